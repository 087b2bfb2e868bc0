/// A header field name compared as SIP compares them: case-insensitively, with compact forms
/// (RFC 3261 §7.3.3) folded to their long form. `canonical` is the lower-case long form.
public struct SIPHeaderName: Hashable, Sendable, CustomStringConvertible {
    /// The lower-case long form, e.g. `call-id` for `i`, `Call-ID` or `CALL-ID`.
    public let canonical: String
    /// The name's place in `knownNames` plus one, 0 for any other name: a known name compares
    /// and hashes by this number instead of its text (profiled: comparing the Strings was most of
    /// building a response and of every header lookup).
    let code: UInt8

    public init(_ name: String) {
        let lower = name.lowercased()
        self.init(canonical: SIPHeaderName.longForms[lower] ?? lower)
    }

    /// For names already in canonical (lower-case long) form.
    init(canonical: String) {
        self.canonical = canonical
        self.code = SIPHeaderName.codes[canonical] ?? 0
    }

    /// A name of `knownNames`, by its code (no lookup).
    private init(known code: UInt8) {
        self.canonical = SIPHeaderName.knownNames[Int(code) - 1]
        self.code = code
    }

    public var description: String { canonical }

    public static func == (lhs: SIPHeaderName, rhs: SIPHeaderName) -> Bool {
        lhs.code == rhs.code && (lhs.code != 0 || lhs.canonical == rhs.canonical)
    }

    public func hash(into hasher: inout Hasher) {
        if code != 0 { hasher.combine(code) } else { hasher.combine(canonical) }
    }

    /// The names given codes: those a SIP message usually carries (lower-case long forms).
    static let knownNames = [
        "via", "from", "to", "call-id", "cseq", "contact", "max-forwards", "content-length", "content-type", "expires",
        "min-expires", "route", "record-route", "path", "allow", "accept", "supported", "require", "proxy-require",
        "unsupported", "user-agent", "server", "authorization", "proxy-authorization", "www-authenticate",
        "proxy-authenticate", "retry-after", "reason", "feature-caps", "timestamp", "date", "event", "subject", "privacy",
        "min-se", "allow-events", "organization", "mime-version", "session-expires", "content-encoding",
        "content-disposition", "flow-timer",
    ]

    static let codes: [String: UInt8] = Dictionary(
        uniqueKeysWithValues: knownNames.enumerated().map { ($0.element, UInt8($0.offset + 1)) })

    /// The known name `canonical` (which must be in `knownNames`).
    private static func known(_ canonical: String) -> SIPHeaderName {
        SIPHeaderName(known: codes[canonical]!)
    }

    /// Compact forms registered for SIP (RFC 3261 §7.3.3 and the IANA registry).
    static let longForms: [String: String] = [
        "a": "accept-contact", "b": "referred-by", "c": "content-type", "d": "request-disposition",
        "e": "content-encoding", "f": "from", "i": "call-id", "j": "reject-contact", "k": "supported",
        "l": "content-length", "m": "contact", "n": "identity-info", "o": "event", "r": "refer-to",
        "s": "subject", "t": "to", "u": "allow-events", "v": "via", "x": "session-expires", "y": "identity",
    ]

    public static let via = SIPHeaderName.known("via")
    public static let from = SIPHeaderName.known("from")
    public static let to = SIPHeaderName.known("to")
    public static let callID = SIPHeaderName.known("call-id")
    public static let cseq = SIPHeaderName.known("cseq")
    public static let contact = SIPHeaderName.known("contact")
    public static let maxForwards = SIPHeaderName.known("max-forwards")
    public static let contentLength = SIPHeaderName.known("content-length")
    public static let contentType = SIPHeaderName.known("content-type")
    public static let expires = SIPHeaderName.known("expires")
    public static let minExpires = SIPHeaderName.known("min-expires")
    public static let route = SIPHeaderName.known("route")
    public static let recordRoute = SIPHeaderName.known("record-route")
    public static let path = SIPHeaderName.known("path")
    public static let allow = SIPHeaderName.known("allow")
    public static let accept = SIPHeaderName.known("accept")
    public static let supported = SIPHeaderName.known("supported")
    public static let require = SIPHeaderName.known("require")
    public static let proxyRequire = SIPHeaderName.known("proxy-require")
    public static let unsupported = SIPHeaderName.known("unsupported")
    public static let userAgent = SIPHeaderName.known("user-agent")
    public static let server = SIPHeaderName.known("server")
    public static let authorization = SIPHeaderName.known("authorization")
    public static let proxyAuthorization = SIPHeaderName.known("proxy-authorization")
    public static let wwwAuthenticate = SIPHeaderName.known("www-authenticate")
    public static let proxyAuthenticate = SIPHeaderName.known("proxy-authenticate")
    public static let retryAfter = SIPHeaderName.known("retry-after")
    public static let reason = SIPHeaderName.known("reason")
    public static let featureCaps = SIPHeaderName.known("feature-caps")
    public static let timestamp = SIPHeaderName.known("timestamp")
    // Known names the parser recognises that no other module names.
    static let date = SIPHeaderName.known("date")
    static let event = SIPHeaderName.known("event")
    static let subject = SIPHeaderName.known("subject")
    static let privacy = SIPHeaderName.known("privacy")
    static let minSE = SIPHeaderName.known("min-se")
    static let allowEvents = SIPHeaderName.known("allow-events")
    static let organization = SIPHeaderName.known("organization")
    static let mimeVersion = SIPHeaderName.known("mime-version")
    static let sessionExpires = SIPHeaderName.known("session-expires")
    static let contentEncoding = SIPHeaderName.known("content-encoding")
    static let contentDisposition = SIPHeaderName.known("content-disposition")
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
        @inline(__always) func folded(_ lower: StaticString) -> Bool { SIPHeaderValueScanner.equalsFolded(bytes, range, lower) }
        // `usual` and `usualText` are the same spelling: a literal to compare, a String to keep.
        func known(
            _ name: SIPHeaderName, _ usual: StaticString, _ usualText: String, _ checked: SIPCheckedHeader = .other
        ) -> (name: SIPHeaderName, checked: SIPCheckedHeader, spelled: String) {
            let spelled = SIPHeaderValueScanner.equalsLiteral(bytes, range, usual) ? usualText : text()
            return (name, checked, spelled)
        }
        switch range.count {
        case 1:
            let c = bytes[range.lowerBound] | 0x20
            if c >= UInt8(ascii: "a"), c <= UInt8(ascii: "z"), let long = longForms[String(UnicodeScalar(c))] {
                let name = SIPHeaderName(canonical: long)
                return (name, SIPCheckedHeader(name), text())
            }
        case 2:
            if folded("to") { return known(.to, "To", "To", .to) }
        case 3:
            if folded("via") { return known(.via, "Via", "Via", .via) }
        case 4:
            if folded("from") { return known(.from, "From", "From", .from) }
            if folded("cseq") { return known(.cseq, "CSeq", "CSeq", .cseq) }
            if folded("path") { return known(.path, "Path", "Path") }
            if folded("date") { return known(.date, "Date", "Date") }
        case 5:
            if folded("route") { return known(.route, "Route", "Route") }
            if folded("allow") { return known(.allow, "Allow", "Allow") }
            if folded("event") { return known(.event, "Event", "Event") }
        case 6:
            if folded("accept") { return known(.accept, "Accept", "Accept") }
            if folded("server") { return known(.server, "Server", "Server") }
            if folded("reason") { return known(.reason, "Reason", "Reason") }
            if folded("min-se") { return known(.minSE, "Min-Se", "Min-Se") }
        case 7:
            if folded("call-id") { return known(.callID, "Call-ID", "Call-ID", .callID) }
            if folded("contact") { return known(.contact, "Contact", "Contact") }
            if folded("expires") { return known(.expires, "Expires", "Expires", .expires) }
            if folded("require") { return known(.require, "Require", "Require") }
            if folded("subject") { return known(.subject, "Subject", "Subject") }
            if folded("privacy") { return known(.privacy, "Privacy", "Privacy") }
        case 9:
            if folded("supported") { return known(.supported, "Supported", "Supported") }
            if folded("timestamp") { return known(.timestamp, "Timestamp", "Timestamp") }
        case 10:
            if folded("user-agent") { return known(.userAgent, "User-Agent", "User-Agent") }
        case 11:
            if folded("min-expires") { return known(.minExpires, "Min-Expires", "Min-Expires") }
            if folded("unsupported") { return known(.unsupported, "Unsupported", "Unsupported") }
            if folded("retry-after") { return known(.retryAfter, "Retry-After", "Retry-After") }
        case 12:
            if folded("max-forwards") { return known(.maxForwards, "Max-Forwards", "Max-Forwards", .maxForwards) }
            if folded("content-type") { return known(.contentType, "Content-Type", "Content-Type") }
            if folded("record-route") { return known(.recordRoute, "Record-Route", "Record-Route") }
            if folded("feature-caps") { return known(.featureCaps, "Feature-Caps", "Feature-Caps") }
            if folded("allow-events") { return known(.allowEvents, "Allow-Events", "Allow-Events") }
            if folded("organization") { return known(.organization, "Organization", "Organization") }
            if folded("mime-version") { return known(.mimeVersion, "MIME-Version", "MIME-Version") }
        case 13:
            if folded("proxy-require") { return known(.proxyRequire, "Proxy-Require", "Proxy-Require") }
            if folded("authorization") { return known(.authorization, "Authorization", "Authorization") }
        case 14:
            if folded("content-length") {
                return known(.contentLength, "Content-Length", "Content-Length", .contentLength)
            }
        case 15:
            if folded("session-expires") { return known(.sessionExpires, "Session-Expires", "Session-Expires") }
        case 16:
            if folded("www-authenticate") { return known(.wwwAuthenticate, "WWW-Authenticate", "WWW-Authenticate") }
            if folded("content-encoding") { return known(.contentEncoding, "Content-Encoding", "Content-Encoding") }
        case 18:
            if folded("proxy-authenticate") {
                return known(.proxyAuthenticate, "Proxy-Authenticate", "Proxy-Authenticate")
            }
        case 19:
            if folded("proxy-authorization") {
                return known(.proxyAuthorization, "Proxy-Authorization", "Proxy-Authorization")
            }
            if folded("content-disposition") {
                return known(.contentDisposition, "Content-Disposition", "Content-Disposition")
            }
        default:
            break
        }
        let spelled = text()
        let name = SIPHeaderName(spelled)
        return (name, SIPCheckedHeader(name), spelled)
    }
}
