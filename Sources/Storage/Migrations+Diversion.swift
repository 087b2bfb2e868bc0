extension Migrator {
    /// Version 602: extensions' call forwarding (issue 19 "Diversion").
    static let diversionMigrations: [Migration] = [
        Migration(
            version: 602, name: "extension call forwarding",
            sql: """
                CREATE TABLE extension_diversions (
                    extension_id bigint PRIMARY KEY REFERENCES extensions (id) ON DELETE CASCADE,
                    always_target text,
                    busy_target text,
                    no_answer_target text,
                    no_answer_after_s integer CHECK (no_answer_after_s BETWEEN 1 AND 3600),
                    unreachable_target text,
                    updated_at timestamptz NOT NULL DEFAULT now(),
                    CHECK (COALESCE(always_target, busy_target, no_answer_target, unreachable_target) IS NOT NULL)
                );
                -- The forwarding travels with the directory: every writer announces a change on
                -- rouse_directory, and every instance reloads it (per row: an extension removed
                -- without forwarding announces nothing more).
                CREATE FUNCTION rouse_diversions_changed() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    PERFORM pg_notify('rouse_directory', 'extension-forwarding');
                    RETURN NULL;
                END $$;
                CREATE TRIGGER extension_diversions_changed AFTER INSERT OR UPDATE OR DELETE ON extension_diversions
                    FOR EACH ROW EXECUTE FUNCTION rouse_diversions_changed();
                """)
    ]
}
