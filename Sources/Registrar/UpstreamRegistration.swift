public import Foundation
public import RouseVocabulary
public import SIPMessage

/// The PBX an organisation's extensions are registered at in gateway mode (`gateway_pbx`): its
/// hop, the domain of the addresses of record there, the optional digest credentials Rouse answers
/// its challenge with, whether Rouse adds a Path (RFC 3327), and the expiry asked for. A value.
public struct UpstreamPBX: Sendable, Hashable, CustomStringConvertible {
    /// The organisation (Rouse's SIP domain) whose extensions are registered there.
    public var organisation: String
    public var host: String
    public var port: Int
    public var transport: SIPTransportKind
    /// The domain of the To/From address at the PBX (`sip:1001@<domain>`); the host when not set.
    public var domain: String
    /// Digest credentials for the PBX's 401/407; nil when the PBX trusts Rouse by address.
    public var username: String?
    public var password: String?
    /// Adds `Path: <Rouse;lr>` and `Supported: path` to the REGISTER.
    public var usesPath: Bool
    /// The expiry Rouse asks for (the PBX's grant is what counts).
    public var expires: Int

    /// Why an entry of `gateway_pbx` does not read.
    public struct Invalid: Error, CustomStringConvertible {
        public var description: String
    }

    public init(
        organisation: String, host: String, port: Int = 5060, transport: SIPTransportKind = .udp, domain: String? = nil,
        username: String? = nil, password: String? = nil, usesPath: Bool = false, expires: Int = 600
    ) {
        self.organisation = organisation.lowercased()
        self.host = host
        self.port = port
        self.transport = transport
        self.domain = domain ?? host
        self.username = username
        self.password = password
        self.usesPath = usesPath
        self.expires = expires
    }

    /// Reads one entry: `organisation=host:port;transport=udp|tcp;domain=…;user=…;password=…;path`
    /// (port 5060 and UDP when not said; `user` and `password` together or not at all).
    public init(parsing entry: String, expires: Int) throws(Invalid) {
        let sides = entry.split(separator: "=", maxSplits: 1).map { String($0).trimmingSIPWhitespace }
        guard sides.count == 2, AddressOfRecord.isValidDomain(sides[0].lowercased()) else {
            throw Invalid(description: "gateway_pbx entry \"\(Self.redacted(entry))\" is not organisation=host:port;parameters")
        }
        var parts = sides[1].split(separator: ";").map { String($0).trimmingSIPWhitespace }
        guard !parts.isEmpty, let hop = SocketAddressText(parts.removeFirst()) else {
            throw Invalid(description: "gateway_pbx entry for \(sides[0]) names no host:port")
        }
        self.init(organisation: sides[0], host: hop.host, port: hop.port ?? 5060, expires: expires)
        for part in parts {
            let pair = part.split(separator: "=", maxSplits: 1).map(String.init)
            switch (pair[0].lowercased(), pair.count == 2 ? pair[1] : nil) {
            case ("transport", let value?):
                guard let kind = SIPTransportKind(rawValue: value.lowercased()), kind != .tls else {
                    throw Invalid(description: "gateway_pbx entry for \(organisation): transport must be udp or tcp")
                }
                transport = kind
            case ("domain", let value?): domain = value
            case ("user", let value?): username = value
            case ("password", let value?): password = value
            case ("path", nil): usesPath = true
            default: throw Invalid(description: "gateway_pbx entry for \(organisation): unknown parameter \"\(pair[0])\"")
            }
        }
        guard (username == nil) == (password == nil) else {
            throw Invalid(description: "gateway_pbx entry for \(organisation): user and password go together")
        }
    }

    /// Without the password.
    public var description: String {
        "\(organisation)=\(host):\(port);transport=\(transport.rawValue)" + (username.map { ";user=\($0);password=…" } ?? "") + (usesPath ? ";path" : "")
    }

    private static func redacted(_ entry: String) -> String {
        entry.split(separator: ";").filter { !$0.lowercased().hasPrefix("password=") }.joined(separator: ";")
    }

    /// `host`, `host:port` or `[v6]:port`.
    private struct SocketAddressText {
        var host: String
        var port: Int?
        init?(_ text: String) {
            if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
                host = String(text[...close])
                let rest = text[text.index(after: close)...]
                guard rest.isEmpty || rest.hasPrefix(":") else { return nil }
                port = rest.isEmpty ? nil : Int(rest.dropFirst())
                if !rest.isEmpty, port == nil { return nil }
            } else {
                let pieces = text.split(separator: ":", omittingEmptySubsequences: false)
                guard pieces.count <= 2, !pieces[0].isEmpty else { return nil }
                host = String(pieces[0])
                port = pieces.count == 2 ? Int(pieces[1]) : nil
                if pieces.count == 2, port == nil { return nil }
            }
            if let port, !(1...65_535).contains(port) { return nil }
        }
    }
}

/// One extension's registration at the PBX in gateway mode, as a value: events and the time in,
/// actions out (it never reads the clock nor touches a socket or the database).
///
/// While the extension has a live binding in Rouse (a push binding included: a sleeping app's
/// binding lives for days), the instance that holds the extension's lease REGISTERs a Contact of
/// Rouse's own upstream, refreshes at half of what the PBX granted, answers the PBX's digest
/// challenge with the PBX's credentials, and unregisters (Expires: 0) when the last binding goes.
/// The lease (in PostgreSQL) is taken before the first REGISTER and renewed at half its length;
/// an instance that cannot take it stands by and tries again, so exactly one instance refreshes an
/// extension and another takes over within one and a half lease lengths when that one dies. A
/// lease lost stops the refreshing without an unregister (the new holder keeps the registration).
/// RFC 8599 `pn-*` parameters never go upstream: the Contact is Rouse's, not the phone's.
///
/// Threading: a value; its owner (SIPService's gateway, on one queue) serialises the events.
public struct UpstreamRegistration: Sendable {
    /// What happened.
    public enum Event: Sendable {
        /// Whether the extension has a live binding in Rouse now.
        case bindings(live: Bool)
        /// The answer to `.takeLease`: held until `until`, or not (another instance holds it, or
        /// storage did not answer in time).
        case lease(held: Bool, until: Date)
        /// The final response to the last REGISTER sent (a 408 or 503 made locally included).
        case response(SIPResponse)
        /// The time asked for by `.wake(at:)` has come.
        case timer
    }

    /// What to do.
    public enum Action: Sendable, Hashable {
        /// Take or renew the extension's lease until the date (answer with `.lease`).
        case takeLease(until: Date)
        /// Give the lease up (after the unregister).
        case releaseLease
        /// Send this REGISTER to the PBX in a client transaction (Rouse's Via still to add).
        case send(SIPRequest)
        /// Call back with `.timer` at this time (replaces any earlier wake).
        case wake(at: Date)
        /// The PBX granted this many seconds.
        case registered(expires: Int)
        /// The PBX refused (or did not answer); tried again at the date.
        case failed(status: Int, reason: String, retryAt: Date)
        /// Unregistered, or standing down: nothing more to do until bindings are live again.
        case stopped
    }

    /// Where the registration is.
    public enum State: Sendable, Hashable {
        /// No live binding, or it went and the unregister is done.
        case idle
        /// Waiting for the lease.
        case awaitingLease
        /// Another instance holds the lease; tried again at `retryAt`.
        case standby(retryAt: Date)
        /// A REGISTER is out.
        case registering
        /// Registered until `expiresAt`; refreshed at `refreshAt`.
        case registered(refreshAt: Date, expiresAt: Date)
        /// The last REGISTER failed; tried again at `retryAt`.
        case failed(retryAt: Date)
        /// The Expires: 0 REGISTER is out.
        case unregistering
    }

    /// How long a lease lasts; renewed at half.
    public static let leaseLength: TimeInterval = 30
    /// The first retry after a failure, doubled up to `longestRetry`.
    public static let firstRetry: TimeInterval = 30
    public static let longestRetry: TimeInterval = 300

    public let aor: AddressOfRecord
    public let pbx: UpstreamPBX
    /// Rouse's Contact for the extension, e.g. `sip:1001@192.0.2.10:5060`, and its Path entry.
    public let contact: String
    public let pathEntry: String
    public let callID: String
    public let fromTag: String
    public private(set) var state: State = .idle
    public private(set) var cseq: UInt32 = 0
    private var live = false
    private var leaseUntil: Date?
    private var leaseRenewAt: Date?
    private var leasePending = false
    private var digest: DigestClient?
    /// The Authorization answered in the current attempt (one answer per challenge unless stale).
    private var answeredNonce: String?
    private var authorization: (name: SIPHeaderName, value: String)?
    private var failures = 0
    private var asking: Int

    public init(aor: AddressOfRecord, pbx: UpstreamPBX, contact: String, pathEntry: String, callID: String, fromTag: String) {
        self.aor = aor
        self.pbx = pbx
        self.contact = contact
        self.pathEntry = pathEntry
        self.callID = callID
        self.fromTag = fromTag
        self.asking = pbx.expires
        if let username = pbx.username, let password = pbx.password {
            digest = DigestClient(username: username, password: password, preferredAlgorithm: nil)
        }
    }

    /// True while this instance holds the lease.
    public func holdsLease(at now: Date) -> Bool { leaseUntil.map { $0 > now } ?? false }

    /// Takes one event at `now`; returns what to do, in order.
    public mutating func handle(_ event: Event, now: Date) -> [Action] {
        var actions: [Action] = []
        switch event {
        case .bindings(let isLive):
            guard isLive != live else { break }
            live = isLive
            if live {
                if case .idle = state { state = .awaitingLease; actions += askLease(now) }
            } else {
                actions += wind(now)
            }
        case .lease(let held, let until):
            leasePending = false
            actions += leaseAnswered(held: held, until: until, now: now)
        case .response(let response):
            guard response.cseq?.number == cseq else { break }
            actions += answered(response, now: now)
        case .timer:
            actions += due(now)
        }
        if let next = nextWake {
            actions.append(.wake(at: next))
        }
        return actions
    }

    /// The earliest time something is due (a refresh, a retry, a lease renewal).
    public var nextWake: Date? {
        var times: [Date] = []
        switch state {
        case .standby(let at), .failed(let at): times.append(at)
        case .registered(let at, _): times.append(at)
        default: break
        }
        if leaseUntil != nil, let renew = leaseRenewAt { times.append(renew) }
        return times.min()
    }

    // MARK: Steps

    private mutating func askLease(_ now: Date) -> [Action] {
        guard !leasePending else { return [] }
        leasePending = true
        return [.takeLease(until: now.addingTimeInterval(Self.leaseLength))]
    }

    private mutating func leaseAnswered(held: Bool, until: Date, now: Date) -> [Action] {
        guard held, until > now else {
            leaseUntil = nil
            leaseRenewAt = nil
            guard live else { return [] }
            switch state {
            case .unregistering, .idle: return []
            default:
                // Another instance has it (or storage could not say): stand by, never unregister.
                state = .standby(retryAt: now.addingTimeInterval(Self.leaseLength / 2))
                return []
            }
        }
        // Bindings went while the lease was asked for: give it straight back.
        guard live || state == .unregistering else { return [.releaseLease] }
        leaseUntil = until
        leaseRenewAt = now.addingTimeInterval(until.timeIntervalSince(now) / 2)
        guard live else { return [] }
        switch state {
        case .awaitingLease, .standby:
            return register(now, expires: asking)
        default:
            return []
        }
    }

    private mutating func due(_ now: Date) -> [Action] {
        var actions: [Action] = []
        if let renew = leaseRenewAt, renew <= now, leaseUntil != nil {
            leaseRenewAt = nil
            actions += askLease(now)
        }
        switch state {
        case .standby(let at) where at <= now:
            state = .awaitingLease
            actions += askLease(now)
        case .registered(let at, _) where at <= now && holdsLease(at: now):
            actions += register(now, expires: asking)
        case .failed(let at) where at <= now && holdsLease(at: now):
            actions += register(now, expires: asking)
        case .failed(let at) where at <= now:
            state = .awaitingLease
            actions += askLease(now)
        default:
            break
        }
        return actions
    }

    /// The last binding went: unregister when this instance registered it, else stand down.
    private mutating func wind(_ now: Date) -> [Action] {
        switch state {
        case .registered, .registering, .failed:
            guard holdsLease(at: now) else { return standDown() }
            authorization = nil
            answeredNonce = nil
            return register(now, expires: 0)
        case .unregistering:
            return []
        default:
            return standDown()
        }
    }

    private mutating func standDown() -> [Action] {
        state = .idle
        let held = leaseUntil != nil
        leaseUntil = nil
        leaseRenewAt = nil
        return (held ? [.releaseLease] : []) + [.stopped]
    }

    private mutating func answered(_ response: SIPResponse, now: Date) -> [Action] {
        let unregistering = state == .unregistering
        switch response.statusCode {
        case 100..<200:
            return []
        case 200..<300:
            failures = 0
            if unregistering || !live { return standDown() }
            let granted = grantedExpiry(response)
            guard granted > 0 else { return fail(response, now: now) }
            state = .registered(refreshAt: now.addingTimeInterval(Double(granted) / 2), expiresAt: now.addingTimeInterval(Double(granted)))
            return [.registered(expires: granted)]
        case 401, 407:
            let offered = response.headers.lines(response.statusCode == 407 ? .proxyAuthenticate : .wwwAuthenticate)
                .compactMap(DigestChallenge.init(header:))
            let nonce = offered.first?.nonce
            let stale = offered.contains { $0.stale }
            guard var client = digest, nonce != nil, nonce != answeredNonce || stale,
                let answer = client.authorization(answering: response, method: "REGISTER", uri: requestURI.description)
            else { return unregistering ? standDown() : fail(response, now: now) }
            digest = client
            answeredNonce = nonce
            authorization = answer
            return send(now, expires: unregistering ? 0 : asking)
        case 423:
            guard let minimum = response.headers[.minExpires].flatMap({ Int($0.trimmingSIPWhitespace) }), minimum > asking, !unregistering else {
                return unregistering ? standDown() : fail(response, now: now)
            }
            asking = minimum
            return register(now, expires: asking)
        default:
            return unregistering ? standDown() : fail(response, now: now)
        }
    }

    private mutating func fail(_ response: SIPResponse, now: Date) -> [Action] {
        let backoff = min(Self.firstRetry * pow(2, Double(failures)), Self.longestRetry)
        failures += 1
        let retryAfter = response.headers[.retryAfter].flatMap { Double($0.split(separator: ";").first.map(String.init)?.trimmingSIPWhitespace ?? "") }
        let retryAt = now.addingTimeInterval(retryAfter.map { min(max($0, 1), Self.longestRetry) } ?? backoff)
        state = .failed(retryAt: retryAt)
        authorization = nil
        answeredNonce = nil
        return [.failed(status: response.statusCode, reason: response.reasonPhrase, retryAt: retryAt)]
    }

    /// A fresh attempt (new challenge answers allowed), then the REGISTER.
    private mutating func register(_ now: Date, expires: Int) -> [Action] {
        answeredNonce = nil
        authorization = nil
        return send(now, expires: expires)
    }

    private mutating func send(_ now: Date, expires: Int) -> [Action] {
        cseq += 1
        state = expires == 0 ? .unregistering : .registering
        return [.send(request(expires: expires))]
    }

    // MARK: The REGISTER

    /// `sip:<pbx domain>` (RFC 3261 §10.2: the registrar's domain, no user part).
    public var requestURI: SIPURI {
        SIPURI(scheme: .sip, host: pbx.domain, port: pbx.domain == pbx.host && pbx.port != 5060 ? pbx.port : nil)
    }

    /// The REGISTER as it stands now (without Rouse's Via, which the shell adds for the flow).
    public func request(expires: Int) -> SIPRequest {
        let address = "<sip:\(aor.number)@\(pbx.domain)>"
        var headers: SIPHeaders = [
            ("Max-Forwards", "70"),
            ("From", "\(address);tag=\(fromTag)"),
            ("To", address),
            ("Call-ID", callID),
            ("CSeq", "\(cseq) REGISTER"),
            ("Contact", "<\(contact)>"),
            ("Expires", String(expires)),
        ]
        if pbx.usesPath {
            headers.add(.supported, "path")
            headers.add(.path, "<\(pathEntry)>")
        }
        if let authorization { headers.add(authorization.name, authorization.value) }
        headers.add(.userAgent, "Rouse gateway")
        headers.add(.contentLength, "0")
        return SIPRequest(method: .register, uri: requestURI, headers: headers)
    }

    /// What the PBX granted: the `expires` of its Contact that is Rouse's, else its Expires, else
    /// what was asked (RFC 3261 §10.2.4).
    func grantedExpiry(_ response: SIPResponse) -> Int {
        let ours = try? SIPURI(parsing: contact)
        for case .address(let address) in response.contacts ?? [] where address.uri == ours {
            if let expires = address.expires { return expires }
        }
        return response.expires ?? asking
    }
}

/// Where gateway mode's leases are kept (PostgreSQL's `PostgresGatewayLeases` in production):
/// which instance registers an extension upstream. Implementations are thread-safe and answer
/// within a deadline of their own (an error then: the caller takes the lease as not held).
public protocol GatewayLeases: Sendable {
    /// Takes or renews the lease of `aor` for `seconds`; true when this instance holds it now.
    func take(_ aor: AddressOfRecord, for seconds: Double) async throws -> Bool
    /// Gives the lease of `aor` up, if this instance holds it.
    func release(_ aor: AddressOfRecord) async throws
}
