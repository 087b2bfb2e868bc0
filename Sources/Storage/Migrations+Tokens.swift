extension Migrator {
    /// Versions 710–719: push tokens that stay true (issue 20 item 1).
    static let tokenMigrations: [Migration] = [
        Migration(
            version: 710, name: "push token liveness",
            sql: """
                -- What the stale-device rule (CallRouting's DeviceStaleness) needs of each pushed
                -- device, keyed by its token: its last sign of life (a REGISTER carrying the token,
                -- a post of it, a woken app's return) and the ring pushes counted against it since.
                -- No foreign key: a token lives in bindings and posted tokens alike; a row whose
                -- token is gone from both is harmless and removed by `PushTokenLiveness.prune`.
                CREATE TABLE push_token_liveness (
                    family text NOT NULL,
                    token text NOT NULL,
                    last_sign_of_life timestamptz NOT NULL,
                    unanswered_pushes integer NOT NULL DEFAULT 0 CHECK (unanswered_pushes >= 0),
                    PRIMARY KEY (family, token)
                );
                """)
    ]
}
