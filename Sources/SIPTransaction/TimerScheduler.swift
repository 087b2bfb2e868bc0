/// Runs a closure once after a delay; the transaction layer's only source of time, injected so
/// tests drive timers by hand. Implementations are thread-safe; `schedule` and `cancel` never
/// block and never run the body before returning (the layer calls them while holding its lock).
public protocol TimerScheduler: Sendable {
    /// Arranges for `body` to run once, `delay` from now, unless the returned timer is cancelled.
    func schedule(after delay: Duration, _ body: @escaping @Sendable () -> Void) -> any ScheduledTimer
}

/// A pending timer from a `TimerScheduler`; `cancel()` is thread-safe and idempotent, and a timer
/// cancelled before it fires never runs its body.
public protocol ScheduledTimer: Sendable {
    func cancel()
}
