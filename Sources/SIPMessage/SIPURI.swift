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

    /// Counted, then written once into the String's own storage (profiled: adding the parts up
    /// was 2.7k instructions per REGISTER, where the registrar keeps a binding's Contact URI).
    public var description: String {
        String(sipBytes: textLength) { out in write(to: &out) }
    }

    /// How many UTF-8 bytes `description` has.
    var textLength: Int {
        var count = scheme.rawValue.utf8.count + 1
        if scheme == .tel {
            count += user?.utf8.count ?? 0
        } else {
            if let user {
                count += user.utf8.count + 1
                if let password { count += 1 + password.utf8.count }
            }
            count += host.utf8.count
            if let port { count += 1 + SIPByteWriter.decimalLength(port) }
        }
        count += parameters.serializedLength
        if !headers.isEmpty {
            for header in headers {
                count += 1 + header.name.utf8.count + (header.value.map { 1 + $0.utf8.count } ?? 0)
            }
        }
        return count
    }

    /// Writes `description`'s bytes.
    func write(to out: inout SIPByteWriter) {
        out.write(text: scheme.rawValue)
        out.write(UInt8(ascii: ":"))
        if scheme == .tel {
            if let user { out.write(text: user) }
        } else {
            if let user {
                out.write(text: user)
                if let password {
                    out.write(UInt8(ascii: ":"))
                    out.write(text: password)
                }
                out.write(UInt8(ascii: "@"))
            }
            out.write(text: host)
            if let port {
                out.write(UInt8(ascii: ":"))
                out.writeDecimal(port)
            }
        }
        parameters.write(to: &out)
        for (index, header) in headers.enumerated() {
            out.write(index == 0 ? UInt8(ascii: "?") : UInt8(ascii: "&"))
            out.write(text: header.name)
            if let value = header.value {
                out.write(UInt8(ascii: "="))
                out.write(text: value)
            }
        }
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
        let name = displayName.flatMap { $0.isEmpty ? nil : SIPHeaderValueScanner.quote($0) }
        let count = (name.map { $0.utf8.count + 1 } ?? 0) + 2 + uri.textLength + parameters.serializedLength
        return String(sipBytes: count) { out in
            if let name {
                out.write(text: name)
                out.write(UInt8(ascii: " "))
            }
            out.write(UInt8(ascii: "<"))
            uri.write(to: &out)
            out.write(UInt8(ascii: ">"))
            parameters.write(to: &out)
        }
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
