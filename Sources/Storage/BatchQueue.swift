import Foundation

/// The queue and writer threads of a group-commit writer (the location store's, one thread; the
/// posting group commit's, a few): callers `enqueue` items, and a free writer thread takes every
/// item queued at once (the first always, then as many as fit in `limit` by `size`) and hands the
/// batch to its body, so whatever arrived while a transaction ran goes in the next.
///
/// Threading: `enqueue`, `locked` and `count` may be called from any thread and never wait for
/// the writers; each body runs on its writer thread only. `shutdown()` blocks until the bodies
/// have had every queued item and the threads ended: never call it from a body.
final class BatchQueue<Item>: @unchecked Sendable {
    // @unchecked: `pending`, `accepting`, `running` and what owners keep under `locked` are only
    // touched under `condition`.
    private let condition = NSCondition()
    private var pending: [Item] = []
    private var accepting = true
    /// Writer threads not yet ended.
    private var running = 0
    private let limit: Int
    private let size: (Item) -> Int

    init(limit: Int, size: @escaping (Item) -> Int = { _ in 1 }) {
        self.limit = max(1, limit)
        self.size = size
    }

    /// Starts a writer thread, named `name`, which calls `body` with each batch it takes until
    /// shutdown (call it again for more writers sharing the queue).
    func start(name: String, _ body: @escaping @Sendable ([Item]) -> Void) {
        condition.lock()
        running += 1
        condition.unlock()
        let thread = Thread { [self] in
            while let batch = nextBatch() { body(batch) }
            condition.lock()
            running -= 1
            condition.broadcast()
            condition.unlock()
        }
        thread.name = name
        thread.start()
    }

    /// Queues `item`; false (and not queued) after `shutdown()`.
    func enqueue(_ item: Item) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard accepting else { return false }
        pending.append(item)
        condition.signal()
        return true
    }

    /// Items queued and not yet taken by the writer.
    var count: Int { locked { pending.count } }

    /// Runs `body` under the queue's lock (for the owner's counters).
    func locked<T>(_ body: () -> T) -> T {
        condition.lock()
        defer { condition.unlock() }
        return body()
    }

    /// Stops taking items, lets the writer have what is queued and waits for it to end.
    func shutdown() {
        condition.lock()
        accepting = false
        condition.broadcast()
        while running > 0 { condition.wait() }
        condition.unlock()
    }

    private func nextBatch() -> [Item]? {
        condition.lock()
        defer { condition.unlock() }
        while pending.isEmpty && accepting { condition.wait() }
        guard !pending.isEmpty else { return nil }
        var taken = 0
        var total = 0
        while taken < pending.count {
            let itemSize = size(pending[taken])
            if taken > 0 && total + itemSize > limit { break }
            total += itemSize
            taken += 1
        }
        let batch = Array(pending.prefix(taken))
        pending.removeFirst(taken)
        return batch
    }
}
