public import Crypto
public import Foundation
import SIPMessage

/// The parameters of a `Digest` Authorization header (RFC 7616 §3.4, RFC 3261 §22.4).
public struct DigestCredentials: Hashable, Sendable {
    public var parameters: [String: String]

    /// Parses `Digest username="1001", realm="example.com", ...`; nil when it is not a Digest
    /// header or is malformed.
    public init?(header: String) {
        let trimmed = header.trimmingSIPWhitespace
        guard trimmed.count > 7, trimmed.prefix(6).lowercased() == "digest",
            trimmed.dropFirst(6).first.map({ $0 == " " || $0 == "\t" }) == true
        else { return nil }
        var result: [String: String] = [:]
        for element in SIPHeaderValueScanner.splitList(String(trimmed.dropFirst(7))) {
            guard let eq = element.firstIndex(of: "=") else { return nil }
            let name = String(element[..<eq]).trimmingSIPWhitespace.lowercased()
            let value = SIPHeaderValueScanner.unquote(String(element[element.index(after: eq)...]).trimmingSIPWhitespace)
            guard !name.isEmpty, result[name] == nil else { return nil }
            result[name] = value
        }
        parameters = result
    }

    public var username: String? { parameters["username"] }
    public var realm: String? { parameters["realm"] }
    public var nonce: String? { parameters["nonce"] }
    public var uri: String? { parameters["uri"] }
    public var response: String? { parameters["response"] }
    public var cnonce: String? { parameters["cnonce"] }
    public var qop: String? { parameters["qop"] }
    public var nc: String? { parameters["nc"] }
    public var opaque: String? { parameters["opaque"] }
    /// The algorithm named (MD5 when absent, RFC 7616 §3.3).
    public var algorithm: Digest.Algorithm? {
        guard let name = parameters["algorithm"] else { return .md5 }
        return Digest.Algorithm.allCases.first { $0.rawValue.caseInsensitiveEquals(name) }
    }
}

/// Issues digest challenges and checks answers to them, for SIP (RFC 3261 §22, RFC 7616, RFC 8760).
///
/// Which algorithms are offered is a setting (`digest_algorithms`): one challenge header each, in
/// the order given. The default is MD5 alone, as Kamailio, Asterisk and Flexisip do: SIPp 3.6.1
/// and libre-based clients give up on any 401 that carries a SHA-256 challenge (decisions.md). An
/// answer is accepted only in an algorithm that is offered.
///
/// Nonces are stateless (decisions.md): the issue time, random bytes and an HMAC under a secret all
/// instances share, so any instance can check a nonce another made. A nonce is good for
/// `nonceLifetime`; after that the answer is a new challenge with `stale=true`. With qop=auth the
/// nonce count must grow for each use of a nonce (replay protection, kept in memory).
///
/// Threading: thread-safe; the replay window is behind a lock.
public final class DigestAuthenticator: @unchecked Sendable {
    // @unchecked: `seenCounts` and `lastPurge` are only touched under `lock`; the rest is immutable.

    /// What checking an Authorization header found.
    public enum Verdict: Hashable, Sendable {
        case authenticated(AddressOfRecord)
        /// Wrong credentials, unknown extension, bad header, replayed nonce count: challenge again.
        case rejected
        /// A correct answer to an expired nonce: challenge again with `stale=true`.
        case stale
    }

    private let secret: [UInt8]
    public let nonceLifetime: TimeInterval
    /// The algorithms challenged with, most preferred first (never empty).
    public let algorithms: [Digest.Algorithm]
    private let opaque: String
    private let lock = NSLock()
    private var seenCounts: [String: (count: UInt32, issued: Date)] = [:]
    private var lastPurge = Date.distantPast

    /// The MD5-only default of `digest_algorithms`.
    public static let defaultAlgorithms: [Digest.Algorithm] = [.md5]

    public init(secret: [UInt8], nonceLifetime: TimeInterval, algorithms: [Digest.Algorithm] = DigestAuthenticator.defaultAlgorithms) {
        precondition(!algorithms.isEmpty, "digest_algorithms names at least one algorithm")
        self.secret = secret
        self.nonceLifetime = nonceLifetime
        self.algorithms = algorithms
        self.opaque = Hex.encode(Digest.hmacSHA256(key: secret, message: Array("rouse-opaque".utf8)).prefix(8))
    }

    /// The WWW-Authenticate (or Proxy-Authenticate) values for a challenge: one per configured
    /// algorithm, the most preferred first (RFC 8760 §2.4), all with the same nonce.
    public func challenges(realm: String, stale: Bool, now: Date) -> [String] {
        let nonce = makeNonce(now: now)
        return algorithms.map { algorithm in
            var value = "Digest realm=\(SIPHeaderValueScanner.quote(realm)), nonce=\"\(nonce)\", opaque=\"\(opaque)\""
            value += ", algorithm=\(algorithm.rawValue), qop=\"auth\""
            if stale { value += ", stale=true" }
            return value
        }
    }

    /// Checks `credentials` for `method` against the extension they name. `lookup` finds an
    /// extension's stored hashes; for an unknown one the same hash work is done on a stand-in, so
    /// a probe cannot tell the two apart by timing (decisions.md).
    public func verify(
        _ credentials: DigestCredentials, method: String, realm: String, now: Date,
        lookup: (AddressOfRecord) -> ExtensionCredentials?
    ) -> Verdict {
        guard let algorithm = credentials.algorithm, algorithms.contains(algorithm), let username = credentials.username,
            let nonce = credentials.nonce, let uri = credentials.uri, let response = credentials.response,
            credentials.realm.map({ $0.lowercased() == realm.lowercased() }) == true
        else { return .rejected }
        // The digest username is the number, or number@domain (decisions.md).
        var number = username
        if let at = username.firstIndex(of: "@") {
            guard username[username.index(after: at)...].lowercased() == realm.lowercased() else { return .rejected }
            number = String(username[..<at])
        }
        let aor = AddressOfRecord(number: number, domain: realm)
        let stored = lookup(aor)
        let ha1 = stored?.ha1(for: algorithm) ?? Digest.hex(algorithm, "\(number):\(realm):\(Hex.encode(secret.prefix(4)))")
        let ha2 = Digest.hex(algorithm, "\(method):\(uri)")
        let expected: String
        switch credentials.qop?.lowercased() {
        case "auth":
            guard let cnonce = credentials.cnonce, let nc = credentials.nc else { return .rejected }
            expected = Digest.hex(algorithm, "\(ha1):\(nonce):\(nc):\(cnonce):auth:\(ha2)")
        case nil:
            expected = Digest.hex(algorithm, "\(ha1):\(nonce):\(ha2)")  // RFC 2069 compatibility
        default:
            return .rejected
        }
        let matches = Digest.constantTimeEquals(Array(expected.utf8), Array(response.lowercased().utf8))
        guard matches, stored != nil else { return .rejected }
        guard let issued = nonceIssueTime(nonce) else { return .rejected }
        if now.timeIntervalSince(issued) > nonceLifetime || issued.timeIntervalSince(now) > 60 { return .stale }
        if credentials.qop != nil {
            guard let count = credentials.nc.flatMap({ UInt32($0, radix: 16) }), acceptCount(count, for: nonce, issued: issued, now: now)
            else { return .rejected }
        }
        return .authenticated(aor)
    }

    /// hex(issue time in ms, 8 bytes) + hex(8 random bytes) + hex(HMAC prefix, 16 bytes).
    func makeNonce(now: Date) -> String {
        var body: [UInt8] = []
        let milliseconds = UInt64(max(0, now.timeIntervalSince1970 * 1000))
        for shift in stride(from: 56, through: 0, by: -8) { body.append(UInt8(truncatingIfNeeded: milliseconds >> UInt64(shift))) }
        body += SecureRandom.bytes(8)
        let mac = Digest.hmacSHA256(key: secret, message: body).prefix(16)
        return Hex.encode(body) + Hex.encode(mac)
    }

    /// The issue time of a nonce this server (or another sharing its secret) made; nil otherwise.
    func nonceIssueTime(_ nonce: String) -> Date? {
        guard nonce.utf8.count == 64, let bytes = Hex.decode(nonce) else { return nil }
        let body = Array(bytes.prefix(16))
        let mac = Array(Digest.hmacSHA256(key: secret, message: body).prefix(16))
        guard Digest.constantTimeEquals(mac, Array(bytes.suffix(16))) else { return nil }
        let milliseconds = body.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return Date(timeIntervalSince1970: Double(milliseconds) / 1000)
    }

    /// RFC 7616 §3.4.5: each use of a nonce must carry a higher nonce count than the last.
    private func acceptCount(_ count: UInt32, for nonce: String, issued: Date, now: Date) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if now.timeIntervalSince(lastPurge) > 10 {
            // Counts of expired nonces are no longer needed: those nonces are refused as stale.
            let oldest = now.addingTimeInterval(-nonceLifetime - 60)
            seenCounts = seenCounts.filter { $0.value.issued >= oldest }
            lastPurge = now
        }
        if let last = seenCounts[nonce], count <= last.count { return false }
        seenCounts[nonce] = (count, issued)
        return true
    }
}
