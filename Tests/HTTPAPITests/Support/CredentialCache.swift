import Foundation
import Registrar

/// The extensions' stored HA1 hashes, held in memory, for the HTTP API run in a test without a
/// registrar beside it (`rouse serve` gives it the registrar's directory). `StandaloneHTTPAPI`
/// replaces the snapshot at start and on `NOTIFY rouse_directory`.
///
/// Threading: thread-safe (an `NSLock` guards the snapshot); `verify` does a fixed amount of hash
/// work and never blocks on I/O.
final class CredentialCache: ExtensionDirectory, @unchecked Sendable {
    // @unchecked: `extensions` is only touched under `lock`.
    private let lock = NSLock()
    private var extensions: [AddressOfRecord: ExtensionCredentials] = [:]
    private var loaded = false

    init() {}

    /// Swaps in a newly loaded directory.
    func update(_ snapshot: DirectorySnapshot) {
        lock.lock()
        extensions = snapshot.extensions
        loaded = true
        lock.unlock()
    }

    /// True once a snapshot has been loaded.
    var isLoaded: Bool {
        lock.lock()
        defer { lock.unlock() }
        return loaded
    }

    func credentials(of aor: AddressOfRecord) -> ExtensionCredentials? {
        lock.lock()
        defer { lock.unlock() }
        return extensions[aor]
    }

}
