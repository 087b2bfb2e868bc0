import CallRouting
import Dispatch
public import Foundation
public import Registrar
public import RouseLog
import RouseVocabulary
public import SIPMessage
import SIPProxy
import SIPTransaction
import SIPTransport

/// Gateway mode (issue 19): Rouse in front of a PBX that keeps its dialplan and voicemail. For
/// each extension of an organisation with a PBX (`gateway_pbx`) that has a live binding in Rouse,
/// one instance (the lease holder) registers a Contact of Rouse's own at the PBX
/// (`UpstreamRegistration`, the value that decides); calls the PBX sends to that Contact reach the
/// call coordinator like any trusted peer's. The PBX's qualify OPTIONS to the Contact are answered
/// 200 while the extension has a live binding (a sleeping app's push binding included), and its
/// message-waiting NOTIFYs (RFC 3842) are accepted and delivered when the app is back: the latest
/// summary of each extension is held in memory (at most `heldSummaryLimit` extensions, the oldest
/// dropped first), until a binding of the extension answers it 2xx.
///
/// Threading: the registrations, their timers and the held summaries are owned by one serial queue
/// (`rouse.gateway`); the public methods only enqueue and never block. REGISTERs go in client
/// transactions of the SIP service; leases are taken off the queue (`GatewayLeases`, its deadline)
/// and the answer comes back onto it.
public final class UpstreamGateway: @unchecked Sendable {
    // @unchecked: every var below is only touched on `queue`.
    private let queue = DispatchQueue(label: "rouse.gateway")
    private let pbxs: [String: UpstreamPBX]
    private let registrar: Registrar
    private let leases: any GatewayLeases
    private let logger: Logger
    private let clock: @Sendable () -> Date
    private weak var service: SIPService?
    private var registrations: [AddressOfRecord: UpstreamRegistration] = [:]
    private var timers: [AddressOfRecord: DispatchWorkItem] = [:]
    private var held: [AddressOfRecord: HeldSummary] = [:]
    /// Most extensions whose message summary is held for a sleeping app.
    public static let heldSummaryLimit = 10_000

    /// A message-waiting NOTIFY held for an app that was asleep when it came.
    struct HeldSummary {
        var notify: SIPRequest
        var receivedAt: Date
    }

    /// - Parameter pbxs: the PBX of each gateway organisation.
    /// - Parameter leases: where the leases are kept (every instance shares them).
    public init(
        pbxs: [UpstreamPBX], registrar: Registrar, leases: any GatewayLeases, logger: Logger, clock: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.pbxs = Dictionary(pbxs.map { ($0.organisation, $0) }) { first, _ in first }
        self.registrar = registrar
        self.leases = leases
        self.logger = logger
        self.clock = clock
    }

    /// Joins the SIP service that sends the REGISTERs.
    func attach(_ service: SIPService) {
        queue.async { [self] in self.service = service }
    }

    /// Looks at every extension of the gateway organisations once (bindings loaded at start),
    /// when the service's listen points are bound.
    func serviceStarted() {
        queue.async { [self] in
            for aor in registrar.directorySnapshot().extensions.keys where pbxs[aor.domain] != nil {
                update(aor)
            }
        }
    }

    /// An extension's bindings changed (here or on another instance).
    public func bindingsChanged(_ aor: AddressOfRecord) {
        guard pbxs[aor.domain] != nil else { return }
        queue.async { [self] in
            update(aor)
            deliverHeldSummary(to: aor)
        }
    }

    // MARK: Registrations

    private func update(_ aor: AddressOfRecord) {
        let live = registrar.bindings(for: aor).contains { $0.expiresAt > clock() }
        guard live || registrations[aor] != nil else { return }
        if registrations[aor] == nil {
            guard let pbx = pbxs[aor.domain], let value = makeRegistration(aor, pbx) else { return }
            registrations[aor] = value
        }
        run(.bindings(live: live), for: aor)
    }

    private func makeRegistration(_ aor: AddressOfRecord, _ pbx: UpstreamPBX) -> UpstreamRegistration? {
        guard let service, let point = service.listeningPoints.first(where: { $0.transport == pbx.transport }) else {
            logger.warning("gateway.no_listen_point", ["organisation": pbx.organisation, "transport": pbx.transport.rawValue])
            return nil
        }
        let host = Self.advertisedHost(point, aliases: service.selfHandler.ownNames)
        let transport = pbx.transport == .udp ? "" : ";transport=\(pbx.transport.rawValue)"
        return UpstreamRegistration(
            aor: aor, pbx: pbx, contact: "sip:\(aor.number)@\(host):\(point.port)\(transport)",
            pathEntry: "sip:\(host):\(point.port)\(transport);lr", callID: "gw-\(UUID().uuidString.lowercased())@rouse",
            fromTag: SIPService.makeTag())
    }

    /// The host Rouse's Contact names: the listen point's address, or for a wildcard the first
    /// other name of the server that is an address.
    static func advertisedHost(_ point: ListenPoint, aliases: Set<String>) -> String {
        guard point.host == "0.0.0.0" || point.host == "::" else { return point.isIPv6 ? "[\(point.host)]" : point.host }
        return aliases.sorted().first { $0 != "127.0.0.1" && $0.first?.isNumber == true } ?? "127.0.0.1"
    }

    /// Feeds one event to an extension's value and carries out what it says. On `queue`.
    private func run(_ event: UpstreamRegistration.Event, for aor: AddressOfRecord) {
        guard var value = registrations[aor] else { return }
        let actions = value.handle(event, now: clock())
        registrations[aor] = value
        for action in actions {
            switch action {
            case .takeLease(let until):
                let seconds = max(1, until.timeIntervalSince(clock()))
                let leases = leases
                Task {
                    let held = (try? await leases.take(aor, for: seconds)) ?? false
                    self.queue.async { self.run(.lease(held: held, until: held ? until : self.clock()), for: aor) }
                }
            case .releaseLease:
                let leases = leases
                Task { try? await leases.release(aor) }
            case .send(let request):
                send(request, for: aor, pbx: value.pbx)
            case .wake(let at):
                schedule(aor, at: at)
            case .registered(let expires):
                logger.info("gateway.registered", ["aor": aor.description, "pbx": "\(value.pbx.host):\(value.pbx.port)", "expires": String(expires)])
            case .failed(let status, let reason, let retryAt):
                logger.warning(
                    "gateway.register_failed",
                    ["aor": aor.description, "pbx": "\(value.pbx.host):\(value.pbx.port)", "status": String(status), "reason": reason,
                     "retry_in": String(Int(retryAt.timeIntervalSince(clock())))])
            case .stopped:
                timers.removeValue(forKey: aor)?.cancel()
                registrations[aor] = nil
                logger.info("gateway.unregistered", ["aor": aor.description])
            }
        }
    }

    private func schedule(_ aor: AddressOfRecord, at date: Date) {
        timers.removeValue(forKey: aor)?.cancel()
        let item = DispatchWorkItem { [weak self] in
            guard let self else { return }
            self.timers[aor] = nil
            self.run(.timer, for: aor)
        }
        timers[aor] = item
        queue.asyncAfter(deadline: .now() + max(0, date.timeIntervalSince(clock())), execute: item)
    }

    /// The REGISTER to the PBX in a client transaction (its Timer F is the deadline of the wait);
    /// the final response comes back to the value on the queue.
    private func send(_ request: SIPRequest, for aor: AddressOfRecord, pbx: UpstreamPBX) {
        guard let service, let address = try? SocketAddress(ip: pbx.host.trimmingCharacters(in: CharacterSet(charactersIn: "[]")), port: UInt16(pbx.port))
        else {
            return queue.async { self.run(.response(SIPResponse(replyingTo: request, statusCode: 503, reasonPhrase: "No Route To PBX")), for: aor) }
        }
        let onResponse: @Sendable (ClientTransactionEvent) -> Void = { [weak self] event in
            let response = event.response
            guard response.statusCode >= 200, let self else { return }
            self.queue.async { self.run(.response(response), for: aor) }
        }
        let failed: @Sendable () -> Void = { [weak self] in
            guard let self else { return }
            self.queue.async { self.run(.response(SIPResponse(replyingTo: request, statusCode: 503, reasonPhrase: "Transport Error")), for: aor) }
        }
        if pbx.transport == .udp {
            guard let flow = service.transport.datagramFlow(from: nil, to: address) else { return failed() }
            if !service.sendUpstream(request, over: flow, onResponse: onResponse) { failed() }
            return
        }
        service.transport.streamFlow(to: address, transport: pbx.transport) { flow in
            guard let flow, service.sendUpstream(request, over: flow, onResponse: onResponse) else { return failed() }
        }
    }

    // MARK: Requests from the PBX

    /// Takes the PBX's OPTIONS (qualify) and message-summary NOTIFYs to a Contact Rouse registered
    /// (`sip:<number>@<Rouse>`), from the address of that extension's PBX; returns nil for any
    /// other request (a stranger's gets what Rouse answers anyone: 404 or 405).
    func answer(_ request: SIPRequest, from sourceIP: String, ownNames: Set<String>, serverName: String) -> SIPResponse? {
        guard request.method == .options || request.method == .notify, let number = request.uri.user,
            ownNames.contains(request.uri.host.lowercased()) || ownNames.contains("\(request.uri.host.lowercased()):\(request.uri.port ?? 5060)")
        else { return nil }
        let candidates = pbxs.values.filter { $0.host.trimmingCharacters(in: CharacterSet(charactersIn: "[]")).lowercased() == sourceIP.lowercased() }
            .map { AddressOfRecord(number: number, domain: $0.organisation) }.filter { registrar.credentials(of: $0) != nil }
        guard candidates.count == 1, let aor = candidates.first else { return nil }
        let live = registrar.bindings(for: aor).contains { $0.expiresAt > clock() }
        var response = SIPResponse(replyingTo: request, statusCode: live ? 200 : 480, toTag: request.to?.tag == nil ? SIPService.makeTag() : nil)
        response.headers.add(.server, serverName)
        if request.method == .notify {
            guard request.headers[SIPHeaderName("event")]?.lowercased().hasPrefix("message-summary") == true else {
                response = SIPResponse(replyingTo: request, statusCode: 489, reasonPhrase: "Bad Event", toTag: SIPService.makeTag())
                response.headers.add(SIPHeaderName("allow-events"), "message-summary")
                return response
            }
            guard live else { return response }
            let now = clock()
            queue.async { [self] in
                hold(request, for: aor, at: now)
                deliverHeldSummary(to: aor, awakeOnly: true)
            }
        }
        return response
    }

    private func hold(_ notify: SIPRequest, for aor: AddressOfRecord, at now: Date) {
        if held[aor] == nil, held.count >= Self.heldSummaryLimit, let oldest = held.min(by: { $0.value.receivedAt < $1.value.receivedAt })?.key {
            held[oldest] = nil
        }
        held[aor] = HeldSummary(notify: notify, receivedAt: now)
    }

    /// Sends the held summary to the extension's bindings that can take it: with `awakeOnly`, a
    /// device that needs no push or an app whose connection is open; otherwise also any binding
    /// registered since the summary came (the app is back). Dropped once one answers 2xx.
    private func deliverHeldSummary(to aor: AddressOfRecord, awakeOnly: Bool = false) {
        guard let summary = held[aor], let service else { return }
        for binding in registrar.bindings(for: aor) where binding.expiresAt > clock() {
            let awake = binding.pushChannels.isEmpty || service.reach(binding) == .connected
            guard awake || (!awakeOnly && binding.registeredAt > summary.receivedAt) else { continue }
            var notify = summary.notify
            notify.uri = (try? SIPURI(parsing: binding.contact)) ?? notify.uri
            notify.headers.remove(.via)
            notify.headers.remove(.route)
            notify.headers.set(.maxForwards, "70")
            let receivedAt = summary.receivedAt
            service.sendRequest(notify, to: binding) { [weak self] event in
                guard (200..<300).contains(event.response.statusCode), let self else { return }
                self.queue.async {
                    if self.held[aor]?.receivedAt == receivedAt { self.held[aor] = nil }
                    self.logger.info("gateway.mwi_delivered", ["aor": aor.description, "binding": binding.id.uuidString.lowercased()])
                }
            }
        }
    }
}

extension SIPService {
    /// A request of Rouse's own to a peer (the PBX), with Rouse's Via, in a client transaction.
    func sendUpstream(_ request: SIPRequest, over flow: FlowID, onResponse: @escaping @Sendable (ClientTransactionEvent) -> Void) -> Bool {
        var outgoing = request
        addVia(to: &outgoing, over: flow)
        do {
            try transactions.sendRequest(outgoing, over: flow, isReliable: flow.isReliable, onResponse: onResponse)
            return true
        } catch {
            logger.warning("gateway.send_failed", ["error": "\(error)"])
            return false
        }
    }
}
