/// A binary min-heap: the smallest element first, O(log n) to insert and to take the smallest.
/// Shared by the queues that hand out what has fallen due (the registrar's expiry and refresh
/// queues, the transaction layer's timers). A value; not thread-safe: one owner.
public struct MinHeap<Element: Comparable> {
    public private(set) var elements: [Element] = []

    public init() {}

    public var count: Int { elements.count }
    public var isEmpty: Bool { elements.isEmpty }
    /// The smallest element, if any.
    public var min: Element? { elements.first }

    /// Adds an element. O(log n).
    public mutating func insert(_ element: Element) {
        elements.append(element)
        siftUp(elements.count - 1)
    }

    /// Removes and returns the smallest element. O(log n).
    @discardableResult
    public mutating func removeMin() -> Element? {
        guard !elements.isEmpty else { return nil }
        let last = elements.removeLast()
        guard !elements.isEmpty else { return last }
        let smallest = elements[0]
        elements[0] = last
        siftDown(0)
        return smallest
    }

    /// Removes the elements `isExcluded` accepts and restores the heap order, in O(n).
    public mutating func removeAll(where isExcluded: (Element) throws -> Bool) rethrows {
        try elements.removeAll(where: isExcluded)
        guard elements.count > 1 else { return }
        for index in stride(from: elements.count / 2 - 1, through: 0, by: -1) { siftDown(index) }
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        let element = elements[child]
        while child > 0 {
            let parent = (child - 1) / 2
            guard element < elements[parent] else { break }
            elements[child] = elements[parent]
            child = parent
        }
        elements[child] = element
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        let element = elements[parent]
        let count = elements.count
        while true {
            var child = 2 * parent + 1
            guard child < count else { break }
            if child + 1 < count, elements[child + 1] < elements[child] { child += 1 }
            guard elements[child] < element else { break }
            elements[parent] = elements[child]
            parent = child
        }
        elements[parent] = element
    }
}

extension MinHeap: Sendable where Element: Sendable {}
