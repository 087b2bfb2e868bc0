public import CallRouting
public import Foundation

/// Claims a binding's refresh push in PostgreSQL, so that of all instances exactly one sends it,
/// once per registration (CallRouting's `RefreshClaims`).
///
/// Threading: thread-safe; the statement runs on a pool thread and suspends the caller without
/// blocking it.
public final class PostgresRefreshClaims: RefreshClaims {
    private let pool: PostgresWorkerPool

    public init(pool: PostgresWorkerPool) {
        self.pool = pool
    }

    public func claim(bindingID: UUID) async throws -> Bool {
        try await pool.perform { connection in
            let rows = try connection.query(
                """
                UPDATE bindings SET refresh_pushed_at = now()
                WHERE id = $1::uuid AND (refresh_pushed_at IS NULL OR refresh_pushed_at < registered_at)
                RETURNING id
                """,
                [bindingID.uuidString])
            return !rows.isEmpty
        }
    }
}
