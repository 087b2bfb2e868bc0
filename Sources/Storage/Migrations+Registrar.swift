extension Migrator {
    /// Versions 10–99: organisations, extensions, bindings and their push channels.
    static let registrarMigrations: [Migration] = []
}
