extension Migrator {
    /// Versions 500–599: the replica change log (docs/architecture.md, "The replica"). Every change
    /// of a binding (keyed by its extension), a posted token or a dead-token mark (keyed by
    /// `family:token`) gets the next number of `replica_change_seq` when its transaction commits,
    /// written by triggers so that every writer (every instance, the HTTP API, the command line)
    /// is covered.
    ///
    /// Statement triggers (with transition tables, so a batch of any size costs one statement
    /// each) note the changed keys in `replica_pending`, once per key and transaction, and the
    /// transaction in `replica_txns`, whose deferred trigger runs once at COMMIT: it takes one
    /// advisory lock, numbers the transaction's keys into `replica_changes` and announces them with
    /// one `NOTIFY rouse_replica '<first> <last> <kinds> <origin>'`. The lock makes numbers follow
    /// commit order: once a change is visible, every change with a lower number is visible too (or
    /// never happened), so an instance that has applied everything up to N can ask for `seq > N`
    /// and miss nothing. Deletes leave their row (`tombstone`) until it is pruned;
    /// `replica_state.pruned_through` is the highest number pruned, below which an instance must
    /// reload everything.
    static let replicaMigrations: [Migration] = [
        Migration(
            version: 500, name: "replica change log",
            sql: """
                CREATE SEQUENCE replica_change_seq;
                CREATE TABLE replica_changes (
                    seq bigint PRIMARY KEY,
                    kind text NOT NULL CHECK (kind IN ('binding', 'posted', 'dead')),
                    key text NOT NULL,
                    tombstone boolean NOT NULL,
                    origin text NOT NULL DEFAULT '',
                    changed_at timestamptz NOT NULL DEFAULT clock_timestamp()
                );
                CREATE INDEX replica_changes_changed_at_idx ON replica_changes (changed_at);
                CREATE TABLE replica_state (
                    id smallint PRIMARY KEY CHECK (id = 1),
                    pruned_through bigint NOT NULL DEFAULT 0
                );
                INSERT INTO replica_state (id) VALUES (1);
                -- Keys changed by transactions not yet committed (rows live only until their COMMIT).
                CREATE UNLOGGED TABLE replica_pending (
                    txn bigint NOT NULL,
                    kind text NOT NULL,
                    key text NOT NULL,
                    tombstone boolean NOT NULL,
                    PRIMARY KEY (txn, kind, key)
                );
                CREATE UNLOGGED TABLE replica_txns (txn bigint PRIMARY KEY);

                CREATE FUNCTION rouse_replica_note(change_kind text, keys text[], is_tombstone boolean) RETURNS void
                LANGUAGE plpgsql AS $$
                BEGIN
                    INSERT INTO replica_pending (txn, kind, key, tombstone)
                    SELECT DISTINCT txid_current(), change_kind, k, is_tombstone FROM unnest(keys) AS k WHERE k IS NOT NULL
                    ON CONFLICT (txn, kind, key) DO UPDATE SET tombstone = EXCLUDED.tombstone
                    WHERE replica_pending.tombstone IS DISTINCT FROM EXCLUDED.tombstone;
                    IF FOUND THEN
                        INSERT INTO replica_txns (txn) VALUES (txid_current()) ON CONFLICT DO NOTHING;
                    END IF;
                END
                $$;

                CREATE FUNCTION rouse_replica_commit() RETURNS trigger LANGUAGE plpgsql AS $$
                DECLARE
                    who text := coalesce(current_setting('rouse.origin', true), '');
                    first_seq bigint;
                    last_seq bigint;
                    kinds text;
                BEGIN
                    -- Held until this transaction ends: numbers follow commit order.
                    PERFORM pg_advisory_xact_lock(491496760422);
                    WITH moved AS (
                        DELETE FROM replica_pending WHERE txn = NEW.txn RETURNING kind, key, tombstone
                    ), numbered AS (
                        INSERT INTO replica_changes (seq, kind, key, tombstone, origin)
                        SELECT nextval('replica_change_seq'), m.kind, m.key, m.tombstone, who
                        FROM (SELECT * FROM moved ORDER BY kind, key) AS m
                        RETURNING seq, kind
                    )
                    SELECT min(seq), max(seq), string_agg(DISTINCT kind, ',') INTO first_seq, last_seq, kinds FROM numbered;
                    DELETE FROM replica_txns WHERE txn = NEW.txn;
                    IF first_seq IS NOT NULL THEN
                        PERFORM pg_notify('rouse_replica', first_seq || ' ' || last_seq || ' ' || kinds || ' ' || who);
                    END IF;
                    RETURN NULL;
                END
                $$;

                CREATE CONSTRAINT TRIGGER replica_txn_commits AFTER INSERT ON replica_txns
                    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION rouse_replica_commit();

                CREATE FUNCTION rouse_replica_bindings() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF TG_OP = 'INSERT' THEN
                        PERFORM rouse_replica_note('binding', ARRAY(SELECT aor FROM new_rows), false);
                    ELSIF TG_OP = 'DELETE' THEN
                        PERFORM rouse_replica_note('binding', ARRAY(SELECT aor FROM old_rows), true);
                    ELSE
                        -- A refresh-push claim (refresh_pushed_at alone) changes nothing another instance holds.
                        PERFORM rouse_replica_note('binding', ARRAY(
                            SELECT a FROM new_rows n JOIN old_rows o ON o.id = n.id, LATERAL (VALUES (n.aor), (o.aor)) AS v(a)
                            WHERE n.updated_at IS DISTINCT FROM o.updated_at OR n.aor IS DISTINCT FROM o.aor), false);
                    END IF;
                    RETURN NULL;
                END
                $$;

                CREATE FUNCTION rouse_replica_binding_channels() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    -- A binding deleted with its channels is noted by its own trigger.
                    IF TG_OP = 'DELETE' THEN
                        PERFORM rouse_replica_note('binding', ARRAY(SELECT b.aor FROM old_rows c JOIN bindings b ON b.id = c.binding_id), false);
                    ELSE
                        PERFORM rouse_replica_note('binding', ARRAY(SELECT b.aor FROM new_rows c JOIN bindings b ON b.id = c.binding_id), false);
                    END IF;
                    RETURN NULL;
                END
                $$;

                CREATE FUNCTION rouse_replica_tokens() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF TG_OP = 'INSERT' THEN
                        PERFORM rouse_replica_note(TG_ARGV[0], ARRAY(SELECT family || ':' || token FROM new_rows), false);
                    ELSIF TG_OP = 'DELETE' THEN
                        PERFORM rouse_replica_note(TG_ARGV[0], ARRAY(SELECT family || ':' || token FROM old_rows), true);
                    ELSE
                        PERFORM rouse_replica_note(TG_ARGV[0], ARRAY(SELECT family || ':' || token FROM old_rows), true);
                        PERFORM rouse_replica_note(TG_ARGV[0], ARRAY(SELECT family || ':' || token FROM new_rows), false);
                    END IF;
                    RETURN NULL;
                END
                $$;

                CREATE TRIGGER replica_bindings_inserted AFTER INSERT ON bindings
                    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION rouse_replica_bindings();
                CREATE TRIGGER replica_bindings_updated AFTER UPDATE ON bindings
                    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION rouse_replica_bindings();
                CREATE TRIGGER replica_bindings_deleted AFTER DELETE ON bindings
                    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION rouse_replica_bindings();
                CREATE TRIGGER replica_binding_channels_inserted AFTER INSERT ON binding_push_channels
                    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION rouse_replica_binding_channels();
                CREATE TRIGGER replica_binding_channels_deleted AFTER DELETE ON binding_push_channels
                    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION rouse_replica_binding_channels();
                CREATE TRIGGER replica_posted_tokens_inserted AFTER INSERT ON posted_push_tokens
                    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION rouse_replica_tokens('posted');
                CREATE TRIGGER replica_posted_tokens_updated AFTER UPDATE ON posted_push_tokens
                    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION rouse_replica_tokens('posted');
                CREATE TRIGGER replica_posted_tokens_deleted AFTER DELETE ON posted_push_tokens
                    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION rouse_replica_tokens('posted');
                CREATE TRIGGER replica_dead_tokens_inserted AFTER INSERT ON push_dead_tokens
                    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION rouse_replica_tokens('dead');
                CREATE TRIGGER replica_dead_tokens_updated AFTER UPDATE ON push_dead_tokens
                    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION rouse_replica_tokens('dead');
                CREATE TRIGGER replica_dead_tokens_deleted AFTER DELETE ON push_dead_tokens
                    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION rouse_replica_tokens('dead');
                """)
    ]
}
