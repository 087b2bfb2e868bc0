extension Migrator {
    /// Versions 740–749: secrets sealed at rest (issue 20 item 7, `SealedSecrets`).
    static let sealedMigrations: [Migration] = [
        Migration(
            version: 740, name: "secrets sealed at rest",
            sql: """
                -- SQL cannot seal (the key never reaches PostgreSQL), so each secret stored before
                -- this version is marked plain: here, and sealed by the first start with a key
                -- (SealedSecrets.sealPlainValues, in one transaction) — an upgrade loses nothing.
                UPDATE push_apps SET key_text = 'plain:' || key_text;
                UPDATE extensions SET ha1_md5 = 'plain:' || ha1_md5, ha1_sha256 = 'plain:' || ha1_sha256;
                UPDATE outbound_routes SET password = 'plain:' || password WHERE password IS NOT NULL;
                UPDATE webpush_vapid_keys SET private_key_pem = 'plain:' || private_key_pem;
                UPDATE rouse_settings SET value = 'plain:' || value WHERE key LIKE '%\\_secret';
                -- From now on PostgreSQL itself refuses a secret written in plain text, by any
                -- writer (NOT VALID: rows are checked as they are written, the marked ones pass).
                ALTER TABLE push_apps ADD CONSTRAINT push_apps_key_sealed
                    CHECK (key_text LIKE 'v1:%' OR key_text LIKE 'plain:%') NOT VALID;
                ALTER TABLE extensions ADD CONSTRAINT extensions_ha1_sealed
                    CHECK ((ha1_md5 LIKE 'v1:%' OR ha1_md5 LIKE 'plain:%') AND (ha1_sha256 LIKE 'v1:%' OR ha1_sha256 LIKE 'plain:%')) NOT VALID;
                ALTER TABLE outbound_routes ADD CONSTRAINT outbound_routes_password_sealed
                    CHECK (password IS NULL OR password LIKE 'v1:%' OR password LIKE 'plain:%') NOT VALID;
                ALTER TABLE webpush_vapid_keys ADD CONSTRAINT webpush_vapid_keys_private_key_sealed
                    CHECK (private_key_pem LIKE 'v1:%' OR private_key_pem LIKE 'plain:%') NOT VALID;
                ALTER TABLE rouse_settings ADD CONSTRAINT rouse_settings_secret_sealed
                    CHECK (key NOT LIKE '%\\_secret' OR value LIKE 'v1:%' OR value LIKE 'plain:%') NOT VALID;
                """)
    ]
}
