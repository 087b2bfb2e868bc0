/// A binary min-heap: the smallest element first, O(log n) to insert and to take the smallest.
/// Shared by the queues that hand out what has fallen due (the registrar's expiry and refresh
/// queues, the transaction layer's timers). A value; not thread-safe: one owner.
///
/// `@inlinable`, so each user compiles it for its own `Element`: across the module boundary
/// unspecialised, every comparison went through the `Comparable` witness (profiled: ~5.9k
/// instructions to take one transaction timer from a heap of ~2,000).
public struct MinHeap<Element: Comparable> {
    @usableFromInline var storage: [Element] = []

    @inlinable
    public init() {}

    /// The elements in heap order.
    @inlinable
    public var elements: [Element] { storage }

    @inlinable
    public var count: Int { storage.count }
    @inlinable
    public var isEmpty: Bool { storage.isEmpty }
    /// The smallest element, if any.
    @inlinable
    public var min: Element? { storage.first }

    /// Adds an element. O(log n).
    @inlinable
    public mutating func insert(_ element: Element) {
        storage.append(element)
        siftUp(storage.count - 1)
    }

    /// Removes and returns the smallest element. O(log n).
    @inlinable
    @discardableResult
    public mutating func removeMin() -> Element? {
        guard !storage.isEmpty else { return nil }
        let last = storage.removeLast()
        guard !storage.isEmpty else { return last }
        let smallest = storage[0]
        storage[0] = last
        siftDown(0)
        return smallest
    }

    /// Removes the elements `isExcluded` accepts and restores the heap order, in O(n).
    @inlinable
    public mutating func removeAll(where isExcluded: (Element) throws -> Bool) rethrows {
        try storage.removeAll(where: isExcluded)
        guard storage.count > 1 else { return }
        for index in stride(from: storage.count / 2 - 1, through: 0, by: -1) { siftDown(index) }
    }

    @inlinable
    mutating func siftUp(_ start: Int) {
        var child = start
        let element = storage[child]
        while child > 0 {
            let parent = (child - 1) / 2
            guard element < storage[parent] else { break }
            storage[child] = storage[parent]
            child = parent
        }
        storage[child] = element
    }

    @inlinable
    mutating func siftDown(_ start: Int) {
        var parent = start
        let element = storage[parent]
        let count = storage.count
        while true {
            var child = 2 * parent + 1
            guard child < count else { break }
            if child + 1 < count, storage[child + 1] < storage[child] { child += 1 }
            guard storage[child] < element else { break }
            storage[parent] = storage[child]
            parent = child
        }
        storage[parent] = element
    }
}

extension MinHeap: Sendable where Element: Sendable {}
