import RouseVocabulary

/// Pending timers in a binary min-heap by deadline: a value that is told the time and returns
/// what has fallen due. It reads no clock and runs nothing; its owner (`HeapTimerScheduler`)
/// keeps it behind one lock and wakes when `nextDeadline` comes, so thousands of transactions
/// waiting out Timer J cost one heap entry each instead of one Dispatch timer each.
///
/// Scheduling and taking are O(log n); cancelling is O(1) (the payload is dropped at once, its
/// heap entry when it reaches the top). Timers due at the same instant come out in the order they
/// were scheduled. Not shared: its owner serialises the calls.
public struct TimerHeap<Payload> {
    /// A heap entry: when, and which timer (ids increase, so they also break ties in order).
    private struct Entry: Comparable {
        var deadline: Duration
        var id: UInt64

        static func < (a: Entry, b: Entry) -> Bool {
            a.deadline < b.deadline || (a.deadline == b.deadline && a.id < b.id)
        }
    }

    private var heap = MinHeap<Entry>()
    private var payloads: [UInt64: Payload] = [:]
    private var nextID: UInt64 = 0

    public init() {}

    /// Timers scheduled and neither taken nor cancelled.
    public var count: Int { payloads.count }

    /// The earliest deadline among the pending timers (nil when there are none).
    public mutating func nextDeadline() -> Duration? {
        dropCancelledTop()
        return heap.min?.deadline
    }

    /// Adds a timer due at `deadline`; returns its id (for `cancel`).
    public mutating func schedule(_ payload: Payload, at deadline: Duration) -> UInt64 {
        nextID += 1
        payloads[nextID] = payload
        heap.insert(Entry(deadline: deadline, id: nextID))
        return nextID
    }

    /// Forgets a pending timer; false when it was already taken or cancelled.
    @discardableResult
    public mutating func cancel(_ id: UInt64) -> Bool {
        payloads.removeValue(forKey: id) != nil
    }

    /// Removes and returns every pending timer due at or before `now`, soonest first.
    public mutating func takeDue(at now: Duration) -> [Payload] {
        var due: [Payload] = []
        while let top = heap.min, top.deadline <= now {
            heap.removeMin()
            if let payload = payloads.removeValue(forKey: top.id) { due.append(payload) }
        }
        return due
    }

    private mutating func dropCancelledTop() {
        while let top = heap.min, payloads[top.id] == nil { heap.removeMin() }
    }
}

extension TimerHeap: Sendable where Payload: Sendable {}
