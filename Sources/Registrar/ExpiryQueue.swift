public import Foundation
import RouseVocabulary

/// Binding ids ordered by when something falls due for them (their expiry, or their refresh
/// push): a binary min-heap, so finding what is due costs O(due · log n), never a walk of every
/// binding. Entries are not removed when a binding changes: a refreshed binding gets a new entry
/// and its old one is handed out when its time comes, for the owner to check against the binding
/// (lazy deletion); `compact` drops such stale entries once they outnumber the live bindings.
/// A value; not thread-safe: one owner.
public struct ExpiryQueue: Sendable {
    /// One id and the moment it falls due (seconds since the reference date, as `Date` holds it).
    struct Entry: Sendable, Comparable {
        var due: Double
        var id: UUID

        static func < (a: Entry, b: Entry) -> Bool { a.due < b.due }
    }

    private var heap = MinHeap<Entry>()

    public init() {}

    /// How many entries are held, stale ones included.
    public var count: Int { heap.count }

    /// The earliest due time held, if any.
    public var earliest: Date? { heap.min.map { Date(timeIntervalSinceReferenceDate: $0.due) } }

    /// Adds `id`, due at `due`. O(log n).
    public mutating func insert(_ id: UUID, due: Date) {
        heap.insert(Entry(due: due.timeIntervalSinceReferenceDate, id: id))
    }

    /// Removes and returns, earliest first, every entry due at or before `deadline`.
    public mutating func popDue(through deadline: Date) -> [(id: UUID, due: Date)] {
        let limit = deadline.timeIntervalSinceReferenceDate
        var due: [(id: UUID, due: Date)] = []
        while let top = heap.min, top.due <= limit {
            due.append((top.id, Date(timeIntervalSinceReferenceDate: top.due)))
            heap.removeMin()
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
    }
}
