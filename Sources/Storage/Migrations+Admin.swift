extension Migrator {
    /// Versions 200–299: the administrators of the admin API.
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
                """)
    ]
}
