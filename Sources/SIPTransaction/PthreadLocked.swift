#if canImport(Glibc)
public import Glibc
#endif

/// A value behind a pthread mutex: the transaction layer's shard lock.
///
/// `Synchronization.Mutex` locks with a futex ThreadSanitizer cannot see, so once the layer's
/// transactions were spread over shards used from several threads, TSan reported every shard
/// access as a race; a pthread mutex is the same short critical section, and TSan checks it.
///
/// Threading: `withLock` may be called from any thread; it must not be re-entered from its body.
@usableFromInline
final class PthreadLocked<Value>: @unchecked Sendable {
    // @unchecked: `value` is only touched between `pthread_mutex_lock` and `_unlock` of `mutex`.
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    @usableFromInline var value: Value

    @usableFromInline
    init(_ value: Value) {
        self.value = value
        mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with the value, holding the lock.
    @inlinable
    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
