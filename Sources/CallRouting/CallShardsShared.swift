import Foundation
import Registrar
import SIPDNS
import Synchronization

/// What every shard of the call coordinator shares: the count of live calls (one gauge for the
/// instance), the outside calls' toll-fraud guard with the hops held off, so their limits stay
/// global, and which shards a binding change must reach (`BindingWatch`). Thread-safe: the count
/// is an atomic, the outside state and the watch each sit behind a lock taken for a decision or
/// a lookup only (never across I/O).
final class CallShardsShared: @unchecked Sendable {
    // @unchecked: `outside` is only touched under `lock`, `watch` under `watchLock`.
    /// Calls to extensions not yet ended, on every shard.
    let liveCalls = Atomic<Int>(0)
    private let lock = NSLock()
    private var outside: SharedOutside
    private let watchLock = NSLock()
    private var watch = BindingWatch()

    init(limits: OutsideCallLimits) {
        outside = SharedOutside(guardian: OutsideCallGuard(limits: limits))
    }

    /// The shards a binding change of `aor` must reach (none, nearly always: then no shard's
    /// queue is woken for a REGISTER).
    func shardsToTell(of aor: AddressOfRecord) -> [Int] {
        watchLock.withLock { watch.shards(for: aor) }
    }

    /// Shard `shard` now holds calls or grace devices of `aor` (called before it reads the
    /// callee's bindings, so a change made after that read is not missed).
    func watch(_ aor: AddressOfRecord, shard: Int) {
        watchLock.withLock { watch.holders[aor, default: []].append(shard) }
    }

    /// Shard `shard` holds nothing of `aor` any more.
    func unwatch(_ aor: AddressOfRecord, shard: Int) {
        watchLock.withLock {
            watch.holders[aor]?.removeAll { $0 == shard }
            if watch.holders[aor]?.isEmpty == true { watch.holders[aor] = nil }
        }
    }

    /// Whether shard `shard` may hold dead-token marks of `aor`'s tokens (its binding changes then
    /// reach it: a token registered again revives).
    func setHoldsDeadMarks(_ holds: Bool, of aor: AddressOfRecord, shard: Int) {
        watchLock.withLock {
            if holds {
                if watch.deadMarkHolders[aor]?.contains(shard) != true { watch.deadMarkHolders[aor, default: []].append(shard) }
            } else {
                watch.deadMarkHolders[aor]?.removeAll { $0 == shard }
                if watch.deadMarkHolders[aor]?.isEmpty == true { watch.deadMarkHolders[aor] = nil }
            }
        }
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

/// Which shards care about a binding change: those holding calls or grace devices of an AOR, and
/// those that may hold dead-token marks of its tokens (both by AOR, each shard once), so a
/// REGISTER of anyone else wakes no shard. Each shard keeps its own part up to date from its
/// queue; a shard listed that no longer cares only costs a wasted hop. Only touched under
/// `CallShardsShared`'s watch lock.
struct BindingWatch {
    var holders: [AddressOfRecord: [Int]] = [:]
    var deadMarkHolders: [AddressOfRecord: [Int]] = [:]

    func shards(for aor: AddressOfRecord) -> [Int] {
        let holding = holders[aor] ?? []
        guard let marking = deadMarkHolders[aor] else { return holding }
        return Set(holding + marking).sorted()
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
