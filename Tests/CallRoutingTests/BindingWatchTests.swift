import Registrar
import XCTest

@testable import CallRouting

/// Which call shards a binding change reaches: only those holding calls or grace devices of the
/// AOR, or dead-token marks of its tokens.
final class BindingWatchTests: XCTestCase {
    private let alice = AddressOfRecord(number: "1001", domain: "acme.example")
    private let bob = AddressOfRecord(number: "1002", domain: "acme.example")

    func testAChangeReachesTheShardsHoldingTheAorAndThoseWithDeadMarks() {
        let shared = CallShardsShared(limits: OutsideCallLimits())
        XCTAssertEqual(shared.shardsToTell(of: alice), [], "nobody calls alice: no shard is woken")
        shared.watch(alice, shard: 2)
        shared.watch(alice, shard: 0)
        XCTAssertEqual(shared.shardsToTell(of: alice).sorted(), [0, 2])
        XCTAssertEqual(shared.shardsToTell(of: bob), [])
        shared.unwatch(alice, shard: 2)
        XCTAssertEqual(shared.shardsToTell(of: alice), [0])
        shared.setHoldsDeadMarks(true, of: bob, shard: 1)
        XCTAssertEqual(shared.shardsToTell(of: bob), [1], "a re-registered token may revive there")
        XCTAssertEqual(shared.shardsToTell(of: alice), [0], "alice's tokens have no marks: her changes go to her calls alone")
        shared.setHoldsDeadMarks(true, of: alice, shard: 1)
        shared.setHoldsDeadMarks(true, of: alice, shard: 1)
        shared.setHoldsDeadMarks(true, of: alice, shard: 0)
        XCTAssertEqual(shared.shardsToTell(of: alice), [0, 1], "each shard once")
        shared.setHoldsDeadMarks(false, of: alice, shard: 1)
        shared.setHoldsDeadMarks(false, of: alice, shard: 0)
        shared.unwatch(alice, shard: 0)
        XCTAssertEqual(shared.shardsToTell(of: alice), [])
        XCTAssertEqual(shared.shardsToTell(of: bob), [1])
        shared.setHoldsDeadMarks(false, of: bob, shard: 1)
        XCTAssertEqual(shared.shardsToTell(of: bob), [])
    }
}
