import CallRouting
import Foundation
import Push
import Registrar
import RouseVocabulary
import SIPMessage
import XCTest

/// Issue 17 item 4: nothing on a call waits without a deadline, and nothing the coordinator keeps
/// grows without bound. The deadlines are the defaults, on a manual clock.
final class CallDeadlineTests: XCTestCase {
    let callee = AddressOfRecord(number: "1002", domain: "example.com")

    func testACallToNobodyIsAnsweredWhenThePostedTokenReadNeverReturns() throws {
        let tokens = StalledTokens()
        defer { tokens.release() }
        let harness = Harness(bindings: [], tokens: tokens, manualClock: true)
        harness.placeCall()
        try harness.waitUntil { tokens.stalledReads == 1 }
        harness.advance(by: .milliseconds(1999))
        XCTAssertNil(harness.responsesToCaller.first { $0.statusCode >= 200 }, "still within the 2 s read deadline")
        harness.advance(by: .milliseconds(1))
        let final = try harness.waitForCallerResponse { $0 >= 200 }
        XCTAssertEqual(final.statusCode, 480)
        XCTAssertEqual(final.headers[.reason], "SIP;cause=480;text=\"no device is registered and none can be woken by push\"")
        let journey = try harness.waitForJourney()
        XCTAssertTrue(journey.events.contains { $0.text.hasPrefix("posted tokens not read within") }, "\(journey.events.map(\.text))")
    }

    func testTheRingTimerRunsWhileThePostedTokensAreStillBeingRead() throws {
        let tokens = StalledTokens()
        defer { tokens.release() }
        let harness = Harness(bindings: [], settings: CallSettings(tokenReadTimeout: .seconds(600)), tokens: tokens, manualClock: true)
        harness.placeCall()
        try harness.waitUntil { tokens.stalledReads == 1 }
        harness.advance(by: .seconds(45))
        let final = try harness.waitForCallerResponse { $0 >= 200 }
        XCTAssertEqual(final.statusCode, 480)
        XCTAssertEqual(final.headers[.reason], "SIP;cause=480;text=\"no answer within 45 s\"")
    }

    func testACallThatEndsWhileStartingKeepsNoEndedCallEntry() throws {
        let tokens = StalledTokens()
        defer { tokens.release() }
        let harness = Harness(
            bindings: [], settings: CallSettings(tokenReadTimeout: .seconds(600)), callTokens: CallTokenSigner(secret: Array(repeating: 7, count: 32)),
            tokens: tokens, manualClock: true)
        harness.placeCall()
        try harness.waitUntil { tokens.stalledReads == 1 }
        harness.coordinator.handleCancel(of: try XCTUnwrap(harness.serverHandle), callID: harness.callID, reason: nil)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 487)
        XCTAssertEqual(harness.coordinator.occupancy.endedCalls, 0, "no call token was issued: nothing can ask how it ended")
        harness.advance(by: .seconds(32))
        let held = harness.coordinator.occupancy
        XCTAssertEqual([held.calls, held.endedCalls, held.talking, held.graceDevices, held.callees], [0, 0, 0, 0, 0], "nothing is left of the call")
    }

    func testAnEndedCallIsForgottenAfter64T1() throws {
        let harness = Harness(bindings: [desk()], manualClock: true)
        harness.placeCall()
        let invite = try harness.waitForBranch()
        invite.respond(200)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 200)
        harness.advance(by: .milliseconds(31_999))
        XCTAssertEqual(harness.coordinator.occupancy.calls, 1, "kept 64·T1 (32 s) for 2xx retransmissions")
        harness.advance(by: .milliseconds(1))
        XCTAssertEqual(harness.coordinator.occupancy.calls, 0)
    }

    func testAnAnsweredCallWhoseByeNeverCameIsLetGoAfterTheLongestCall() throws {
        let harness = Harness(bindings: [desk()], manualClock: true)
        harness.placeCall()
        let invite = try harness.waitForBranch()
        invite.respond(200)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 200)
        harness.advance(by: .seconds(12 * 3600 - 1))
        XCTAssertEqual(harness.coordinator.occupancy.talking, 1)
        harness.advance(by: .seconds(1))
        XCTAssertEqual(harness.coordinator.occupancy.talking, 0, "let go after 12 h")
        let recorded = harness.journeys.calls.count
        harness.coordinator.dialogEnded(callID: try XCTUnwrap(invite.request.callID), fromCallee: true)
        harness.coordinator.drain()
        XCTAssertEqual(harness.journeys.calls.count, recorded, "a BYE after that is not followed")
        XCTAssertNil(harness.journeys.calls.last?.endedAt)
    }

    func testAnAnsweredCallIsFollowedToItsByeWithinTheLongestCall() throws {
        let harness = Harness(bindings: [desk()])
        harness.placeCall()
        let invite = try harness.waitForBranch()
        invite.respond(200)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 200)
        XCTAssertEqual(harness.coordinator.occupancy.talking, 1)
        harness.coordinator.dialogEnded(callID: try XCTUnwrap(invite.request.callID), fromCallee: true)
        try harness.waitUntil { harness.journeys.calls.last?.endedAt != nil }
        XCTAssertEqual(harness.coordinator.occupancy.talking, 0)
    }

    func testADeadTokenIsNotPushedAgainWhileItsMarkIsHeld() throws {
        let harness = Harness(bindings: [app()], settings: CallSettings(wakeWait: .seconds(30)))
        harness.pusher.refuseAsDead(voip.token)
        harness.placeCall()
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 480)
        XCTAssertEqual(harness.coordinator.occupancy.deadTokens, 1)
        harness.placeCall()
        try harness.waitUntil { Set(harness.journeys.calls.filter { $0.outcome == .unanswered }.map(\.callID)).count == 2 }
        XCTAssertEqual(harness.pusher.rings.count, 1, "the dead token is not pushed again")
    }

    func testADeadTokenMarkIsForgottenAfterItsMemory() throws {
        let harness = Harness(bindings: [app()], manualClock: true)
        harness.pusher.refuseAsDead(voip.token)
        harness.placeCall()
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 480)
        harness.advance(by: .seconds(24 * 3600))
        harness.placeCall()
        try harness.waitUntil { harness.pusher.rings.count == 2 }
        harness.coordinator.drain()
        XCTAssertLessThanOrEqual(harness.coordinator.occupancy.deadTokens, 1)
    }

    func testTheCallQueueServesOnWhileABranchToAnotherInstanceIsConnecting() throws {
        let harness = Harness(bindings: [remoteDesk()])
        harness.signaling.holdSendsToOtherInstances()
        harness.placeCall()
        try harness.waitUntil { harness.signaling.heldSendCount == 1 }
        // The caller hangs up while the connection to the other instance is still being set up.
        harness.coordinator.handleCancel(of: try XCTUnwrap(harness.serverHandle), callID: harness.callID, reason: nil)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 487)
        harness.signaling.releaseSends()
        let invite = try harness.waitForBranch()
        invite.respond(180)
        try harness.waitUntil { harness.signaling.cancels.count == 1 }
        XCTAssertEqual(harness.signaling.cancels.first?.callID, invite.request.callID)
    }

    func testABranchSentAfterItsConnectionIsUpCanAnswer() throws {
        let harness = Harness(bindings: [remoteDesk()])
        harness.signaling.holdSendsToOtherInstances()
        harness.placeCall()
        try harness.waitUntil { harness.signaling.heldSendCount == 1 }
        harness.signaling.releaseSends()
        let invite = try harness.waitForBranch()
        invite.respond(200)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 200)
    }

    /// A desk phone whose TCP connection another instance holds.
    func remoteDesk() -> Binding {
        Binding(
            aor: callee, contact: "sip:desk@192.0.2.8:5060;transport=tcp", callID: "r", cseq: 1, registeredAt: Date(),
            expiresAt: Date().addingTimeInterval(600), userAgent: "Remote desk",
            flow: BindingFlow(transport: .tcp, source: SocketAddress(parsing: "192.0.2.8:40000"), connectionID: FlowConnectionID("tcp#9"), local: SocketAddress(parsing: "127.0.0.1:5070"), instanceID: "other"))
    }

    func testAVoIPOnlyIPhoneThatNeverComesBackIsLetGoAfterTheGrace() throws {
        let harness = Harness(bindings: [app()], manualClock: true)
        harness.placeCall()
        try harness.waitUntil { harness.pusher.rings.count == 1 }
        harness.coordinator.handleCancel(of: try XCTUnwrap(harness.serverHandle), callID: harness.callID, reason: nil)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 487)
        harness.advance(by: .milliseconds(29_999))
        XCTAssertEqual(harness.coordinator.occupancy.graceDevices, 1, "it may still register within the 30 s grace")
        harness.advance(by: .milliseconds(1))
        XCTAssertEqual(harness.coordinator.occupancy.graceDevices, 0)
    }

    let voip = PushChannel(provider: .apns, token: String(repeating: "cd", count: 32), param: nil, kind: .voip)

    func app() -> Binding {
        Binding(
            aor: callee, contact: "sip:app@192.0.2.6:5060;transport=tcp", instance: "<urn:uuid:1>", callID: "a", cseq: 1,
            registeredAt: Date().addingTimeInterval(-60), expiresAt: Date().addingTimeInterval(600), userAgent: "App",
            flow: BindingFlow(transport: .tcp, source: SocketAddress(parsing: "192.0.2.6:40000"), connectionID: FlowConnectionID("tcp#1"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "i"),
            pushChannels: [voip])
    }

    func desk() -> Binding {
        Binding(
            aor: callee, contact: "sip:desk@192.0.2.5:5060", callID: "d", cseq: 1, registeredAt: Date(), expiresAt: Date().addingTimeInterval(600),
            userAgent: "Desk", flow: BindingFlow(transport: .udp, source: SocketAddress(parsing: "192.0.2.5:5060"), connectionID: FlowConnectionID("udp#0"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "i"))
    }
}
