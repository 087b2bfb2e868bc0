import Glibc

/// A value guarded by a `pthread_mutex_t`, which it owns and destroys in deinit. Thread-safe. Used
/// instead of `Synchronization.Mutex` because ThreadSanitizer sees pthread mutexes (it intercepts
/// them) but not the futex behind `Mutex` on Linux, and reports every access under it as a race.
public final class Locked<Value: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: `value` is only touched between pthread_mutex_lock and _unlock.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    public init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    public func withLock<Result, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
