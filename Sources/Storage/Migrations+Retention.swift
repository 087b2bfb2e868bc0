extension Migrator {
    /// Versions 720–729: stale devices shared by every instance, and history kept for
    /// `history_retention` (issue 20 item 1).
    static let retentionMigrations: [Migration] = [
        Migration(
            version: 720, name: "stale marks carried by the replica",
            sql: """
                -- When a device is stale from (once `stale_after_pushes` went unanswered:
                -- `stale_after` past its last sign of life, perhaps still ahead); NULL while it is
                -- not. Set by the instance that counted the push, cleared by any sign of life.
                ALTER TABLE push_token_liveness ADD COLUMN stale_from timestamptz;
                CREATE INDEX push_token_liveness_stale_idx ON push_token_liveness (stale_from) WHERE stale_from IS NOT NULL;

                -- The replica carries a mark when it is set or lifted (not every REGISTER's sign
                -- of life), as it carries dead marks.
                ALTER TABLE replica_changes DROP CONSTRAINT replica_changes_kind_check;
                ALTER TABLE replica_changes ADD CONSTRAINT replica_changes_kind_check
                    CHECK (kind IN ('binding', 'posted', 'dead', 'stale'));

                CREATE FUNCTION rouse_replica_stale() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF TG_OP = 'INSERT' THEN
                        PERFORM rouse_replica_note('stale', ARRAY(SELECT family || ':' || token FROM new_rows WHERE stale_from IS NOT NULL), false);
                    ELSIF TG_OP = 'DELETE' THEN
                        PERFORM rouse_replica_note('stale', ARRAY(SELECT family || ':' || token FROM old_rows WHERE stale_from IS NOT NULL), true);
                    ELSE
                        PERFORM rouse_replica_note('stale', ARRAY(
                            SELECT n.family || ':' || n.token FROM new_rows n JOIN old_rows o ON o.family = n.family AND o.token = n.token
                            WHERE n.stale_from IS DISTINCT FROM o.stale_from), false);
                    END IF;
                    RETURN NULL;
                END
                $$;
                CREATE TRIGGER replica_liveness_inserted AFTER INSERT ON push_token_liveness
                    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION rouse_replica_stale();
                CREATE TRIGGER replica_liveness_updated AFTER UPDATE ON push_token_liveness
                    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION rouse_replica_stale();
                CREATE TRIGGER replica_liveness_deleted AFTER DELETE ON push_token_liveness
                    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION rouse_replica_stale();
                """)
    ]
}
