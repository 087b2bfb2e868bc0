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

/// The headers the parser itself checks, told apart without comparing Strings.
enum SIPCheckedHeader: UInt8 {
    case via, from, to, callID, cseq, maxForwards, contentLength, expires, other

    init(_ name: SIPHeaderName) {
        switch name.canonical {
        case "via": self = .via
        case "from": self = .from
        case "to": self = .to
        case "call-id": self = .callID
        case "cseq": self = .cseq
        case "max-forwards": self = .maxForwards
        case "content-length": self = .contentLength
        case "expires": self = .expires
        default: self = .other
        }
    }
}

extension SIPHeaderName {
    /// The name of the header whose name spans `range` of `bytes`, and its spelling, without
    /// building a lower-cased copy for the common names (the parser's hot path). A common name
    /// spelled the usual way (`Call-ID`) reuses a String literal.
    static func recognise(
        _ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>
    ) -> (name: SIPHeaderName, checked: SIPCheckedHeader, spelled: String) {
        func text() -> String { SIPHeaderValueScanner.text(bytes, range) }
        func folded(_ lower: StaticString) -> Bool { SIPHeaderValueScanner.equalsFolded(bytes, range, lower) }
        // `usual` and `usualText` are the same spelling: a literal to compare, a String to keep.
        func known(
            _ canonical: String, _ usual: StaticString, _ usualText: String, _ checked: SIPCheckedHeader = .other
        ) -> (name: SIPHeaderName, checked: SIPCheckedHeader, spelled: String) {
            let spelled = SIPHeaderValueScanner.equalsLiteral(bytes, range, usual) ? usualText : text()
            return (SIPHeaderName(canonical: canonical), checked, spelled)
        }
        switch range.count {
        case 1:
            let c = bytes[range.lowerBound] | 0x20
            if c >= UInt8(ascii: "a"), c <= UInt8(ascii: "z"), let long = longForms[String(UnicodeScalar(c))] {
                let name = SIPHeaderName(canonical: long)
                return (name, SIPCheckedHeader(name), text())
            }
        case 2:
            if folded("to") { return known("to", "To", "To", .to) }
        case 3:
            if folded("via") { return known("via", "Via", "Via", .via) }
        case 4:
            if folded("from") { return known("from", "From", "From", .from) }
            if folded("cseq") { return known("cseq", "CSeq", "CSeq", .cseq) }
            if folded("path") { return known("path", "Path", "Path") }
            if folded("date") { return known("date", "Date", "Date") }
        case 5:
            if folded("route") { return known("route", "Route", "Route") }
            if folded("allow") { return known("allow", "Allow", "Allow") }
            if folded("event") { return known("event", "Event", "Event") }
        case 6:
            if folded("accept") { return known("accept", "Accept", "Accept") }
            if folded("server") { return known("server", "Server", "Server") }
            if folded("reason") { return known("reason", "Reason", "Reason") }
            if folded("min-se") { return known("min-se", "Min-Se", "Min-Se") }
        case 7:
            if folded("call-id") { return known("call-id", "Call-ID", "Call-ID", .callID) }
            if folded("contact") { return known("contact", "Contact", "Contact") }
            if folded("expires") { return known("expires", "Expires", "Expires", .expires) }
            if folded("require") { return known("require", "Require", "Require") }
            if folded("subject") { return known("subject", "Subject", "Subject") }
            if folded("privacy") { return known("privacy", "Privacy", "Privacy") }
        case 9:
            if folded("supported") { return known("supported", "Supported", "Supported") }
            if folded("timestamp") { return known("timestamp", "Timestamp", "Timestamp") }
        case 10:
            if folded("user-agent") { return known("user-agent", "User-Agent", "User-Agent") }
        case 11:
            if folded("min-expires") { return known("min-expires", "Min-Expires", "Min-Expires") }
            if folded("unsupported") { return known("unsupported", "Unsupported", "Unsupported") }
            if folded("retry-after") { return known("retry-after", "Retry-After", "Retry-After") }
        case 12:
            if folded("max-forwards") { return known("max-forwards", "Max-Forwards", "Max-Forwards", .maxForwards) }
            if folded("content-type") { return known("content-type", "Content-Type", "Content-Type") }
            if folded("record-route") { return known("record-route", "Record-Route", "Record-Route") }
            if folded("feature-caps") { return known("feature-caps", "Feature-Caps", "Feature-Caps") }
            if folded("allow-events") { return known("allow-events", "Allow-Events", "Allow-Events") }
            if folded("organization") { return known("organization", "Organization", "Organization") }
            if folded("mime-version") { return known("mime-version", "MIME-Version", "MIME-Version") }
        case 13:
            if folded("proxy-require") { return known("proxy-require", "Proxy-Require", "Proxy-Require") }
            if folded("authorization") { return known("authorization", "Authorization", "Authorization") }
        case 14:
            if folded("content-length") {
                return known("content-length", "Content-Length", "Content-Length", .contentLength)
            }
        case 15:
            if folded("session-expires") { return known("session-expires", "Session-Expires", "Session-Expires") }
        case 16:
            if folded("www-authenticate") { return known("www-authenticate", "WWW-Authenticate", "WWW-Authenticate") }
            if folded("content-encoding") { return known("content-encoding", "Content-Encoding", "Content-Encoding") }
        case 18:
            if folded("proxy-authenticate") {
                return known("proxy-authenticate", "Proxy-Authenticate", "Proxy-Authenticate")
            }
        case 19:
            if folded("proxy-authorization") {
                return known("proxy-authorization", "Proxy-Authorization", "Proxy-Authorization")
            }
            if folded("content-disposition") {
                return known("content-disposition", "Content-Disposition", "Content-Disposition")
            }
        default:
            break
        }
        let spelled = text()
        let name = SIPHeaderName(spelled)
        return (name, SIPCheckedHeader(name), spelled)
    }
}
