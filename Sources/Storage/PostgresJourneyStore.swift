public import CallRouting
public import Foundation
import Push
import Registrar
public import RouseVocabulary

/// Where calls' journeys and ring pushes go in PostgreSQL (`calls`, `push_records`), written behind
/// the call so that recording never delays signalling.
///
/// Threading: every method may be called from any thread. `recordPush`, `recordWake` and
/// `recordCall` never block: they go into one `PostgresWriteQueue`, whose writer thread writes
/// them in order, several to a transaction, so a wake is never written before its push, nor a call
/// before the pushes recorded ahead of it. Journeys without pushes (nothing else of theirs is queued)
/// are group-committed: such a journey waits (under `lock`) as the latest version of its call, and the first of their queued writes to run
/// writes every journey waiting then in one statement (a call recorded twice before that, as an
/// answered call and at its BYE, is written once, in its latest form); the writes behind it find
/// their journeys written. While PostgreSQL is away, slow or locked, the writes wait and are
/// retried (the queue's discipline: back-off from 0.2 s to 5 s, at most `capacity` kept, refused
/// values set aside). Every write can be repeated without harm. The store logs nothing; its owner
/// reads `lastFailure` and the counts. `flush(timeout:)` and `shutdown()` block the caller: never
/// call them on the SIP path.
public final class PostgresJourneyStore: JourneyStore, @unchecked Sendable {
    // @unchecked: `waitingJourneys`, `waitingOrder` and `refusedJourneys` are only touched under
    // `lock`.
    /// The default `capacity`: writes kept while PostgreSQL is away.
    public static let defaultCapacity = 100_000

    private let queue: PostgresWriteQueue
    private let lock = NSLock()
    /// Journeys recorded and not yet taken by a write: the latest of each call, and the order the
    /// calls were first recorded in.
    private var waitingJourneys: [UUID: CallJourney] = [:]
    private var waitingOrder: [UUID] = []
    /// Journeys PostgreSQL refused inside a group (set aside alone, the rest of it written).
    private var refusedJourneys = 0

    /// One queued write.
    enum Write: Sendable {
        case push(JourneyPush, journeyID: UUID, aor: String, callID: String)
        case wake(pushID: UUID, WakeResult)
    }

    /// The journeys one queued write took from `waitingJourneys` when it first ran, kept for the
    /// queue's retries of its transaction. @unchecked Sendable: only touched on the writer thread.
    final class TakenJourneys: @unchecked Sendable {
        var journeys: [CallJourney]?
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
        queue = PostgresWriteQueue(
            settings: settings, name: "rouse-journey-write", capacity: capacity, maxBatchWrites: maxBatchWrites,
            initialRetryDelay: initialRetryDelay, maximumRetryDelay: maximumRetryDelay)
    }

    public var settings: PostgresSettings { queue.settings }
    /// Most writes kept waiting (and being written) at once.
    public var capacity: Int { queue.capacity }
    /// Most writes one transaction takes.
    public var maxBatchWrites: Int { queue.maxBatchWrites }

    // MARK: - JourneyStore

    public func recordPush(_ push: JourneyPush, of journey: CallJourney) {
        enqueue(.push(push, journeyID: journey.id, aor: journey.callee.description, callID: journey.callID))
    }

    public func recordWake(pushID: UUID, _ result: WakeResult) {
        enqueue(.wake(pushID: pushID, result))
    }

    public func recordCall(_ journey: CallJourney) {
        // A call with pushes has push and wake writes queued around its journey, and the journey
        // is the final word on their wakes: it is written in its place, as recorded.
        guard journey.pushes.isEmpty else {
            return queue.enqueue { connection in try Self.upsert([journey], on: connection) }
        }
        lock.withLock {
            if waitingJourneys.updateValue(journey, forKey: journey.id) == nil { waitingOrder.append(journey.id) }
        }
        let taken = TakenJourneys()
        queue.enqueue { [self] connection in
            if taken.journeys == nil { taken.journeys = takeWaitingJourneys() }
            try writeJourneys(taken.journeys ?? [], on: connection)
        }
    }

    /// Every journey waiting now, in the order their calls were first recorded.
    private func takeWaitingJourneys() -> [CallJourney] {
        lock.withLock {
            let journeys = waitingOrder.compactMap { waitingJourneys[$0] }
            waitingJourneys.removeAll(keepingCapacity: true)
            waitingOrder.removeAll(keepingCapacity: true)
            return journeys
        }
    }

    /// Writes a group of journeys in one statement. When PostgreSQL refuses the group for what one
    /// of them holds, they are written one by one (each behind a savepoint of the queue's
    /// transaction) and the refused ones set aside; a group of one is refused as the queue's write.
    private func writeJourneys(_ journeys: [CallJourney], on connection: PostgresConnection) throws {
        guard journeys.count > 1 else {
            if !journeys.isEmpty { try Self.upsert(journeys, on: connection) }
            return
        }
        try connection.query("SAVEPOINT journeys")
        do {
            try Self.upsert(journeys, on: connection)
            return
        } catch let error as PostgresError where PostgresWriteQueue.isRefusal(error) && connection.isHealthy {
            try connection.query("ROLLBACK TO SAVEPOINT journeys")
        }
        var refused = 0
        for journey in journeys {
            do {
                try connection.query("SAVEPOINT journeys")
                try Self.upsert([journey], on: connection)
                try connection.query("RELEASE SAVEPOINT journeys")
            } catch let error as PostgresError where PostgresWriteQueue.isRefusal(error) && connection.isHealthy {
                try connection.query("ROLLBACK TO SAVEPOINT journeys")
                refused += 1
            }
        }
        let total = refused
        lock.withLock { refusedJourneys += total }
    }

    private func enqueue(_ write: Write) {
        queue.enqueue { connection in try Self.apply(write, on: connection) }
    }

    // MARK: - State

    /// Writes queued or being written.
    public var pendingCount: Int { queue.pendingCount }
    /// Writes dropped unwritten: the oldest when the queue was full, and those left at `shutdown()`.
    public var droppedCount: Int { queue.droppedCount }
    /// Writes PostgreSQL refused for what they hold (not retried).
    public var rejectedCount: Int { queue.rejectedCount + lock.withLock { refusedJourneys } }
    /// Writes committed so far (a recorded journey counts as written once its group is, and a
    /// journey refused inside a group as refused, not written).
    public var writtenCount: Int { queue.writtenCount - lock.withLock { refusedJourneys } }
    /// Why the last attempt failed (host and port, never a value written), or nil once a write
    /// succeeded since.
    public var lastFailure: String? { queue.lastFailure }

    /// Waits until every queued write is written (true), or until `timeout` seconds have passed
    /// (false). A writer waiting to retry tries again at once. Blocking.
    @discardableResult
    public func flush(timeout: TimeInterval) -> Bool { queue.flush(timeout: timeout) }

    /// Stops taking writes, writes what is queued while PostgreSQL takes it, drops the rest at the
    /// first failure, and waits for the writer thread. Call `flush(timeout:)` first. Idempotent;
    /// blocking.
    public func shutdown() { queue.shutdown() }

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
        }
    }

    /// Writes `journeys` (distinct calls) in one statement, and each push's wake result as the
    /// call's final word on it.
    static func upsert(_ journeys: [CallJourney], on connection: PostgresConnection) throws {
        var json = JSONText(capacity: journeys.count * 1024)
        json.beginArray()
        for journey in journeys { JourneyJSON.writeRow(journey, into: &json) }
        json.endArray()
        var parameters = PostgresParameters()
        parameters.append(json)
        try connection.query(prepared: "rouse_upsert_calls", upsertCallsSQL, parameters)
        guard journeys.contains(where: { !$0.pushes.isEmpty }) else { return }
        try connection.query(prepared: "rouse_settle_call_wakes", settleWakesSQL, parameters)
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

    /// The rows of `calls`, one per element of a JSON array (`JourneyJSON.writeRow`); a call
    /// already there (recorded again, or a retried transaction) is replaced.
    static let upsertCallsSQL = """
        INSERT INTO calls (id, call_id, uuid, aor, caller, caller_name, transport, source, instance_id, started_at,
            answered_at, ended_at, outcome, final_status, reason, answered_by, ring_ms, journey)
        SELECT c.id, c.call_id, c.uuid, c.aor, c.caller, c.caller_name, c.transport, c.source, c.instance_id, c.started_at,
            c.answered_at, c.ended_at, c.outcome, c.final_status, c.reason, c.answered_by, c.ring_ms, c.journey
        FROM jsonb_to_recordset($1::jsonb) AS c(id uuid, call_id text, uuid text, aor text, caller text, caller_name text,
            transport text, source text, instance_id text, started_at timestamptz, answered_at timestamptz,
            ended_at timestamptz, outcome text, final_status integer, reason text, answered_by text, ring_ms integer,
            journey jsonb)
        ON CONFLICT (id) DO UPDATE SET
            call_id = EXCLUDED.call_id, uuid = EXCLUDED.uuid, aor = EXCLUDED.aor, caller = EXCLUDED.caller,
            caller_name = EXCLUDED.caller_name, transport = EXCLUDED.transport, source = EXCLUDED.source,
            instance_id = EXCLUDED.instance_id, started_at = EXCLUDED.started_at, answered_at = EXCLUDED.answered_at,
            ended_at = EXCLUDED.ended_at, outcome = EXCLUDED.outcome, final_status = EXCLUDED.final_status,
            reason = EXCLUDED.reason, answered_by = EXCLUDED.answered_by, ring_ms = EXCLUDED.ring_ms,
            journey = EXCLUDED.journey
        """

    /// The calls' final word on each of their pushes' wake results; a push whose own row never
    /// arrived (dropped while PostgreSQL was away) gets one from the journey.
    static let settleWakesSQL = """
        INSERT INTO push_records (created_at, aor, call_id, provider, token_short, app_id, outcome, status, reason,
            explanation, latency_ms, record_uuid, call_uuid, device, wake, woke_after_ms)
        SELECT p.sent_at, c.aor, c.call_id, p.provider, p.token_short, (SELECT a.id FROM push_apps a WHERE a.id = p.app_id),
            p.outcome, p.status, p.reason, p.explanation, p.latency_ms, p.id, c.id, p.device, p.wake, p.woke_after_ms
        FROM jsonb_to_recordset($1::jsonb) AS c(id uuid, aor text, call_id text, journey jsonb)
        CROSS JOIN LATERAL jsonb_to_recordset(c.journey -> 'pushes') AS p(id uuid, sent_at timestamptz, provider text,
            token_short text, app_id bigint, outcome text, status integer, reason text, explanation text, latency_ms integer,
            device text, wake text, woke_after_ms integer)
        ON CONFLICT (record_uuid) DO UPDATE SET wake = EXCLUDED.wake, woke_after_ms = EXCLUDED.woke_after_ms
        """
}
