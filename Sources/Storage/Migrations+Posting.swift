extension Migrator {
    /// Versions 770–779: posting a push token at thousands a second (issue 21). A re-post that
    /// moves only `posted_at` (the same extension, provider, param, kind and device) is no longer
    /// a replica change when its extension holds no other posted token: nothing another instance
    /// holds would differ (the time only orders an extension's tokens). Before, every re-post was
    /// numbered into `replica_changes` at COMMIT under the replica's advisory lock, which is held
    /// through the commit's WAL flush, so the posting lanes' commits could not share a flush, and
    /// every instance read the token back; a batch of re-posts now commits with no replica work.
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
                """)
    ]
}
