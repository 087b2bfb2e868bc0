/// A header field name compared as SIP compares them: case-insensitively, with compact forms
/// (RFC 3261 §7.3.3) folded to their long form. `canonical` is the lower-case long form.
public struct SIPHeaderName: Hashable, Sendable, CustomStringConvertible {
    /// The lower-case long form, e.g. `call-id` for `i`, `Call-ID` or `CALL-ID`.
    public let canonical: String

    public init(_ name: String) {
        let lower = name.lowercased()
        self.canonical = SIPHeaderName.longForms[lower] ?? lower
    }

    /// For names already in canonical (lower-case long) form.
    init(canonical: String) { self.canonical = canonical }

    public var description: String { canonical }

    /// Compact forms registered for SIP (RFC 3261 §7.3.3 and the IANA registry).
    static let longForms: [String: String] = [
        "a": "accept-contact", "b": "referred-by", "c": "content-type", "d": "request-disposition",
        "e": "content-encoding", "f": "from", "i": "call-id", "j": "reject-contact", "k": "supported",
        "l": "content-length", "m": "contact", "n": "identity-info", "o": "event", "r": "refer-to",
        "s": "subject", "t": "to", "u": "allow-events", "v": "via", "x": "session-expires", "y": "identity",
    ]

    public static let via = SIPHeaderName(canonical: "via")
    public static let from = SIPHeaderName(canonical: "from")
    public static let to = SIPHeaderName(canonical: "to")
    public static let callID = SIPHeaderName(canonical: "call-id")
    public static let cseq = SIPHeaderName(canonical: "cseq")
    public static let contact = SIPHeaderName(canonical: "contact")
    public static let maxForwards = SIPHeaderName(canonical: "max-forwards")
    public static let contentLength = SIPHeaderName(canonical: "content-length")
    public static let contentType = SIPHeaderName(canonical: "content-type")
    public static let expires = SIPHeaderName(canonical: "expires")
    public static let minExpires = SIPHeaderName(canonical: "min-expires")
    public static let route = SIPHeaderName(canonical: "route")
    public static let recordRoute = SIPHeaderName(canonical: "record-route")
    public static let path = SIPHeaderName(canonical: "path")
    public static let allow = SIPHeaderName(canonical: "allow")
    public static let accept = SIPHeaderName(canonical: "accept")
    public static let supported = SIPHeaderName(canonical: "supported")
    public static let require = SIPHeaderName(canonical: "require")
    public static let proxyRequire = SIPHeaderName(canonical: "proxy-require")
    public static let unsupported = SIPHeaderName(canonical: "unsupported")
    public static let userAgent = SIPHeaderName(canonical: "user-agent")
    public static let server = SIPHeaderName(canonical: "server")
    public static let authorization = SIPHeaderName(canonical: "authorization")
    public static let proxyAuthorization = SIPHeaderName(canonical: "proxy-authorization")
    public static let wwwAuthenticate = SIPHeaderName(canonical: "www-authenticate")
    public static let proxyAuthenticate = SIPHeaderName(canonical: "proxy-authenticate")
    public static let retryAfter = SIPHeaderName(canonical: "retry-after")
    public static let reason = SIPHeaderName(canonical: "reason")
    public static let featureCaps = SIPHeaderName(canonical: "feature-caps")
    public static let timestamp = SIPHeaderName(canonical: "timestamp")
}

extension SIPHeaderName {
    /// The name of the header whose name spans `range` of `bytes`, without building a lower-cased
    /// copy for the common names (the parser's hot path).
    static func recognise(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, spelled: String) -> SIPHeaderName {
        let count = range.count
        if count == 1 {
            let c = bytes[range.lowerBound] | 0x20
            if c >= UInt8(ascii: "a"), c <= UInt8(ascii: "z"), let long = compactTable[Int(c - UInt8(ascii: "a"))] {
                return long
            }
        } else if count < knownByLength.count {
            for candidate in knownByLength[count] where matches(bytes, range, candidate.lower) {
                return candidate.name
            }
        }
        return SIPHeaderName(spelled)
    }

    private static func matches(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, _ lower: [UInt8]) -> Bool {
        var k = 0
        for i in range {
            // Token bytes: OR-ing 0x20 folds A-Z and leaves '-' and digits alone (RFC 3261 §7.3.1).
            if bytes[i] | 0x20 != lower[k] { return false }
            k += 1
        }
        return true
    }

    private static let compactTable: [SIPHeaderName?] = (UInt8(ascii: "a")...UInt8(ascii: "z")).map { letter in
        longForms[String(UnicodeScalar(letter))].map { SIPHeaderName(canonical: $0) }
    }

    private static let knownByLength: [[(lower: [UInt8], name: SIPHeaderName)]] = {
        let names: [SIPHeaderName] = [
            .via, .from, .to, .callID, .cseq, .contact, .maxForwards, .contentLength, .contentType, .expires,
            .minExpires, .route, .recordRoute, .path, .allow, .accept, .supported, .require, .proxyRequire,
            .unsupported, .userAgent, .server, .authorization, .proxyAuthorization, .wwwAuthenticate,
            .proxyAuthenticate, .retryAfter, .reason, .featureCaps, .timestamp,
            SIPHeaderName(canonical: "allow-events"), SIPHeaderName(canonical: "event"),
            SIPHeaderName(canonical: "subject"), SIPHeaderName(canonical: "date"),
            SIPHeaderName(canonical: "organization"), SIPHeaderName(canonical: "content-disposition"),
            SIPHeaderName(canonical: "content-encoding"), SIPHeaderName(canonical: "session-expires"),
            SIPHeaderName(canonical: "min-se"), SIPHeaderName(canonical: "p-asserted-identity"),
            SIPHeaderName(canonical: "privacy"), SIPHeaderName(canonical: "mime-version"),
        ]
        var table = [[(lower: [UInt8], name: SIPHeaderName)]](repeating: [], count: 24)
        for name in names where name.canonical.utf8.count < table.count {
            table[name.canonical.utf8.count].append((Array(name.canonical.utf8), name))
        }
        return table
    }()
}
