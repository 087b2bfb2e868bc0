import Crypto
import Foundation
import Registrar

/// The extensions' stored HA1 hashes, held in memory so that checking a password never waits
/// for PostgreSQL, for an HTTP API that runs without a registrar beside it (`rouse serve` gives it
/// the registrar's directory instead, so the hashes are held once). The owner replaces the
/// snapshot at start and on `NOTIFY rouse_directory`.
///
/// Threading: thread-safe (an `NSLock` guards the snapshot); `verify` does a fixed amount of hash
/// work and never blocks on I/O.
public final class CredentialCache: ExtensionDirectory, @unchecked Sendable {
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

    public func credentials(of aor: AddressOfRecord) -> ExtensionCredentials? {
        lock.lock()
        defer { lock.unlock() }
        return extensions[aor]
    }

}

extension ExtensionDirectory {
    /// The extension `user` (`number@domain`) when `password` is its password; nil otherwise.
    /// An unknown or malformed user costs the same hash work and comparison as a wrong password
    /// (decisions.md: identical 401s, timing within noise).
    public func verify(user: String, password: String) -> AddressOfRecord? {
        let aor = AddressOfRecord(parsing: user)
        let number = aor?.number ?? user
        let domain = aor?.domain ?? ""
        let computed = Array(ExtensionCredentials.ha1(.md5, number: number, realm: domain, password: password).utf8)
        let stored = aor.flatMap { credentials(of: $0) }
        let expected = Array((stored?.ha1MD5 ?? unmatchableHA1).utf8)
        let equal = Digest.constantTimeEquals(computed, expected)
        guard let aor, stored != nil, equal else { return nil }
        return aor
    }

}

/// 32 characters that are not hex, so no MD5 hex digest ever equals them.
private let unmatchableHA1 = String(repeating: "z", count: 32)
