/// A SIP transport a next hop can be reached over.
public enum SIPHopTransport: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case udp, tcp, tls

    public var description: String { rawValue }

    /// The port a host without one is reached on (RFC 3261 §19.1.2).
    public var defaultPort: UInt16 { self == .tls ? 5061 : 5060 }

    /// The NAPTR service field (RFC 3263 §4.1) that names this transport.
    var naptrService: String {
        switch self {
        case .udp: return "SIP+D2U"
        case .tcp: return "SIP+D2T"
        case .tls: return "SIPS+D2T"
        }
    }

    /// The SRV name prefix (RFC 3263 §4.1: `_sip._udp`, `_sip._tcp`, `_sips._tcp`).
    var srvPrefix: String {
        switch self {
        case .udp: return "_sip._udp"
        case .tcp: return "_sip._tcp"
        case .tls: return "_sips._tcp"
        }
    }
}

/// What a next hop is before resolution: the host of a URI or route, with what it says of port and
/// transport (RFC 3263 §4 reads `sip:trunk.example.com`, `sip:trunk.example.com;transport=tcp`,
/// `sips:…`, `sip:198.51.100.7:5080`).
public struct SIPServerTarget: Sendable, Hashable, CustomStringConvertible {
    /// A domain name or an IP literal (IPv6 without brackets).
    public var host: String
    public var port: UInt16?
    public var transport: SIPHopTransport?
    /// `sips:`: only TLS will do.
    public var secure: Bool

    public init(host: String, port: UInt16? = nil, transport: SIPHopTransport? = nil, secure: Bool = false) {
        var host = host
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        self.host = host.lowercased()
        self.port = port
        // `sips:…;transport=tcp` is TLS over TCP; without a transport, NAPTR still decides (§4.1).
        self.transport = secure && transport != nil ? .tls : transport
        self.secure = secure
    }

    public var description: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return shownHost + (port.map { ":\($0)" } ?? "") + (transport.map { ";transport=\($0)" } ?? "")
    }

    /// Whether `host` is an IPv4 or IPv6 literal rather than a name.
    public var hostIsAddress: Bool {
        if host.contains(":") { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { part in UInt8(part) != nil }
    }
}

/// One place a request can be sent: an IP literal, a port and a transport, in the order to try.
public struct ResolvedHop: Sendable, Hashable, CustomStringConvertible {
    public var transport: SIPHopTransport
    public var ip: String
    public var port: UInt16
    /// The name the address was found for (for TLS, the name the certificate must carry).
    public var host: String

    public init(transport: SIPHopTransport, ip: String, port: UInt16, host: String) {
        self.transport = transport
        self.ip = ip
        self.port = port
        self.host = host
    }

    public var description: String { "\(ip.contains(":") ? "[\(ip)]" : ip):\(port);transport=\(transport)" }
}

/// RFC 3263 §4 as a value: it says which DNS questions to ask, takes their answers, and ends with
/// the ordered hops to try (§4.3: the next one after a transport error or a 503). NAPTR first when
/// neither port nor transport is given, then SRV (ordered by priority, weighted within one, RFC
/// 2782), then A and AAAA; an IP literal needs no DNS at all. It never touches the network, so its
/// tests feed it answers; `DNSResolver.locate` is the shell that asks them. Not thread-safe (a value).
public struct SIPServerLocator: Sendable {
    /// What the owner does next.
    public enum Action: Sendable, Hashable {
        /// Ask these questions (all of them; each answer comes back through `answer`).
        case lookUp([DNSQuestion])
        /// Done: the hops in the order to try; empty when nothing was found.
        case located([ResolvedHop])
    }

    /// A service to look up by SRV, or a name to look up by A/AAAA, with its transport.
    private struct Candidate: Sendable, Hashable {
        var name: String
        var port: UInt16
        var transport: SIPHopTransport
    }

    private enum Phase: Sendable {
        case idle
        case naptr
        /// SRV names in the order their NAPTRs (or the client's preference) put them.
        case srv([(name: String, transport: SIPHopTransport)])
        /// Names to resolve to addresses, in order.
        case addresses([Candidate])
        case done
    }

    public let target: SIPServerTarget
    public let supported: [SIPHopTransport]
    private var phase: Phase = .idle
    private var pending: Set<DNSQuestion> = []
    private var answered: [DNSQuestion: [DNSRecord]] = [:]
    /// A/AAAA records that came in additional sections, by name (saves a round trip).
    private var glue: [String: [String]] = [:]
    private var random: SplitMix64

    /// - Parameters:
    ///   - supported: the transports Rouse can send over, in its order of preference.
    ///   - seed: seeds the weighted SRV choice (RFC 2782); tests pass a fixed one.
    public init(target: SIPServerTarget, supported: [SIPHopTransport] = SIPHopTransport.allCases, seed: UInt64) {
        self.target = target
        self.supported = target.secure ? supported.filter { $0 == .tls } : supported
        self.random = SplitMix64(seed: seed)
    }

    /// The first step.
    public mutating func start() -> Action {
        let defaultTransport = target.transport ?? (target.secure ? .tls : .udp)
        if target.hostIsAddress {
            phase = .done
            guard supported.contains(defaultTransport) else { return .located([]) }
            return .located([ResolvedHop(transport: defaultTransport, ip: target.host, port: target.port ?? defaultTransport.defaultPort, host: target.host)])
        }
        if let port = target.port {
            return resolveAddresses([Candidate(name: target.host, port: port, transport: defaultTransport)])
        }
        if let transport = target.transport {
            return lookUpServices([("\(transport.srvPrefix).\(target.host)", transport)])
        }
        phase = .naptr
        return ask([DNSQuestion(target.host, .naptr)])
    }

    /// The answer to one question asked: every record of the response (answers and additional);
    /// empty when the name does not exist, the server failed or did not answer in time.
    public mutating func answer(_ question: DNSQuestion, records: [DNSRecord]) -> Action? {
        guard pending.remove(question) != nil else { return nil }
        answered[question] = records.filter { $0.type == question.type || ($0.type == .cname) }
        for record in records {
            if case .address(let ip) = record.data, record.type == .a || record.type == .aaaa {
                glue[record.name, default: []].append(ip)
            }
        }
        guard pending.isEmpty else { return nil }
        switch phase {
        case .naptr: return naptrAnswered(answered[DNSQuestion(target.host, .naptr)] ?? [])
        case .srv(let services): return servicesAnswered(services)
        case .addresses(let candidates): return addressesAnswered(candidates)
        case .idle, .done: return nil
        }
    }

    private mutating func ask(_ questions: [DNSQuestion]) -> Action {
        pending = Set(questions)
        return .lookUp(questions)
    }

    /// §4.1: the NAPTRs of transports Rouse supports, in order and preference; without any, an SRV
    /// query per supported transport.
    private mutating func naptrAnswered(_ records: [DNSRecord]) -> Action {
        var chosen: [(order: UInt16, preference: UInt16, name: String, transport: SIPHopTransport)] = []
        for record in records {
            guard case .naptr(let order, let preference, let flags, let service, _, let replacement) = record.data,
                flags.lowercased() == "s", !replacement.isEmpty,
                let transport = supported.first(where: { $0.naptrService == service.uppercased() })
            else { continue }
            chosen.append((order, preference, replacement, transport))
        }
        chosen.sort { ($0.order, $0.preference) < ($1.order, $1.preference) }
        if chosen.isEmpty {
            return lookUpServices(supported.map { ("\($0.srvPrefix).\(target.host)", $0) })
        }
        return lookUpServices(chosen.map { ($0.name, $0.transport) })
    }

    private mutating func lookUpServices(_ services: [(name: String, transport: SIPHopTransport)]) -> Action {
        phase = .srv(services)
        var questions: [DNSQuestion] = []
        for service in services where !questions.contains(DNSQuestion(service.name, .srv)) {
            questions.append(DNSQuestion(service.name, .srv))
        }
        return ask(questions)
    }

    /// §4.2: the SRV targets in priority order, weighted within a priority; none at all falls back
    /// to the host's own addresses on the default port.
    private mutating func servicesAnswered(_ services: [(name: String, transport: SIPHopTransport)]) -> Action {
        var candidates: [Candidate] = []
        for service in services {
            var records: [(priority: UInt16, weight: UInt16, port: UInt16, target: String)] = []
            for record in answered[DNSQuestion(service.name, .srv)] ?? [] {
                if case .srv(let priority, let weight, let port, let target) = record.data, !target.isEmpty {
                    records.append((priority, weight, port, target))
                }
            }
            for record in weightedOrder(records) {
                candidates.append(Candidate(name: record.target, port: record.port, transport: service.transport))
            }
        }
        if candidates.isEmpty {
            let transport = target.transport ?? services.first?.transport ?? (target.secure ? .tls : .udp)
            candidates = [Candidate(name: target.host, port: transport.defaultPort, transport: transport)]
        }
        return resolveAddresses(candidates)
    }

    private mutating func resolveAddresses(_ candidates: [Candidate]) -> Action {
        phase = .addresses(candidates)
        var questions: [DNSQuestion] = []
        for candidate in candidates where glue[candidate.name] == nil {
            for type in [DNSRecordType.a, .aaaa] where !questions.contains(DNSQuestion(candidate.name, type)) {
                questions.append(DNSQuestion(candidate.name, type))
            }
        }
        if questions.isEmpty { return addressesAnswered(candidates) }
        return ask(questions)
    }

    /// IPv4 before IPv6 for each name, names in the order found, every hop once.
    private mutating func addressesAnswered(_ candidates: [Candidate]) -> Action {
        phase = .done
        var hops: [ResolvedHop] = []
        for candidate in candidates {
            var addresses: [String] = []
            for type in [DNSRecordType.a, .aaaa] {
                for record in answered[DNSQuestion(candidate.name, type)] ?? [] {
                    if case .address(let ip) = record.data, record.type == type { addresses.append(ip) }
                }
            }
            if addresses.isEmpty { addresses = glue[candidate.name] ?? [] }
            for ip in addresses {
                let hop = ResolvedHop(transport: candidate.transport, ip: ip, port: candidate.port, host: candidate.name)
                if !hops.contains(hop) { hops.append(hop) }
            }
        }
        return .located(hops)
    }

    /// RFC 2782: lowest priority first; within one priority, a weighted random order (zero-weight
    /// records first in the running sum, so they are chosen rarely but can be).
    private mutating func weightedOrder(_ records: [(priority: UInt16, weight: UInt16, port: UInt16, target: String)]) -> [(priority: UInt16, weight: UInt16, port: UInt16, target: String)] {
        var ordered: [(priority: UInt16, weight: UInt16, port: UInt16, target: String)] = []
        for priority in Set(records.map(\.priority)).sorted() {
            var group = records.filter { $0.priority == priority }.sorted { $0.weight < $1.weight }
            while !group.isEmpty {
                let total = group.reduce(0) { $0 + Int($1.weight) }
                let pick = total == 0 ? 0 : Int(random.next() % UInt64(total + 1))
                var running = 0
                var chosen = group.count - 1
                for (index, record) in group.enumerated() {
                    running += Int(record.weight)
                    if running >= pick {
                        chosen = index
                        break
                    }
                }
                ordered.append(group.remove(at: chosen))
            }
        }
        return ordered
    }
}

/// A small seeded generator (SplitMix64) for the SRV weights: reproducible in tests, and nothing
/// there needs to be unpredictable.
struct SplitMix64: Sendable {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
