import Synchronization

/// A `TimerScheduler` whose time only moves when `advance(by:)` is called, for deterministic
/// tests. Thread-safe; bodies run on the thread calling `advance(by:)`, outside the scheduler's
/// lock (so a body may schedule or cancel timers), in deadline order, ties in scheduling order.
public final class ManualTimerScheduler: TimerScheduler {
    private struct Pending {
        var deadline: Duration
        var sequence: UInt64
        var body: @Sendable () -> Void
    }

    private struct State {
        var now: Duration = .zero
        var nextSequence: UInt64 = 0
        var pending: [UInt64: Pending] = [:]
    }

    private let state = Mutex(State())

    public init() {}

    /// Time elapsed since creation, as advanced so far.
    public var now: Duration { state.withLock { $0.now } }

    /// Timers scheduled and neither fired nor cancelled.
    public var pendingCount: Int { state.withLock { $0.pending.count } }

    /// The delays from now of the pending timers, soonest first.
    public var pendingDelays: [Duration] {
        state.withLock { state in
            state.pending.values.sorted { ($0.deadline, $0.sequence) < ($1.deadline, $1.sequence) }
                .map { $0.deadline - state.now }
        }
    }

    public func schedule(after delay: Duration, _ body: @escaping @Sendable () -> Void) -> any ScheduledTimer {
        let sequence = state.withLock { state in
            let sequence = state.nextSequence
            state.nextSequence += 1
            state.pending[sequence] = Pending(
                deadline: state.now + max(delay, .zero), sequence: sequence, body: body)
            return sequence
        }
        return ManualScheduledTimer(scheduler: self, sequence: sequence)
    }

    /// Moves time forward by `duration`, running every timer that falls due on the way (including
    /// ones scheduled by the bodies run), each with `now` set to its deadline.
    public func advance(by duration: Duration) {
        let target = state.withLock { $0.now + duration }
        while let body = takeNextDue(before: target) {
            body()
        }
        state.withLock { $0.now = max($0.now, target) }
    }

    fileprivate func cancel(_ sequence: UInt64) {
        _ = state.withLock { $0.pending.removeValue(forKey: sequence) }
    }

    private func takeNextDue(before target: Duration) -> (@Sendable () -> Void)? {
        state.withLock { state in
            let next = state.pending.values.filter { $0.deadline <= target }
                .min { ($0.deadline, $0.sequence) < ($1.deadline, $1.sequence) }
            guard let next else { return nil }
            state.pending.removeValue(forKey: next.sequence)
            state.now = next.deadline
            return next.body
        }
    }
}

/// A timer of `ManualTimerScheduler`.
struct ManualScheduledTimer: ScheduledTimer {
    let scheduler: ManualTimerScheduler
    let sequence: UInt64

    func cancel() { scheduler.cancel(sequence) }
}
