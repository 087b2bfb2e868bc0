/// One versioned schema change. Versions only grow; an applied migration is never edited. Its SQL
/// is fixed text in Rouse's code and may hold several statements.
public struct Migration: Sendable {
    public let version: Int
    public let name: String
    public let sql: String

    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
    }
}

/// Applies Rouse's migrations in order, each in its own transaction, recording them in
/// `schema_migrations`. Idempotent, and safe when several instances start at once (a PostgreSQL
/// advisory lock serialises them).
public enum Migrator {
    /// Every migration Rouse knows, oldest first. Each area keeps its own list in its own file
    /// (`Migrations+Registrar.swift`, `Migrations+Push.swift`, `Migrations+Admin.swift`,
    /// `Migrations+Calls.swift`, `Migrations+WebPush.swift`, `Migrations+Replica.swift`,
    /// `Migrations+Routes.swift`, `Migrations+Diversion.swift`, `Migrations+Gateway.swift`,
    /// `Migrations+PushPolicy.swift`, `Migrations+Tokens.swift`, `Migrations+Retention.swift`,
    /// `Migrations+Sealed.swift`, `Migrations+DisplayNames.swift`, `Migrations+Posting.swift`), in its own range of
    /// versions.
    public static var all: [Migration] {
        let lists: [[Migration]] = [
            coreMigrations,
            registrarMigrations,
            pushMigrations,
            adminMigrations,
            callMigrations,
            webPushMigrations,
            replicaMigrations,
            routeMigrations,
            diversionMigrations,
            gatewayMigrations,
            pushPolicyMigrations,
            tokenMigrations,
            retentionMigrations,
            sealedMigrations,
            displayNameMigrations,
            postingMigrations,
        ]
        return lists.joined()
            .sorted { $0.version < $1.version }
    }

    /// Versions 1–9: Rouse itself.
    static let coreMigrations: [Migration] = [
        Migration(
            version: 1, name: "instance settings",
            sql: """
                CREATE TABLE rouse_settings (
                    key text PRIMARY KEY,
                    value text NOT NULL,
                    updated_at timestamptz NOT NULL DEFAULT now()
                );
                """)
    ]

    /// A lock id no other application is likely to use ("rouse" in ASCII).
    static let advisoryLockID = "491496760421"

    /// Applies what is missing; returns the versions applied now (empty when up to date).
    @discardableResult
    public static func migrate(_ connection: PostgresConnection, migrations: [Migration] = all) throws -> [Int] {
        try connection.query("SELECT pg_advisory_lock($1::bigint)", [advisoryLockID])
        defer { _ = try? connection.query("SELECT pg_advisory_unlock($1::bigint)", [advisoryLockID]) }
        try connection.query(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version integer PRIMARY KEY,
                name text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )
            """)
        let applied = Set(try connection.query("SELECT version FROM schema_migrations").rows.compactMap { $0[0].flatMap { Int($0) } })
        var appliedNow: [Int] = []
        for migration in migrations.sorted(by: { $0.version < $1.version }) where !applied.contains(migration.version) {
            try connection.transaction { connection in
                try connection.runScript(text: migration.sql)
                try connection.query(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    [String(migration.version), migration.name])
            }
            appliedNow.append(migration.version)
        }
        return appliedNow
    }

    /// The highest applied version, or 0 on an empty database.
    public static func currentVersion(_ connection: PostgresConnection) throws(PostgresError) -> Int {
        let exists = try connection.query("SELECT to_regclass('schema_migrations') IS NOT NULL AS present")
        guard exists.value(0, "present") == "t" else { return 0 }
        return Int(try connection.query("SELECT coalesce(max(version), 0) AS v FROM schema_migrations").value(0, "v") ?? "0") ?? 0
    }
}
