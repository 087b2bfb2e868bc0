import Foundation
@testable import Storage
import XCTest

/// A `rouse_replica` payload read as bytes, and the follower's path for this instance's own
/// changes (the common case under REGISTER load).
final class ReplicaNoticeTests: XCTestCase {
    func testAPayloadIsReadAndOwnBindingChangesAreRecognised() {
        XCTAssertEqual(PostgresReplica.notice("5 7 binding instance-a", origin: "instance-a").map { [$0.seqs.lowerBound, $0.seqs.upperBound] }, [5, 7])
        XCTAssertEqual(PostgresReplica.notice("5 7 binding instance-a", origin: "instance-a")?.own, true)
        XCTAssertEqual(PostgresReplica.notice("5 7 binding instance-b", origin: "instance-a")?.own, false, "another instance's")
        XCTAssertEqual(PostgresReplica.notice("5 7 binding,posted instance-a", origin: "instance-a")?.own, false, "not only bindings")
        XCTAssertEqual(PostgresReplica.notice("5 7 binding instance-a", origin: "instance")?.own, false, "a prefix is not the origin")
        XCTAssertEqual(PostgresReplica.notice("5 5 binding ", origin: "")?.own, false, "no origin is nobody's own")
        XCTAssertEqual(PostgresReplica.notice("5 5 dead ", origin: "")?.seqs, 5...5)
        for bad in ["", "5", "5 7", "5 7 binding", "7 5 binding a", "x 7 binding a", "5 7 binding a b", "-1 2 binding a",
            "99999999999999999999 99999999999999999999 binding a"] {
            XCTAssertNil(PostgresReplica.notice(bad, origin: "a"), bad)
        }
    }

    func testOwnChangesInARunMoveTheNumberOnWithoutAReadAndAnotherInstancesStillAsksForOne() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        var follower = ReplicaFollower()
        XCTAssertEqual(follower.handle(.listening, now: now), [.read(after: nil, reason: .start)])
        XCTAssertEqual(follower.handle(.readDone(through: 10, full: true), now: now), [])
        // Merged ranges, and one overlapping what is already applied.
        XCTAssertEqual(follower.handle(.notified(seqs: 11...40, own: true), now: now), [])
        XCTAssertEqual(follower.handle(.notified(seqs: 35...41, own: true), now: now), [])
        XCTAssertEqual(follower.lastSeen, 41)
        // A gap before an own change: a catch-up, and the own number waits for it.
        XCTAssertEqual(follower.handle(.notified(seqs: 43...43, own: true), now: now), [.read(after: 41, reason: .catchUp)])
        XCTAssertEqual(follower.handle(.readDone(through: 42, full: false), now: now), [])
        XCTAssertEqual(follower.lastSeen, 43)
        XCTAssertEqual(follower.handle(.notified(seqs: 44...44, own: false), now: now), [.read(after: 43, reason: .follow)])
    }
}
