extension Migrator {
    /// Versions 100–199: push apps, dead tokens and push records.
    static let pushMigrations: [Migration] = []
}
