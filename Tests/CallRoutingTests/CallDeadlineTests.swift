import CallRouting
import Foundation
import Push
import Registrar
import SIPMessage
import XCTest

/// Issue 17 item 4: nothing on a call waits without a deadline, and nothing the coordinator keeps
/// grows without bound.
final class CallDeadlineTests: XCTestCase {
    let callee = AddressOfRecord(number: "1002", domain: "example.com")

    func testACallToNobodyIsAnsweredWhenThePostedTokenReadNeverReturns() throws {
        let tokens = StalledTokens()
        defer { tokens.release() }
        let harness = Harness(bindings: [], settings: CallSettings(tokenReadTimeout: .milliseconds(100)), tokens: tokens)
        harness.placeCall()
        try harness.waitUntil { tokens.stalledReads == 1 }
        let final = try harness.waitForCallerResponse { $0 >= 200 }
        XCTAssertEqual(final.statusCode, 480)
        XCTAssertEqual(final.headers[.reason], "SIP;cause=480;text=\"no device is registered and none can be woken by push\"")
        let journey = try harness.waitForJourney()
        XCTAssertTrue(journey.events.contains { $0.text.hasPrefix("posted tokens not read within") }, "\(journey.events.map(\.text))")
    }

    func testTheRingTimerRunsWhileThePostedTokensAreStillBeingRead() throws {
        let tokens = StalledTokens()
        defer { tokens.release() }
        let harness = Harness(
            bindings: [], settings: CallSettings(ringTimeout: .milliseconds(200), tokenReadTimeout: .seconds(600)), tokens: tokens)
        harness.placeCall()
        let final = try harness.waitForCallerResponse { $0 >= 200 }
        XCTAssertEqual(final.statusCode, 480)
        XCTAssertEqual(final.headers[.reason], "SIP;cause=480;text=\"no answer within 0.2 s\"")
    }

    func testACallThatEndsWhileStartingKeepsNoEndedCallEntry() throws {
        let tokens = StalledTokens()
        defer { tokens.release() }
        let harness = Harness(
            bindings: [], settings: CallSettings(tokenReadTimeout: .seconds(600), endedCallKeep: .milliseconds(50)),
            callTokens: CallTokenSigner(secret: Array(repeating: 7, count: 32)), tokens: tokens)
        harness.placeCall()
        try harness.waitUntil { tokens.stalledReads == 1 }
        harness.coordinator.handleCancel(of: try XCTUnwrap(harness.serverHandle), reason: nil)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 487)
        XCTAssertEqual(harness.coordinator.occupancy.endedCalls, 0, "no call token was issued: nothing can ask how it ended")
        try harness.waitUntil { harness.coordinator.occupancy.calls == 0 }
    }

    func testAnEndedCallIsForgottenAfter64T1() throws {
        let harness = Harness(bindings: [desk()], settings: CallSettings(endedCallKeep: .milliseconds(100)))
        harness.placeCall()
        let invite = try harness.waitForBranch()
        invite.respond(200)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 200)
        XCTAssertEqual(harness.coordinator.occupancy.calls, 1, "kept for 2xx retransmissions")
        try harness.waitUntil { harness.coordinator.occupancy.calls == 0 }
    }

    func desk() -> Binding {
        Binding(
            aor: callee, contact: "sip:desk@192.0.2.5:5060", callID: "d", cseq: 1, registeredAt: Date(), expiresAt: Date().addingTimeInterval(600),
            userAgent: "Desk", flow: BindingFlow(transport: "udp", source: "192.0.2.5:5060", connectionID: "udp#0", localPoint: "udp:127.0.0.1:5060", instanceID: "i"))
    }
}
