import Foundation
import Storage
import XCTest

/// The replica's follower as a value: which read it asks for after each event, and how far it has
/// applied the change log.
final class ReplicaFollowerTests: XCTestCase {
    let start = Date(timeIntervalSince1970: 1_800_000_000)

    /// A follower that has done its first (full) read, through `seq`.
    func started(through seq: Int64) -> ReplicaFollower {
        var follower = ReplicaFollower()
        XCTAssertEqual(follower.handle(.listening, now: start), [.read(after: nil, reason: .start)])
        XCTAssertEqual(follower.handle(.readDone(through: seq, full: true), now: start), [])
        return follower
    }

    func testTheNextNumberIsFollowedAndARepeatIsIgnored() {
        var follower = started(through: 4)
        XCTAssertEqual(follower.lastSeen, 4)
        XCTAssertEqual(follower.handle(.notified(seqs: 5...5, own: false), now: start), [.read(after: 4, reason: .follow)])
        XCTAssertEqual(follower.handle(.readDone(through: 5, full: false), now: start), [])
        XCTAssertEqual(follower.handle(.notified(seqs: 5...5, own: false), now: start), [], "already applied")
        XCTAssertEqual(follower.lastSeen, 5)
        XCTAssertEqual(follower.catchUps, 0)
    }

    func testOwnChangesOnlyMoveTheNumberOn() {
        var follower = started(through: 4)
        XCTAssertEqual(follower.handle(.notified(seqs: 5...5, own: true), now: start), [])
        XCTAssertEqual(follower.handle(.notified(seqs: 6...6, own: true), now: start), [])
        XCTAssertEqual(follower.lastSeen, 6)
        XCTAssertEqual(follower.handle(.notified(seqs: 7...7, own: false), now: start), [.read(after: 6, reason: .follow)])
    }

    func testATransactionsNumbersComeInOneAnnouncement() {
        var follower = started(through: 4)
        XCTAssertEqual(follower.handle(.notified(seqs: 5...7, own: true), now: start), [])
        XCTAssertEqual(follower.lastSeen, 7)
        XCTAssertEqual(follower.handle(.notified(seqs: 8...9, own: false), now: start), [.read(after: 7, reason: .follow)])
        XCTAssertEqual(follower.handle(.readDone(through: 9, full: false), now: start), [])
        XCTAssertEqual(follower.lastSeen, 9)
    }

    func testAGapInTheNumbersIsACatchUp() {
        var follower = started(through: 4)
        // 5 and 6 were lost (own or not, they cannot be skipped unseen).
        XCTAssertEqual(follower.handle(.notified(seqs: 7...7, own: true), now: start), [.read(after: 4, reason: .catchUp)])
        XCTAssertEqual(follower.handle(.readDone(through: 7, full: false), now: start), [])
        XCTAssertEqual(follower.catchUps, 1)
        XCTAssertEqual(follower.lastSeen, 7)
    }

    func testEveryReconnectCatchesUpFromTheLastNumberSeen() {
        var follower = started(through: 9)
        XCTAssertEqual(follower.handle(.listening, now: start), [.read(after: 9, reason: .catchUp)])
        XCTAssertEqual(follower.handle(.readDone(through: 12, full: false), now: start), [])
        XCTAssertEqual(follower.handle(.listening, now: start), [.read(after: 12, reason: .catchUp)])
        XCTAssertEqual(follower.handle(.readDone(through: 12, full: false), now: start), [])
        XCTAssertEqual(follower.catchUps, 2)
    }

    func testOneReadAtATimeAndWhatCameMeanwhileIsReadAfter() {
        var follower = started(through: 1)
        XCTAssertEqual(follower.handle(.notified(seqs: 2...2, own: false), now: start), [.read(after: 1, reason: .follow)])
        // While it runs: a reconnect, and numbers the read may not hold.
        XCTAssertEqual(follower.handle(.notified(seqs: 3...3, own: false), now: start), [])
        XCTAssertEqual(follower.handle(.listening, now: start), [])
        XCTAssertEqual(follower.handle(.notified(seqs: 4...4, own: false), now: start), [])
        // The read's snapshot held 2 and 3: the reconnect still needs its catch-up, from 3.
        XCTAssertEqual(follower.handle(.readDone(through: 3, full: false), now: start), [.read(after: 3, reason: .catchUp)])
        XCTAssertEqual(follower.handle(.readDone(through: 4, full: false), now: start), [])
        XCTAssertEqual(follower.lastSeen, 4)
        XCTAssertEqual(follower.catchUps, 1)
    }

    func testAReadThatHeldLaterNumbersCoversTheirAnnouncements() {
        var follower = started(through: 1)
        _ = follower.handle(.notified(seqs: 2...2, own: false), now: start)
        _ = follower.handle(.notified(seqs: 3...3, own: false), now: start)
        XCTAssertEqual(follower.handle(.readDone(through: 3, full: false), now: start), [])
        XCTAssertNil(follower.reading)
    }

    func testAFailedReadIsTriedAgainAfterAGrowingDelay() {
        var follower = started(through: 1)
        XCTAssertEqual(follower.handle(.listening, now: start), [.read(after: 1, reason: .catchUp)])
        XCTAssertEqual(follower.handle(.readFailed, now: start), [.wake(at: start.addingTimeInterval(0.5))])
        XCTAssertEqual(follower.handle(.tick, now: start.addingTimeInterval(0.4)), [.wake(at: start.addingTimeInterval(0.5))])
        XCTAssertEqual(follower.handle(.tick, now: start.addingTimeInterval(0.5)), [.read(after: 1, reason: .catchUp)])
        XCTAssertEqual(follower.handle(.readFailed, now: start.addingTimeInterval(0.5)), [.wake(at: start.addingTimeInterval(1.5))])
        XCTAssertEqual(follower.handle(.tick, now: start.addingTimeInterval(1.5)), [.read(after: 1, reason: .catchUp)])
        XCTAssertEqual(follower.handle(.readDone(through: 6, full: false), now: start.addingTimeInterval(1.6)), [])
        XCTAssertEqual(follower.catchUps, 1)
        XCTAssertEqual(follower.lastSeen, 6)
    }

    func testAReadThatHadToReadEverythingIsAFullReload() {
        var follower = started(through: 1)
        XCTAssertEqual(follower.fullReloads, 0, "the first read reads everything by design")
        _ = follower.handle(.listening, now: start)
        XCTAssertEqual(follower.handle(.readDone(through: 90, full: true), now: start), [])
        XCTAssertEqual(follower.fullReloads, 1)
        XCTAssertEqual(follower.lastSeen, 90)
    }

    func testNotificationsBeforeTheFirstReadAskForIt() {
        var follower = ReplicaFollower()
        XCTAssertEqual(follower.handle(.notified(seqs: 3...3, own: false), now: start), [.read(after: nil, reason: .start)])
        XCTAssertEqual(follower.handle(.readDone(through: 3, full: true), now: start), [])
        XCTAssertEqual(follower.lastSeen, 3)
    }
}
