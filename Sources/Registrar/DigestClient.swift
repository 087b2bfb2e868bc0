public import Crypto
public import SIPMessage

/// One offer of a `WWW-Authenticate`/`Proxy-Authenticate` line (RFC 7616 §3.3, RFC 3261 §22):
/// `Digest realm="…", nonce="…", algorithm=…, qop="auth", opaque="…"`.
public struct DigestChallenge: Sendable, Hashable {
    public var realm: String
    public var nonce: String
    public var opaque: String?
    public var algorithm: Digest.Algorithm
    /// The qop values offered, lower-cased (`auth`, `auth-int`); empty: RFC 2069 style.
    public var qop: [String]
    public var stale: Bool

    /// Nil when the line is not a digest challenge, has no nonce, or names an algorithm Rouse
    /// cannot compute.
    public init?(header: String) {
        guard let fields = DigestCredentials(header: header)?.parameters, let nonce = fields["nonce"] else { return nil }
        var algorithm = Digest.Algorithm.md5
        if let name = fields["algorithm"] {
            guard let known = Digest.Algorithm.allCases.first(where: { $0.rawValue.caseInsensitiveEquals(name) }) else { return nil }
            algorithm = known
        }
        self.realm = fields["realm"] ?? ""
        self.nonce = nonce
        self.opaque = fields["opaque"]
        self.algorithm = algorithm
        self.qop = (fields["qop"] ?? "").split(separator: ",").map { String($0).trimmingSIPWhitespace.lowercased() }.filter { !$0.isEmpty }
        self.stale = fields["stale"]?.lowercased() == "true"
    }
}

/// Answers digest challenges as a client (RFC 7616 with `qop=auth`, or RFC 2069 style when no qop
/// is offered; RFC 8760 SHA-256 preferred over MD5): the credentials Rouse sends a trunk or a PBX
/// that challenges its INVITE or REGISTER, and what the test agents send Rouse. Keeps the nonce
/// count of each nonce. A value; not thread-safe.
public struct DigestClient: Sendable {
    public var username: String
    public var password: String
    /// The algorithm chosen when the challenge offers it (nil: the strongest offered).
    public var preferredAlgorithm: Digest.Algorithm?
    private var nonceCounts: [String: Int] = [:]

    public init(username: String, password: String, preferredAlgorithm: Digest.Algorithm? = nil) {
        self.username = username
        self.password = password
        self.preferredAlgorithm = preferredAlgorithm
    }

    /// The header answering `challenge` (401: Authorization, 407: Proxy-Authorization) for
    /// `method` to `uri`, or nil when it offers no digest Rouse can compute.
    public mutating func authorization(
        answering challenge: SIPResponse, method: String, uri: String, cnonce: String = SecureRandom.hex(8)
    ) -> (name: SIPHeaderName, value: String)? {
        let proxy = challenge.statusCode == 407
        let offers = challenge.headers.lines(proxy ? .proxyAuthenticate : .wwwAuthenticate).compactMap(DigestChallenge.init(header:))
        let chosen = preferredAlgorithm.flatMap { preferred in offers.first { $0.algorithm == preferred } }
            ?? offers.first { $0.algorithm == .sha256 } ?? offers.first
        guard let offer = chosen else { return nil }
        return (proxy ? .proxyAuthorization : .authorization, answer(offer, method: method, uri: uri, cnonce: cnonce))
    }

    /// The `Digest …` value answering one offer.
    public mutating func answer(_ offer: DigestChallenge, method: String, uri: String, cnonce: String = SecureRandom.hex(8)) -> String {
        let ha1 = Digest.hex(offer.algorithm, "\(username):\(offer.realm):\(password)")
        let ha2 = Digest.hex(offer.algorithm, "\(method):\(uri)")
        var value = "Digest username=\"\(username)\", realm=\"\(offer.realm)\", nonce=\"\(offer.nonce)\", uri=\"\(uri)\""
        if offer.qop.contains("auth") {
            let count = nonceCounts[offer.nonce, default: 0] + 1
            if nonceCounts.count >= 64 { nonceCounts.removeAll() }
            nonceCounts[offer.nonce] = count
            let hex = String(count, radix: 16)
            let nonceCount = String(repeating: "0", count: max(0, 8 - hex.count)) + hex
            let response = Digest.hex(offer.algorithm, "\(ha1):\(offer.nonce):\(nonceCount):\(cnonce):auth:\(ha2)")
            value += ", response=\"\(response)\", algorithm=\(offer.algorithm.rawValue), cnonce=\"\(cnonce)\", qop=auth, nc=\(nonceCount)"
        } else {
            let response = Digest.hex(offer.algorithm, "\(ha1):\(offer.nonce):\(ha2)")
            value += ", response=\"\(response)\", algorithm=\(offer.algorithm.rawValue)"
        }
        if let opaque = offer.opaque { value += ", opaque=\"\(opaque)\"" }
        return value
    }
}
