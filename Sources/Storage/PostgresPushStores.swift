public import Foundation
public import Push
import Registrar
public import RouseVocabulary

/// `push_dead_tokens` and `push_records` for the push service: marks dead tokens (the registrar's
/// lookups skip them until the token is registered or posted again) and keeps every push's outcome.
/// Both go through a `PostgresWriteQueue`, so a push made while PostgreSQL is away is recorded when
/// it is back (issue 9), in order, and the push's caller never waits for the database.
///
/// Threading: thread-safe; `markDead` and `record` return at once. `flush(timeout:)` and
/// `shutdown()` block: never call them on the SIP path.
public final class PostgresPushStores: DeadTokenRecorder, PushRecordStore {
    /// The writer behind both (its counts and last failure are for `/health` and logs).
    public let queue: PostgresWriteQueue

    public init(settings: PostgresSettings, capacity: Int = 100_000) {
        queue = PostgresWriteQueue(settings: settings, name: "rouse-push-records", capacity: capacity)
    }

    public func markDead(_ token: PushTokenID, reason: String) async throws {
        let markedAt = Date()
        queue.enqueue { connection in
            try Self.markDead(on: connection, family: token.family, token: token.token, reason: reason, at: markedAt)
        }
    }

    public func record(_ record: PushRecord) async throws {
        // A record id makes the write safe to repeat (a retried transaction may have committed).
        var identified = record
        if identified.id == nil { identified.id = UUID() }
        let stored = identified
        queue.enqueue { connection in
            try Self.insert(stored, on: connection)
        }
    }

    /// Waits until every queued write is in PostgreSQL (true) or `timeout` seconds passed. Blocking.
    @discardableResult
    public func flush(timeout: TimeInterval) -> Bool {
        queue.flush(timeout: timeout)
    }

    /// Writes what PostgreSQL takes, drops the rest, stops the writer. Blocking; idempotent.
    public func shutdown() {
        queue.shutdown()
    }

    /// Marks a token dead (or refreshes the mark) on `connection`, as of `markedAt` (by default now).
    public static func markDead(
        on connection: PostgresConnection, family: PushProviderFamily, token: String, reason: String, at markedAt: Date? = nil
    ) throws {
        let id = PushTokenID(family: family, token: token)
        try connection.query(
            """
            INSERT INTO push_dead_tokens (family, token, reason, marked_at)
            VALUES ($1, $2, $3, coalesce(to_timestamp($4::double precision), now()))
            ON CONFLICT (family, token) DO UPDATE SET reason = EXCLUDED.reason, marked_at = EXCLUDED.marked_at
            """,
            [id.family.rawValue, id.token, reason, markedAt.map { String($0.timeIntervalSince1970) }])
    }

    /// Stores one push's outcome on `connection`; a record with an id already stored stays as it
    /// is (a retried write), and an app removed meanwhile leaves `app_id` empty. A record without an
    /// id or device is written as before migration 300 (which added `record_uuid` and `device`) knew it.
    public static func insert(_ record: PushRecord, on connection: PostgresConnection) throws {
        var parameters: [String?] = [
            String(record.createdAt.timeIntervalSince1970), record.aor, record.callID, record.provider.rawValue, record.tokenShort,
            record.appID.map(String.init), record.outcome, record.status.map(String.init), record.reason, record.explanation,
            String(record.latencyMilliseconds),
        ]
        var columns = "created_at, aor, call_id, provider, token_short, app_id, outcome, status, reason, explanation, latency_ms"
        var values = """
            to_timestamp($1::double precision), $2, $3, $4, $5, (SELECT id FROM push_apps WHERE id = $6::bigint), $7, $8::integer, $9,
                $10, $11::integer
            """
        if let device = record.device {
            parameters.append(device)
            columns += ", device"
            values += ", $\(parameters.count)"
        }
        if let id = record.id {
            parameters.append(id.uuidString)
            columns += ", record_uuid"
            values += ", $\(parameters.count)::uuid"
        }
        let conflict = record.id == nil ? "" : " ON CONFLICT (record_uuid) DO NOTHING"
        try connection.query("INSERT INTO push_records (\(columns)) VALUES (\(values))\(conflict)", parameters)
    }

    /// The latest records, newest first (of one AOR when given), with the device and wake result
    /// of a call's ring push.
    public static func recent(on connection: PostgresConnection, aor: String? = nil, limit: Int = 50) throws -> [PushRecord] {
        let rows = try connection.query(
            """
            SELECT extract(epoch FROM created_at)::double precision AS at, aor, call_id, provider, token_short, app_id, outcome,
                   status, reason, explanation, latency_ms, record_uuid::text AS record_uuid, device, wake, woke_after_ms
            FROM push_records WHERE ($1::text IS NULL OR aor = $1) ORDER BY created_at DESC, id DESC LIMIT $2::integer
            """,
            [aor, String(limit)])
        return rows.rows.indices.map { index in
            PushRecord(
                createdAt: Date(timeIntervalSince1970: Double(rows.value(index, "at") ?? "0") ?? 0),
                aor: rows.value(index, "aor"), callID: rows.value(index, "call_id"),
                provider: PushProvider(rawValue: rows.value(index, "provider") ?? "") ?? .apns,
                tokenShort: rows.value(index, "token_short") ?? "", appID: rows.value(index, "app_id").flatMap { Int64($0) },
                outcome: rows.value(index, "outcome") ?? "", status: rows.value(index, "status").flatMap { Int($0) },
                reason: rows.value(index, "reason"), explanation: rows.value(index, "explanation") ?? "",
                latencyMilliseconds: Int(rows.value(index, "latency_ms") ?? "0") ?? 0,
                id: rows.value(index, "record_uuid").flatMap(UUID.init(uuidString:)), device: rows.value(index, "device"),
                wake: rows.value(index, "wake").map { WakeResult(word: $0, milliseconds: rows.value(index, "woke_after_ms").flatMap { Int($0) }) })
        }
    }

    /// Whether a token is marked dead.
    public static func isDead(on connection: PostgresConnection, family: PushProviderFamily, token: String) throws -> Bool {
        let id = PushTokenID(family: family, token: token)
        return try !connection.query("SELECT 1 FROM push_dead_tokens WHERE family = $1 AND token = $2", [id.family.rawValue, id.token]).isEmpty
    }
}
