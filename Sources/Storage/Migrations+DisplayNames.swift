extension Migrator {
    /// Versions 730–739: the display names of extensions (issue 20 item 3), which ring pushes
    /// carry as `callee_name` (and `caller_name` for a call from an extension whose From has none).
    static let displayNameMigrations: [Migration] = [
        Migration(
            version: 730, name: "extensions: display name",
            sql: """
                ALTER TABLE extensions ADD COLUMN display_name text
                    CHECK (display_name IS NULL OR (char_length(display_name) BETWEEN 1 AND 64));
                """)
    ]
}
