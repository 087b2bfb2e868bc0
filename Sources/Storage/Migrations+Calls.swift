extension Migrator {
    /// Versions 300–399: calls and their journeys, and the call side of push records (which device a
    /// ring push went to, and whether it woke in time).
    static let callMigrations: [Migration] = [
        Migration(
            version: 300, name: "calls, journeys and wake results of push records",
            sql: """
                ALTER TABLE push_records
                    ADD COLUMN record_uuid uuid UNIQUE,
                    ADD COLUMN call_uuid uuid,
                    ADD COLUMN device text,
                    ADD COLUMN wake text,
                    ADD COLUMN woke_after_ms integer;
                CREATE INDEX push_records_call_idx ON push_records (call_uuid);
                CREATE TABLE calls (
                    id uuid PRIMARY KEY,
                    call_id text NOT NULL,
                    uuid text NOT NULL,
                    aor text NOT NULL,
                    caller text NOT NULL,
                    caller_name text,
                    transport text NOT NULL,
                    source text NOT NULL,
                    instance_id text NOT NULL,
                    started_at timestamptz NOT NULL,
                    answered_at timestamptz,
                    ended_at timestamptz,
                    outcome text NOT NULL,
                    final_status integer,
                    reason text,
                    answered_by text,
                    ring_ms integer,
                    journey jsonb NOT NULL
                );
                CREATE INDEX calls_aor_idx ON calls (aor, started_at DESC);
                CREATE INDEX calls_started_idx ON calls (started_at DESC);
                """),
        Migration(
            version: 301, name: "binding-refresh pushes claimed once per registration",
            sql: """
                ALTER TABLE bindings ADD COLUMN refresh_pushed_at timestamptz;
                """),
    ]
}
