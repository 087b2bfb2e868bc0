@testable import SIPProxy
import XCTest

/// `sip_rate_limit`'s table, with time passed in.
final class SourceRateLimiterTests: XCTestCase {
    func testASourcePastItsBurstIsDroppedUntilItsBucketRefills() {
        let limiter = SourceRateLimiter(rate: 2)
        XCTAssertEqual((0..<6).map { _ in limiter.allow("192.0.2.1", now: 100) }, [true, true, true, true, false, false])
        XCTAssertTrue(limiter.allow("192.0.2.1", now: 100.5), "one token back after half a second")
        XCTAssertTrue(limiter.allow("192.0.2.2", now: 100.5), "another source has its own bucket")
        XCTAssertEqual(limiter.droppedCount, 2)
    }

    func testTheTableStaysWithinItsBoundWhileEverySourceIsBusy() {
        let limiter = SourceRateLimiter(rate: 1, maxSources: 100)
        for round in 0..<3 {
            for source in 0..<1000 { _ = limiter.allow("198.51.100.\(source)", now: 10 + Double(round) * 0.01) }
        }
        XCTAssertEqual(limiter.trackedSources, 100)
    }

    func testAFloodingSourceStaysLimitedWhileOthersComeAndGo() {
        let limiter = SourceRateLimiter(rate: 1, maxSources: 10)
        for _ in 0..<5 { _ = limiter.allow("203.0.113.9", now: 50) }
        for source in 0..<5 { XCTAssertTrue(limiter.allow("198.51.100.\(source)", now: 50)) }
        XCTAssertFalse(limiter.allow("203.0.113.9", now: 50))
    }
}
