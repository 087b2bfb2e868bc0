extension Migrator {
    /// Versions 700–709: the delivery policy of push apps (issue 20 item 5).
    static let pushPolicyMigrations: [Migration] = [
        Migration(
            version: 700, name: "push apps: FCM direct boot",
            sql: """
                ALTER TABLE push_apps ADD COLUMN direct_boot_ok boolean NOT NULL DEFAULT true;
                """)
    ]
}
