public import Foundation
public import Registrar

/// Gateway mode's leases in PostgreSQL (migration 603): which instance registers an extension at
/// its PBX. Taking succeeds for the holder (a renewal) or when nobody holds the lease or it has run
/// out; the lease's end is counted by PostgreSQL's clock, so instances' clocks need not agree.
///
/// Threading: thread-safe; each statement runs on a pool thread within `deadline` seconds (then
/// `PostgresError.deadlinePassed`) and suspends the caller without blocking it.
public final class PostgresGatewayLeases: GatewayLeases {
    private let pool: PostgresWorkerPool
    /// This instance's name as holder.
    public let holder: String
    private let deadline: Double

    public init(pool: PostgresWorkerPool, holder: String, deadline: Double = 5) {
        self.pool = pool
        self.holder = holder
        self.deadline = deadline
    }

    /// Takes or renews the lease of `aor` for `seconds`; true when this instance holds it now.
    public func take(_ aor: AddressOfRecord, for seconds: Double) async throws -> Bool {
        let holder = holder
        return try await pool.perform(within: deadline) { connection in
            let rows = try connection.query(
                """
                INSERT INTO gateway_leases (aor, holder, expires_at) VALUES ($1, $2, now() + $3::double precision * interval '1 second')
                ON CONFLICT (aor) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
                WHERE gateway_leases.holder = EXCLUDED.holder OR gateway_leases.expires_at < now()
                RETURNING aor
                """,
                [aor.description, holder, String(seconds)])
            return !rows.isEmpty
        }
    }

    /// Gives the lease of `aor` up, if this instance holds it.
    public func release(_ aor: AddressOfRecord) async throws {
        let holder = holder
        _ = try await pool.perform(within: deadline) { connection in
            try connection.query("DELETE FROM gateway_leases WHERE aor = $1 AND holder = $2", [aor.description, holder])
        }
    }

    /// The holder of `aor`'s lease while it runs, nil when nobody holds it (admin reads, tests).
    public func holder(of aor: AddressOfRecord) async throws -> String? {
        try await pool.perform(within: deadline) { connection in
            let rows = try connection.query("SELECT holder FROM gateway_leases WHERE aor = $1 AND expires_at > now()", [aor.description])
            return rows.isEmpty ? nil : rows.value(0, "holder")
        }
    }
}
