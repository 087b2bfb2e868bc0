import Foundation
@testable import Registrar
import SIPMessage
import XCTest

/// Failed credentials per source address: SIP REGISTERs past the limit get 503 with Retry-After.
final class ThrottleTests: XCTestCase {
    typealias F = RegistrarFixture

    /// A REGISTER from `source` answering a fresh challenge with `password`.
    func attempt(_ fixture: inout F, password: String, source: String, callID: String) throws -> SIPResponse {
        let flow = F.flow(source)
        let challenge = F.response(try fixture.send(F.register(callID: callID), flow: flow))
        guard challenge.statusCode == 401 else { return challenge }
        let authorization = F.answer(challenge.headers.lines(.wwwAuthenticate)[0], password: password)
        return F.response(try fixture.send(F.register(callID: callID, cseq: 2, authorization: authorization), flow: flow))
    }

    func testWrongPasswordsPastTheLimitAreRefusedWith503UntilTheBlockEnds() throws {
        var fixture = F()
        fixture.core.authFailureThrottle = AuthFailureThrottle(limit: 3, window: 60, blockFor: 120)
        // First REGISTERs without Authorization never count.
        for index in 0..<10 {
            XCTAssertEqual(F.response(try fixture.send(F.register(callID: "plain-\(index)"), flow: F.flow("192.0.2.7:5060"))).statusCode, 401)
        }
        for index in 0..<3 {
            XCTAssertEqual(try attempt(&fixture, password: "guess-\(index)", source: "192.0.2.7:\(5060 + index)", callID: "g\(index)").statusCode, 401)
        }
        // Blocked: any port of that address, even with the right password, before any digest work.
        let blocked = F.response(try fixture.send(F.register(callID: "after"), flow: F.flow("192.0.2.7:6000")))
        XCTAssertEqual(blocked.statusCode, 503)
        XCTAssertEqual(blocked.reasonPhrase, RegistrarCore.throttledReasonPhrase)
        XCTAssertEqual(blocked.headers[.retryAfter], "120")
        XCTAssertTrue(blocked.headers.lines(.wwwAuthenticate).isEmpty)
        fixture.now = fixture.now.addingTimeInterval(50)
        XCTAssertEqual(F.response(try fixture.send(F.register(callID: "later"), flow: F.flow("192.0.2.7:6001"))).headers[.retryAfter], "70")

        // Another source is unaffected and registers.
        XCTAssertEqual(try attempt(&fixture, password: "alice-secret", source: "198.51.100.9:5060", callID: "other").statusCode, 200)

        // The block ends with the clock: the right password registers again.
        fixture.now = fixture.now.addingTimeInterval(71)
        XCTAssertEqual(try attempt(&fixture, password: "alice-secret", source: "192.0.2.7:5060", callID: "back").statusCode, 200)
    }

    func testFailuresOutsideTheWindowAreForgotten() throws {
        var fixture = F()
        fixture.core.authFailureThrottle = AuthFailureThrottle(limit: 2, window: 10, blockFor: 60)
        XCTAssertEqual(try attempt(&fixture, password: "x", source: "192.0.2.7:5060", callID: "a").statusCode, 401)
        fixture.now = fixture.now.addingTimeInterval(11)
        XCTAssertEqual(try attempt(&fixture, password: "y", source: "192.0.2.7:5060", callID: "b").statusCode, 401)
        XCTAssertEqual(try attempt(&fixture, password: "alice-secret", source: "192.0.2.7:5060", callID: "c").statusCode, 200)
    }

    func testTheTableIsBoundedAndAddressesIgnoreThePort() {
        let throttle = AuthFailureThrottle(limit: 1, window: 60, blockFor: 60, maxSources: 3)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        for index in 0..<10 { throttle.recordFailure("10.0.0.\(index)", now: now) }
        XCTAssertEqual(throttle.trackedSourceCount, 3)
        XCTAssertNil(throttle.isBlocked("10.0.0.0", now: now))  // the oldest were forgotten
        XCTAssertNotNil(throttle.isBlocked("10.0.0.9", now: now))
        XCTAssertEqual(AuthFailureThrottle.address(ofSource: "192.0.2.7:5060"), "192.0.2.7")
        XCTAssertEqual(AuthFailureThrottle.address(ofSource: "[2001:db8::1]:5060"), "2001:db8::1")
        XCTAssertEqual(AuthFailureThrottle.address(ofSource: "2001:db8::1"), "2001:db8::1")
    }
}
