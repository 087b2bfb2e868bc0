import CallRouting
import Foundation
import Push
import Registrar

/// Where calls' journeys and ring pushes go in PostgreSQL (`calls`, `push_records`), written behind
/// the call so that recording never delays signalling.
///
/// Threading: every method may be called from any thread. `recordPush`, `recordWake` and
/// `recordCall` never block: they append to an in-memory FIFO that the store's one writer thread
/// empties, in order, on its own connection, taking every queued write at once (up to
/// `maxBatchWrites`) into one transaction. So a wake is never written before its push, nor a call
/// before the pushes recorded ahead of it. While PostgreSQL is away, slow or locked, the writes
/// wait in the queue and the writer retries (and reconnects) after 0.2 s, doubling up to 5 s.
/// The queue holds at most `capacity` writes; past that the oldest waiting write is dropped and
/// counted in `droppedCount`. A write PostgreSQL refuses for what it holds (a constraint, a value
/// out of range) is not retried: it is set aside and counted in `rejectedCount`, and the rest of
/// its transaction is written. Every write can be repeated without harm (a retried transaction
/// may have been committed once already). The store logs nothing; its owner reads `lastFailure`
/// and the counts. `flush(timeout:)` and `shutdown()` block the caller: never call them on the
/// SIP path. The writer thread keeps the store alive until `shutdown()`.
public final class PostgresJourneyStore: JourneyStore, @unchecked Sendable {
    // @unchecked: `waiting`, `waitingHead`, `inFlight`, `accepting`, `writerRunning`, `hurry`,
    // the counts and `failure` are only touched under `condition`; the writer's connection is a
    // local of the writer thread.

    /// The default `capacity`: writes kept while PostgreSQL is away.
    public static let defaultCapacity = 100_000

    public let settings: PostgresSettings
    /// Most writes kept waiting (and being written) at once.
    public let capacity: Int
    /// Most writes one transaction takes.
    public let maxBatchWrites: Int
    /// The first wait before a retry, doubled after each failure up to `maximumRetryDelay`.
    public let initialRetryDelay: TimeInterval
    public let maximumRetryDelay: TimeInterval

    private let condition = NSCondition()
    private var waiting: [Write] = []
    private var waitingHead = 0
    private var inFlight = 0
    private var accepting = true
    private var writerRunning = true
    /// Set by `flush` so a writer waiting to retry tries again at once.
    private var hurry = false
    private var dropped = 0
    private var rejected = 0
    private var written = 0
    private var failure: String?

    /// One queued write.
    enum Write: Sendable {
        case push(JourneyPush, journeyID: UUID, aor: String, callID: String)
        case wake(pushID: UUID, WakeResult)
        case call(CallJourney)
    }

    /// Starts the writer thread; no connection opens until there is something to write.
    /// - Parameters:
    ///   - settings: where PostgreSQL is, with the statement deadline a write may take.
    ///   - capacity: writes kept while PostgreSQL is away (at least 1).
    ///   - maxBatchWrites: writes per transaction (at least 1).
    public init(
        settings: PostgresSettings, capacity: Int = PostgresJourneyStore.defaultCapacity, maxBatchWrites: Int = 500,
        initialRetryDelay: TimeInterval = 0.2, maximumRetryDelay: TimeInterval = 5
    ) {
        self.settings = settings
        self.capacity = max(1, capacity)
        self.maxBatchWrites = max(1, min(maxBatchWrites, self.capacity))
        self.initialRetryDelay = max(0.001, initialRetryDelay)
        self.maximumRetryDelay = max(self.initialRetryDelay, maximumRetryDelay)
        let thread = Thread { [self] in writerLoop() }
        thread.name = "rouse-journey-write"
        thread.start()
    }

    // MARK: - JourneyStore

    public func recordPush(_ push: JourneyPush, of journey: CallJourney) {
        enqueue(.push(push, journeyID: journey.id, aor: journey.callee.description, callID: journey.callID))
    }

    public func recordWake(pushID: UUID, _ result: WakeResult) {
        enqueue(.wake(pushID: pushID, result))
    }

    public func recordCall(_ journey: CallJourney) {
        enqueue(.call(journey))
    }

    // MARK: - State

    /// Writes queued or being written.
    public var pendingCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return waiting.count - waitingHead + inFlight
    }

    /// Writes dropped unwritten: the oldest when the queue was full, and those left at `shutdown()`.
    public var droppedCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return dropped
    }

    /// Writes PostgreSQL refused for what they hold (not retried).
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

    /// Why the last attempt failed (host and port, never a value written), or nil once a write
    /// succeeded since.
    public var lastFailure: String? {
        condition.lock()
        defer { condition.unlock() }
        return failure
    }

    /// Waits until every queued write is written (true), or until `timeout` seconds have passed
    /// (false). A writer waiting to retry tries again at once. Blocking.
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

    /// Stops taking writes (later ones are dropped and counted), writes what is queued while
    /// PostgreSQL takes it without failing, drops the rest at the first failure, and waits for the
    /// writer thread to end (at most one connection attempt and one statement deadline). Call
    /// `flush(timeout:)` first to give PostgreSQL time. Idempotent; blocking.
    public func shutdown() {
        condition.lock()
        accepting = false
        condition.broadcast()
        while writerRunning { condition.wait() }
        condition.unlock()
    }

    // MARK: - The queue

    private func enqueue(_ write: Write) {
        condition.lock()
        defer { condition.unlock() }
        guard accepting else {
            dropped += 1
            return
        }
        if waiting.count - waitingHead + inFlight >= capacity {
            guard waitingHead < waiting.count else {
                // Everything kept is being written already: the new write is the one to go.
                dropped += 1
                return
            }
            waitingHead += 1
            dropped += 1
            // While the writer retries, nothing else trims the front: keep the array near the
            // number of writes it holds.
            if waitingHead >= 4096 && waitingHead * 2 >= waiting.count {
                waiting.removeFirst(waitingHead)
                waitingHead = 0
            }
        }
        waiting.append(write)
        condition.signal()
    }

    /// The next writes to commit (they count as in flight until `finish`), or nil once the store
    /// is shut down with nothing left.
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

    /// Notes a failed attempt and waits before the next; false when the store is shutting down
    /// (the batch is then dropped).
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
            // Shutting down: no more attempts, for this batch or the writes behind it.
            dropped += batchSize + waiting.count - waitingHead
            inFlight = 0
            waiting.removeAll()
            waitingHead = 0
            condition.broadcast()
            return false
        }
        return true
    }

    // MARK: - The writer

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
    /// holds, writes them one at a time and sets the refused ones aside. Returns how many were
    /// refused; throws when PostgreSQL is away or slow (the whole batch is then tried again).
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
            try inTransaction(current) { for write in batch { try Self.apply(write, on: $0) } }
            return 0
        } catch let error as PostgresError where Self.isRefusal(error) && current.isHealthy {
            guard batch.count > 1 else { return 1 }
        }
        var refused = 0
        for write in batch {
            do {
                try inTransaction(current) { try Self.apply(write, on: $0) }
            } catch let error as PostgresError where Self.isRefusal(error) && current.isHealthy {
                refused += 1
            }
        }
        return refused
    }

    private func inTransaction(_ connection: PostgresConnection, _ body: (PostgresConnection) throws -> Void) throws {
        try connection.query("BEGIN")
        do {
            try body(connection)
            try connection.query("COMMIT")
        } catch {
            _ = try? connection.query("ROLLBACK")
            throw error
        }
    }

    /// A refusal of the values themselves, which no retry changes: data exceptions (22),
    /// integrity constraints (23) and cardinality violations (21).
    static func isRefusal(_ error: PostgresError) -> Bool {
        guard error.kind == .query, let state = error.sqlState else { return false }
        return state.hasPrefix("21") || state.hasPrefix("22") || state.hasPrefix("23")
    }

    // MARK: - Statements

    static func apply(_ write: Write, on connection: PostgresConnection) throws {
        switch write {
        case .push(let push, let journeyID, let aor, let callID):
            try connection.query(
                insertPushSQL,
                [
                    MillisecondTime.string(push.sentAt), JourneyJSON.storable(aor), JourneyJSON.storable(callID), push.provider.rawValue,
                    JourneyJSON.storable(push.tokenShort), push.appID.map { String($0) }, JourneyJSON.storable(push.outcome),
                    push.status.map(String.init), push.reason.map(JourneyJSON.storable), JourneyJSON.storable(push.explanation),
                    String(push.latencyMilliseconds), push.id.uuidString, journeyID.uuidString, JourneyJSON.storable(push.device),
                    push.wake.word, push.wake.milliseconds.map(String.init),
                ])
        case .wake(let pushID, let result):
            try connection.query(
                "UPDATE push_records SET wake = $2, woke_after_ms = $3::integer WHERE record_uuid = $1::uuid",
                [pushID.uuidString, result.word, result.milliseconds.map(String.init)])
        case .call(let journey):
            let json = JourneyJSON.encode(journey)
            try connection.query(
                upsertCallSQL,
                [
                    journey.id.uuidString, JourneyJSON.storable(journey.callID), JourneyJSON.storable(journey.uuid),
                    JourneyJSON.storable(journey.callee.description), JourneyJSON.storable(journey.caller),
                    journey.callerName.map(JourneyJSON.storable), JourneyJSON.storable(journey.transport),
                    JourneyJSON.storable(journey.source), JourneyJSON.storable(journey.instanceID), MillisecondTime.string(journey.startedAt),
                    journey.answeredAt.map(MillisecondTime.string), journey.endedAt.map(MillisecondTime.string), journey.outcome.rawValue,
                    journey.finalStatus.map(String.init), journey.reason.map(JourneyJSON.storable),
                    journey.answeredBy.map(JourneyJSON.storable), journey.ringMilliseconds.map(String.init), json,
                ])
            if !journey.pushes.isEmpty {
                try connection.query(
                    settleWakesSQL, [journey.id.uuidString, JourneyJSON.storable(journey.callee.description), JourneyJSON.storable(journey.callID), json])
            }
        }
    }

    /// A ring push's row; a row already there (a retried transaction) stays as it is. An app
    /// removed meanwhile leaves `app_id` empty, as its removal would have.
    static let insertPushSQL = """
        INSERT INTO push_records (created_at, aor, call_id, provider, token_short, app_id, outcome, status, reason,
            explanation, latency_ms, record_uuid, call_uuid, device, wake, woke_after_ms)
        VALUES ($1::timestamptz, $2, $3, $4, $5, (SELECT id FROM push_apps WHERE id = $6::bigint), $7, $8::integer, $9,
            $10, $11::integer, $12::uuid, $13::uuid, $14, $15, $16::integer)
        ON CONFLICT (record_uuid) DO NOTHING
        """

    static let upsertCallSQL = """
        INSERT INTO calls (id, call_id, uuid, aor, caller, caller_name, transport, source, instance_id, started_at,
            answered_at, ended_at, outcome, final_status, reason, answered_by, ring_ms, journey)
        VALUES ($1::uuid, $2, $3, $4, $5, $6, $7, $8, $9, $10::timestamptz, $11::timestamptz, $12::timestamptz, $13,
            $14::integer, $15, $16, $17::integer, $18::jsonb)
        ON CONFLICT (id) DO UPDATE SET
            call_id = EXCLUDED.call_id, uuid = EXCLUDED.uuid, aor = EXCLUDED.aor, caller = EXCLUDED.caller,
            caller_name = EXCLUDED.caller_name, transport = EXCLUDED.transport, source = EXCLUDED.source,
            instance_id = EXCLUDED.instance_id, started_at = EXCLUDED.started_at, answered_at = EXCLUDED.answered_at,
            ended_at = EXCLUDED.ended_at, outcome = EXCLUDED.outcome, final_status = EXCLUDED.final_status,
            reason = EXCLUDED.reason, answered_by = EXCLUDED.answered_by, ring_ms = EXCLUDED.ring_ms,
            journey = EXCLUDED.journey
        """

    /// The call's final word on each of its pushes' wake results; a push whose own row never
    /// arrived (dropped while PostgreSQL was away) gets one from the journey.
    static let settleWakesSQL = """
        INSERT INTO push_records (created_at, aor, call_id, provider, token_short, app_id, outcome, status, reason,
            explanation, latency_ms, record_uuid, call_uuid, device, wake, woke_after_ms)
        SELECT p.sent_at, $2, $3, p.provider, p.token_short, (SELECT a.id FROM push_apps a WHERE a.id = p.app_id), p.outcome,
            p.status, p.reason, p.explanation, p.latency_ms, p.id, $1::uuid, p.device, p.wake, p.woke_after_ms
        FROM jsonb_to_recordset($4::jsonb -> 'pushes') AS p(id uuid, sent_at timestamptz, provider text, token_short text,
            app_id bigint, outcome text, status integer, reason text, explanation text, latency_ms integer, device text,
            wake text, woke_after_ms integer)
        ON CONFLICT (record_uuid) DO UPDATE SET wake = EXCLUDED.wake, woke_after_ms = EXCLUDED.woke_after_ms
        """
}
