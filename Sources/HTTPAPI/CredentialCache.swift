import Crypto
import Foundation
import Registrar

/// The extensions' stored HA1 hashes, held in memory so that checking a password never waits
/// for PostgreSQL. The owner replaces the snapshot at start and on `NOTIFY rouse_directory`.
///
/// Threading: thread-safe (an `NSLock` guards the snapshot); `verify` does a fixed amount of hash
/// work and never blocks on I/O.
public final class CredentialCache: @unchecked Sendable {
    // @unchecked: `extensions` is only touched under `lock`.
    private let lock = NSLock()
    private var extensions: [AddressOfRecord: ExtensionCredentials] = [:]
    private var loaded = false

    public init() {}

    /// Swaps in a newly loaded directory.
    public func update(_ snapshot: DirectorySnapshot) {
        lock.lock()
        extensions = snapshot.extensions
        loaded = true
        lock.unlock()
    }

    /// True once a snapshot has been loaded.
    public var isLoaded: Bool {
        lock.lock()
        defer { lock.unlock() }
        return loaded
    }

    /// The extension `user` (`number@domain`) when `password` is its password; nil otherwise.
    /// An unknown or malformed user costs the same hash work and comparison as a wrong password
    /// (decisions.md: identical 401s, timing within noise).
    public func verify(user: String, password: String) -> AddressOfRecord? {
        let aor = AddressOfRecord(parsing: user)
        let number = aor?.number ?? user
        let domain = aor?.domain ?? ""
        let computed = Array(ExtensionCredentials.ha1(.md5, number: number, realm: domain, password: password).utf8)
        let stored: ExtensionCredentials?
        if let aor {
            lock.lock()
            stored = extensions[aor]
            lock.unlock()
        } else {
            stored = nil
        }
        let expected = Array((stored?.ha1MD5 ?? Self.unmatchable).utf8)
        let equal = Digest.constantTimeEquals(computed, expected)
        guard let aor, stored != nil, equal else { return nil }
        return aor
    }

    /// 32 characters that are not hex, so no MD5 hex digest ever equals them.
    private static let unmatchable = String(repeating: "z", count: 32)
}
