import SIPDNS
import XCTest

@testable import SIPProxy

/// Serial failover across a route's hops, as action sequences: resolve, send, time, move on, and
/// never after the callee may be ringing.
final class HopFailoverTests: XCTestCase {
    private let first = RouteHop(SIPServerTarget(host: "trunk-a.example"))
    private let second = RouteHop(SIPServerTarget(host: "192.0.2.20", port: 5080, transport: .tcp))
    private let a1 = ResolvedHop(transport: .udp, ip: "192.0.2.1", port: 5060, host: "trunk-a.example")
    private let a2 = ResolvedHop(transport: .udp, ip: "192.0.2.2", port: 5060, host: "trunk-a.example")
    private let b = ResolvedHop(transport: .tcp, ip: "192.0.2.20", port: 5080, host: "192.0.2.20")

    func testSilenceAndATransportErrorMoveOnThroughEveryAddressThenTheNextHop() {
        var failover = HopFailover(hops: [first, second], hopTimeout: .seconds(4))
        XCTAssertEqual(failover.start(), [.resolve(first)])
        XCTAssertEqual(failover.handle(.resolved([a1, a2])), [.send(attempt: 1, to: a1), .startHopTimer(attempt: 1, after: .seconds(4))])
        XCTAssertEqual(failover.handle(.hopTimerFired(attempt: 1)), [
            .abandon(attempt: 1), .record(.init(hop: a1.description, outcome: "no response in 4 s")),
            .send(attempt: 2, to: a2), .startHopTimer(attempt: 2, after: .seconds(4)),
        ])
        XCTAssertEqual(failover.handle(.transportFailed(attempt: 2, reason: "connection refused")), [
            .stopHopTimer(attempt: 2), .record(.init(hop: a2.description, outcome: "transport error: connection refused")), .resolve(second),
        ])
        XCTAssertEqual(failover.handle(.resolved([b])), [.send(attempt: 3, to: b), .startHopTimer(attempt: 3, after: .seconds(4))])
        XCTAssertEqual(failover.handle(.response(attempt: 3, status: 100, retryAfter: nil)), [.stopHopTimer(attempt: 3)])
        XCTAssertEqual(failover.handle(.response(attempt: 3, status: 200, retryAfter: nil)), [
            .record(.init(hop: b.description, outcome: "200")), .relay(attempt: 3),
        ])
        XCTAssertEqual(failover.handle(.hopTimerFired(attempt: 3)), [], "nothing after the call is answered")
    }

    func testA503WithRetryAfterHoldsTheHopOffAndA408MovesOn() {
        var failover = HopFailover(hops: [first, second], hopTimeout: .seconds(2))
        _ = failover.start()
        _ = failover.handle(.resolved([a1]))
        XCTAssertEqual(failover.handle(.response(attempt: 1, status: 503, retryAfter: .seconds(30))), [
            .stopHopTimer(attempt: 1), .holdOff(a1, for: .seconds(30)), .record(.init(hop: a1.description, outcome: "503")), .resolve(second),
        ])
        _ = failover.handle(.resolved([b]))
        XCTAssertEqual(failover.handle(.response(attempt: 2, status: 408, retryAfter: nil)), [
            .stopHopTimer(attempt: 2), .record(.init(hop: b.description, outcome: "408")), .exhausted(status: 503, reason: "Service Unavailable"),
        ])
    }

    func testNoFailoverOnceTheCalleeMayBeRinging() {
        var failover = HopFailover(hops: [first, second], hopTimeout: .seconds(2))
        _ = failover.start()
        _ = failover.handle(.resolved([a1]))
        XCTAssertEqual(failover.handle(.response(attempt: 1, status: 180, retryAfter: nil)), [.stopHopTimer(attempt: 1), .relay(attempt: 1)])
        XCTAssertEqual(failover.handle(.response(attempt: 1, status: 503, retryAfter: .seconds(5))), [
            .record(.init(hop: a1.description, outcome: "503")), .relay(attempt: 1),
        ], "a 503 after 180 goes to the caller")
    }

    func testOtherFinalAnswersGoToTheCallerAsTheyAre() {
        var failover = HopFailover(hops: [first, second], hopTimeout: .seconds(2))
        _ = failover.start()
        _ = failover.handle(.resolved([a1]))
        XCTAssertEqual(failover.handle(.response(attempt: 1, status: 486, retryAfter: nil)), [
            .stopHopTimer(attempt: 1), .record(.init(hop: a1.description, outcome: "486")), .relay(attempt: 1),
        ])
    }

    func testOnlySilenceEndsIn408AndNothingResolvedIn503() {
        var silent = HopFailover(hops: [second], hopTimeout: .seconds(1))
        _ = silent.start()
        _ = silent.handle(.resolved([b]))
        XCTAssertEqual(silent.handle(.hopTimerFired(attempt: 1)).last, .exhausted(status: 408, reason: "Request Timeout"))

        var unresolved = HopFailover(hops: [first], hopTimeout: .seconds(1))
        _ = unresolved.start()
        XCTAssertEqual(unresolved.handle(.resolved([])), [
            .record(.init(hop: "trunk-a.example", outcome: "not resolved")), .exhausted(status: 503, reason: "Service Unavailable"),
        ])
    }

    func testHeldOffAddressesAreSkippedWhileOthersRemainAndTriedWhenNothingElseIs() {
        var failover = HopFailover(hops: [first, second], hopTimeout: .seconds(2), heldOff: [a1, b])
        _ = failover.start()
        XCTAssertEqual(failover.handle(.resolved([a1, a2])), [
            .record(.init(hop: a1.description, outcome: "skipped: held off by Retry-After")),
            .send(attempt: 1, to: a2), .startHopTimer(attempt: 1, after: .seconds(2)),
        ])
        XCTAssertEqual(failover.handle(.transportFailed(attempt: 1, reason: "unreachable")).last, .resolve(second))
        XCTAssertEqual(failover.handle(.resolved([b])), [.send(attempt: 2, to: b), .startHopTimer(attempt: 2, after: .seconds(2))],
            "the last hop is tried though held off: better than no call")
    }

    func testTheCallersCancelStopsTheAttemptTheRightWay() {
        var silent = HopFailover(hops: [first], hopTimeout: .seconds(2))
        _ = silent.start()
        _ = silent.handle(.resolved([a1]))
        XCTAssertEqual(silent.handle(.callerCancelled), [.stopHopTimer(attempt: 1), .abandon(attempt: 1)], "no CANCEL before a provisional (§9.1)")

        var ringing = HopFailover(hops: [first], hopTimeout: .seconds(2))
        _ = ringing.start()
        _ = ringing.handle(.resolved([a1]))
        _ = ringing.handle(.response(attempt: 1, status: 183, retryAfter: nil))
        XCTAssertEqual(ringing.handle(.callerCancelled), [.cancel(attempt: 1)])
        XCTAssertEqual(ringing.handle(.response(attempt: 1, status: 487, retryAfter: nil)), [])
    }

    func testStaleEventsOfAnEarlierAttemptAreIgnored() {
        var failover = HopFailover(hops: [first], hopTimeout: .seconds(2))
        _ = failover.start()
        _ = failover.handle(.resolved([a1, a2]))
        _ = failover.handle(.hopTimerFired(attempt: 1))
        XCTAssertEqual(failover.handle(.response(attempt: 1, status: 503, retryAfter: nil)), [])
        XCTAssertEqual(failover.handle(.transportFailed(attempt: 1, reason: "late")), [])
        XCTAssertEqual(failover.currentAttempt, 2)
    }
}
