extension Migrator {
    /// Version 603: gateway mode's leases (issue 19: Rouse in front of a PBX).
    static let gatewayMigrations: [Migration] = [
        Migration(
            version: 603, name: "gateway registration leases",
            sql: """
                -- Which instance registers an extension at its organisation's PBX: the holder takes
                -- the lease for a short while and renews it; another instance takes it only once it
                -- has run out, so exactly one refreshes the upstream registration.
                CREATE TABLE gateway_leases (
                    aor text PRIMARY KEY CHECK (aor LIKE '%@%'),
                    holder text NOT NULL,
                    expires_at timestamptz NOT NULL
                );
                """)
    ]
}
