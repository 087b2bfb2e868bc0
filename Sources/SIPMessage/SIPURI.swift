/// A `sip:`, `sips:` or `tel:` URI (RFC 3261 §19.1, RFC 3966) with its parameters and headers
/// kept in order and verbatim. IPv6 hosts keep their brackets (`[2001:db8::1]`).
public struct SIPURI: Hashable, Sendable, CustomStringConvertible {
    /// The URI schemes Rouse understands.
    public enum Scheme: String, Hashable, Sendable {
        case sip, sips, tel
    }

    public var scheme: Scheme
    /// The user part (escapes kept as received); for `tel:` the telephone number.
    public var user: String?
    public var password: String?
    /// Host name, IPv4 address or bracketed IPv6 reference; empty for `tel:`.
    public var host: String
    public var port: Int?
    public var parameters: SIPParameters
    /// `?name=value&...` headers of the URI.
    public var headers: [SIPParameter]

    public init(
        scheme: Scheme = .sip, user: String? = nil, password: String? = nil, host: String,
        port: Int? = nil, parameters: SIPParameters = [], headers: [SIPParameter] = []
    ) {
        self.scheme = scheme
        self.user = user
        self.password = password
        self.host = host
        self.port = port
        self.parameters = parameters
        self.headers = headers
    }

    /// The `transport` parameter, lower-cased, if any.
    public var transportParameter: String? { parameters.value("transport")?.lowercased() }

    /// `user@host` (or `host`), lower-casing the host: the address-of-record form of this URI.
    public var userAtHost: String {
        if let user { return user + "@" + host.lowercased() }
        return host.lowercased()
    }

    public var description: String {
        var out = scheme.rawValue + ":"
        if scheme == .tel {
            out += user ?? ""
        } else {
            if let user {
                out += user
                if let password { out += ":" + password }
                out += "@"
            }
            out += host
            if let port { out += ":" + String(port) }
        }
        out += parameters.serialized
        if !headers.isEmpty {
            out += "?" + headers.map { header in header.value.map { "\(header.name)=\($0)" } ?? header.name }
                .joined(separator: "&")
        }
        return out
    }
}

/// A `name-addr` or `addr-spec` with header parameters, as in From, To, Contact, Route
/// (RFC 3261 §20.10): `"Alice" <sip:alice@example.com>;tag=1928`.
public struct SIPNameAddress: Hashable, Sendable, CustomStringConvertible {
    /// The display name, unquoted and unescaped.
    public var displayName: String?
    public var uri: SIPURI
    /// Header parameters (after `>`, or after the addr-spec when there are no brackets).
    public var parameters: SIPParameters

    public init(displayName: String? = nil, uri: SIPURI, parameters: SIPParameters = []) {
        self.displayName = displayName
        self.uri = uri
        self.parameters = parameters
    }

    public var tag: String? { parameters.value("tag") }

    /// Always written as name-addr (with angle brackets), so URI parameters never turn into header
    /// parameters on the way out.
    public var description: String {
        var out = ""
        if let displayName, !displayName.isEmpty {
            out += SIPHeaderValueScanner.quote(displayName) + " "
        }
        out += "<" + uri.description + ">" + parameters.serialized
        return out
    }
}

/// One element of a Contact header: a binding's address, or `*` (RFC 3261 §10.2.2).
public enum SIPContact: Hashable, Sendable, CustomStringConvertible {
    case wildcard
    case address(SIPNameAddress)

    public var description: String {
        switch self {
        case .wildcard: return "*"
        case .address(let address): return address.description
        }
    }
}

extension SIPNameAddress {
    /// Contact `q` (0...1), when present and well formed.
    public var q: Double? { parameters.value("q").flatMap(Double.init) }
    /// Contact `expires` in seconds, when present and well formed; like the Expires header, a
    /// value beyond 2^32-1 reads as 2^32-1.
    public var expires: Int? { parameters.value("expires").flatMap(SIPNameAddress.deltaSeconds) }

    /// `delta-seconds` (RFC 3261 §20.19) saturated at 2^32-1; nil when not digits.
    static func deltaSeconds(_ text: String) -> Int? {
        text.withSIPBytes(deltaSeconds)
    }

    static func deltaSeconds(_ bytes: UnsafeBufferPointer<UInt8>) -> Int? {
        SIPHeaderValueScanner.decimal(bytes, 0..<bytes.count).map { Int(min($0, UInt64(UInt32.max))) }
    }
    /// `+sip.instance` (RFC 5626 §4.1) without its quotes: `<urn:uuid:...>`.
    public var instance: String? {
        parameters.value("+sip.instance").map(SIPHeaderValueScanner.unquote)
    }
    /// `reg-id` (RFC 5626 §4.2).
    public var regID: Int? { parameters.value("reg-id").flatMap { Int($0) } }
}
