import Crypto
import Foundation
import RouseVocabulary
import SIPMessage
@testable import SIPProxy
import SIPTransport
import XCTest

/// RFC 3261 §16 as Rouse applies it, on bytes and without a process: an INVITE forwarded with
/// Rouse's Record-Route and Via, then the dialog's BYE, re-INVITE and ACK routed back by the flow
/// tokens, and what is refused (a tampered or foreign token, no hops left, no route of Rouse's).
final class ProxyCoreTests: XCTestCase {
    let listening = [
        ListenPoint(transport: .udp, host: "192.0.2.50", port: 5060), ListenPoint(transport: .tcp, host: "192.0.2.50", port: 5060),
    ]
    let key = Array("the deployment's flow token key".utf8)
    lazy var proxy = ProxyCore(instanceID: "instance-a", ownNames: ["192.0.2.50", "sip.example.com"], flowTokenKey: key)
    let callerFlow = FlowID(description: "udp#0/198.51.100.1:5060")!
    let deviceFlow = FlowID(description: "udp#0/203.0.113.9:40000")!
    let deviceTCPFlow = FlowID(description: "tcp#7")!
    let branch = SIPVia.magicCookie + "rouse1"

    /// The caller's INVITE (`ProxyRulesTests.invite`).
    let invite = ProxyRulesTests.invite

    func parse(_ text: String) throws -> SIPRequest {
        guard case .request(let request) = try SIPParser.parse(Array(text.utf8)) else { return try XCTUnwrap(nil, "the fixture is not a request") }
        return request
    }

    /// What goes on the wire, read back as the peer reads it.
    func wire(_ request: SIPRequest) throws -> SIPRequest {
        guard case .request(let parsed) = try SIPParser.parse(SIPSerializer.serialize(.request(request))) else {
            XCTFail("the forwarded bytes are not a request")
            return request
        }
        return parsed
    }

    /// The INVITE as the device gets it, forwarded with Rouse's Record-Route.
    func forwardedInvite(to device: FlowID) throws -> SIPRequest {
        let outgoing = try proxy.forwarded(try parse(invite), over: device, recordRouteFrom: callerFlow, listening: listening, branch: branch).get()
        return try wire(outgoing)
    }

    /// A request inside the dialog, sent with `routes` as its Route set (§12.2.1.1).
    func inDialog(_ method: SIPMethod, routes: [String], maxForwards: Int = 70, extra: String = "") throws -> SIPRequest {
        var text = "\(method.rawValue) sip:1001@198.51.100.1:5060 SIP/2.0\r\nVia: SIP/2.0/UDP 203.0.113.9:40000;branch=z9hG4bKdev\(method.rawValue)\r\n"
        text += "Max-Forwards: \(maxForwards)\r\nFrom: <sip:1002@example.com>;tag=b2\r\nTo: \"Alice\" <sip:1001@example.com>;tag=a1\r\n"
        text += "Call-ID: call-1@198.51.100.1\r\nCSeq: 2 \(method.rawValue)\r\n"
        for route in routes { text += "Route: \(route)\r\n" }
        return try parse(text + extra + "Content-Length: 0\r\n\r\n")
    }

    func testAForwardedRequestHasMaxForwardsOneLessRousesViaOnTopAndARecordRouteWithBothFlows() throws {
        let sent = try forwardedInvite(to: deviceFlow)
        XCTAssertEqual(sent.maxForwards, 69)
        XCTAssertEqual(sent.vias.count, 2)
        let via = try XCTUnwrap(sent.topVia)
        XCTAssertEqual(via.host, "192.0.2.50")
        XCTAssertEqual(via.branch, branch)
        XCTAssertTrue(via.parameters.contains("rport"))
        XCTAssertEqual(sent.vias[1].branch, "z9hG4bKcaller1", "the caller's Via stays below Rouse's")
        XCTAssertTrue(ProxyRules.isLooping(sent, instanceMarker: "instance-a"), "the Via marks the request as having passed here")
        XCTAssertFalse(ProxyRules.isLooping(sent, instanceMarker: "instance-b"))

        let recordRoutes = sent.headers.values(.recordRoute)
        XCTAssertEqual(recordRoutes.count, 1, "both sides on UDP: one entry")
        let uri = try SIPNameAddress(parsing: recordRoutes[0]).uri
        XCTAssertEqual(uri.host, "192.0.2.50")
        XCTAssertEqual(uri.port, 5060)
        XCTAssertTrue(uri.parameters.contains("lr"), "loose routing (§16.6 step 4)")
        XCTAssertEqual(uri.parameters.value(ProxyCore.callerFlowParameter).flatMap(proxy.flow(fromToken:)), callerFlow)
        XCTAssertEqual(uri.parameters.value(ProxyCore.deviceFlowParameter).flatMap(proxy.flow(fromToken:)), deviceFlow)
    }

    func testAFlowTokenIsRefusedWhenTamperedSignedWithAnotherKeyOrMadeByAnotherInstance() throws {
        let token = proxy.flowToken(deviceFlow)
        XCTAssertEqual(proxy.flow(fromToken: token), deviceFlow)

        // Point the token at another flow, keeping its signature.
        let parts = token.split(separator: ".").map(String.init)
        let forgedText = Hex.encode(Array("instance-a \(callerFlow.description)".utf8))
        XCTAssertNil(proxy.flow(fromToken: forgedText + "." + parts[1]), "a token naming another flow under the old MAC")
        var flipped = Array(parts[1])
        flipped[0] = flipped[0] == "0" ? "1" : "0"
        XCTAssertNil(proxy.flow(fromToken: parts[0] + "." + String(flipped)), "a token whose MAC was changed")
        XCTAssertNil(proxy.flow(fromToken: parts[0]), "a token without its MAC")
        XCTAssertNil(proxy.flow(fromToken: "zz." + parts[1]))

        let otherDeployment = ProxyCore(instanceID: "instance-a", ownNames: [], flowTokenKey: Array("another key".utf8))
        XCTAssertNil(otherDeployment.flow(fromToken: token), "signed with another deployment's key")
        let otherInstance = ProxyCore(instanceID: "instance-b", ownNames: [], flowTokenKey: key)
        XCTAssertNil(otherInstance.flow(fromToken: token), "another instance of the deployment does not take this one's flows")
    }

    func testAFlowTokenIsCheckedOnceRememberedAndTheCacheStaysBounded() throws {
        let token = proxy.flowToken(callerFlow)
        XCTAssertEqual(proxy.flowToken(callerFlow), token, "signed once, the same token again")
        let reader = ProxyCore(instanceID: "instance-a", ownNames: [], flowTokenKey: key)
        XCTAssertEqual(reader.flow(fromToken: token), callerFlow, "checked")
        XCTAssertEqual(reader.flow(fromToken: token), callerFlow, "remembered")
        let parts = token.split(separator: ".").map(String.init)
        XCTAssertNil(reader.flow(fromToken: parts[0] + "." + String(parts[1].reversed())), "a changed MAC misses the cache and fails the check")

        let cache = FlowTokenCache(limit: 2)
        cache.remember(checked: "a", for: callerFlow)
        cache.remember(signed: "b", for: deviceFlow)
        XCTAssertEqual(cache.flow(of: "a"), callerFlow)
        XCTAssertEqual(cache.token(of: deviceFlow), "b")
        XCTAssertNil(cache.token(of: callerFlow), "a checked token is not taken as the flow's own")
        cache.remember(checked: "c", for: deviceTCPFlow)
        XCTAssertEqual(cache.count, 1, "full: started again")
        XCTAssertNil(cache.flow(of: "a"))
        XCTAssertEqual(cache.flow(of: "c"), deviceTCPFlow)
    }

    func testARecordRouteWrittenHereIsKnownUnparsedAndOneWrittenElsewhereIsParsedToTheSameFlows() throws {
        let recordRoute = try XCTUnwrap(try forwardedInvite(to: deviceFlow).headers.values(.recordRoute).first)
        XCTAssertEqual(proxy.tokenCache.flows(ofRoute: recordRoute)?.device, deviceFlow, "the entry as it came back is the one written")
        // The same instance after a restart (the same key, nothing remembered) parses the entry.
        let restarted = ProxyCore(instanceID: "instance-a", ownNames: ["192.0.2.50"], flowTokenKey: key)
        for core in [proxy, restarted] {
            let bye = try inDialog(.bye, routes: [recordRoute, "<sip:edge.example.net;lr>"])
            guard case .forward(let request, let target, let fromCallee) = core.step(bye, arrivedOn: deviceFlow, listening: listening) else {
                XCTFail("the device's BYE is forwarded")
                continue
            }
            XCTAssertEqual(target, callerFlow)
            XCTAssertEqual(fromCallee, true)
            XCTAssertEqual(request.headers.values(.route), ["<sip:edge.example.net;lr>"])
        }

        let cache = FlowTokenCache(limit: 1)
        cache.remember(route: "<sip:a;lr>", caller: callerFlow, device: deviceFlow)
        XCTAssertEqual(cache.flows(ofRoute: "<sip:a;lr>")?.caller, callerFlow)
        XCTAssertNil(cache.flows(ofRoute: "<sip:A;lr>"), "only the entry exactly as written")
        cache.remember(route: "<sip:b;lr>", caller: deviceFlow, device: callerFlow)
        XCTAssertNil(cache.flows(ofRoute: "<sip:a;lr>"), "full: started again")
        XCTAssertEqual(cache.flows(ofRoute: "<sip:b;lr>")?.caller, deviceFlow)
    }

    func testTheCallersByeFollowsTheTokenToTheDeviceWithRousesRoutePoppedAndItsCredentialsRemoved() throws {
        let recordRoute = try XCTUnwrap(try forwardedInvite(to: deviceFlow).headers.values(.recordRoute).first)
        var bye = try inDialog(.bye, routes: [recordRoute, "<sip:edge.example.net;lr>"], extra: "Proxy-Authorization: Digest username=\"1001\"\r\n")
        // From the caller this time (the device's BYE is the next case).
        bye.headers.set(.from, "\"Alice\" <sip:1001@example.com>;tag=a1")
        guard case .forward(let request, let target, let fromCallee) = proxy.step(bye, arrivedOn: callerFlow, listening: listening) else {
            return XCTFail("the BYE is forwarded")
        }
        XCTAssertEqual(target, deviceFlow)
        XCTAssertEqual(fromCallee, false)
        XCTAssertEqual(request.headers.values(.route), ["<sip:edge.example.net;lr>"], "Rouse's entry popped (§16.4), the next one kept")
        XCTAssertNil(request.headers[.proxyAuthorization], "credentials meant for Rouse do not reach the phone (§22.3)")

        let sent = try wire(try proxy.forwarded(request, over: target, recordRouteFrom: nil, listening: listening, branch: branch).get())
        XCTAssertEqual(sent.maxForwards, 69)
        XCTAssertEqual(sent.topVia?.branch, branch)
        XCTAssertTrue(sent.headers.values(.recordRoute).isEmpty, "no Record-Route on a request inside the dialog")
    }

    func testTheDevicesByeAndReInviteGoToTheCallersFlow() throws {
        let recordRoute = try XCTUnwrap(try forwardedInvite(to: deviceFlow).headers.values(.recordRoute).first)
        for method in [SIPMethod.bye, .invite] {
            guard case .forward(let request, let target, let fromCallee) = proxy.step(
                try inDialog(method, routes: [recordRoute]), arrivedOn: deviceFlow, listening: listening)
            else { return XCTFail("the device's \(method) is forwarded") }
            XCTAssertEqual(target, callerFlow)
            XCTAssertEqual(fromCallee, method == .bye ? true : nil)
            XCTAssertTrue(request.headers.values(.route).isEmpty)
        }
    }

    func testDoubleRecordRouteWhenTheSidesUseDifferentTransportsAndEachSideRoutesBack() throws {
        let sent = try forwardedInvite(to: deviceTCPFlow)
        let recordRoutes = sent.headers.values(.recordRoute)
        XCTAssertEqual(recordRoutes.count, 2, "RFC 5658: one entry per transport")
        let first = try SIPNameAddress(parsing: recordRoutes[0]).uri
        let second = try SIPNameAddress(parsing: recordRoutes[1]).uri
        XCTAssertEqual(first.parameters.value("transport"), "tcp", "the device's side comes first")
        XCTAssertNil(second.parameters.value("transport"))

        // The device (UAS) routes by the Record-Route as it came; the caller (UAC) by it reversed.
        guard case .forward(_, let toCaller, _) = proxy.step(try inDialog(.bye, routes: recordRoutes), arrivedOn: deviceTCPFlow, listening: listening)
        else { return XCTFail("the device's BYE is forwarded") }
        XCTAssertEqual(toCaller, callerFlow)
        guard case .forward(let request, let toDevice, _) = proxy.step(
            try inDialog(.bye, routes: recordRoutes.reversed()), arrivedOn: callerFlow, listening: listening)
        else { return XCTFail("the caller's BYE is forwarded") }
        XCTAssertEqual(toDevice, deviceTCPFlow)
        XCTAssertTrue(request.headers.values(.route).isEmpty, "both of Rouse's entries are popped")

        let onward = try proxy.forwarded(request, over: toDevice, recordRouteFrom: nil, listening: listening, branch: branch).get()
        XCTAssertEqual(onward.topVia?.transport, "TCP", "Rouse's Via names the transport it sends on")
    }

    func testARequestInADialogRouseDidNotRecordRouteGets481AndATamperedTokenNoFlow() throws {
        guard case .reply(let status, _) = proxy.step(try inDialog(.bye, routes: []), arrivedOn: callerFlow, listening: listening) else {
            return XCTFail("answered")
        }
        XCTAssertEqual(status, 481)
        guard case .reply(let foreign, _) = proxy.step(
            try inDialog(.bye, routes: ["<sip:proxy.example.net;lr>"]), arrivedOn: callerFlow, listening: listening)
        else { return XCTFail("answered") }
        XCTAssertEqual(foreign, 481, "a Route naming another proxy is not Rouse's")

        // Rouse's own address, but a token whose MAC was changed: no flow to go on.
        let recordRoute = try XCTUnwrap(try forwardedInvite(to: deviceFlow).headers.values(.recordRoute).first)
        let token = try XCTUnwrap(recordRoute.range(of: ProxyCore.deviceFlowParameter + "="))
        let dot = try XCTUnwrap(recordRoute.range(of: ".", range: token.upperBound..<recordRoute.endIndex))
        let firstOfMAC = dot.upperBound..<recordRoute.index(after: dot.upperBound)
        let tampered = recordRoute.replacingCharacters(in: firstOfMAC, with: recordRoute[firstOfMAC] == "0" ? "1" : "0")
        XCTAssertNotEqual(tampered, recordRoute)
        guard case .reply(let refused, _) = proxy.step(try inDialog(.bye, routes: [tampered]), arrivedOn: callerFlow, listening: listening) else {
            return XCTFail("answered")
        }
        XCTAssertEqual(refused, 430)

        // An OPTIONS keep-alive with a To tag and no user part is for Rouse itself.
        var options = try inDialog(.options, routes: [])
        options.uri = try SIPURI(parsing: "sip:192.0.2.50")
        guard case .outsideDialog = proxy.step(options, arrivedOn: callerFlow, listening: listening) else { return XCTFail("for Rouse itself") }
    }

    func testRousesOwnRouteIsPoppedByNameAndPortButNotOnAnotherPortOrHost() throws {
        var request = try inDialog(.bye, routes: ["<sip:sip.example.com;lr>", "<sip:192.0.2.50:5070;lr>"])
        let tokens = proxy.popOwnRoutes(&request, listening: listening)
        XCTAssertTrue(tokens.popped)
        XCTAssertNil(tokens.device)
        XCTAssertEqual(request.headers.values(.route), ["<sip:192.0.2.50:5070;lr>"], "port 5070 is not Rouse's: popping stops there")
    }

    func testAnInviteWithNoHopsLeftGets483() throws {
        let exhausted = try parse(invite.replacingOccurrences(of: "Max-Forwards: 70", with: "Max-Forwards: 0"))
        switch proxy.forwarded(exhausted, over: deviceFlow, recordRouteFrom: callerFlow, listening: listening, branch: branch) {
        case .success: XCTFail("forwarded with no hops left")
        case .failure(let refusal): XCTAssertEqual(refusal.response.statusCode, 483)
        }
        let one = try parse(invite.replacingOccurrences(of: "Max-Forwards: 70", with: "Max-Forwards: 1"))
        XCTAssertEqual(try proxy.forwarded(one, over: deviceFlow, recordRouteFrom: nil, listening: listening, branch: branch).get().maxForwards, 0)
    }

    func testTheAckForA2xxFollowsTheTokenAndIsDroppedWithoutOneOrWithNoHopsLeft() throws {
        let recordRoute = try XCTUnwrap(try forwardedInvite(to: deviceFlow).headers.values(.recordRoute).first)
        var ack = try inDialog(.ack, routes: [recordRoute], extra: "Proxy-Authorization: Digest username=\"1001\"\r\n")
        ack.headers.set(.cseq, "1 ACK")
        let (sent, target) = try XCTUnwrap(proxy.ackStep(ack, arrivedOn: callerFlow, listening: listening, branch: branch))
        XCTAssertEqual(target, deviceFlow)
        let onWire = try wire(sent)
        XCTAssertEqual(onWire.maxForwards, 69)
        XCTAssertEqual(onWire.topVia?.branch, branch)
        XCTAssertTrue(onWire.headers.values(.route).isEmpty)
        XCTAssertNil(onWire.headers[.proxyAuthorization])

        XCTAssertNil(proxy.ackStep(try inDialog(.ack, routes: []), arrivedOn: callerFlow, listening: listening, branch: branch))
        XCTAssertNil(proxy.ackStep(try inDialog(.ack, routes: [recordRoute], maxForwards: 0), arrivedOn: callerFlow, listening: listening, branch: branch))
    }

    func testTheCallersCancelMatchesTheForwardedInviteOnceAndCarriesItsBranch() throws {
        let sent = try forwardedInvite(to: deviceFlow)
        var table = ForwardedInvites<String>()
        table.add(sent, over: deviceFlow, for: "server transaction 1")
        XCTAssertNil(table.cancel("server transaction 2", reason: nil), "a CANCEL of another transaction matches nothing here")

        let (cancel, flow) = try XCTUnwrap(table.cancel("server transaction 1", reason: ProxyRules.reason(cause: 487, text: "caller hung up")))
        XCTAssertEqual(flow, deviceFlow)
        let onWire = try wire(cancel)
        XCTAssertEqual(onWire.method, .cancel)
        XCTAssertEqual(onWire.uri, sent.uri)
        XCTAssertEqual(onWire.topVia?.branch, branch, "the CANCEL's Via is the branch INVITE's (§9.1)")
        XCTAssertEqual(onWire.vias.count, 1)
        XCTAssertEqual(onWire.callID, sent.callID)
        XCTAssertEqual(onWire.cseq?.number, sent.cseq?.number)
        XCTAssertEqual(onWire.headers[.reason], "SIP;cause=487;text=\"caller hung up\"")
        XCTAssertEqual(table.count, 0)
        XCTAssertNil(table.cancel("server transaction 1", reason: nil), "matched once")

        table.add(sent, over: deviceFlow, for: "server transaction 3")
        table.remove("server transaction 3")
        XCTAssertNil(table.cancel("server transaction 3", reason: nil), "an INVITE that got its final response is not cancelled")
    }

    func testAnInviteRoutedThroughAnotherInstanceCarriesAProofThatInstancePopsAndAccepts() throws {
        let binding = UUID(uuidString: "6c1f0e7a-3b2d-4c5e-8f90-a1b2c3d4e5f6")!
        let secret = Array("the deployment's shared secret".utf8)
        let other = ListenPoint(transport: .tcp, host: "192.0.2.60", port: 5070)
        var sent = try proxy.forwarded(try parse(invite), over: deviceTCPFlow, recordRouteFrom: callerFlow, listening: listening, branch: branch).get()
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let proof = try XCTUnwrap(InstanceForwardProof(secret: secret).sign(sent, binding: binding, at: now))
        sent.headers.prepend(.route, InstanceForwardProof.routeEntry(to: other, binding: binding, proof: proof))

        // Instance B, listening at that point, reads the bytes.
        var received = try wire(sent)
        let instanceB = ProxyCore(instanceID: "instance-b", ownNames: ["192.0.2.60"], flowTokenKey: key)
        let tokens = instanceB.popOwnRoutes(&received, listening: [other])
        XCTAssertTrue(tokens.popped)
        XCTAssertEqual(tokens.forwarded?.binding, binding)
        XCTAssertEqual(tokens.forwarded?.proof, proof)
        XCTAssertNil(tokens.device, "instance A's flow tokens mean nothing to instance B")
        XCTAssertTrue(received.headers.values(.route).isEmpty, "the proof never reaches the phone")
        XCTAssertEqual(received.headers.values(.recordRoute).count, 2, "instance A stays in the dialog")
        var checker = ForwardProofChecker(proof: InstanceForwardProof(secret: secret))
        XCTAssertNil(checker.check(proof, of: received, binding: binding, at: now.addingTimeInterval(1)))
        XCTAssertEqual(checker.check(proof, of: received, binding: binding, at: now.addingTimeInterval(2)), .replayed)
    }
}
