public import Crypto

/// What Rouse keeps of an extension's SIP password: the digest HA1 hashes for MD5 and SHA-256
/// (RFC 7616 §3.4.2: H(username:realm:password), with the number as username and the domain as
/// realm). The password itself is never stored.
public struct ExtensionCredentials: Hashable, Sendable {
    public let aor: AddressOfRecord
    public let ha1MD5: String
    public let ha1SHA256: String

    public init(aor: AddressOfRecord, ha1MD5: String, ha1SHA256: String) {
        self.aor = aor
        self.ha1MD5 = ha1MD5
        self.ha1SHA256 = ha1SHA256
    }

    /// Hashes a password for an extension.
    public init(aor: AddressOfRecord, password: String) {
        self.init(
            aor: aor,
            ha1MD5: ExtensionCredentials.ha1(.md5, number: aor.number, realm: aor.domain, password: password),
            ha1SHA256: ExtensionCredentials.ha1(.sha256, number: aor.number, realm: aor.domain, password: password))
    }

    public func ha1(for algorithm: Digest.Algorithm) -> String {
        algorithm == .md5 ? ha1MD5 : ha1SHA256
    }

    public static func ha1(_ algorithm: Digest.Algorithm, number: String, realm: String, password: String) -> String {
        Digest.hex(algorithm, "\(number):\(realm):\(password)")
    }
}

/// The organisations (SIP domains) and extensions Rouse serves, as loaded from storage. A value:
/// the registrar swaps in a new snapshot when the directory changes.
public struct DirectorySnapshot: Sendable {
    public var domains: Set<String>
    public var extensions: [AddressOfRecord: ExtensionCredentials]
    /// The call forwarding of the extensions that have any.
    public var diversions: [AddressOfRecord: DiversionRules]
    /// The display names of the extensions that have one (what a ring push calls them).
    public var displayNames: [AddressOfRecord: String]

    public init(
        domains: Set<String> = [], extensions: [AddressOfRecord: ExtensionCredentials] = [:], diversions: [AddressOfRecord: DiversionRules] = [:],
        displayNames: [AddressOfRecord: String] = [:]
    ) {
        self.domains = Set(domains.map { $0.lowercased() })
        self.extensions = extensions
        self.diversions = diversions
        self.displayNames = displayNames
    }
}

/// The extensions' digest hashes as held in memory, read by whoever checks a password (the
/// registrar's REGISTER and INVITE checks, the HTTP API's Basic). One holder per process: the
/// registrar, so the hashes are held once. Thread-safe; never blocks on I/O.
public protocol ExtensionDirectory: Sendable {
    /// The extension's stored hashes; nil for an extension that does not exist.
    func credentials(of aor: AddressOfRecord) -> ExtensionCredentials?
}

/// Where the registrar reads the directory from (PostgreSQL in production). Blocking: called off
/// the SIP path, at start and when the directory changes.
public protocol DirectorySource: Sendable {
    func loadDirectory() throws -> DirectorySnapshot
}
