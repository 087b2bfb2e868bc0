extension Migrator {
    /// Versions 770–789: posting a push token at thousands a second (issue 21). A re-post that
    /// moves only `posted_at` (the same extension, provider, param, kind and device) is no longer
    /// a replica change when its extension holds no other posted token: nothing another instance
    /// holds would differ (the time only orders an extension's tokens). Before, every re-post was
    /// numbered into `replica_changes` at COMMIT under the replica's advisory lock, which is held
    /// through the commit's WAL flush, so the posting lanes' commits could not share a flush, and
    /// every instance read the token back; a batch of re-posts now commits with no replica work.
    ///
    /// Migration 780: the replica's triggers on a post's path cost nothing when they note nothing.
    /// A statement trigger runs for every statement, even one that changed no row (a post's
    /// `DELETE` of a dead mark that is not there, the `INSERT` half of an upsert that updated):
    /// `rouse_replica_note` now returns at once for no keys; the inserts and deletes of posted
    /// tokens and the deletes of dead marks are noted by row triggers (none runs for no row); and
    /// a device's sign of life, which the replica carries only when it sets or lifts a stale mark,
    /// by row triggers that run only then (`WHEN` on `stale_from`). A re-post of the same token
    /// (and a REGISTER's sign of life) no longer runs the liveness or dead-mark triggers at all.
    static let postingMigrations: [Migration] = [
        Migration(
            version: 770, name: "posted token refreshes leave the replica alone",
            sql: """
                CREATE FUNCTION rouse_replica_posted_tokens_updated() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    PERFORM rouse_replica_note('posted', ARRAY(
                        SELECT o.family || ':' || o.token FROM old_rows o
                        WHERE NOT EXISTS (SELECT 1 FROM new_rows n WHERE n.family = o.family AND n.token = o.token)), true);
                    PERFORM rouse_replica_note('posted', ARRAY(
                        SELECT n.family || ':' || n.token
                        FROM new_rows n LEFT JOIN old_rows o ON o.family = n.family AND o.token = n.token
                        WHERE o.token IS NULL
                            OR (n.extension_id, n.provider, n.param, n.kind, n.device_id)
                                IS DISTINCT FROM (o.extension_id, o.provider, o.param, o.kind, o.device_id)
                            OR (n.posted_at IS DISTINCT FROM o.posted_at AND EXISTS (
                                SELECT 1 FROM posted_push_tokens p
                                WHERE p.extension_id = n.extension_id AND NOT (p.family = n.family AND p.token = n.token)))), false);
                    RETURN NULL;
                END
                $$;
                DROP TRIGGER replica_posted_tokens_updated ON posted_push_tokens;
                CREATE TRIGGER replica_posted_tokens_updated AFTER UPDATE ON posted_push_tokens
                    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
                    FOR EACH STATEMENT EXECUTE FUNCTION rouse_replica_posted_tokens_updated();
                """),
        Migration(
            version: 780, name: "replica triggers that cost nothing when they note nothing",
            sql: """
                CREATE OR REPLACE FUNCTION rouse_replica_note(change_kind text, keys text[], is_tombstone boolean) RETURNS void
                LANGUAGE plpgsql AS $$
                BEGIN
                    IF cardinality(keys) = 0 THEN
                        RETURN;
                    END IF;
                    INSERT INTO replica_pending (txn, kind, key, tombstone)
                    SELECT DISTINCT txid_current(), change_kind, k, is_tombstone FROM unnest(keys) AS k WHERE k IS NOT NULL
                    ON CONFLICT (txn, kind, key) DO UPDATE SET tombstone = EXCLUDED.tombstone
                    WHERE replica_pending.tombstone IS DISTINCT FROM EXCLUDED.tombstone;
                    IF FOUND THEN
                        INSERT INTO replica_txns (txn) VALUES (txid_current()) ON CONFLICT DO NOTHING;
                    END IF;
                END
                $$;

                -- One row's key (`family:token`), noted as kind TG_ARGV[0]; a tombstone when the row went.
                CREATE FUNCTION rouse_replica_token_row() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF TG_OP = 'DELETE' THEN
                        PERFORM rouse_replica_note(TG_ARGV[0], ARRAY[OLD.family || ':' || OLD.token], true);
                    ELSE
                        PERFORM rouse_replica_note(TG_ARGV[0], ARRAY[NEW.family || ':' || NEW.token], false);
                    END IF;
                    RETURN NULL;
                END
                $$;

                DROP TRIGGER replica_posted_tokens_inserted ON posted_push_tokens;
                DROP TRIGGER replica_posted_tokens_deleted ON posted_push_tokens;
                DROP TRIGGER replica_dead_tokens_deleted ON push_dead_tokens;
                CREATE TRIGGER replica_posted_tokens_inserted AFTER INSERT ON posted_push_tokens
                    FOR EACH ROW EXECUTE FUNCTION rouse_replica_token_row('posted');
                CREATE TRIGGER replica_posted_tokens_deleted AFTER DELETE ON posted_push_tokens
                    FOR EACH ROW EXECUTE FUNCTION rouse_replica_token_row('posted');
                CREATE TRIGGER replica_dead_tokens_deleted AFTER DELETE ON push_dead_tokens
                    FOR EACH ROW EXECUTE FUNCTION rouse_replica_token_row('dead');

                -- As rouse_replica_stale (migration 720): a mark set or lifted, or a marked row gone.
                DROP TRIGGER replica_liveness_inserted ON push_token_liveness;
                DROP TRIGGER replica_liveness_updated ON push_token_liveness;
                DROP TRIGGER replica_liveness_deleted ON push_token_liveness;
                CREATE TRIGGER replica_liveness_inserted AFTER INSERT ON push_token_liveness
                    FOR EACH ROW WHEN (NEW.stale_from IS NOT NULL) EXECUTE FUNCTION rouse_replica_token_row('stale');
                CREATE TRIGGER replica_liveness_updated AFTER UPDATE ON push_token_liveness
                    FOR EACH ROW WHEN (NEW.stale_from IS DISTINCT FROM OLD.stale_from) EXECUTE FUNCTION rouse_replica_token_row('stale');
                CREATE TRIGGER replica_liveness_deleted AFTER DELETE ON push_token_liveness
                    FOR EACH ROW WHEN (OLD.stale_from IS NOT NULL) EXECUTE FUNCTION rouse_replica_token_row('stale');
                DROP FUNCTION rouse_replica_stale();
                """),
    ]
}
