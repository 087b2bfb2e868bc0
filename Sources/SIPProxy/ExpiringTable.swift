public import Foundation

/// A table that forgets: an entry older than `maxAge` is dropped, and at most `limit` are kept
/// (when full, the oldest goes). Lookups, inserts and removals cost O(1) amortised: entries are
/// also kept in the order they came, so pruning and eviction look only at the oldest, never scan.
///
/// Threading: a value; its owner serialises access (the call coordinator keeps its tables on its
/// queue). Time is passed in.
public struct ExpiringTable<Key: Hashable, Value> {
    private struct Entry {
        var value: Value
        var at: Date
        var serial: UInt64
    }

    public let limit: Int
    public let maxAge: TimeInterval
    private var entries: [Key: Entry] = [:]
    /// Every insert in order; an item whose serial no longer matches its entry is stale and skipped.
    private var order: [(key: Key, at: Date, serial: UInt64)] = []
    private var head = 0
    private var nextSerial: UInt64 = 0

    /// `maxAge` may be `.infinity`: then only `limit` makes entries go.
    public init(limit: Int, maxAge: TimeInterval) {
        self.limit = max(1, limit)
        self.maxAge = maxAge
    }

    public var count: Int { entries.count }
    public var isEmpty: Bool { entries.isEmpty }

    /// How many insert records are kept, stale ones included (bounded by twice the entries plus a
    /// little), for tests.
    var orderCount: Int { order.count - head }

    /// When the oldest entry was inserted.
    public var oldestInsertedAt: Date? {
        order[head...].first { entries[$0.key]?.serial == $0.serial }?.at
    }

    public subscript(key: Key) -> Value? { entries[key]?.value }

    /// Sets `value` for `key` as of `now` (a new age), after dropping what expired; when full,
    /// the oldest entry goes.
    public mutating func insert(_ value: Value, for key: Key, at now: Date) {
        prune(now: now)
        if entries[key] == nil, entries.count >= limit { dropOldest() }
        nextSerial += 1
        entries[key] = Entry(value: value, at: now, serial: nextSerial)
        order.append((key, now, nextSerial))
        compact()
    }

    /// Changes the value of an entry that is there, keeping its age.
    public mutating func update(_ value: Value, for key: Key) {
        entries[key]?.value = value
    }

    @discardableResult
    public mutating func removeValue(forKey key: Key) -> Value? {
        defer { compact() }
        return entries.removeValue(forKey: key)?.value
    }

    /// Drops every entry inserted `maxAge` or more before `now`.
    public mutating func prune(now: Date) {
        while head < order.count, now.timeIntervalSince(order[head].at) >= maxAge {
            let item = order[head]
            if entries[item.key]?.serial == item.serial { entries[item.key] = nil }
            head += 1
        }
        compact()
    }

    private mutating func dropOldest() {
        while head < order.count {
            let item = order[head]
            head += 1
            if entries[item.key]?.serial == item.serial {
                entries[item.key] = nil
                return
            }
        }
    }

    /// Keeps `order` within twice the live entries (plus a little): amortised O(1) per change.
    private mutating func compact() {
        let kept = order.count - head
        if kept > 2 * entries.count + 64 {
            order = order[head...].filter { entries[$0.key]?.serial == $0.serial }
            head = 0
        } else if head > 64, head * 2 > order.count {
            order.removeFirst(head)
            head = 0
        }
    }
}
