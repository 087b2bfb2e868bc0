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
/// before the pushes recorded ahead of it. While PostgreSQL is away, slow or locked, the writes
/// wait and are retried (the queue's discipline: back-off from 0.2 s to 5 s, at most `capacity`
/// kept, refused values set aside). Every write can be repeated without harm. The store logs
/// nothing; its owner reads `lastFailure` and the counts. `flush(timeout:)` and `shutdown()` block
/// the caller: never call them on the SIP path.
public final class PostgresJourneyStore: JourneyStore, Sendable {
    /// The default `capacity`: writes kept while PostgreSQL is away.
    public static let defaultCapacity = 100_000

    private let queue: PostgresWriteQueue

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
        enqueue(.call(journey))
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
    public var rejectedCount: Int { queue.rejectedCount }
    /// Writes committed so far.
    public var writtenCount: Int { queue.writtenCount }
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
