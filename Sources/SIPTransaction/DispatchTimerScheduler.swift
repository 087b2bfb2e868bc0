public import Dispatch

/// The production `TimerScheduler`: each timer is a `DispatchWorkItem` run by `asyncAfter` on the
/// given queue. Thread-safe; bodies run on that queue.
public struct DispatchTimerScheduler: TimerScheduler {
    public let queue: DispatchQueue

    public init(queue: DispatchQueue) {
        self.queue = queue
    }

    public func schedule(after delay: Duration, _ body: @escaping @Sendable () -> Void) -> any ScheduledTimer {
        let timer = DispatchScheduledTimer(body)
        let (seconds, attoseconds) = delay.components
        let nanoseconds = max(0, seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(nanoseconds)), execute: timer.item)
        return timer
    }
}

/// A timer of `DispatchTimerScheduler`. `@unchecked Sendable`: its only stored property is a
/// `DispatchWorkItem`, whose `cancel()` Dispatch documents as safe from any thread, and which is
/// never mutated after `init`.
final class DispatchScheduledTimer: ScheduledTimer, @unchecked Sendable {
    let item: DispatchWorkItem

    init(_ body: @escaping @Sendable () -> Void) {
        self.item = DispatchWorkItem(block: body)
    }

    func cancel() { item.cancel() }
}
