public import Foundation

/// Binding ids ordered by when something falls due for them (their expiry, or their refresh
/// push): a binary min-heap, so finding what is due costs O(due · log n), never a walk of every
/// binding. Entries are not removed when a binding changes: a refreshed binding gets a new entry
/// and its old one is handed out when its time comes, for the owner to check against the binding
/// (lazy deletion); `compact` drops such stale entries once they outnumber the live bindings.
/// A value; not thread-safe: one owner.
public struct ExpiryQueue: Sendable {
    /// One id and the moment it falls due (seconds since the reference date, as `Date` holds it).
    struct Entry: Sendable {
        var due: Double
        var id: UUID
    }

    private var heap: [Entry] = []

    public init() {}

    /// How many entries are held, stale ones included.
    public var count: Int { heap.count }

    /// The earliest due time held, if any.
    public var earliest: Date? { heap.first.map { Date(timeIntervalSinceReferenceDate: $0.due) } }

    /// Adds `id`, due at `due`. O(log n).
    public mutating func insert(_ id: UUID, due: Date) {
        heap.append(Entry(due: due.timeIntervalSinceReferenceDate, id: id))
        siftUp(heap.count - 1)
    }

    /// Removes and returns, earliest first, every entry due at or before `deadline`.
    public mutating func popDue(through deadline: Date) -> [(id: UUID, due: Date)] {
        let limit = deadline.timeIntervalSinceReferenceDate
        var due: [(id: UUID, due: Date)] = []
        while let top = heap.first, top.due <= limit {
            due.append((top.id, Date(timeIntervalSinceReferenceDate: top.due)))
            let last = heap.removeLast()
            if !heap.isEmpty {
                heap[0] = last
                siftDown(0)
            }
        }
        return due
    }

    /// Whether stale entries have grown past the live ones (`live`: how many ids are current).
    public func needsCompaction(live: Int) -> Bool {
        heap.count > 2 * live + 1024
    }

    /// Keeps only the entries `isCurrent` accepts, in O(n): called when `needsCompaction`, so at
    /// most once per `live + 1024` inserts, which makes it O(1) per insert over time.
    public mutating func compact(isCurrent: (UUID, Date) -> Bool) {
        heap.removeAll { !isCurrent($0.id, Date(timeIntervalSinceReferenceDate: $0.due)) }
        guard heap.count > 1 else { return }
        for index in stride(from: heap.count / 2 - 1, through: 0, by: -1) { siftDown(index) }
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        let entry = heap[child]
        while child > 0 {
            let parent = (child - 1) / 2
            guard entry.due < heap[parent].due else { break }
            heap[child] = heap[parent]
            child = parent
        }
        heap[child] = entry
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        let entry = heap[parent]
        let count = heap.count
        while true {
            var child = 2 * parent + 1
            guard child < count else { break }
            if child + 1 < count, heap[child + 1].due < heap[child].due { child += 1 }
            guard heap[child].due < entry.due else { break }
            heap[parent] = heap[child]
            parent = child
        }
        heap[parent] = entry
    }
}
