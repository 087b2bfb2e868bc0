extension Migrator {
    /// Versions 200–299: the administrators of the admin API, the sessions of the admin pages, and
    /// the last test push to each device token (`test_push_interval`).
    static let adminMigrations: [Migration] = [
        Migration(
            version: 200, name: "administrators",
            sql: """
                CREATE TABLE admins (
                    id bigserial PRIMARY KEY,
                    name text NOT NULL UNIQUE,
                    password_hash text NOT NULL,
                    created_at timestamptz NOT NULL DEFAULT now()
                );
                """),
        Migration(
            version: 201, name: "admin page sessions",
            sql: """
                CREATE TABLE admin_sessions (
                    token_hash text PRIMARY KEY,
                    admin_id bigint NOT NULL REFERENCES admins(id) ON DELETE CASCADE,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    expires_at timestamptz NOT NULL
                );
                CREATE INDEX admin_sessions_expires_at ON admin_sessions (expires_at);
                """),
        Migration(
            version: 202, name: "test pushes per device token",
            sql: """
                CREATE TABLE test_push_claims (
                    token_hash text PRIMARY KEY,
                    sent_at timestamptz NOT NULL
                );
                CREATE INDEX test_push_claims_sent_at ON test_push_claims (sent_at);
                """),
    ]
}
