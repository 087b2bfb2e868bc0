import Foundation
import Push
import Registrar

/// `push_dead_tokens` and `push_records` for the push service: marks dead tokens (the registrar's
/// lookups skip them until the token is registered or posted again) and keeps every push's outcome.
///
/// Threading: thread-safe; every call runs on the worker pool's threads and suspends the caller
/// without blocking it.
public final class PostgresPushStores: DeadTokenRecorder, PushRecordStore {
    private let pool: PostgresWorkerPool

    public init(pool: PostgresWorkerPool) {
        self.pool = pool
    }

    public func markDead(family: PushProviderFamily, token: String, reason: String) async throws {
        try await pool.perform { connection in
            try Self.markDead(on: connection, family: family, token: token, reason: reason)
        }
    }

    public func record(_ record: PushRecord) async throws {
        try await pool.perform { connection in
            try Self.insert(record, on: connection)
        }
    }

    /// Marks a token dead (or refreshes the mark) on `connection`.
    public static func markDead(on connection: PostgresConnection, family: PushProviderFamily, token: String, reason: String) throws {
        try connection.query(
            """
            INSERT INTO push_dead_tokens (family, token, reason, marked_at) VALUES ($1, $2, $3, now())
            ON CONFLICT (family, token) DO UPDATE SET reason = EXCLUDED.reason, marked_at = EXCLUDED.marked_at
            """,
            [family.rawValue, token, reason])
    }

    /// Stores one push's outcome on `connection`.
    public static func insert(_ record: PushRecord, on connection: PostgresConnection) throws {
        try connection.query(
            """
            INSERT INTO push_records (created_at, aor, call_id, provider, token_short, app_id, outcome, status, reason, explanation, latency_ms)
            VALUES (to_timestamp($1::double precision), $2, $3, $4, $5, $6::bigint, $7, $8::integer, $9, $10, $11::integer)
            """,
            [
                String(record.createdAt.timeIntervalSince1970), record.aor, record.callID, record.provider.rawValue, record.tokenShort,
                record.appID.map(String.init), record.outcome, record.status.map(String.init), record.reason, record.explanation,
                String(record.latencyMilliseconds),
            ])
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
                wake: rows.value(index, "wake"), wokeAfterMilliseconds: rows.value(index, "woke_after_ms").flatMap { Int($0) })
        }
    }

    /// Whether a token is marked dead.
    public static func isDead(on connection: PostgresConnection, family: PushProviderFamily, token: String) throws -> Bool {
        try !connection.query("SELECT 1 FROM push_dead_tokens WHERE family = $1 AND token = $2", [family.rawValue, token]).isEmpty
    }
}
