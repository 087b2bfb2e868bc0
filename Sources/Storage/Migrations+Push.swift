extension Migrator {
    /// Versions 100–199: push apps and push records (`push_dead_tokens` is part of version 10).
    static let pushMigrations: [Migration] = [
        Migration(
            version: 100, name: "push apps and push records",
            sql: """
                CREATE TABLE push_apps (
                    id bigserial PRIMARY KEY,
                    kind text NOT NULL CHECK (kind IN ('apns', 'fcm')),
                    fields jsonb NOT NULL,
                    key_text text NOT NULL,
                    param text NOT NULL DEFAULT '',
                    environment text CHECK (environment IN ('production', 'sandbox')),
                    created_at timestamptz NOT NULL DEFAULT now(),
                    UNIQUE (kind, param)
                );
                CREATE TABLE push_records (
                    id bigserial PRIMARY KEY,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    aor text,
                    call_id text,
                    provider text NOT NULL,
                    token_short text NOT NULL,
                    app_id bigint REFERENCES push_apps (id) ON DELETE SET NULL,
                    outcome text NOT NULL CHECK (outcome IN ('accepted', 'refused', 'failed')),
                    status integer,
                    reason text,
                    explanation text NOT NULL,
                    latency_ms integer NOT NULL
                );
                CREATE INDEX push_records_aor_idx ON push_records (aor, created_at DESC);
                CREATE INDEX push_records_created_idx ON push_records (created_at DESC);
                """)
    ]
}
