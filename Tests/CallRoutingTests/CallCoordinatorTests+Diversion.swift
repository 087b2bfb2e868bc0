import CallRouting
import Foundation
import Registrar
import RouseVocabulary
import SIPDNS
import SIPMessage
import SIPProxy
import SIPTransaction
import XCTest

/// Call forwarding through the coordinator: a diverted call starts the target extension's call on
/// the caller's same server transaction, or goes out through the diverting extension's routes.
final class CallCoordinatorDiversionTests: XCTestCase {
    let callee = AddressOfRecord(number: "1002", domain: "example.com")
    let colleague = AddressOfRecord(number: "1003", domain: "example.com")

    func testNoAnswerDivertsToAnotherExtensionOnTheSameTransaction() throws {
        let harness = Harness(bindings: [desk(of: callee, "desk2"), desk(of: colleague, "desk3")], manualClock: true)
        harness.directory.set(extensions: [colleague], diversions: [
            callee: DiversionRules(noAnswer: try SIPURI(parsing: "sip:1003@example.com"), noAnswerAfter: .seconds(20)),
        ])
        harness.placeCall()
        let first = try harness.waitForBranch()
        XCTAssertEqual(first.request.uri.user, "desk2")
        first.respond(180)
        try harness.waitUntil { harness.responsesToCaller.contains { $0.statusCode == 180 } }

        harness.advance(by: .seconds(20))
        try harness.waitUntil { harness.signaling.invites.count == 2 }
        let second = harness.signaling.invites[1]
        XCTAssertEqual(second.request.uri.user, "desk3", "the colleague's phone rings")
        XCTAssertEqual(second.request.headers["History-Info"],
                       "<sip:1002@example.com?Reason=SIP%3Bcause%3D408>;index=1, <sip:1003@example.com;cause=408>;index=1.1;mp=1")
        XCTAssertEqual(second.request.headers[.to], "<sip:1002@example.com>", "the To header stays the number dialled")
        XCTAssertEqual(harness.signaling.cancels.first?.uri.user, "desk2", "the first phone stops ringing")
        XCTAssertFalse(harness.responsesToCaller.contains { $0.statusCode >= 300 }, "the caller never hears a 480")

        second.respond(200)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 200)
        try harness.waitUntil { harness.journeys.calls.count >= 2 }
        let journeys = harness.journeys.calls
        let diverted = try XCTUnwrap(journeys.last { $0.callee == callee })
        XCTAssertEqual(diverted.outcome, .diverted)
        XCTAssertEqual(diverted.finalStatus, 408)
        XCTAssertTrue(diverted.events.contains { $0.text == "forwarded to sip:1003@example.com (no answer, History-Info cause 408): no answer within 20 s" },
                      "\(diverted.events.map(\.text))")
        let answered = try XCTUnwrap(journeys.last { $0.callee == colleague && $0.outcome == .answered })
        XCTAssertEqual(answered.callID, diverted.callID)
        XCTAssertTrue(answered.events.contains { $0.text == "forwarded here from 1002@example.com (no answer, History-Info cause 408)" },
                      "\(answered.events.map(\.text))")
    }

    func testTheCallersCancelAfterADiversionReachesTheTargetsCall() throws {
        let harness = Harness(bindings: [desk(of: colleague, "desk3")], manualClock: true)
        harness.directory.set(extensions: [colleague], diversions: [callee: DiversionRules(always: try SIPURI(parsing: "sip:1003@example.com"))])
        harness.placeCall()
        let invite = try harness.waitForBranch()
        XCTAssertEqual(invite.request.uri.user, "desk3", "unconditional: straight to the colleague")
        invite.respond(180)
        harness.coordinator.handleCancel(of: harness.serverHandle!, callID: harness.callID, reason: nil)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 487)
        try harness.waitUntil { harness.signaling.cancels.count == 1 }
        XCTAssertEqual(harness.coordinator.liveCallCount, 0)
    }

    func testAnOutsideTargetGoesOutThroughTheRoutesAndWithoutOneTheCallEndsAsItWould() throws {
        let voicemail = try SIPURI(parsing: "sip:vm1002@pbx.example")
        let routed = Harness(bindings: [], manualClock: true)
        routed.directory.set(extensions: [], diversions: [callee: DiversionRules(unreachable: voicemail)])
        try routed.route(.domain("pbx.example"), named: "pbx", toPort: 5090)
        routed.placeCall()
        try routed.waitUntil { routed.signaling.outsideInvites.count == 1 }
        let sent = try XCTUnwrap(routed.signaling.outsideInvites.first)
        XCTAssertEqual(sent.request.uri, voicemail, "a domain route keeps the voicemail URI")
        XCTAssertEqual(sent.hop.port, 5090)
        XCTAssertEqual(sent.request.headers["History-Info"],
                       "<sip:1002@example.com?Reason=SIP%3Bcause%3D503>;index=1, <sip:vm1002@pbx.example;cause=503>;index=1.1;mp=1")
        XCTAssertFalse(routed.responsesToCaller.contains { $0.statusCode >= 300 }, "the caller never hears the 480")
        XCTAssertEqual(sent.request.headers.values(SIPHeaderName("P-Asserted-Identity")), ["\"Alice\" <sip:1001@example.com>"],
                       "a forwarded call asserts its original caller, not the extension that forwarded it")
        var unavailable = SIPResponse(replyingTo: sent.request, statusCode: 503, toTag: "pbx")
        unavailable.headers.set(.via, sent.request.headers.lines(.via).joined(separator: ", "))
        sent.onResponse(.response(unavailable))
        XCTAssertEqual(try routed.waitForCallerResponse { $0 >= 300 }.statusCode, 480, "every hop failed: the answer the call would have had")

        let bare = Harness(bindings: [], manualClock: true)
        bare.directory.set(extensions: [], diversions: [callee: DiversionRules(unreachable: voicemail)])
        bare.placeCall()
        XCTAssertEqual(try bare.waitForCallerResponse { $0 >= 200 }.statusCode, 480)
        let journey = try bare.waitForJourney()
        XCTAssertTrue(journey.events.contains { $0.text == "not forwarded to sip:vm1002@pbx.example: no route for vm1002@pbx.example in example.com" },
                      "\(journey.events.map(\.text))")
    }

    func testATargetThatIsNoExtensionIsNotFollowed() throws {
        let harness = Harness(bindings: [desk(of: callee, "desk2")], manualClock: true)
        harness.directory.set(extensions: [], diversions: [callee: DiversionRules(always: try SIPURI(parsing: "sip:1009@example.com"))])
        harness.placeCall()
        XCTAssertEqual(try harness.waitForBranch().request.uri.user, "desk2", "the callee's own phone rings")
    }

    // MARK: - Fixtures

    func desk(of aor: AddressOfRecord, _ user: String) -> Binding {
        Binding(
            aor: aor, contact: "sip:\(user)@192.0.2.5:5060", callID: user, cseq: 1, registeredAt: Date(), expiresAt: Date().addingTimeInterval(600),
            userAgent: user, flow: BindingFlow(transport: .udp, source: SocketAddress(parsing: "192.0.2.5:5060"), connectionID: FlowConnectionID("udp#0"),
                                             local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "i"))
    }
}

/// Outside calls through the coordinator's shell (reached here by a diversion, which needs no
/// digest in the harness): Rouse stopping ends one still ringing with 503, and its hop stops.
final class CallCoordinatorOutsideTests: XCTestCase {
    func testStoppingEndsAnOutsideCallStillRingingWith503() throws {
        let callee = AddressOfRecord(number: "1002", domain: "example.com")
        let harness = Harness(bindings: [], manualClock: true)
        harness.directory.set(extensions: [], diversions: [callee: DiversionRules(always: try SIPURI(parsing: "sip:02079460958@example.com"))])
        try harness.route(.prefix("0"), named: "trunk", toPort: 5091)
        harness.placeCall()
        try harness.waitUntil { harness.signaling.outsideInvites.count == 1 }
        let sent = try XCTUnwrap(harness.signaling.outsideInvites.first)
        XCTAssertEqual(sent.request.uri.description, "sip:02079460958@127.0.0.1:5091")
        XCTAssertEqual(harness.coordinator.liveOutsideCallCount, 1)
        var ringing = SIPResponse(replyingTo: sent.request, statusCode: 180, toTag: "trunk")
        ringing.headers.set(.via, sent.request.headers.lines(.via).joined(separator: ", "))
        sent.onResponse(.response(ringing))
        try harness.waitUntil { harness.responsesToCaller.contains { $0.statusCode == 180 } }

        XCTAssertEqual(harness.coordinator.endAll(reason: "Rouse is stopping"), 1)
        let final = try harness.waitForCallerResponse { $0 >= 200 }
        XCTAssertEqual(final.statusCode, 503)
        XCTAssertEqual(final.headers[.retryAfter], "5")
        try harness.waitUntil { harness.signaling.cancels.count == 1 }
        XCTAssertEqual(harness.coordinator.liveOutsideCallCount, 0)
    }
}

extension Harness {
    /// example.com's one outbound route, `pattern` to a hop on 127.0.0.1:`port` (resolved by the fake).
    func route(_ pattern: RoutePattern, named name: String, toPort port: UInt16) throws {
        let hop = try RouteHop(parsing: "127.0.0.1:\(port)")
        signaling.resolutions = [hop.description: [ResolvedHop(transport: .udp, ip: "127.0.0.1", port: port, host: "127.0.0.1")]]
        coordinator.updateOutsidePolicy(OutsideCallPolicy(routes: [
            (OutboundRoute(id: 1, organisation: "example.com", name: name, position: 10, pattern: pattern, hops: [hop]), nil),
        ]))
    }
}
