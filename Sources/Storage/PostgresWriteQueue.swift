public import Foundation

/// Writes that must not be lost while PostgreSQL is away (push records, dead-token marks), made
/// behind their caller: `enqueue` never blocks, and one writer thread empties the FIFO in order on
/// its own connection, every queued write at once (up to `maxBatchWrites`) in one transaction.
/// While PostgreSQL is away, slow or locked, the writes wait and the writer retries (and
/// reconnects) after `initialRetryDelay`, doubling up to `maximumRetryDelay`. At most `capacity`
/// writes are kept; past that the oldest waiting one is dropped and counted. A write PostgreSQL
/// refuses for what it holds (a constraint, a value out of range) is set aside and counted, and
/// the rest of its transaction is written. Every write must be safe to repeat (a retried
/// transaction may have committed once already). Journeys (`PostgresJourneyStore`) go through one.
///
/// Threading: every method may be called from any thread. `flush(timeout:)` and `shutdown()`
/// block the caller: never call them on the SIP path. The writer thread keeps the queue alive
/// until `shutdown()`. The queue logs nothing; its owner reads `lastFailure` and the counts.
public final class PostgresWriteQueue: @unchecked Sendable {
    // @unchecked: `waiting`, `waitingHead`, `inFlight`, `accepting`, `writerRunning`, `hurry`, the
    // counts and `failure` are only touched under `condition`; the connection is a local of the
    // writer thread.

    /// One write: statements on the writer's connection, inside the batch's transaction.
    public typealias Write = @Sendable (PostgresConnection) throws -> Void

    public let settings: PostgresSettings
    public let capacity: Int
    public let maxBatchWrites: Int
    public let initialRetryDelay: TimeInterval
    public let maximumRetryDelay: TimeInterval

    private let condition = NSCondition()
    private var waiting: [Write] = []
    private var waitingHead = 0
    private var inFlight = 0
    private var accepting = true
    private var writerRunning = true
    private var hurry = false
    private var dropped = 0
    private var rejected = 0
    private var written = 0
    private var failure: String?

    /// Starts the writer thread (named `name`); no connection opens until there is a write.
    public init(
        settings: PostgresSettings, name: String = "rouse-write-queue", capacity: Int = 100_000, maxBatchWrites: Int = 500,
        initialRetryDelay: TimeInterval = 0.2, maximumRetryDelay: TimeInterval = 5
    ) {
        self.settings = settings
        self.capacity = max(1, capacity)
        self.maxBatchWrites = max(1, min(maxBatchWrites, self.capacity))
        self.initialRetryDelay = max(0.001, initialRetryDelay)
        self.maximumRetryDelay = max(self.initialRetryDelay, maximumRetryDelay)
        let thread = Thread { [self] in writerLoop() }
        thread.name = name
        thread.start()
    }

    /// Queues `write`; returns at once.
    public func enqueue(_ write: @escaping Write) {
        condition.lock()
        defer { condition.unlock() }
        guard accepting else {
            dropped += 1
            return
        }
        if waiting.count - waitingHead + inFlight >= capacity {
            guard waitingHead < waiting.count else {
                dropped += 1
                return
            }
            waitingHead += 1
            dropped += 1
            if waitingHead >= 4096 && waitingHead * 2 >= waiting.count {
                waiting.removeFirst(waitingHead)
                waitingHead = 0
            }
        }
        waiting.append(write)
        condition.signal()
    }

    /// Writes queued or being written.
    public var pendingCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return waiting.count - waitingHead + inFlight
    }

    /// Writes dropped unwritten (the queue was full, or they were left at `shutdown()`).
    public var droppedCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return dropped
    }

    /// Writes PostgreSQL refused for what they hold.
    public var rejectedCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return rejected
    }

    /// Writes committed so far.
    public var writtenCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return written
    }

    /// Why the last attempt failed (host and port, never a value written); nil once one succeeded.
    public var lastFailure: String? {
        condition.lock()
        defer { condition.unlock() }
        return failure
    }

    /// Waits until every queued write is written (true) or `timeout` seconds passed (false); a
    /// writer waiting to retry tries again at once. Blocking.
    @discardableResult
    public func flush(timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(max(0, timeout))
        condition.lock()
        defer { condition.unlock() }
        hurry = true
        condition.broadcast()
        while waiting.count - waitingHead + inFlight > 0 {
            guard writerRunning, condition.wait(until: deadline) else { return waiting.count - waitingHead + inFlight == 0 }
        }
        return true
    }

    /// Stops taking writes, writes what is queued while PostgreSQL takes it, drops the rest at the
    /// first failure, and waits for the writer thread. Call `flush(timeout:)` first to give
    /// PostgreSQL time. Idempotent; blocking.
    public func shutdown() {
        condition.lock()
        accepting = false
        condition.broadcast()
        while writerRunning { condition.wait() }
        condition.unlock()
    }

    // MARK: - The writer

    private func takeBatch() -> [Write]? {
        condition.lock()
        defer { condition.unlock() }
        while waitingHead == waiting.count && accepting { condition.wait() }
        guard waitingHead < waiting.count else { return nil }
        let end = min(waiting.count, waitingHead + maxBatchWrites)
        let batch = Array(waiting[waitingHead..<end])
        waitingHead = end
        if waitingHead == waiting.count {
            waiting.removeAll(keepingCapacity: waiting.count <= 4096)
            waitingHead = 0
        } else if waitingHead > 4096 {
            waiting.removeFirst(waitingHead)
            waitingHead = 0
        }
        inFlight = batch.count
        hurry = false
        return batch
    }

    private func finish(writtenCount count: Int, rejectedCount refused: Int) {
        condition.lock()
        inFlight = 0
        written += count
        rejected += refused
        failure = nil
        condition.broadcast()
        condition.unlock()
    }

    /// Notes a failed attempt and waits before the next; false when shutting down (the batch and
    /// everything behind it are then dropped).
    private func failed(_ error: any Error, batchSize: Int, delay: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(delay)
        condition.lock()
        defer { condition.unlock() }
        failure = "\(error)"
        while accepting && !hurry {
            guard condition.wait(until: deadline) else { break }
        }
        hurry = false
        guard accepting else {
            dropped += batchSize + waiting.count - waitingHead
            inFlight = 0
            waiting.removeAll()
            waitingHead = 0
            condition.broadcast()
            return false
        }
        return true
    }

    private func writerLoop() {
        var connection: PostgresConnection? = nil
        while let batch = takeBatch() {
            var delay = initialRetryDelay
            while true {
                do {
                    let refused = try commit(batch, connection: &connection)
                    finish(writtenCount: batch.count - refused, rejectedCount: refused)
                    break
                } catch {
                    if let current = connection, !current.isHealthy { connection = nil }
                    guard failed(error, batchSize: batch.count, delay: delay) else { break }
                    delay = min(delay * 2, maximumRetryDelay)
                }
            }
        }
        connection = nil
        condition.lock()
        writerRunning = false
        condition.broadcast()
        condition.unlock()
    }

    /// Writes `batch` in one transaction; when PostgreSQL refuses one of its writes for what it
    /// holds, writes them one by one and sets the refused ones aside. Returns how many were refused;
    /// throws when PostgreSQL is away or slow (the whole batch is then tried again).
    private func commit(_ batch: [Write], connection: inout PostgresConnection?) throws -> Int {
        if let current = connection, !current.probe() { connection = nil }
        let current: PostgresConnection
        if let open = connection {
            current = open
        } else {
            current = try settings.connect()
            connection = current
        }
        do {
            try current.transaction { connection in for write in batch { try write(connection) } }
            return 0
        } catch let error as PostgresError where Self.isRefusal(error) && current.isHealthy {
            guard batch.count > 1 else { return 1 }
        }
        var refused = 0
        for write in batch {
            do {
                try current.transaction { try write($0) }
            } catch let error as PostgresError where Self.isRefusal(error) && current.isHealthy {
                refused += 1
            }
        }
        return refused
    }

    /// A refusal of the values themselves, which no retry changes: data exceptions (22),
    /// integrity constraints (23) and cardinality violations (21).
    static func isRefusal(_ error: PostgresError) -> Bool {
        guard error.kind == .query, let state = error.sqlState else { return false }
        return state.hasPrefix("21") || state.hasPrefix("22") || state.hasPrefix("23")
    }
}
