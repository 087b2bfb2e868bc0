public import CallRouting
import Crypto
import Foundation
public import Registrar
import RouseLog
import RouseVocabulary
public import SIPMessage
import SIPProxy
public import SIPTransaction
public import SIPTransport

/// The proxy side of the SIP service: the `CallSignaling` the call coordinator drives, and the
/// steps of `ProxyCore` (RFC 3261 §16) carried out over the transaction layer and the transport.
extension SIPService: CallSignaling {
    public typealias Flow = FlowID

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
        if point.transport == .udp {
            return sent(transport.datagramFlow(from: nil, to: address).flatMap {
                sendBranch(outgoing, to: binding, over: $0, callerFlow: callerFlow, through: point, onResponse: onResponse)
            })
        }
        // A connection to that instance is set up on the transport's loop; the call does not wait.
        let outgoingRequest = outgoing
        transport.streamFlow(to: address, transport: point.transport) { [weak self] flow in
            guard let self, let flow else { return sent(nil) }
            sent(sendBranch(outgoingRequest, to: binding, over: flow, callerFlow: callerFlow, through: point, onResponse: onResponse))
        }
    }

    /// A branch INVITE (to `binding`, or to an outside hop when nil) with Rouse's Record-Route and
    /// Via, in a client transaction over `target`.
    /// `through`: the listen point of the other instance holding the binding, routed through with
    /// the proof, signed over the request as sent, once Rouse's Via is on it.
    func sendBranch(
        _ request: SIPRequest, to binding: Binding?, over target: FlowID, callerFlow: FlowID, through: ListenPoint? = nil,
        onResponse: @escaping @Sendable (ClientTransactionEvent) -> Void
    ) -> SentRequest<FlowID>? {
        var outgoing = request
        proxy.addRecordRoutes(to: &outgoing, callerFlow: callerFlow, deviceFlow: target, listening: listeningPoints)
        addVia(to: &outgoing, over: target)
        if let through, let binding {
            guard let proof = forwardProofs.proof.sign(outgoing, binding: binding.id, at: Date()) else { return nil }
            outgoing.headers.prepend(.route, InstanceForwardProof.routeEntry(to: through, binding: binding.id, proof: proof))
        }
        do {
            try transactions.sendRequest(outgoing, over: target, isReliable: target.isReliable, onResponse: onResponse)
            return SentRequest(outgoing, over: target)
        } catch {
            logger.warning("sip.send_failed", ["to": binding?.id.uuidString ?? outgoing.uri.description, "error": "\(error)"])
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
        switch proxy.step(request, arrivedOn: flow, listening: listeningPoints) {
        case .reply(let status, let reason):
            reply(request, handle, status, reason)
            return true
        case .forward(let request, let target, let fromCallee):
            var unreachable: (@Sendable (Int) -> Void)?
            if request.method == .bye, let callID = request.callID, let coordinator {
                coordinator.dialogEnded(callID: callID, fromCallee: fromCallee)
                // A BYE toward the device that answered, which cannot reach it: `call.ended`.
                if fromCallee != true { unreachable = { [weak coordinator] in coordinator?.dialogUnreachable(callID: callID, status: $0) } }
            }
            forward(request, handle, to: target, recordRouteFrom: nil, unreachable: unreachable)
            return true
        case .outsideDialog(let request, let tokens):
            // An INVITE here has no To tag (`step` sends only an OPTIONS with one this way): its
            // To is not parsed again.
            if let forwarded = tokens.forwarded, request.method == .invite,
                takeForwarded(request, handle, arrivedOn: flow, binding: forwarded.binding, proof: forwarded.proof)
            {
                return true
            }
            guard request.method == .invite, let coordinator else { return false }
            coordinator.handleInvite(request, handle: handle, callerFlow: flow, sourceIP: sourceIP(of: flow), transport: flow.transport.rawValue)
            return true
        }
    }

    /// An ACK for a 2xx: forwarded statelessly along Rouse's Route entries (§16.11); dropped when
    /// it names no open flow of Rouse's.
    func routeACK(_ ack: SIPRequest, arrivedOn flow: FlowID) {
        guard let (request, target) = proxy.ackStep(ack, arrivedOn: flow, listening: listeningPoints, branch: Self.makeBranch()),
            transport.flowIsOpen(target)
        else { return }
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
        forward(outgoing, handle, to: target, recordRouteFrom: flow)
        return true
    }

    /// Forwards statefully over `target` (§16.6), record-routing when `recordRouteFrom` (the flow
    /// the request arrived on) is given: responses go back through the server transaction without
    /// Rouse's Via; an INVITE is remembered for the caller's CANCEL until its final response.
    /// `unreachable` is told when the request cannot reach `target`: 430 (the flow is gone), 503
    /// (the send failed, or the transport did later), 408 (no answer).
    func forward(
        _ request: SIPRequest, _ handle: ServerTransactionHandle, to target: FlowID, recordRouteFrom callerFlow: FlowID?,
        unreachable: (@Sendable (Int) -> Void)? = nil
    ) {
        let outgoing: SIPRequest
        switch proxy.forwarded(request, over: target, recordRouteFrom: callerFlow, listening: listeningPoints, branch: Self.makeBranch()) {
        case .failure(let refusal):
            transactions.respond(refusal.response, to: handle)
            return
        case .success(let request):
            outgoing = request
        }
        guard transport.flowIsOpen(target) else {
            reply(request, handle, 430, "Flow Failed")
            unreachable?(430)
            return
        }
        let isInvite = request.method == .invite
        if isInvite { forwardedInvites.withLock { $0.add(outgoing, over: target, for: handle) } }
        do {
            try transactions.sendRequest(outgoing, over: target, isReliable: target.isReliable) { [weak self] event in
                guard let self else { return }
                let response = event.response
                switch event {
                case .timedOut, .transportError: unreachable?(response.statusCode)
                // An edge proxy (another instance holding the flow, RFC 5626 §5.3) found it gone.
                case .response where response.statusCode == 430: unreachable?(430)
                case .response: break
                }
                guard response.statusCode != 100 else { return }
                if isInvite, response.statusCode >= 200 { self.forwardedInvites.withLock { $0.remove(handle) } }
                self.transactions.respond(ProxyRules.upstream(response), to: handle)
            }
        } catch {
            if isInvite { forwardedInvites.withLock { $0.remove(handle) } }
            reply(request, handle, 503, "Service Unavailable")
            unreachable?(503)
        }
    }

    // MARK: Headers

    /// Rouse's Via on an outgoing request (`ProxyCore.addVia`), with a fresh branch.
    func addVia(to request: inout SIPRequest, over flow: FlowID) {
        proxy.addVia(to: &request, over: flow, listening: listeningPoints, branch: Self.makeBranch())
    }

    /// A fresh RFC 3261 branch for a Via of Rouse's.
    static func makeBranch() -> String {
        SIPVia.magicCookie + makeTag()
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
