extension Migrator {
    /// Versions 200–299: the administrators of the admin API and the sessions of the admin pages.
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
    ]
}
