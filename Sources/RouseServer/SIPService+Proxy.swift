import CallRouting
import Crypto
import Foundation
import Registrar
import RouseVocabulary
import SIPMessage
import SIPTransaction
import SIPTransport

/// An INVITE this instance forwarded statefully for another instance (through a flow it holds):
/// what was sent and over which flow, so the caller's CANCEL can follow it.
struct ForwardedInvite: Sendable {
    let sent: SIPRequest
    let flow: FlowID
}

/// The proxy side of the SIP service (RFC 3261 §16): loose routing by Rouse's own Route entries,
/// Record-Route carrying signed flow tokens (RFC 5626 §5.3 style) so requests inside a dialog
/// reach each end over its own flow, and the `CallSignaling` the call coordinator drives.
extension SIPService: CallSignaling {
    public typealias Flow = FlowID

    /// URI parameters of Rouse's Record-Route entries: the caller's flow and the device's flow. (A
    /// Route from another instance carries `InstanceForwardProof`'s parameters instead.)
    static let callerFlowParameter = "rouse-c"
    static let deviceFlowParameter = "rouse-d"

    // MARK: CallSignaling

    public func respond(_ response: SIPResponse, to handle: ServerTransactionHandle) {
        transactions.respond(response, to: handle)
    }

    public func relay2xx(_ response: SIPResponse, to handle: ServerTransactionHandle, callerFlow: FlowID) {
        if !transactions.respond(response, to: handle) {
            send(.response(response), over: callerFlow)
        }
    }

    public func reach(_ binding: Binding) -> BindingReach {
        if let flow = flow(for: binding) { return flow.isReliable ? .connected : .datagram }
        guard let point = holder(of: binding) else { return .gone }
        // Held by another instance, and reached through it: a UDP binding as this instance would
        // reach its own; a desk phone's connection is taken as open (that instance answers 430 if
        // not); a push binding's app is taken as asleep until it registers again.
        if point.transport == .udp { return .datagram }
        return binding.pushChannels.isEmpty ? .connected : .gone
    }

    /// The listen point of the other instance that holds `binding`, which this one cannot reach
    /// itself: the point its REGISTER arrived on, when that is not one of this instance's (nor a
    /// wildcard, which names no machine). A connection this instance held and lost has no holder.
    func holder(of binding: Binding) -> ListenPoint? {
        guard let local = binding.flow.local else { return nil }
        let point = ListenPoint(transport: binding.flow.transport, host: local.ip, port: local.port)
        guard !listeningPoints.contains(point), point.host != "0.0.0.0", point.host != "::" else { return nil }
        if point.transport.isReliable, binding.flow.instanceID == instanceID { return nil }
        return point
    }

    public func sendInvite(
        _ request: SIPRequest, to binding: Binding, callerFlow: FlowID, sent: @escaping @Sendable (SentRequest<FlowID>?) -> Void,
        onResponse: @escaping @Sendable (ClientTransactionEvent) -> Void
    ) {
        var outgoing = request
        if let local = flow(for: binding) {
            for path in binding.path.reversed() { outgoing.headers.prepend(.route, path) }
            return sent(sendBranch(outgoing, to: binding, over: local, callerFlow: callerFlow, onResponse: onResponse))
        }
        guard let point = holder(of: binding), let address = try? SocketAddress(ip: point.host, port: point.port) else { return sent(nil) }
        // The binding is held by another instance: route through it, to the listen point the phone
        // registered on (as a Path would), with the proof that this instance sent it (that
        // instance then forwards it over the phone's own flow without challenging the caller again).
        let host = point.isIPv6 ? "[\(point.host)]" : point.host
        let transportParameter = point.transport == .udp ? "" : ";transport=\(point.transport.rawValue)"
        let through = "sip:\(host):\(point.port)\(transportParameter);lr;\(InstanceForwardProof.bindingParameter)=\(binding.id.uuidString.lowercased())"
        if point.transport == .udp {
            return sent(transport.datagramFlow(from: nil, to: address).flatMap {
                sendBranch(outgoing, to: binding, over: $0, callerFlow: callerFlow, through: through, onResponse: onResponse)
            })
        }
        // A connection to that instance is set up on the transport's loop; the call does not wait.
        let outgoingRequest = outgoing
        transport.streamFlow(to: address, transport: point.transport) { [weak self] flow in
            guard let self, let flow else { return sent(nil) }
            sent(sendBranch(outgoingRequest, to: binding, over: flow, callerFlow: callerFlow, through: through, onResponse: onResponse))
        }
    }

    /// The branch INVITE with Rouse's Record-Route and Via, in a client transaction over `target`.
    /// `through`: the Route URI (without its proof) of the other instance holding the binding; the
    /// proof is signed over the request as sent, once Rouse's Via is on it.
    private func sendBranch(
        _ request: SIPRequest, to binding: Binding, over target: FlowID, callerFlow: FlowID, through: String? = nil,
        onResponse: @escaping @Sendable (ClientTransactionEvent) -> Void
    ) -> SentRequest<FlowID>? {
        var outgoing = request
        addRecordRoutes(to: &outgoing, callerFlow: callerFlow, deviceFlow: target)
        addVia(to: &outgoing, over: target)
        if let through {
            guard let proof = forwardProofs.proof.sign(outgoing, binding: binding.id, at: Date()) else { return nil }
            outgoing.headers.prepend(.route, "<\(through);\(InstanceForwardProof.proofParameter)=\(proof)>")
        }
        do {
            try transactions.sendRequest(outgoing, over: target, isReliable: target.isReliable, onResponse: onResponse)
            return SentRequest(outgoing, over: target)
        } catch {
            logger.warning("sip.send_failed", ["binding": binding.id.uuidString, "error": "\(error)"])
            return nil
        }
    }

    public func sendCancel(_ cancel: SIPRequest, over flow: FlowID) {
        do {
            try transactions.sendRequest(cancel, over: flow, isReliable: flow.isReliable) { _ in }
        } catch {
            logger.debug("sip.cancel_failed", ["error": "\(error)"])
        }
    }

    // MARK: Routing requests

    /// Takes a request that is not for Rouse itself: an INVITE for an extension (to the call
    /// coordinator), a request inside a dialog Rouse record-routed, or an INVITE another instance
    /// forwarded to a binding held here. Returns false when the request is for Rouse itself.
    func route(_ request: SIPRequest, _ handle: ServerTransactionHandle, arrivedOn flow: FlowID) -> Bool {
        var request = request
        let tokens = popOwnRoutes(&request)
        let inDialog = request.to?.tag != nil
        if let forwarded = tokens.forwarded, request.method == .invite, !inDialog,
            takeForwarded(request, handle, arrivedOn: flow, binding: forwarded.binding, proof: forwarded.proof)
        {
            return true
        }
        if inDialog {
            guard tokens.popped else {
                guard request.method != .options || request.uri.user != nil else { return false }
                reply(request, handle, 481, "Call/Transaction Does Not Exist")
                return true
            }
            guard let target = tokens.target(arrivedOn: flow) else {
                reply(request, handle, 430, "Flow Failed")
                return true
            }
            if request.method == .bye, let callID = request.callID {
                coordinator?.dialogEnded(callID: callID, fromCallee: tokens.device.map { $0 == flow })
            }
            // The end beyond is a phone, not another proxy: credentials were meant for Rouse
            // (§22.3), as on the INVITE's branch copies.
            request.headers.remove(.proxyAuthorization)
            forward(request, handle, arrivedOn: flow, to: target, recordRoute: false)
            return true
        }
        guard request.method == .invite, let coordinator else { return false }
        coordinator.handleInvite(request, handle: handle, callerFlow: flow, sourceIP: sourceIP(of: flow), transport: flow.transport.rawValue)
        return true
    }

    /// An ACK for a 2xx: forwarded statelessly along Rouse's Route entries (§16.11); dropped when
    /// it names no flow of Rouse's.
    func routeACK(_ ack: SIPRequest, arrivedOn flow: FlowID) {
        var request = ack
        let tokens = popOwnRoutes(&request)
        guard let target = tokens.target(arrivedOn: flow), transport.flowIsOpen(target) else { return }
        guard (request.maxForwards ?? ProxyRules.defaultMaxForwards) > 0 else { return }
        request.headers.remove(.proxyAuthorization)
        request.headers.set(.maxForwards, String((request.maxForwards ?? ProxyRules.defaultMaxForwards) - 1))
        addVia(to: &request, over: target)
        send(.request(request), over: target)
    }

    /// An INVITE another instance forwarded with a proof (`InstanceForwardProof`): when the proof
    /// is good, forwarded over the flow of the binding it names, if this instance holds that
    /// binding (430 when it does not, or its flow has gone), and true. A forged, stale or replayed
    /// proof proves nothing: false, and the INVITE is taken as any other (a caller gets the 407).
    /// Never an open relay: only bindings registered here are reached this way.
    func takeForwarded(_ request: SIPRequest, _ handle: ServerTransactionHandle, arrivedOn flow: FlowID, binding id: UUID, proof: String) -> Bool {
        if let refusal = forwardProofs.check(proof, of: request, binding: id, at: Date()) {
            logger.warning(
                "sip.forward_refused", ["call": request.callID ?? "", "peer": sourceIP(of: flow), "why": "proof \(refusal.rawValue)"])
            return false
        }
        var outgoing = request
        guard let binding = registrar?.binding(id: id), binding.expiresAt > Date(), (try? SIPURI(parsing: binding.contact)) == request.uri,
            let target = self.flow(for: binding)
        else {
            logger.info("sip.forward_unreachable", ["call": request.callID ?? "", "binding": id.uuidString.lowercased()])
            reply(request, handle, 430, "Flow Failed")
            return true
        }
        for path in binding.path.reversed() { outgoing.headers.prepend(.route, path) }
        forward(outgoing, handle, arrivedOn: flow, to: target, recordRoute: true)
        return true
    }

    /// Forwards statefully over `target` (§16.6): responses go back through the server
    /// transaction without Rouse's Via.
    func forward(_ request: SIPRequest, _ handle: ServerTransactionHandle, arrivedOn flow: FlowID, to target: FlowID, recordRoute: Bool) {
        if let tooMany = ProxyRules.tooManyHops(request) {
            transactions.respond(tooMany, to: handle)
            return
        }
        guard transport.flowIsOpen(target) else {
            reply(request, handle, 430, "Flow Failed")
            return
        }
        var outgoing = request
        outgoing.headers.set(.maxForwards, String((request.maxForwards ?? ProxyRules.defaultMaxForwards) - 1))
        if recordRoute { addRecordRoutes(to: &outgoing, callerFlow: flow, deviceFlow: target) }
        addVia(to: &outgoing, over: target)
        let isInvite = request.method == .invite
        if isInvite { forwardedInvites.set(handle, ForwardedInvite(sent: outgoing, flow: target)) }
        do {
            try transactions.sendRequest(outgoing, over: target, isReliable: target.isReliable) { [weak self] event in
                guard let self else { return }
                let response = event.response
                guard response.statusCode != 100 else { return }
                if isInvite, response.statusCode >= 200 { _ = self.forwardedInvites.remove(handle) }
                self.transactions.respond(ProxyRules.upstream(response), to: handle)
            }
        } catch {
            if isInvite { _ = forwardedInvites.remove(handle) }
            reply(request, handle, 503, "Service Unavailable")
        }
    }

    /// Rouse's own entries at the top of the Route set, removed (§16.4), with the flow tokens they
    /// carried.
    func popOwnRoutes(_ request: inout SIPRequest) -> RouteTokens {
        var tokens = RouteTokens()
        while let first = request.headers.values(.route).first, let address = try? SIPNameAddress(parsing: first) {
            let uri = address.uri
            let caller = uri.parameters.value(Self.callerFlowParameter).flatMap(flow(fromToken:))
            let device = uri.parameters.value(Self.deviceFlowParameter).flatMap(flow(fromToken:))
            guard caller != nil || device != nil || namesThisServer(uri) else { break }
            request.headers.removeFirstValue(.route)
            tokens.popped = true
            tokens.caller = tokens.caller ?? caller
            tokens.device = tokens.device ?? device
            if tokens.forwarded == nil, let binding = uri.parameters.value(InstanceForwardProof.bindingParameter).flatMap(UUID.init(uuidString:)),
                let proof = uri.parameters.value(InstanceForwardProof.proofParameter)
            {
                tokens.forwarded = (binding, proof)
            }
        }
        return tokens
    }

    /// Whether a Route URI is this server: one of its names and one of its ports.
    func namesThisServer(_ uri: SIPURI) -> Bool {
        let host = uri.host.lowercased()
        guard ownNames.contains(host) else { return false }
        let port = uri.port.map { UInt16(clamping: $0) } ?? 5060
        return listeningPoints.contains { $0.port == port }
    }

    // MARK: Headers

    /// Rouse's Via on an outgoing request: the listen point of the flow's transport, a fresh
    /// branch, rport, and the instance marker for loop detection.
    func addVia(to request: inout SIPRequest, over flow: FlowID) {
        let local = listeningPoints.first { $0.transport == flow.transport } ?? listeningPoints.first
        let host = local.map { $0.isIPv6 ? "[\($0.host)]" : $0.host } ?? "127.0.0.1"
        let sentBy = local.map { "\(host):\($0.port)" } ?? host
        request.headers.prepend(
            .via,
            "SIP/2.0/\(flow.transport.rawValue.uppercased()) \(sentBy);branch=\(SIPVia.magicCookie)\(SIPService.makeTag());rport;"
                + "\(ProxyRules.viaMarkerParameter)=\(instanceID)")
    }

    /// Record-Route naming both flows (RFC 3261 §16.6 step 4); two entries when the two sides use
    /// different transports (RFC 5658 double record-routing), so each side reaches Rouse its way.
    func addRecordRoutes(to request: inout SIPRequest, callerFlow: FlowID, deviceFlow: FlowID) {
        let tokens = "\(Self.callerFlowParameter)=\(flowToken(callerFlow.description));\(Self.deviceFlowParameter)=\(flowToken(deviceFlow.description))"
        func entry(_ transport: SIPTransportKind) -> String {
            let point = listeningPoints.first { $0.transport == transport } ?? listeningPoints.first
            let host = point.map { $0.isIPv6 ? "[\($0.host)]" : $0.host } ?? "127.0.0.1"
            let port = point.map { String($0.port) } ?? "5060"
            let transportParameter = transport == .udp ? "" : ";transport=\(transport.rawValue)"
            return "<sip:\(host):\(port)\(transportParameter);lr;\(tokens)>"
        }
        // The device side is nearest the device: its entry comes first in the request it gets.
        if callerFlow.transport != deviceFlow.transport { request.headers.prepend(.recordRoute, entry(callerFlow.transport)) }
        request.headers.prepend(.recordRoute, entry(deviceFlow.transport))
    }

    // MARK: Flow tokens

    /// A flow of this instance, named and signed:
    /// `hex(instance " " name).hex(HMAC-SHA256(key, instance " " name)[0..<8])`. Every instance
    /// shares the key; nobody else can forge a token, and an instance accepts only its own.
    func flowToken(_ name: String) -> String {
        let text = Array("\(instanceID) \(name)".utf8)
        return Hex.encode(text) + "." + Hex.encode(Digest.hmacSHA256(key: flowTokenKey, message: text).prefix(8))
    }

    /// The flow a token names, when the signature is Rouse's and the flow is this instance's.
    func flow(fromToken token: String) -> FlowID? {
        let parts = token.split(separator: ".")
        guard parts.count == 2, let textBytes = Hex.decode(String(parts[0])), let mac = Hex.decode(String(parts[1])) else { return nil }
        let expected = Array(Digest.hmacSHA256(key: flowTokenKey, message: textBytes).prefix(8))
        guard Digest.constantTimeEquals(expected, mac) else { return nil }
        let text = String(decoding: textBytes, as: UTF8.self)
        guard let space = text.firstIndex(of: " "), text[..<space] == instanceID else { return nil }
        return FlowID(description: String(text[text.index(after: space)...]))
    }

    // MARK: Helpers

    func sourceIP(of flow: FlowID) -> String {
        if let peer = flow.datagramPeer { return peer.ip }
        return connections.endpoints(of: flow)?.0?.ip ?? ""
    }

    func reply(_ request: SIPRequest, _ handle: ServerTransactionHandle, _ status: Int, _ reason: String) {
        var response = SIPResponse(replyingTo: request, statusCode: status, reasonPhrase: reason, toTag: request.to?.tag == nil ? SIPService.makeTag() : nil)
        response.headers.add(.server, selfHandler.serverName)
        transactions.respond(response, to: handle)
    }
}

/// INVITEs forwarded outside the coordinator, by server transaction. Thread-safe behind a lock;
/// entries go when the INVITE gets a final response or is cancelled.
final class ForwardedInvites: @unchecked Sendable {
    // @unchecked: `entries` is only touched under `lock`.
    private let lock = NSLock()
    private var entries: [ServerTransactionHandle: ForwardedInvite] = [:]

    func set(_ handle: ServerTransactionHandle, _ invite: ForwardedInvite) {
        lock.lock()
        entries[handle] = invite
        lock.unlock()
    }

    func remove(_ handle: ServerTransactionHandle) -> ForwardedInvite? {
        lock.lock()
        defer { lock.unlock() }
        return entries.removeValue(forKey: handle)
    }
}

/// The flow tokens found in Rouse's own Route entries of a request.
struct RouteTokens {
    var popped = false
    var caller: FlowID?
    var device: FlowID?
    /// From another instance's Route: the binding it forwarded to, and its proof.
    var forwarded: (binding: UUID, proof: String)?

    /// Inside a dialog: a request from the device goes to the caller, any other to the device.
    func target(arrivedOn flow: FlowID) -> FlowID? {
        guard let device else { return nil }
        if flow == device { return caller }
        return device
    }
}
