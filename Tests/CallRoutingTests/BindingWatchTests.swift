import Registrar
import XCTest

@testable import CallRouting

/// Which call shards a binding change reaches: only those holding calls or grace devices of the
/// AOR, or dead-token marks.
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
        shared.setHoldsDeadMarks(true, shard: 1)
        XCTAssertEqual(shared.shardsToTell(of: bob), [1], "a re-registered token may revive there")
        XCTAssertEqual(shared.shardsToTell(of: alice), [0, 1])
        shared.setHoldsDeadMarks(false, shard: 1)
        shared.unwatch(alice, shard: 0)
        XCTAssertEqual(shared.shardsToTell(of: alice), [])
    }
}
