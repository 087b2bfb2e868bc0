import Foundation
import Registrar
import SIPDNS
import Synchronization

/// What every shard of the call coordinator shares: the count of live calls (one gauge for the
/// instance) and the outside calls' toll-fraud guard with the hops held off, so their limits stay
/// global. Thread-safe: the count is an atomic, the outside state sits behind a lock taken only
/// for a guard decision (never across I/O).
final class CallShardsShared: @unchecked Sendable {
    // @unchecked: `outside` is only touched under `lock`.
    /// Calls to extensions not yet ended, on every shard.
    let liveCalls = Atomic<Int>(0)
    private let lock = NSLock()
    private var outside: SharedOutside

    init(limits: OutsideCallLimits) {
        outside = SharedOutside(guardian: OutsideCallGuard(limits: limits))
    }

    /// Adds `delta` to the live calls and returns the new count.
    @discardableResult
    func addLiveCalls(_ delta: Int) -> Int {
        liveCalls.wrappingAdd(delta, ordering: .sequentiallyConsistent).newValue
    }

    var liveCallCount: Int { liveCalls.load(ordering: .sequentiallyConsistent) }

    /// Runs `body` on the outside-call state under the lock.
    func withOutside<Result>(_ body: (inout SharedOutside) -> Result) -> Result {
        lock.withLock { body(&outside) }
    }
}

/// The outside-call state that spans shards: the toll-fraud guard, the hops a 503's Retry-After
/// holds off (until when), and the extensions already reported as surging (with when). Only
/// touched under `CallShardsShared`'s lock.
struct SharedOutside {
    var guardian: OutsideCallGuard
    var heldOff: [ResolvedHop: Date] = [:]
    var surgeReported: [AddressOfRecord: Date] = [:]
}
