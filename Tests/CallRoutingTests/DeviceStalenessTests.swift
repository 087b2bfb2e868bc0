import CallRouting
import Foundation
import XCTest

/// The stale-device rule (issue 20 item 1) on a manual clock: three accepted ring pushes in a row
/// with no sign of life, each on a call that outlasted the wake wait, and a week of silence.
final class DeviceStalenessTests: XCTestCase {
    let policy = DeviceStaleness.Policy()
    let start = Date(timeIntervalSince1970: 1_800_000_000)
    let day: TimeInterval = 24 * 3600

    /// A ring push at `at`, its wait over 8 s later.
    func ring(_ device: inout DeviceStaleness, at: Date, accepted: Bool = true, outlasted: Bool = true) -> DeviceStaleness.Change {
        device.handle(.ringPushEnded(pushedAt: at, accepted: accepted, callOutlastedWakeWait: outlasted), now: at + 8, policy: policy)
    }

    func testThreeUnansweredPushesAndAWeekOfSilenceMakeADeviceStaleAndLifeRevivesIt() {
        var device = DeviceStaleness(lastSignOfLife: start)
        XCTAssertEqual(ring(&device, at: start + 8 * day), .unchanged)
        XCTAssertEqual(ring(&device, at: start + 9 * day), .unchanged)
        XCTAssertFalse(device.isStale(under: policy, now: start + 9 * day + 60), "two pushes are not enough")
        XCTAssertEqual(ring(&device, at: start + 10 * day), .becameStale)
        XCTAssertTrue(device.isStale(under: policy, now: start + 10 * day + 60))
        XCTAssertEqual(device.unansweredPushes, 3)

        XCTAssertEqual(device.handle(.signOfLife, now: start + 11 * day, policy: policy), .revived)
        XCTAssertFalse(device.isStale(under: policy, now: start + 30 * day), "its count starts again")
        XCTAssertEqual(device.unansweredPushes, 0)
        XCTAssertEqual(device.lastSignOfLife, start + 11 * day)
    }

    func testPushesWithinTheWeekCountButTheDeviceGoesStaleOnlyWhenTheWeekIsOver() {
        var device = DeviceStaleness(lastSignOfLife: start)
        for hour in 1...5 { XCTAssertEqual(ring(&device, at: start + Double(hour) * 3600), .unchanged) }
        XCTAssertEqual(device.unansweredPushes, 5)
        XCTAssertFalse(device.isStale(under: policy, now: start + 7 * day - 1))
        XCTAssertTrue(device.isStale(under: policy, now: start + 7 * day), "time alone makes it stale once the pushes counted")
    }

    func testOneWhoDeclinesFromTheLockScreenNeverGoesStale() {
        var device = DeviceStaleness(lastSignOfLife: start)
        for index in 0..<20 {
            let pushed = start + Double(index) * day
            // The woken app declines with the call token (or registers) before the wait is over.
            _ = device.handle(.signOfLife, now: pushed + 2, policy: policy)
            XCTAssertEqual(ring(&device, at: pushed), .unchanged)
        }
        XCTAssertEqual(device.unansweredPushes, 0)
        XCTAssertFalse(device.isStale(under: policy, now: start + 60 * day))
    }

    func testRefusedPushesAndCallsShorterThanTheWaitDoNotCount() {
        var device = DeviceStaleness(lastSignOfLife: start)
        for index in 0..<5 {
            let at = start + Double(index + 8) * day
            XCTAssertEqual(ring(&device, at: at, accepted: false), .unchanged)
            XCTAssertEqual(ring(&device, at: at + 60, outlasted: false), .unchanged)
        }
        XCTAssertEqual(device.unansweredPushes, 0)
        XCTAssertFalse(device.isStale(under: policy, now: start + 30 * day))
    }

    func testThePolicyIsTheOperatorsAndNeverBelowOnePush() {
        let strict = DeviceStaleness.Policy(pushes: 0, after: 3600)
        XCTAssertEqual(strict.pushes, 1)
        var device = DeviceStaleness(lastSignOfLife: start)
        XCTAssertFalse(device.isStale(under: strict, now: start + day), "no unanswered push yet")
        XCTAssertEqual(
            device.handle(.ringPushEnded(pushedAt: start + day, accepted: true, callOutlastedWakeWait: true), now: start + day + 8, policy: strict),
            .becameStale)
        XCTAssertEqual(DeviceStaleness.Policy(), DeviceStaleness.Policy(pushes: 3, after: 7 * day))
    }

    func testASignOfLifeOlderThanTheLastOneKnownChangesNothing() {
        var device = DeviceStaleness(lastSignOfLife: start + 10 * day)
        _ = ring(&device, at: start + 11 * day)
        XCTAssertEqual(device.handle(.signOfLife, now: start + 9 * day, policy: policy), .unchanged)
        XCTAssertEqual(device.unansweredPushes, 1, "a late report of an old REGISTER does not answer a newer push")
        XCTAssertEqual(device.lastSignOfLife, start + 10 * day)
    }

    func testTheStaleMarkIsTheSilenceDeadlineOnceEnoughPushesWentUnanswered() {
        var device = DeviceStaleness(lastSignOfLife: start)
        _ = ring(&device, at: start + day)
        _ = ring(&device, at: start + 2 * day)
        XCTAssertNil(device.staleFrom(under: policy), "two unanswered pushes of three")
        _ = ring(&device, at: start + 3 * day)
        XCTAssertEqual(device.staleFrom(under: policy), start + 7 * day, "stale once a week has passed since its last sign of life")
        XCTAssertFalse(device.isStale(under: policy, now: start + 7 * day - 1))
        XCTAssertTrue(device.isStale(under: policy, now: start + 7 * day))
        _ = device.handle(.signOfLife, now: start + 8 * day, policy: policy)
        XCTAssertNil(device.staleFrom(under: policy))
    }
}
