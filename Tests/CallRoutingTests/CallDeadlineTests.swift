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
}
