import CallRouting
import Crypto
import Foundation
@testable import RouseServer
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPProxy
import SIPTransport
import Storage
import XCTest

/// Calls placed on one instance to devices registered on another (issue 17 item 3): two
/// `rouse serve` on one PostgreSQL, each on its own ports as on two machines, the caller on one,
/// the callee's phone on the other over UDP, TCP and TLS, and an app woken by push.
extension CallProcessTests {
    /// An iPhone app of 1002 registered on the other instance over `transport` with `token`,
    /// then asleep (its flow closed) once every instance knows its binding.
    func sleepingApp(
        on other: [ListenPoint], transport: SIPTransportKind, kind: TestSIPClient.Transport, token: String,
        userAgent: String
    ) throws -> TestUserAgent {
        let phone = try TestUserAgent(
            transport: kind, serverPort: try XCTUnwrap(other.first { $0.transport == transport }).port, user: "1002", domain: "example.com",
            password: "pw-1002", instanceID: "urn:uuid:\(UUID().uuidString.lowercased())",
            contactURIParameters: "pn-provider=apns;pn-prid=\(token);pn-param=\(Self.voipParam)", userAgent: userAgent)
        agents.append(phone)
        try registerAndSleep(phone)
        try waitUntilKnown(phone)
        return phone
    }

    /// Starts two instances listening on UDP, TCP and TLS; the first is the test's `rouse`.
    func startTwoInstances(wakeWait: Int = 3, extra: [String: String] = [:]) throws -> [ListenPoint] {
        let certificate = try TestCertificate.make(commonName: "rouse.test")
        let tls = [
            "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0,tcp:127.0.0.1:0,tls:127.0.0.1:0",
            "ROUSE_TLS_CERT": certificate.certificatePath, "ROUSE_TLS_KEY": certificate.keyPath,
        ].merging(extra) { $1 }
        try startRouse(wakeWait: wakeWait, extra: tls)
        let (_, other) = try startInstance(wakeWait: wakeWait, extra: tls)
        return other
    }

    /// A desk phone of 1002 registered on the instance listening at `points`, over `transport`.
    func deskPhone(on points: [ListenPoint], over transport: SIPTransportKind) throws -> TestUserAgent {
        let kind: TestSIPClient.Transport = transport == .udp ? .udp : transport == .tcp ? .tcp : .tls
        let agent = try TestUserAgent(
            transport: kind, serverPort: try XCTUnwrap(points.first { $0.transport == transport }).port, user: "1002", domain: "example.com",
            password: "pw-1002", userAgent: "RouseDeskPhone/\(transport.rawValue)")
        agents.append(agent)
        return agent
    }

    /// Waits until the instance holding the call (`rouse`) knows `phone`'s binding, which it learns
    /// from PostgreSQL's NOTIFY a moment after the other instance answered the REGISTER.
    func waitUntilKnown(_ phone: TestUserAgent) throws {
        let contacts = try DigestRegistration.waitForBindings(port: try port(.udp), user: "1002", password: "pw-1002") { contacts in
            contacts.contains { $0.contains(":\(phone.localPort)") }
        }
        XCTAssertTrue(contacts.contains { $0.contains(":\(phone.localPort)") }, "\(contacts)")
    }

    /// The caller's one challenge: every 407 it got, across the whole call.
    func challenges(_ call: TestOutgoingCall) -> [SIPResponse] {
        call.responses.filter { $0.statusCode == 407 }
    }

    func testCallOnOneInstanceRingsDeskPhonesRegisteredOnTheOtherOverUDPTCPAndTLS() throws {
        let other = try startTwoInstances()
        for transport in [SIPTransportKind.udp, .tcp, .tls] {
            let desk = try deskPhone(on: other, over: transport)
            XCTAssertEqual(try desk.register().statusCode, 200, "\(transport)")
            try waitUntilKnown(desk)
            let caller = try caller()
            let call = try place(caller)
            let invite = try desk.waitForRequest(.invite)
            XCTAssertEqual(invite.callID, call.callID, "\(transport)")
            // It came through the other instance, over the phone's own flow there, which
            // record-routes too; the proof between the instances never reaches the phone.
            let holder = try XCTUnwrap(other.first { $0.transport == transport })
            XCTAssertTrue(invite.headers.values(.recordRoute).first?.contains(":\(holder.port)") ?? false, "\(invite.headers.values(.recordRoute))")
            XCTAssertEqual(invite.headers.values(.route), [], "\(transport)")
            XCTAssertFalse(String(decoding: SIPSerializer.serialize(invite), as: UTF8.self).contains("rouse-p="), "\(transport)")
            try answerAndHangUp(desk, invite, call, caller)
            XCTAssertEqual(challenges(call).count, 1, "\(transport): one 407 for the caller, \(call.responses.map(\.statusCode))")
            _ = try journey(callID: call.callID, outcome: .answered)
            // The flow token of the phone's flow that the caller saw in the Record-Route opens no
            // way to the phone past the 407, even sent straight to the instance holding the flow.
            let ok = try XCTUnwrap(call.responses.first { $0.statusCode == 200 })
            let entry = try SIPNameAddress(parsing: try XCTUnwrap(ok.headers.values(.recordRoute).first))
            let token = try XCTUnwrap(entry.uri.parameters.value(ProxyCore.deviceFlowParameter))
            let sneaky = try TestUserAgent(
                transport: .udp, serverPort: try XCTUnwrap(other.first { $0.transport == .udp }).port, user: "1001", domain: "example.com",
                password: "pw-1001")
            agents.append(sneaky)
            let holderPoint = "127.0.0.1:\(try XCTUnwrap(other.first { $0.transport == .udp }).port)"
            let bypass = try sneaky.invite(
                desk.contactURI, authenticate: false, headers: [("Route", "<sip:\(holderPoint);lr;rouse-f=\(token)>")])
            XCTAssertEqual(try bypass.waitForFinal().statusCode, 407, "\(transport)")
            sneaky.close()
            XCTAssertEqual(try desk.register(expires: 0).statusCode, 200)
            desk.close()
            caller.close()
        }
    }

    func testAppsRegisteredOnTheOtherInstanceAreWokenAndReachedThroughIt() throws {
        let other = try startTwoInstances(wakeWait: 8)
        let tokens = [(SIPTransportKind.udp, "a1"), (.tcp, "b2"), (.tls, "c3")].map { ($0, String(repeating: $1, count: 32)) }
        for (transport, token) in tokens {
            let kind: TestSIPClient.Transport = transport == .udp ? .udp : transport == .tcp ? .tcp : .tls
            let phone = try sleepingApp(on: other, transport: transport, kind: kind, token: token, userAgent: "RouseTestApp/\(transport.rawValue)")
            let caller = try caller()
            let call = try place(caller)
            _ = try pushes(apns, token: token)
            // The woken app registers again on the instance it uses, not the one holding the call.
            try wake(phone)
            let invite = try phone.waitForRequest(.invite)
            XCTAssertEqual(invite.callID, call.callID, "\(transport)")
            try answerAndHangUp(phone, invite, call, caller)
            XCTAssertEqual(challenges(call).count, 1, "\(transport): one 407 for the caller, \(call.responses.map(\.statusCode))")
            let journey = try journey(callID: call.callID, outcome: .answered)
            guard case .woke = journey.pushes.first?.wake else { return XCTFail("\(transport): \(String(describing: journey.pushes.first?.wake))") }
            XCTAssertEqual(try phone.register(expires: 0).statusCode, 200)
            phone.close()
            caller.close()
        }
    }

    func testACallerWhoHangsUpCancelsThePhoneRingingOnTheOtherInstance() throws {
        let other = try startTwoInstances()
        let desk = try deskPhone(on: other, over: .udp)
        XCTAssertEqual(try desk.register().statusCode, 200)
        try waitUntilKnown(desk)
        let caller = try caller()
        let call = try place(caller)
        let invite = try desk.waitForRequest(.invite)
        try desk.respond(to: invite, status: 180)
        _ = try call.waitForResponse(status: 180)
        XCTAssertEqual(try call.cancel().statusCode, 200)
        // The CANCEL follows the INVITE through the other instance, hop by hop, to the phone.
        let cancel = try desk.handleCancel(of: invite)
        XCTAssertEqual(cancel.callID, call.callID)
        XCTAssertEqual(try call.waitForFinal().statusCode, 487)
        XCTAssertEqual(challenges(call).count, 1)
        _ = try journey(callID: call.callID, outcome: .canceled)
    }

    /// What a forwarded INVITE proves, tried on the receiving instance with hand-made requests: a
    /// proof made without the deployment's secret, or too old, gets the caller's 407 like any
    /// INVITE; a good one for a binding the instance does not hold gets 430 and reaches nobody;
    /// only a good one for a binding it holds is forwarded, without the proof.
    func testAForwardedInviteIsTrustedOnlyWithAGoodProofForABindingHeldThere() throws {
        let other = try startTwoInstances()
        let desk = try deskPhone(on: other, over: .udp)
        XCTAssertEqual(try desk.register().statusCode, 200)
        let elsewhere = try deskPhone(on: points, over: .udp)
        XCTAssertEqual(try elsewhere.register().statusCode, 200)
        TestUserAgent.link(desk, elsewhere)
        let connection = try database.connect()
        let secret = try SealedSecrets.sharedSecret(named: "instance_forward_secret", on: connection)
        func bindingID(of phone: TestUserAgent) throws -> UUID {
            let rows = try connection.query("SELECT id FROM bindings WHERE contact = $1", [phone.contactURI])
            return try XCTUnwrap(rows.value(0, "id").flatMap(UUID.init(uuidString:)), phone.contactURI)
        }
        let holder = try XCTUnwrap(other.first { $0.transport == .udp })
        let sender = try TestSIPClient(transport: .udp, host: "127.0.0.1", port: holder.port)
        defer { sender.close() }

        /// Sends an INVITE as an instance forwards it (its Via on top, the caller's below), to
        /// `phone`'s binding, with the proof `sign` makes.
        func forward(to phone: TestUserAgent, signing sign: (SIPRequest, UUID) -> String?) throws -> SIPRequest {
            let binding = try bindingID(of: phone)
            let text = "INVITE \(phone.contactURI) SIP/2.0\r\n"
                + "Via: SIP/2.0/UDP 127.0.0.1:\(sender.localPort);branch=z9hG4bK\(UUID().uuidString.prefix(8));rport\r\n"
                + "Via: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bKcaller;received=127.0.0.1\r\n"
                + "Max-Forwards: 69\r\nFrom: <sip:1001@example.com>;tag=f1\r\nTo: <sip:1002@example.com>\r\n"
                + "Call-ID: \(UUID().uuidString)\r\nCSeq: 2 INVITE\r\nContact: <sip:1001@127.0.0.1:9>\r\nContent-Length: 0\r\n\r\n"
            guard case .request(var request) = try SIPParser.parse(Array(text.utf8)) else { throw TestUserAgentError.unexpected(text) }
            let proof = try XCTUnwrap(sign(request, binding))
            request.headers.prepend(.route, "<sip:127.0.0.1:\(holder.port);lr;rouse-b=\(binding.uuidString.lowercased());rouse-p=\(proof)>")
            try sender.send(SIPSerializer.serialize(request))
            return request
        }
        func finalResponse(to request: SIPRequest) throws -> SIPResponse {
            let deadline = Date().addingTimeInterval(15)
            while Date() < deadline {
                guard let bytes = try sender.receive(timeout: .seconds(1)), case .response(let response) = try SIPParser.parse(bytes),
                    response.callID == request.callID, response.statusCode >= 200
                else { continue }
                return response
            }
            throw TestUserAgentError.timedOut("the final response to a forwarded INVITE")
        }

        let deployment = InstanceForwardProof(secret: secret)
        let stranger = InstanceForwardProof(secret: Array("not the deployment's secret".utf8))
        let forged = try finalResponse(to: try forward(to: desk) { stranger.sign($0, binding: $1, at: Date()) })
        XCTAssertEqual(forged.statusCode, 407, "a forged proof proves nothing")
        let stale = try finalResponse(to: try forward(to: desk) { deployment.sign($0, binding: $1, at: Date().addingTimeInterval(-120)) })
        XCTAssertEqual(stale.statusCode, 407, "a stale proof proves nothing")
        let misdirected = try finalResponse(to: try forward(to: elsewhere) { deployment.sign($0, binding: $1, at: Date()) })
        XCTAssertEqual(misdirected.statusCode, 430, "a binding the instance does not hold is not reached through it")

        let sent = try forward(to: desk) { deployment.sign($0, binding: $1, at: Date()) }
        let invite = try desk.waitForRequest(.invite)
        XCTAssertEqual(invite.callID, sent.callID, "the first INVITE the phone gets is the one with a good proof")
        XCTAssertFalse(String(decoding: SIPSerializer.serialize(invite), as: UTF8.self).contains("rouse-p="))
        XCTAssertEqual(invite.headers.values(.route), [])
        XCTAssertEqual(elsewhere.buffered.requests.filter { $0.method == .invite }.count, 0)
        try desk.respond(to: invite, status: 486)
        XCTAssertEqual(try finalResponse(to: sent).statusCode, 486, "the phone's answer goes back to the forwarding instance")
    }
}
