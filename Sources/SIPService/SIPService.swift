public import CallRouting
public import Crypto
import Dispatch
public import Foundation
public import Metrics
public import Registrar
public import RouseLog
import RouseVocabulary
public import SIPMessage
import SIPDNS
import SIPProxy
public import SIPTransaction
public import SIPTransport

/// The SIP side of Rouse, wired as architecture.md draws it: sockets (SIPTransportLayer) → parser
/// → transactions (TransactionLayer) → the handlers. It needs no database, so benchmarks and
/// tests can run it alone.
///
/// Threading: inbound work runs on the transport's loop threads (`settings.threads` of them, each
/// message on the loop of its flow, several at once) and never blocks there (parsing and the
/// handlers here are pure computation); timers run on a serial queue of their own.
public final class SIPService: Sendable {
    let transport: SIPTransportLayer
    let transactions: TransactionLayer<FlowID>
    let selfHandler: SelfRequestHandler
    private let limits: SIPParserLimits
    let logger: Logger
    private let timerQueue = DispatchQueue(label: "rouse.sip.timers")
    let registrar: Registrar?
    /// `rouse_sip_rate_limited_total`, when metrics are kept.
    private let rateLimited: MetricsRegistry.Counter?
    /// `rouse_register_total{result}`, when metrics are kept: a series per result (`registerResult`).
    private let registerResults: [String: MetricsRegistry.Counter.Series]
    /// Names this process in binding flows, so a restarted or other instance knows a connection
    /// recorded there is not its own.
    public let instanceID: String
    let connections = ConnectionTable()
    let localAddresses = ListenAddresses()
    /// Handles INVITEs for extensions when given; without it they get 405 (benchmarks of the
    /// registrar alone).
    let coordinator: CallCoordinator<SIPService>?
    /// Gateway mode: the upstream registrations at the PBX, and its OPTIONS and NOTIFYs (nil: off).
    let gateway: UpstreamGateway?
    /// Rouse's Route, Record-Route and Via, and where requests inside dialogs go (RFC 3261 §16):
    /// the names of this server and the key of its flow tokens (shared by every instance, so one
    /// instance can route through another's flows and nobody else can forge them).
    let proxy: ProxyCore
    /// Signs the INVITEs this instance forwards through another and checks those others forward
    /// here (a secret shared by every instance, so the trust is proven, never taken from an address).
    let forwardProofs: ForwardProofs
    /// INVITEs forwarded statefully outside the coordinator (through this instance's flow for
    /// another instance), by the server transaction they came in, for the caller's CANCEL.
    let forwardedInvites = Locked(ForwardedInvites<ServerTransactionHandle>())
    /// Drops what a source sends beyond `sip_rate_limit` messages a second (nil: no limit).
    let rateLimiter: SourceRateLimiter?
    /// Set when Rouse is stopping: new transactions outside a dialog get 503.
    let draining = DrainingFlag()
    private let tls: TLSConfiguration?
    /// Resolves outside routes' hops (RFC 3263), with its own cache.
    let resolver: DNSResolver

    /// - Parameter settings: where it listens, its names, TLS, limits, timers and Server header.
    /// - Parameter registrar: handles REGISTER when given; without it REGISTER gets 405.
    /// - Parameter metrics: counts REGISTERs by result when given.
    /// - Parameter coordinator: handles calls to extensions when given (it is attached to this service).
    /// - Parameter flowTokenKey: the key that signs flow tokens (shared by every instance).
    /// - Parameter forwardSecret: the secret of the proofs on INVITEs forwarded between instances
    ///   (shared by every instance).
    public init(
        settings: SIPServiceSettings, logger: Logger, registrar: Registrar? = nil, instanceID: String = UUID().uuidString,
        metrics: MetricsRegistry? = nil, coordinator: CallCoordinator<SIPService>? = nil, flowTokenKey: [UInt8] = SecureRandom.bytes(32),
        forwardSecret: [UInt8] = SecureRandom.bytes(32), gateway: UpstreamGateway? = nil
    ) {
        self.registrar = registrar
        self.gateway = gateway
        self.coordinator = coordinator
        self.forwardProofs = ForwardProofs(secret: forwardSecret)
        let ownNames = SIPService.ownNames(listen: settings.listen, aliases: settings.aliases)
        self.proxy = ProxyCore(instanceID: instanceID, ownNames: ownNames, flowTokenKey: flowTokenKey)
        let registerTotal = metrics?.counter(
            "rouse_register_total", help: "REGISTER requests answered by the registrar, by result (ok, challenged, refused, throttled, error).")
        self.registerResults = Dictionary(uniqueKeysWithValues: ["ok", "challenged", "refused", "throttled", "error"].compactMap { result in
            registerTotal.map { (result, $0.series(["result": result])) }
        })
        self.instanceID = instanceID
        self.rateLimited = metrics?.counter(
            "rouse_sip_rate_limited_total", help: "SIP messages dropped because their source sent more than sip_rate_limit a second.")
        self.limits = settings.limits.framing
        self.logger = logger
        let tls = settings.tls
        self.tls = tls
        self.rateLimiter = settings.rateLimit > 0 ? SourceRateLimiter(rate: Double(settings.rateLimit)) : nil
        self.resolver = DNSResolver(servers: settings.dnsServers)
        let limits = settings.limits

        // The transport and the transaction layer call each other; `Wiring` breaks the cycle.
        let wiring = Wiring()
        transport = SIPTransportLayer(
            listen: settings.listen, tls: tls, limits: limits, loops: settings.threads,
            onPacket: { packet in wiring.service?.receive(packet) },
            onFlowClosed: { flow, _ in
                wiring.service?.connections.remove(flow)
                wiring.service?.transactions.transportFailed(on: flow)
            })
        transactions = TransactionLayer<FlowID>(
            timers: settings.timers,
            scheduler: HeapTimerScheduler(queue: timerQueue),
            send: { bytes, flow in wiring.service?.send(bytes, over: flow) },
            core: { event in wiring.service?.handle(event) })
        var methods: [SIPMethod] = registrar == nil ? [.options] : [.options, .register]
        if coordinator != nil { methods += [.invite, .ack, .cancel, .bye] }
        selfHandler = SelfRequestHandler(
            allowedMethods: methods,
            supportedExtensions: ["path", "outbound"],
            ownNames: ownNames,
            serverName: settings.serverName)
        wiring.service = self
        coordinator?.attach(self)
        gateway?.attach(self)
    }

    /// Binds the listen points and starts serving.
    public func start() throws(SIPTransportError) {
        try transport.start()
        gateway?.serviceStarted()
    }

    /// The points actually bound (port 0 resolved to the port the kernel chose).
    public var listeningPoints: [ListenPoint] { transport.boundPoints }

    /// Stops taking new transactions outside a dialog (they get 503 with Retry-After); requests in
    /// dialogs, ACKs, CANCELs and responses still pass, so calls in progress can finish.
    public func beginDraining() {
        draining.set()
    }

    /// Loads the TLS certificate and key again for new connections (SIGHUP).
    public func reloadTLS() throws(SIPTransportError) {
        guard let tls else { return }
        try transport.reloadTLS(certificatePath: tls.certificatePath, privateKeyPath: tls.privateKeyPath)
    }

    /// Closes every socket and stops the loop thread.
    public func shutdown() {
        transport.shutdown()
    }

    /// Transactions not yet terminated.
    public var activeTransactionCount: Int { transactions.activeTransactionCount }

    // MARK: Inbound

    func receive(_ packet: InboundPacket) {
        if let rateLimiter, !rateLimiter.allow(packet.source.ip) {
            rateLimited?.increment()
            return
        }
        let message: SIPMessage
        do {
            message = try SIPParser.parse(packet.bytes, limits: limits)
        } catch {
            // RFC 3261 §8.2.6 / §18.1.2: answer a bad request when a response can be formed,
            // drop a bad response; either way the flow keeps serving.
            if let response = error.response() {
                transport.send(SIPSerializer.serialize(response), over: packet.flow)
            }
            logger.info(
                "sip.malformed",
                ["peer": packet.source.description, "transport": packet.transport.rawValue,
                 "status": String(error.statusCode), "reason": error.reason])
            return
        }
        if packet.isReliable { connections.note(packet) }
        // Consumed: the request's lines are then its own, and noting the source in its top Via
        // changes them in place instead of copying them all first.
        switch consume message {
        case .request(var request):
            let topVia = SIPService.recordSource(of: packet, in: &request)
            transactions.receive(request, topVia: topVia, from: packet.flow, isReliable: packet.isReliable)
        case .response(let response):
            transactions.receive(.response(response), from: packet.flow, isReliable: packet.isReliable)
        }
    }

    /// RFC 3261 §18.2.1 and RFC 3581 §4: note in the top Via where the request really came from,
    /// so responses go back to that address and port (the flow does the same for TCP/TLS). The
    /// top Via is parsed here once and returned as it now stands (nil when there is none), so
    /// the transaction layer matches on it without parsing it again; the two parameters are
    /// spliced into the Via line's bytes (its other bytes, elements and the other lines untouched).
    @discardableResult
    static func recordSource(of packet: InboundPacket, in request: inout SIPRequest) -> SIPVia? {
        guard var via = request.topVia else { return nil }
        let sourceIP = packet.source.ip
        let wantsRport = via.parameters.contains("rport")
        guard wantsRport || !sentByHost(via.host, equals: sourceIP) else { return via }
        let port = packet.source.port
        via.parameters.set("received", sourceIP)
        if wantsRport { via.parameters.set("rport", String(port)) }
        request.headers.noteSourceInTopVia(received: sourceIP, rport: wantsRport ? Int(port) : nil)
        return via
    }

    /// Whether a Via's sent-by host (an IPv6 reference in brackets) is the source IP, compared
    /// case-insensitively without building lowered copies.
    static func sentByHost(_ host: String, equals ip: String) -> Bool {
        let utf8 = host.utf8
        guard utf8.first == UInt8(ascii: "["), utf8.last == UInt8(ascii: "]"), utf8.count >= 2 else {
            return host.caseInsensitiveEquals(ip)
        }
        return String(Substring(host.dropFirst().dropLast())).caseInsensitiveEquals(ip)
    }

    func handle(_ event: TransactionLayerEvent<FlowID>) {
        switch event {
        case .request(let request, let handle, let flow):
            if draining.isSet, request.to?.tag == nil, request.method != .cancel {
                var unavailable = SIPResponse(replyingTo: request, statusCode: 503, reasonPhrase: "Service Unavailable (stopping)", toTag: SIPService.makeTag())
                unavailable.headers.add(.retryAfter, "5")
                unavailable.headers.add(.server, selfHandler.serverName)
                transactions.respond(unavailable, to: handle)
            } else if request.method == .register, let registrar {
                registrar.handleRegister(request, flow: bindingFlow(flow, request: request)) { [weak self] response in
                    if response.statusCode == 200, flow.isReliable { self?.connections.remember(flow) }
                    self?.registerResults[SIPService.registerResult(response)]?.increment()
                    self?.transactions.respond(response, to: handle)
                }
            } else if request.method == .cancel {
                answerCancel(request, handle)
            } else if route(request, handle, arrivedOn: flow) {
                // Proxied: a call to an extension, or a request inside a dialog Rouse record-routed.
            } else if let response = gateway?.answer(request, from: sourceIP(of: flow), ownNames: selfHandler.ownNames, serverName: selfHandler.serverName) {
                transactions.respond(response, to: handle)
            } else if let response = selfHandler.respond(to: request, toTag: SIPService.makeTag()) {
                transactions.respond(response, to: handle)
            }
        case .ack(let request, let flow):
            // An ACK for a 2xx travels end to end along the dialog's route set (RFC 3261 §13.2.2.4).
            routeACK(request, arrivedOn: flow)
        case .strayResponse:
            // §16.7: a response matching no client transaction is dropped (a 2xx retransmission
            // after the transaction ended has already been relayed once).
            break
        case .serverTransactionFailed(let handle, let failure):
            logger.debug("sip.transaction_failed", ["transaction": handle.description, "why": "\(failure)"])
        }
    }

    /// RFC 3261 §9.2 and §16.10: a CANCEL that matches an INVITE transaction gets 200, one that
    /// matches none gets 481; the call it cancels then ends (487 to the caller, CANCEL to every
    /// branch).
    private func answerCancel(_ cancel: SIPRequest, _ handle: ServerTransactionHandle) {
        let invite = transactions.inviteTransaction(cancelledBy: cancel)
        var response = SIPResponse(replyingTo: cancel, statusCode: invite == nil ? 481 : 200, toTag: SIPService.makeTag())
        response.headers.add(.server, selfHandler.serverName)
        transactions.respond(response, to: handle)
        guard let invite else { return }
        if let forwarded = forwardedInvites.withLock({ $0.cancel(invite, reason: cancel.headers[.reason]) }) {
            sendCancel(forwarded.cancel, over: forwarded.flow)
        } else {
            coordinator?.handleCancel(of: invite, callID: cancel.callID, reason: cancel.headers[.reason])
        }
    }

    /// What a binding must remember of the flow a REGISTER came over (RFC 5626 §5.2).
    /// The `result` label of a registrar's answer: 200 ok, 401 challenged, the throttle's 503
    /// throttled, other 5xx error (storage), anything else refused.
    static func registerResult(_ response: SIPResponse) -> String {
        switch response.statusCode {
        case 200: return "ok"
        case 401: return "challenged"
        case 503 where response.reasonPhrase == RegistrarCore.throttledReasonPhrase: return "throttled"
        case 500...599: return "error"
        default: return "refused"
        }
    }

    func bindingFlow(_ flow: FlowID, request: SIPRequest) -> BindingFlow {
        // Only TCP/TLS connections are in the table (`ConnectionTable.note`): a UDP flow is its peer.
        let (source, local) = flow.isReliable ? connections.endpoints(of: flow) ?? (flow.datagramPeer, nil) : (flow.datagramPeer, nil)
        let address = local.map(localAddresses.address) ?? localAddresses.firstAddress(of: flow.transport) { listeningPoints }
        return BindingFlow(
            transport: flow.transport, source: source, connectionID: FlowConnectionID(flow.description),
            local: address, instanceID: instanceID)
    }

    /// Whether a binding can be reached now, from this instance: over its own flow (a UDP flow
    /// stays usable, even across a restart; a TCP/TLS connection must still be open here). A
    /// binding whose connection has gone is unreachable until the phone registers again: it is
    /// never tried some other way.
    public func isReachable(_ binding: Binding) -> Bool {
        flow(for: binding) != nil
    }

    /// The flow to reach a binding over, if it can be reached from here: a UDP binding over the
    /// same local UDP point to the same peer, a TCP/TLS binding over its connection if this
    /// instance holds it and it is open.
    func flow(for binding: Binding) -> FlowID? {
        if binding.flow.transport == .udp {
            guard let address = binding.flow.local, let peer = binding.flow.source else { return nil }
            let local = ListenPoint(transport: .udp, host: address.ip, port: address.port)
            guard listeningPoints.contains(local) else { return nil }
            return transport.datagramFlow(from: local, to: peer)
        }
        guard binding.flow.instanceID == instanceID, let flow = connections.flow(named: binding.flow.connectionID) else { return nil }
        if flow.isReliable, !transport.flowIsOpen(flow) { return nil }
        return flow
    }

    /// Sends a request to a registered device over the flow its REGISTER came in on (RFC 5626
    /// §5.3), in a client transaction. Adds Rouse's Via (with a fresh branch) and a Route for each
    /// Path the binding recorded (RFC 3327 §5.3). Returns false, sending nothing, when the binding
    /// is unreachable.
    @discardableResult
    public func sendRequest(
        _ request: SIPRequest, to binding: Binding, onResponse: @escaping @Sendable (ClientTransactionEvent) -> Void
    ) -> Bool {
        guard let flow = flow(for: binding) else { return false }
        var outgoing = request
        for path in binding.path.reversed() { outgoing.headers.prepend(.route, path) }
        addVia(to: &outgoing, over: flow)
        do {
            try transactions.sendRequest(outgoing, over: flow, isReliable: flow.isReliable, onResponse: onResponse)
            return true
        } catch {
            logger.warning("sip.send_failed", ["binding": binding.id.uuidString, "error": "\(error)"])
            return false
        }
    }

    // MARK: Outbound

    func send(_ message: SIPMessage, over flow: FlowID) {
        send(SIPSerializer.serialize(message), over: flow)
    }

    /// Sends a message's bytes; a failed send is a transport error for the flow's transactions.
    func send(_ bytes: [UInt8], over flow: FlowID) {
        transport.send(bytes, over: flow) { [weak self] result in
            if case .failure = result { self?.transactions.transportFailed(on: flow) }
        }
    }

    // MARK: Helpers

    static func makeTag() -> String {
        var generator = SystemRandomNumberGenerator()
        return String(generator.next() as UInt64, radix: 36) + String(generator.next() as UInt32, radix: 36)
    }

    /// The names a Request-URI may use for this server: its listening addresses (every interface
    /// address when it listens on a wildcard), `localhost`, the host name and configured aliases.
    public static func ownNames(listen: [ListenPoint], aliases: [String]) -> Set<String> {
        var names: Set<String> = ["localhost", "127.0.0.1", "[::1]"]
        names.formUnion(aliases.map { $0.lowercased() })
        if let host = ProcessInfo.processInfo.hostName.split(separator: ".").first {
            names.insert(String(host).lowercased())
        }
        names.insert(ProcessInfo.processInfo.hostName.lowercased())
        var wildcard = false
        for point in listen {
            if point.host == "0.0.0.0" || point.host == "::" { wildcard = true }
            names.insert(point.isIPv6 ? "[\(point.host.lowercased())]" : point.host)
        }
        if wildcard { names.formUnion(InterfaceAddresses.all().map { $0.contains(":") ? "[\($0)]" : $0 }) }
        return names
    }
}

/// The open TCP/TLS connections this service has heard from: their peer and listen point, and
/// their flow by name (a binding records the name). Thread-safe behind a lock; bounded by the
/// transport's connection limit, since closed connections are removed.
final class ConnectionTable: @unchecked Sendable {
    // @unchecked: both dictionaries are only touched under `lock`.
    private let lock = NSLock()
    private var endpointsByFlow: [FlowID: (SocketAddress, ListenPoint)] = [:]
    private var flowsByName: [FlowConnectionID: FlowID] = [:]

    func note(_ packet: InboundPacket) {
        lock.lock()
        defer { lock.unlock() }
        if endpointsByFlow[packet.flow] == nil {
            endpointsByFlow[packet.flow] = (packet.source, packet.local)
            flowsByName[FlowConnectionID(packet.flow.description)] = packet.flow
        }
    }

    /// Keeps a flow findable by name after a successful REGISTER over it (UDP flows included,
    /// which have no connection to note).
    func remember(_ flow: FlowID) {
        lock.lock()
        defer { lock.unlock() }
        flowsByName[FlowConnectionID(flow.description)] = flow
    }

    func remove(_ flow: FlowID) {
        lock.lock()
        defer { lock.unlock() }
        endpointsByFlow[flow] = nil
        flowsByName[FlowConnectionID(flow.description)] = nil
    }

    func endpoints(of flow: FlowID) -> (SocketAddress?, ListenPoint?)? {
        lock.lock()
        defer { lock.unlock() }
        return endpointsByFlow[flow].map { ($0.0, $0.1) }
    }

    func flow(named name: FlowConnectionID) -> FlowID? {
        lock.lock()
        defer { lock.unlock() }
        return flowsByName[name]
    }
}

/// The socket address of each listen point a binding records as its local end, canonicalised
/// once (`SocketAddress(ip:port:)`) instead of on every REGISTER. Thread-safe behind a lock; one
/// entry per point seen, so bounded by the points and the local addresses connections arrive on.
final class ListenAddresses: @unchecked Sendable {
    // @unchecked: `addresses` is only touched under `lock`.
    private let lock = NSLock()
    private var addresses: [ListenPoint: SocketAddress?] = [:]

    /// The address of the first bound point of each transport (the local end of a UDP binding),
    /// kept once the points are bound: a REGISTER reads it without copying or hashing the points.
    private var firstByTransport: [SIPTransportKind: SocketAddress?] = [:]

    /// The point's address; nil when its host is not an IP literal.
    func address(_ point: ListenPoint) -> SocketAddress? {
        lock.lock()
        defer { lock.unlock() }
        return addressHoldingLock(point)
    }

    /// The address of the first of `bound` (the points bound now) of `transport`; nil when none is
    /// bound or its host is not an IP literal.
    func firstAddress(of transport: SIPTransportKind, bound: () -> [ListenPoint]) -> SocketAddress? {
        lock.lock()
        defer { lock.unlock() }
        if let known = firstByTransport[transport] { return known }
        let points = bound()
        guard !points.isEmpty else { return nil }
        let address = points.first { $0.transport == transport }.flatMap(addressHoldingLock)
        firstByTransport[transport] = .some(address)
        return address
    }

    private func addressHoldingLock(_ point: ListenPoint) -> SocketAddress? {
        if let known = addresses[point] { return known }
        let address = try? SocketAddress(ip: point.host, port: point.port)
        addresses[point] = .some(address)
        return address
    }
}

/// A flag set once, read from any thread. Thread-safe behind a lock.
final class DrainingFlag: @unchecked Sendable {
    // @unchecked: `value` is only touched under `lock`.
    private let lock = NSLock()
    private var value = false

    func set() {
        lock.lock()
        value = true
        lock.unlock()
    }

    var isSet: Bool {
        lock.lock()
        defer { lock.unlock() }
        return value
    }
}

/// Lets closures handed to the transport and the transaction layer reach the service that owns
/// them, which does not exist yet when they are made.
private final class Wiring: @unchecked Sendable {
    // @unchecked: `service` is written once, in SIPService.init, before the transport starts and
    // before any closure can run; afterwards it is only read.
    weak var service: SIPService?
}
