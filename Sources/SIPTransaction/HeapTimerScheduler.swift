public import Dispatch

/// The production `TimerScheduler` of the transaction layer: every pending timer is an entry of
/// one `TimerHeap`, and one `DispatchSourceTimer` on the given queue is armed for the earliest
/// deadline. A REGISTER's Timer J is then a heap insertion and a removal, not a `DispatchWorkItem`
/// and an `asyncAfter` of its own (profiled: 16.8k instructions per REGISTER).
///
/// Timers due within `slack` of a wake-up run in it too (early by at most that much, so that a
/// burst of transactions completed together wakes the queue once, not once per transaction).
/// A timer of `coarseAfter` or longer (Timer J, D, H, K, B, F: seconds, there to absorb
/// retransmissions or give up) is due at the next multiple of `grain` after its deadline, late by
/// less than that: all such timers of a stretch share one wake-up and one re-arm of the source.
/// Each wake-up costs a clock read, the lock and a re-arm of the Dispatch source (profiled: with
/// one wake-up per REGISTER's Timer J, ~30k instructions per REGISTER in all; removing the
/// transaction itself is a small part of it).
///
/// Threading: `schedule` and `cancel` are thread-safe and never block (a short locked section;
/// the source is re-armed inside it, so two threads cannot leave it armed for the later of their
/// deadlines); bodies run on the queue, outside the lock, soonest first.
public final class HeapTimerScheduler: TimerScheduler, @unchecked Sendable {
    // @unchecked: `state` is a lock; `source` is never reassigned, and Dispatch documents a
    // source's `schedule` and `cancel` as safe from any thread.
    /// What a timer runs: its own closure, or its target told its token.
    private enum Job {
        case body(@Sendable () -> Void)
        case target(TimerTarget, TimerToken)

        func run() {
            switch self {
            case .body(let body): body()
            case .target(let target, let token): target.fire(token)
            }
        }
    }

    private struct State {
        var heap = TimerHeap<Job>()
        /// The deadline the source is armed for (uptime nanoseconds), nil when disarmed.
        var armed: UInt64?
    }

    private let state = PthreadLocked(State())
    private let source: any DispatchSourceTimer
    private let slack: UInt64
    private let coarseAfter: UInt64
    private let grain: UInt64

    /// - Parameters:
    ///   - slack: how early a timer may run to share a wake-up with an earlier one.
    ///   - coarseAfter: timers this long or longer are rounded up to `grain`.
    ///   - grain: the step long timers' deadlines are rounded up to (at least 1 ns).
    public init(queue: DispatchQueue, slack: Duration = .milliseconds(2), coarseAfter: Duration = .seconds(4), grain: Duration = .milliseconds(250)) {
        self.slack = Self.nanoseconds(slack)
        self.coarseAfter = Self.nanoseconds(coarseAfter)
        self.grain = max(1, Self.nanoseconds(grain))
        source = DispatchSource.makeTimerSource(queue: queue)
        source.setEventHandler { [weak self] in self?.fire() }
        source.activate()
    }

    deinit {
        source.cancel()
    }

    /// Timers scheduled and neither run nor cancelled.
    public var pendingCount: Int { state.withLock { $0.heap.count } }

    public func schedule(after delay: Duration, _ body: @escaping @Sendable () -> Void) -> any ScheduledTimer {
        schedule(.body(body), after: delay)
    }

    public func schedule(after delay: Duration, token: TimerToken, for target: TimerTarget) -> any ScheduledTimer {
        schedule(.target(target, token), after: delay)
    }

    private func schedule(_ job: Job, after delay: Duration) -> any ScheduledTimer {
        let nanoseconds = Self.nanoseconds(delay)
        var deadline = DispatchTime.now().uptimeNanoseconds &+ nanoseconds
        if nanoseconds >= coarseAfter { deadline = (deadline / grain &+ 1) &* grain }
        let id = state.withLock { state in
            let id = state.heap.schedule(job, at: .nanoseconds(Int64(clamping: deadline)))
            if state.armed.map({ deadline < $0 }) ?? true { arm(deadline, &state) }
            return id
        }
        return HeapScheduledTimer(scheduler: self, id: id)
    }

    func cancel(_ id: UInt64) {
        state.withLock { _ = $0.heap.cancel(id) }
    }

    /// The source fired: takes what is due, arms the source for what is left, runs the bodies.
    private func fire() {
        let now = DispatchTime.now().uptimeNanoseconds
        let due = state.withLock { state -> [Job] in
            let due = state.heap.takeDue(at: .nanoseconds(Int64(clamping: now &+ slack)))
            state.armed = nil
            if let next = state.heap.nextDeadline() { arm(Self.nanoseconds(next), &state) }
            return due
        }
        for job in due { job.run() }
    }

    private func arm(_ deadline: UInt64, _ state: inout State) {
        state.armed = deadline
        source.schedule(deadline: DispatchTime(uptimeNanoseconds: deadline), leeway: .milliseconds(1))
    }

    private static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        // Capped at about 136 years, so the multiplication cannot overflow.
        return UInt64(min(max(0, seconds), 1 << 32)) * 1_000_000_000 + UInt64(max(0, attoseconds) / 1_000_000_000)
    }
}

/// A timer of `HeapTimerScheduler`: the scheduler and the heap id (fits an existential's inline
/// buffer, so returning it allocates nothing).
struct HeapScheduledTimer: ScheduledTimer {
    let scheduler: HeapTimerScheduler
    let id: UInt64

    func cancel() { scheduler.cancel(id) }
}
