extension Migrator {
    /// Versions 500–599: the replica change log (docs/architecture.md, "The replica"). Every change
    /// of a binding (keyed by its extension), a posted token or a dead-token mark (keyed by
    /// `family:token`) gets the next number of `replica_change_seq` when its transaction commits,
    /// written by triggers so that every writer (every instance, the HTTP API, the command line)
    /// is covered, and is announced on `rouse_replica` as `<seq> <kind> <origin>`.
    ///
    /// The triggers are deferred to commit and take one advisory lock there, so numbers are given
    /// in commit order: once a change is visible, every change with a lower number is visible too
    /// (or never happened), and an instance that has applied everything up to N can ask for
    /// `seq > N` and miss nothing. A key changed several times in one transaction is numbered once.
    /// Deletes leave their row (`tombstone`) until it is pruned; `replica_state.pruned_through` is
    /// the highest number pruned, below which an instance must reload everything.
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
                    txn bigint NOT NULL,
                    changed_at timestamptz NOT NULL DEFAULT clock_timestamp()
                );
                CREATE INDEX replica_changes_txn_idx ON replica_changes (txn, kind, key);
                CREATE INDEX replica_changes_changed_at_idx ON replica_changes (changed_at);
                CREATE TABLE replica_state (
                    id smallint PRIMARY KEY CHECK (id = 1),
                    pruned_through bigint NOT NULL DEFAULT 0
                );
                INSERT INTO replica_state (id) VALUES (1);

                CREATE FUNCTION rouse_replica_record(change_kind text, change_key text, is_tombstone boolean) RETURNS void
                LANGUAGE plpgsql AS $$
                DECLARE
                    this_txn bigint := txid_current();
                    who text := coalesce(current_setting('rouse.origin', true), '');
                    number bigint;
                BEGIN
                    IF change_key IS NULL THEN
                        RETURN;
                    END IF;
                    -- Held until this transaction ends: numbers follow commit order.
                    PERFORM pg_advisory_xact_lock(491496760422);
                    UPDATE replica_changes SET tombstone = is_tombstone
                    WHERE txn = this_txn AND kind = change_kind AND key = change_key;
                    IF FOUND THEN
                        RETURN;
                    END IF;
                    number := nextval('replica_change_seq');
                    INSERT INTO replica_changes (seq, kind, key, tombstone, origin, txn)
                    VALUES (number, change_kind, change_key, is_tombstone, who, this_txn);
                    PERFORM pg_notify('rouse_replica', number || ' ' || change_kind || ' ' || who);
                END
                $$;

                CREATE FUNCTION rouse_replica_bindings() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF TG_OP <> 'INSERT' THEN
                        PERFORM rouse_replica_record('binding', OLD.aor, TG_OP = 'DELETE');
                    END IF;
                    IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.aor IS DISTINCT FROM OLD.aor) THEN
                        PERFORM rouse_replica_record('binding', NEW.aor, false);
                    END IF;
                    RETURN NULL;
                END
                $$;

                CREATE FUNCTION rouse_replica_binding_channels() RETURNS trigger LANGUAGE plpgsql AS $$
                DECLARE
                    changed uuid := CASE WHEN TG_OP = 'DELETE' THEN OLD.binding_id ELSE NEW.binding_id END;
                BEGIN
                    -- A binding deleted with its channels was recorded by its own trigger.
                    PERFORM rouse_replica_record('binding', (SELECT aor FROM bindings WHERE id = changed), false);
                    RETURN NULL;
                END
                $$;

                CREATE FUNCTION rouse_replica_tokens() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF TG_OP <> 'INSERT' THEN
                        PERFORM rouse_replica_record(TG_ARGV[0], OLD.family || ':' || OLD.token, TG_OP = 'DELETE');
                    END IF;
                    IF TG_OP <> 'DELETE' THEN
                        PERFORM rouse_replica_record(TG_ARGV[0], NEW.family || ':' || NEW.token, false);
                    END IF;
                    RETURN NULL;
                END
                $$;

                CREATE CONSTRAINT TRIGGER replica_bindings_changed AFTER INSERT OR DELETE ON bindings
                    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION rouse_replica_bindings();
                -- A refresh-push claim (refresh_pushed_at) changes nothing another instance holds.
                CREATE CONSTRAINT TRIGGER replica_bindings_updated AFTER UPDATE ON bindings
                    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
                    WHEN (NEW.updated_at IS DISTINCT FROM OLD.updated_at OR NEW.aor IS DISTINCT FROM OLD.aor)
                    EXECUTE FUNCTION rouse_replica_bindings();
                CREATE CONSTRAINT TRIGGER replica_binding_channels_changed AFTER INSERT OR UPDATE OR DELETE ON binding_push_channels
                    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION rouse_replica_binding_channels();
                CREATE CONSTRAINT TRIGGER replica_posted_tokens_changed AFTER INSERT OR UPDATE OR DELETE ON posted_push_tokens
                    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION rouse_replica_tokens('posted');
                CREATE CONSTRAINT TRIGGER replica_dead_tokens_changed AFTER INSERT OR UPDATE OR DELETE ON push_dead_tokens
                    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION rouse_replica_tokens('dead');
                """)
    ]
}
