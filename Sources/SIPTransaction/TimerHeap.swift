import RouseVocabulary

/// Pending timers in a binary min-heap by deadline: a value that is told the time and returns
/// what has fallen due. It reads no clock and runs nothing; its owner (`HeapTimerScheduler`)
/// keeps it behind one lock and wakes when `nextDeadline` comes, so thousands of transactions
/// waiting out Timer J cost one heap entry each instead of one Dispatch timer each.
///
/// The payloads sit in an array of slots, reused once free; a timer's id names its slot and the
/// slot's generation (bumped at each reuse), so scheduling, cancelling and taking hash nothing.
/// Scheduling and taking are O(log n); cancelling is O(1) (the payload is dropped at once, its
/// heap entry when it reaches the top). Timers due at the same instant come out in the order they
/// were scheduled. Not shared: its owner serialises the calls.
public struct TimerHeap<Payload> {
    /// A heap entry: when, the order of scheduling (which breaks ties), and the timer's slot and
    /// the slot's generation then (a later generation means the timer was cancelled).
    private struct Entry: Comparable {
        var deadline: Duration
        var sequence: UInt64
        var slot: UInt32
        var generation: UInt32

        static func == (a: Entry, b: Entry) -> Bool { a.deadline == b.deadline && a.sequence == b.sequence }

        static func < (a: Entry, b: Entry) -> Bool {
            a.deadline < b.deadline || (a.deadline == b.deadline && a.sequence < b.sequence)
        }
    }

    fileprivate struct Slot {
        var payload: Payload?
        var generation: UInt32
    }

    private var heap = MinHeap<Entry>()
    private var slots: [Slot] = []
    private var free: [UInt32] = []
    private var pending = 0
    private var nextSequence: UInt64 = 0

    public init() {}

    /// Timers scheduled and neither taken nor cancelled.
    public var count: Int { pending }

    /// The earliest deadline among the pending timers (nil when there are none).
    public mutating func nextDeadline() -> Duration? {
        dropCancelledTop()
        return heap.min?.deadline
    }

    /// Adds a timer due at `deadline`; returns its id (for `cancel`).
    public mutating func schedule(_ payload: Payload, at deadline: Duration) -> UInt64 {
        let slot: UInt32
        if let reused = free.popLast() {
            slot = reused
            slots[Int(slot)].payload = payload
        } else {
            slot = UInt32(slots.count)
            slots.append(Slot(payload: payload, generation: 0))
        }
        nextSequence += 1
        pending += 1
        let generation = slots[Int(slot)].generation
        heap.insert(Entry(deadline: deadline, sequence: nextSequence, slot: slot, generation: generation))
        return UInt64(generation) << 32 | UInt64(slot)
    }

    /// Forgets a pending timer; false when it was already taken or cancelled.
    @discardableResult
    public mutating func cancel(_ id: UInt64) -> Bool {
        let slot = Int(UInt32(truncatingIfNeeded: id))
        guard slot < slots.count, slots[slot].generation == UInt32(truncatingIfNeeded: id >> 32), slots[slot].payload != nil
        else { return false }
        release(slot)
        return true
    }

    /// Removes and returns every pending timer due at or before `now`, soonest first.
    public mutating func takeDue(at now: Duration) -> [Payload] {
        var due: [Payload] = []
        while let top = heap.min, top.deadline <= now {
            heap.removeMin()
            let slot = Int(top.slot)
            guard slots[slot].generation == top.generation, let payload = slots[slot].payload else { continue }
            due.append(payload)
            release(slot)
        }
        return due
    }

    /// Empties a slot for reuse: a later generation, so its old id and heap entry match nothing.
    private mutating func release(_ slot: Int) {
        slots[slot].payload = nil
        slots[slot].generation &+= 1
        free.append(UInt32(slot))
        pending -= 1
    }

    private mutating func dropCancelledTop() {
        while let top = heap.min, slots[Int(top.slot)].generation != top.generation { heap.removeMin() }
    }
}

extension TimerHeap: Sendable where Payload: Sendable {}
extension TimerHeap.Slot: Sendable where Payload: Sendable {}
