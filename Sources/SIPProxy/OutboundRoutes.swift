public import SIPDNS
public import SIPMessage

/// What an outside call was dialled as: the number (or user) and the domain of its Request-URI.
/// `tel:+44 20 7946 0958`, `sip:+442079460958@rouse.example;user=phone` and
/// `sip:00442079460958@rouse.example` are numbers; `sip:bob@partner.example` is a user at another
/// domain. Visual separators (RFC 3966 §5.1.1: `-`, `.`, `(`, `)`, spaces) are dropped from numbers.
public struct DialledTarget: Sendable, Hashable, CustomStringConvertible {
    /// The user part with separators removed when it is a number; never empty.
    public var user: String
    /// The Request-URI's host, lowercased (empty for `tel:`).
    public var domain: String
    /// Digits, with an optional leading `+`.
    public var isNumber: Bool

    public init?(_ uri: SIPURI) {
        guard var user = uri.user?.removingPercentEncodingForSIP(), !user.isEmpty else { return nil }
        let separators: Set<Character> = ["-", ".", "(", ")", " "]
        let stripped = String(user.filter { !separators.contains($0) })
        let digits = stripped.hasPrefix("+") ? stripped.dropFirst() : Substring(stripped)
        let numeric = !digits.isEmpty && digits.allSatisfy { $0.isASCII && $0.isNumber }
        if numeric || uri.scheme == .tel || uri.parameters.value("user")?.lowercased() == "phone" {
            user = stripped
        }
        self.user = user
        self.domain = uri.host.lowercased()
        self.isNumber = numeric
    }

    public var description: String { domain.isEmpty ? user : "\(user)@\(domain)" }
}

extension String {
    /// `%XX` escapes of a SIP user part decoded (RFC 3261 §25.1); an invalid escape is kept as is.
    func removingPercentEncodingForSIP() -> String {
        guard contains("%") else { return self }
        var bytes: [UInt8] = []
        var iterator = Array(utf8)[...]
        while let byte = iterator.popFirst() {
            if byte == UInt8(ascii: "%"), iterator.count >= 2,
                let value = UInt8(String(decoding: iterator.prefix(2), as: UTF8.self), radix: 16)
            {
                bytes.append(value)
                iterator = iterator.dropFirst(2)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// How a route picks the calls it carries, written `prefix:+44`, `regex:^0[1-9][0-9]{8,}$` or
/// `domain:partner.example` (in the CLI, the API and PostgreSQL alike).
public enum RoutePattern: Sendable, Hashable, CustomStringConvertible {
    /// The number starts with these characters (empty: every number).
    case prefix(String)
    /// The whole user part matches this regular expression (Swift `Regex` syntax, like PCRE's).
    case regex(String)
    /// The Request-URI's domain is this one (a user at another domain).
    case domain(String)

    /// Why a pattern cannot be used, in words for the CLI and the API.
    public struct Invalid: Error, Sendable, Hashable, CustomStringConvertible {
        public var description: String
    }

    public init(parsing text: String) throws(Invalid) {
        guard let colon = text.firstIndex(of: ":") else {
            throw Invalid(description: "a pattern is prefix:<digits>, regex:<expression> or domain:<name>, not \"\(text)\"")
        }
        let kind = text[..<colon].lowercased()
        let value = String(text[text.index(after: colon)...])
        switch kind {
        case "prefix":
            guard value.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == "+" || $0 == "*" || $0 == "#") }) else {
                throw Invalid(description: "a prefix is digits, +, * and #, not \"\(value)\"")
            }
            self = .prefix(value)
        case "regex":
            do {
                _ = try Regex(value)
            } catch {
                throw Invalid(description: "\"\(value)\" is not a regular expression: \(error)")
            }
            self = .regex(value)
        case "domain":
            guard !value.isEmpty, !value.contains("@"), !value.contains(" ") else { throw Invalid(description: "\"\(value)\" is not a domain") }
            self = .domain(value.lowercased())
        default:
            throw Invalid(description: "a pattern is prefix:<digits>, regex:<expression> or domain:<name>, not \"\(text)\"")
        }
    }

    public var description: String {
        switch self {
        case .prefix(let value): return "prefix:\(value)"
        case .regex(let value): return "regex:\(value)"
        case .domain(let value): return "domain:\(value)"
        }
    }
}

/// One next hop of a route: `198.51.100.7:5080;transport=tcp`, `trunk.example.com` (RFC 3263:
/// NAPTR, SRV, then A/AAAA), `sips:trunk.example.com`, `[2001:db8::7]`.
public struct RouteHop: Sendable, Hashable, CustomStringConvertible {
    public var target: SIPServerTarget

    public init(_ target: SIPServerTarget) { self.target = target }

    public init(parsing text: String) throws(RoutePattern.Invalid) {
        var rest = Substring(text.trimmingSIPWhitespace)
        var secure = false
        if rest.lowercased().hasPrefix("sips:") {
            secure = true
            rest = rest.dropFirst(5)
        } else if rest.lowercased().hasPrefix("sip:") {
            rest = rest.dropFirst(4)
        }
        var transport: SIPHopTransport?
        let parts = rest.split(separator: ";")
        guard let hostPort = parts.first, !hostPort.isEmpty else { throw RoutePattern.Invalid(description: "a hop names a host, not \"\(text)\"") }
        for parameter in parts.dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1)
            guard pair.count == 2, pair[0].lowercased() == "transport", let chosen = SIPHopTransport(rawValue: pair[1].lowercased()) else {
                throw RoutePattern.Invalid(description: "a hop takes only ;transport=udp|tcp|tls, not \"\(parameter)\"")
            }
            transport = chosen
        }
        var host = String(hostPort)
        var port: UInt16?
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { throw RoutePattern.Invalid(description: "\"\(hostPort)\" has no closing ]") }
            let after = host[host.index(after: close)...]
            if after.hasPrefix(":") {
                guard let value = UInt16(after.dropFirst()), value > 0 else { throw RoutePattern.Invalid(description: "\"\(hostPort)\" has a bad port") }
                port = value
            } else if !after.isEmpty {
                throw RoutePattern.Invalid(description: "\"\(hostPort)\" is not host[:port]")
            }
            host = String(host[...close])
        } else if let colon = host.firstIndex(of: ":") {
            guard let value = UInt16(host[host.index(after: colon)...]), value > 0 else { throw RoutePattern.Invalid(description: "\"\(hostPort)\" has a bad port") }
            port = value
            host = String(host[..<colon])
        }
        let allowed = host.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "-.[]:".contains($0)) }
        guard !host.isEmpty, allowed else { throw RoutePattern.Invalid(description: "\"\(host)\" is not a host name or address") }
        target = SIPServerTarget(host: host, port: port, transport: transport, secure: secure)
    }

    public var description: String { (target.secure ? "sips:" : "") + target.description }
}

/// Who the callee sees calling over a route.
public enum CallerIdentity: Sendable, Hashable, CustomStringConvertible {
    /// From kept; `P-Asserted-Identity` (RFC 3325) names the extension, for a trunk that trusts Rouse.
    case assertedIdentity
    /// From's user part rewritten to the route's number (a trunk that checks From).
    case fromNumber(String)
    /// The caller's From as it came.
    case unchanged

    /// Reads what `description` writes: `asserted-identity`, `unchanged` or `from:<number>`.
    public init(parsing text: String) throws(RoutePattern.Invalid) {
        switch text.lowercased() {
        case "asserted-identity": self = .assertedIdentity
        case "unchanged": self = .unchanged
        case _ where text.lowercased().hasPrefix("from:") && text.count > 5:
            let number = String(text.dropFirst(5))
            guard number.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == "+") }) else {
                throw RoutePattern.Invalid(description: "a caller number is digits with an optional +, not \"\(number)\"")
            }
            self = .fromNumber(number)
        default:
            throw RoutePattern.Invalid(description: "caller identity is asserted-identity, unchanged or from:<number>, not \"\(text)\"")
        }
    }

    public var description: String {
        switch self {
        case .assertedIdentity: return "asserted-identity"
        case .fromNumber(let number): return "from:\(number)"
        case .unchanged: return "unchanged"
        }
    }
}

/// A way out of Rouse for calls to numbers or domains that are not local extensions: which calls
/// (its pattern, within one organisation), what is done to the number, and the next hops to try in
/// order. Stored in PostgreSQL like push apps; the password never leaves there except into the
/// digest answer to the trunk's challenge.
public struct OutboundRoute: Sendable, Hashable, Identifiable {
    public var id: Int
    public var organisation: String
    public var name: String
    /// Routes of an organisation are tried in this order; the first whose pattern matches wins.
    public var position: Int
    public var pattern: RoutePattern
    /// Leading characters removed from the number before `prepend` is put in front.
    public var strip: Int
    public var prepend: String
    public var hops: [RouteHop]
    /// How long a hop may stay silent (no response at all) before the next is tried.
    public var hopTimeout: Duration
    /// The digest user Rouse answers the trunk's 401/407 with, when the route has credentials.
    public var username: String?
    public var callerIdentity: CallerIdentity
    /// Emergency numbers: always carried, whatever the caller's class of service.
    public var emergency: Bool
    /// RFC 5806: a diverted call also carries a Diversion header (many trunks and PBXs read it
    /// rather than History-Info).
    public var diversionHeader: Bool
    /// The host of the Request-URI the hops get (the PBX's domain in gateway mode); nil: the
    /// route hop's own host and port.
    public var requestHost: String?

    public init(
        id: Int, organisation: String, name: String, position: Int, pattern: RoutePattern, strip: Int = 0, prepend: String = "",
        hops: [RouteHop], hopTimeout: Duration = .seconds(4), username: String? = nil, callerIdentity: CallerIdentity = .assertedIdentity,
        emergency: Bool = false, diversionHeader: Bool = false, requestHost: String? = nil
    ) {
        self.diversionHeader = diversionHeader
        self.requestHost = requestHost
        self.id = id
        self.organisation = organisation
        self.name = name
        self.position = position
        self.pattern = pattern
        self.strip = strip
        self.prepend = prepend
        self.hops = hops
        self.hopTimeout = hopTimeout
        self.username = username
        self.callerIdentity = callerIdentity
        self.emergency = emergency
    }

    /// The user part sent to the trunk: `strip` characters off the front, `prepend` on.
    public func translated(_ target: DialledTarget) -> String {
        guard case .domain = pattern else { return prepend + String(target.user.dropFirst(min(strip, target.user.count))) }
        return target.user
    }
}

/// A pattern ready to match, its regular expression compiled once. Immutable, so safe to share
/// between threads.
public struct CompiledRoutePattern: @unchecked Sendable {
    // @unchecked: `regex` is built at init and only read after (Regex values are immutable).
    public let pattern: RoutePattern
    private let regex: Regex<AnyRegexOutput>?

    /// Nil when a `regex:` pattern does not compile (stored patterns were checked when added).
    public init?(_ pattern: RoutePattern) {
        self.pattern = pattern
        if case .regex(let text) = pattern {
            guard let compiled = try? Regex(text) else { return nil }
            regex = compiled
        } else {
            regex = nil
        }
    }

    /// Whether the pattern takes `target`: a prefix of a number, the whole user part for a
    /// regular expression, or the domain of a user at another domain.
    public func matches(_ target: DialledTarget) -> Bool {
        switch pattern {
        case .prefix(let prefix): return target.isNumber && target.user.hasPrefix(prefix)
        case .regex: return regex.map { (try? $0.wholeMatch(in: target.user)) != nil } ?? false
        case .domain(let domain): return !target.isNumber && target.domain == domain
        }
    }
}

/// The routes of every organisation, compiled for matching: a value, safe to share between threads
/// (its compiled expressions are immutable once built).
public struct OutboundRouteTable: Sendable {
    private let byOrganisation: [String: [(route: OutboundRoute, pattern: CompiledRoutePattern)]]

    public init(_ routes: [OutboundRoute]) {
        var grouped: [String: [(route: OutboundRoute, pattern: CompiledRoutePattern)]] = [:]
        for route in routes.sorted(by: { ($0.position, $0.id) < ($1.position, $1.id) }) {
            guard let pattern = CompiledRoutePattern(route.pattern) else { continue }
            grouped[route.organisation, default: []].append((route, pattern))
        }
        byOrganisation = grouped
    }

    public var isEmpty: Bool { byOrganisation.isEmpty }

    /// The first route of `organisation` (in position order) whose pattern takes `target`; nil: no route, no call.
    public func route(for target: DialledTarget, organisation: String) -> OutboundRoute? {
        byOrganisation[organisation]?.first { $0.pattern.matches(target) }?.route
    }
}
