/// Runs a closure once after a delay; the transaction layer's only source of time, injected so
/// tests drive timers by hand. Implementations are thread-safe; `schedule` and `cancel` never
/// block and never run the body before returning (the layer calls them while holding its lock).
public protocol TimerScheduler: Sendable {
    /// Arranges for `body` to run once, `delay` from now, unless the returned timer is cancelled.
    func schedule(after delay: Duration, _ body: @escaping @Sendable () -> Void) -> any ScheduledTimer

    /// Arranges for `target` to be told `token` once, `delay` from now, unless the returned timer
    /// is cancelled: a timer of an owner of many (a transaction each) with no closure of its own.
    /// By default a closure calling the target.
    func schedule(after delay: Duration, token: TimerToken, for target: TimerTarget) -> any ScheduledTimer
}

extension TimerScheduler {
    public func schedule(after delay: Duration, token: TimerToken, for target: TimerTarget) -> any ScheduledTimer {
        schedule(after: delay) { target.fire(token) }
    }
}

/// A pending timer from a `TimerScheduler`; `cancel()` is thread-safe and idempotent, and a timer
/// cancelled before it fires never runs its body.
public protocol ScheduledTimer: Sendable {
    func cancel()
}

/// Which of its timers fired, in the terms of the owner that scheduled it (the transaction layer:
/// which shard and transaction, and which of its timers). A value.
public struct TimerToken: Hashable, Sendable {
    public var place: UInt64
    public var serial: UInt64

    @inlinable
    public init(place: UInt64, serial: UInt64) {
        self.place = place
        self.serial = serial
    }
}

/// Where the timers of one owner of many go when they fire: one closure for all of them, told
/// each timer's token, so scheduling a timer allocates no closure and copies nothing of its owner.
/// Threading: `fire` runs on the scheduler's thread, outside the scheduler's lock.
public final class TimerTarget: Sendable {
    @usableFromInline let fire: @Sendable (TimerToken) -> Void

    @inlinable
    public init(_ fire: @escaping @Sendable (TimerToken) -> Void) {
        self.fire = fire
    }
}
