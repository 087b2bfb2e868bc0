public import Crypto

/// What Rouse keeps of an extension's SIP password: the digest HA1 hashes for MD5 and SHA-256
/// (RFC 7616 §3.4.2: H(username:realm:password), with the number as username and the domain as
/// realm), as 48 bytes held inline (no heap allocation, no hex text, not even the extension's
/// address: the directory holds a million of them, keyed by that address). The password itself is
/// never stored. A value, safe to share.
public struct ExtensionCredentials: Hashable, Sendable {
    private let md5Words: (UInt64, UInt64)
    private let sha256Words: (UInt64, UInt64, UInt64, UInt64)

    /// The hashes of `aor`'s password (`aor` names whose they are; it is not kept).
    public init(aor: AddressOfRecord, md5: DigestOutput, sha256: DigestOutput) {
        precondition(md5.count == 16 && sha256.count == 32, "HA1s are an MD5 and a SHA-256")
        var md5Words: (UInt64, UInt64) = (0, 0)
        var sha256Words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        md5.withUnsafeBytes { bytes in withUnsafeMutableBytes(of: &md5Words) { $0.copyMemory(from: bytes) } }
        sha256.withUnsafeBytes { bytes in withUnsafeMutableBytes(of: &sha256Words) { $0.copyMemory(from: bytes) } }
        self.md5Words = md5Words
        self.sha256Words = sha256Words
    }

    /// The hashes from their hex text (as stored); nil when either is not the hex of its digest.
    public init?(aor: AddressOfRecord, ha1MD5: String, ha1SHA256: String) {
        guard let md5 = DigestOutput(hex: ha1MD5), md5.count == 16, let sha256 = DigestOutput(hex: ha1SHA256), sha256.count == 32
        else { return nil }
        self.init(aor: aor, md5: md5, sha256: sha256)
    }

    /// Hashes a password for an extension.
    public init(aor: AddressOfRecord, password: String) {
        self.init(
            aor: aor, md5: ExtensionCredentials.ha1Digest(.md5, number: aor.number, realm: aor.domain, password: password),
            sha256: ExtensionCredentials.ha1Digest(.sha256, number: aor.number, realm: aor.domain, password: password))
    }

    /// H(number:domain:password) with MD5 (16 bytes).
    public var md5: DigestOutput { Swift.withUnsafeBytes(of: md5Words) { DigestOutput(copying: $0) } }
    /// H(number:domain:password) with SHA-256 (32 bytes).
    public var sha256: DigestOutput { Swift.withUnsafeBytes(of: sha256Words) { DigestOutput(copying: $0) } }

    public static func == (lhs: ExtensionCredentials, rhs: ExtensionCredentials) -> Bool {
        lhs.md5Words == rhs.md5Words && lhs.sha256Words.0 == rhs.sha256Words.0 && lhs.sha256Words.1 == rhs.sha256Words.1
            && lhs.sha256Words.2 == rhs.sha256Words.2 && lhs.sha256Words.3 == rhs.sha256Words.3
    }

    public func hash(into hasher: inout Hasher) {
        Swift.withUnsafeBytes(of: md5Words) { hasher.combine(bytes: $0) }
        Swift.withUnsafeBytes(of: sha256Words) { hasher.combine(bytes: $0) }
    }

    /// The MD5 HA1 in lower-case hex (as stored, and as HTTP Basic compares it).
    public var ha1MD5: String { md5.hex }
    /// The SHA-256 HA1 in lower-case hex.
    public var ha1SHA256: String { sha256.hex }

    /// The HA1 of `algorithm`, as bytes (the REGISTER check hashes its hex without a String).
    public func ha1Digest(for algorithm: Digest.Algorithm) -> DigestOutput {
        algorithm == .md5 ? md5 : sha256
    }

    public func ha1(for algorithm: Digest.Algorithm) -> String {
        ha1Digest(for: algorithm).hex
    }

    public static func ha1(_ algorithm: Digest.Algorithm, number: String, realm: String, password: String) -> String {
        ha1Digest(algorithm, number: number, realm: realm, password: password).hex
    }

    public static func ha1Digest(_ algorithm: Digest.Algorithm, number: String, realm: String, password: String) -> DigestOutput {
        var stream = DigestStream(algorithm)
        stream.update(number)
        stream.update(byte: UInt8(ascii: ":"))
        stream.update(realm)
        stream.update(byte: UInt8(ascii: ":"))
        stream.update(password)
        return stream.finish()
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
