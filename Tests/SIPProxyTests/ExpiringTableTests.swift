import Foundation
@testable import SIPProxy
import XCTest

/// The bounded tables of the call core, with time passed in.
final class ExpiringTableTests: XCTestCase {
    let start = Date(timeIntervalSince1970: 1_000_000)

    func testAnEntryIsDroppedOnceItIsOlderThanItsMaximumAge() {
        var table = ExpiringTable<String, Int>(limit: 10, maxAge: 60)
        table.insert(1, for: "a", at: start)
        table.insert(2, for: "b", at: start.addingTimeInterval(30))
        table.prune(now: start.addingTimeInterval(59))
        XCTAssertEqual(table["a"], 1)
        table.prune(now: start.addingTimeInterval(60))
        XCTAssertNil(table["a"])
        XCTAssertEqual(table["b"], 2)
        XCTAssertEqual(table.oldestInsertedAt, start.addingTimeInterval(30))
    }

    func testWhenFullTheOldestGoesFirst() {
        var table = ExpiringTable<Int, Int>(limit: 3, maxAge: 3600)
        for key in 0..<5 { table.insert(key, for: key, at: start.addingTimeInterval(Double(key))) }
        XCTAssertEqual(table.count, 3)
        XCTAssertNil(table[0])
        XCTAssertNil(table[1])
        XCTAssertEqual(table[4], 4)
    }

    func testInsertingAgainGivesANewAgeAndUpdateKeepsIt() {
        var table = ExpiringTable<String, Int>(limit: 10, maxAge: 60)
        table.insert(1, for: "a", at: start)
        table.insert(2, for: "a", at: start.addingTimeInterval(50))
        table.update(3, for: "a")
        table.update(9, for: "absent")
        table.prune(now: start.addingTimeInterval(100))
        XCTAssertEqual(table["a"], 3, "aged from its second insert")
        XCTAssertNil(table["absent"], "update adds nothing")
        table.prune(now: start.addingTimeInterval(110))
        XCTAssertNil(table["a"])
        XCTAssertTrue(table.isEmpty)
    }

    func testRemovedEntriesDoNotPileUpInTheOrder() {
        var table = ExpiringTable<Int, Int>(limit: 100_000, maxAge: 3600)
        table.insert(-1, for: -1, at: start)
        for key in 0..<10_000 {
            table.insert(key, for: key, at: start.addingTimeInterval(1))
            table.removeValue(forKey: key)
        }
        XCTAssertEqual(table.count, 1)
        XCTAssertLessThanOrEqual(table.orderCount, 2 * table.count + 65)
        XCTAssertEqual(table.oldestInsertedAt, start)
    }

    func testAFullTableOfLiveEntriesStaysAtItsLimit() {
        var table = ExpiringTable<Int, Int>(limit: 1000, maxAge: 3600)
        for key in 0..<10_000 { table.insert(key, for: key, at: start) }
        XCTAssertEqual(table.count, 1000)
        XCTAssertLessThanOrEqual(table.orderCount, 2 * 1000 + 65)
        XCTAssertEqual(table[9_999], 9_999)
        XCTAssertNil(table[8_999])
    }
}
