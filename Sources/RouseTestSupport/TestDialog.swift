public import SIPMessage

/// A confirmed dialog of a `TestUserAgent` (RFC 3261 §12), made by `TestUserAgent.answer(_:)` (the
/// phone's side) or `TestOutgoingCall.ack()` (the caller's side). In-dialog requests carry the route
/// set as Route headers in order (the caller's is the 2xx's Record-Route reversed, the phone's the
/// INVITE's Record-Route as received), the remote target as Request-URI (or, for a strict-routing
/// first hop, the first route, with the remote target appended to the Route headers), and an
/// increasing CSeq; they always go to the agent's server socket. Not thread-safe: use it from the
/// agent's thread.
public final class TestDialog {
    public let agent: TestUserAgent
    /// True on the caller's side (the UAC of the INVITE).
    public let isCaller: Bool
    public let callID: String
    /// Our party: From of our requests, with our tag.
    public let local: SIPNameAddress
    /// The other party: To of our requests, with its tag.
    public let remote: SIPNameAddress
    /// Route headers of our requests, in the order they are sent.
    public let routeSet: [String]
    /// The other party's Contact URI: the Request-URI of our requests.
    public let remoteTarget: String
    /// The CSeq number of the INVITE that made the dialog.
    public let inviteCSeq: UInt32
    /// The CSeq number of the last request we sent in the dialog (the INVITE's, on the caller's side, before BYE).
    public private(set) var localCSeq: UInt32
    private let inviteCredentials: [SIPHeader]

    public var localTag: String { local.tag ?? "" }
    public var remoteTag: String { remote.tag ?? "" }

    /// The phone's side (RFC 3261 §12.1.1): route set = the INVITE's Record-Route in order, remote
    /// target = its Contact.
    init(answering invite: SIPRequest, localTag: String, agent: TestUserAgent) throws {
        guard let callID = invite.callID, let from = invite.from, from.tag != nil, var to = invite.to, let cseq = invite.cseq else {
            throw TestUserAgentError.unexpected("the INVITE lacks Call-ID, a tagged From, To or CSeq:\n\(invite)")
        }
        to.parameters.set("tag", localTag)
        self.agent = agent
        self.isCaller = false
        self.callID = callID
        self.local = to
        self.remote = from
        self.routeSet = invite.headers.values(.recordRoute)
        self.remoteTarget = try Self.target(of: invite, "INVITE")
        self.inviteCSeq = cseq.number
        self.localCSeq = 0
        self.inviteCredentials = []
    }

    /// The caller's side (RFC 3261 §12.1.2): route set = the 2xx's Record-Route reversed, remote
    /// target = its Contact.
    init(confirmedBy response: SIPResponse, invite: SIPRequest, agent: TestUserAgent) throws {
        guard let callID = invite.callID, let from = invite.from, let to = response.to, to.tag != nil, let cseq = invite.cseq else {
            throw TestUserAgentError.unexpected("the 2xx lacks a tagged To:\n\(response)")
        }
        self.agent = agent
        self.isCaller = true
        self.callID = callID
        self.local = from
        self.remote = to
        self.routeSet = response.headers.values(.recordRoute).reversed()
        self.remoteTarget = try Self.target(of: response, "2xx")
        self.inviteCSeq = cseq.number
        self.localCSeq = cseq.number
        self.inviteCredentials = invite.headers.filter { $0.key == .authorization || $0.key == .proxyAuthorization }
    }

    /// Caller's side: the ACK of the 2xx (CSeq number of the INVITE, a new branch, the INVITE's
    /// credentials, RFC 3261 §13.2.2.4); sent again by the agent whenever that 2xx is retransmitted.
    public func sendAck() throws {
        guard isCaller else { throw TestUserAgentError.unexpected("only the caller's side ACKs a 2xx") }
        var ack = try makeRequest(.ack, cseq: inviteCSeq, headers: [], body: [], contentType: nil)
        for header in inviteCredentials { ack.headers.add(header) }
        let bytes = SIPSerializer.serialize(ack)
        agent.rememberAck(bytes, callID: callID, toTag: remoteTag, cseq: inviteCSeq)
        try agent.send(bytes)
    }

    /// Sends a request in the dialog with the next CSeq (not ACK: see `sendAck()`) and returns it at
    /// once; its final response comes from `agent.waitForFinalResponse(to:)`.
    @discardableResult
    public func sendRequest(
        _ method: SIPMethod, headers extra: [(String, String)] = [], body: [UInt8] = [], contentType: String? = nil
    ) throws -> SIPRequest {
        guard method != .ack else { throw TestUserAgentError.unexpected("ACK has its own CSeq: use sendAck()") }
        localCSeq += 1
        let request = try makeRequest(method, cseq: localCSeq, headers: extra, body: body, contentType: contentType)
        try agent.send(request)
        return request
    }

    /// Sends BYE and waits for its final response. The other side must be answered meanwhile: by
    /// the server, by a linked agent with `answersBye`, or use `sendRequest(.bye)` and wait later.
    public func sendBye(timeout: Duration = .seconds(15)) throws -> SIPResponse {
        let bye = try sendRequest(.bye)
        return try agent.waitForFinalResponse(to: bye, timeout: timeout)
    }

    /// The next request of `method` in this dialog (same Call-ID).
    public func waitForRequest(_ method: SIPMethod, timeout: Duration = .seconds(15)) throws -> SIPRequest {
        let callID = callID
        return try agent.waitForRequest(method, timeout: timeout) { $0.callID == callID }
    }

    /// Phone's side: the ACK of our 2xx.
    @discardableResult
    public func waitForAck(timeout: Duration = .seconds(15)) throws -> SIPRequest {
        let callID = callID
        let number = inviteCSeq
        return try agent.waitForRequest(.ack, timeout: timeout) { $0.callID == callID && $0.cseq?.number == number }
    }

    /// Waits for the other side's BYE and answers it 200 (unless the agent already did); returns it.
    @discardableResult
    public func receiveBye(timeout: Duration = .seconds(15)) throws -> SIPRequest {
        let bye = try waitForRequest(.bye, timeout: timeout)
        if !agent.hasResponded(to: bye) { try agent.respond(to: bye, status: 200) }
        return bye
    }

    private func makeRequest(
        _ method: SIPMethod, cseq: UInt32, headers extra: [(String, String)], body: [UInt8], contentType: String?
    ) throws -> SIPRequest {
        var uri = try SIPURI(parsing: remoteTarget)
        var routes = routeSet
        if let first = routeSet.first, let hop = try? SIPNameAddress(parsing: first), !hop.uri.parameters.contains("lr") {
            uri = hop.uri
            routes = Array(routeSet.dropFirst()) + ["<\(remoteTarget)>"]
        }
        var headers = SIPHeaders()
        headers.add(.via, agent.newVia())
        headers.add(.maxForwards, "70")
        for route in routes { headers.add(.route, route) }
        headers.add(.from, local.description)
        headers.add(.to, remote.description)
        headers.add(.callID, callID)
        headers.add(.cseq, "\(cseq) \(method.rawValue)")
        headers.add(.userAgent, agent.userAgent)
        for (name, value) in extra { headers.add(SIPHeader(name: name, value: value)) }
        if let contentType { headers.add(.contentType, contentType) }
        return SIPRequest(method: method, uri: uri, headers: headers, body: body)
    }

    private static func target(of message: some SIPMessageHeaders, _ what: String) throws -> String {
        guard case .address(let address)? = message.contacts?.first else {
            throw TestUserAgentError.unexpected("the \(what) has no usable Contact: \(message.headers[.contact] ?? "none")")
        }
        return address.uri.description
    }
}

/// An INVITE in flight from a `TestUserAgent` (the caller's side), made by `TestUserAgent.invite`.
/// Its waits look at the responses to the current INVITE (the one with credentials once a challenge
/// was answered); provisional responses not waited for stay buffered in the agent. Non-2xx finals
/// are ACKed by the agent itself. Not thread-safe: use it from the agent's thread.
public final class TestOutgoingCall {
    public let agent: TestUserAgent
    private let call: OutgoingInvite

    init(call: OutgoingInvite, agent: TestUserAgent) {
        self.call = call
        self.agent = agent
    }

    public var callID: String { call.callID }
    /// The INVITE last sent (with Proxy-Authorization/Authorization after a challenge).
    public var invite: SIPRequest { call.current }
    /// Every response read for this call's INVITEs (challenges included), in arrival order.
    public var responses: [SIPResponse] { call.responses }

    /// The next response to the current INVITE matching `predicate`.
    public func waitForResponse(timeout: Duration = .seconds(15), where predicate: (SIPResponse) -> Bool) throws -> SIPResponse {
        let call = call
        return try agent.waitForResponse(timeout: timeout) { call.isForCurrentInvite($0) && predicate($0) }
    }

    /// The next response to the current INVITE with `status`; others stay buffered.
    public func waitForResponse(status: Int, timeout: Duration = .seconds(15)) throws -> SIPResponse {
        try waitForResponse(timeout: timeout) { $0.statusCode == status }
    }

    /// The final response to the current INVITE (a non-2xx is already ACKed).
    public func waitForFinal(timeout: Duration = .seconds(15)) throws -> SIPResponse {
        try waitForResponse(timeout: timeout) { $0.statusCode >= 200 }
    }

    /// ACKs the last 2xx read for the current INVITE (waiting for the final response when none was
    /// read yet, which must then be a 2xx); returns the confirmed dialog.
    public func ack(timeout: Duration = .seconds(15)) throws -> TestDialog {
        let call = call
        if let success = call.responses.last(where: { (200..<300).contains($0.statusCode) && call.isForCurrentInvite($0) }) {
            agent.takeBuffered(success)
            return try ack(success)
        }
        let final = try waitForFinal(timeout: timeout)
        guard (200..<300).contains(final.statusCode) else {
            throw TestUserAgentError.unexpected("the call ended with \(final.statusCode) \(final.reasonPhrase), not a 2xx")
        }
        return try ack(final)
    }

    /// ACKs `response` (a 2xx of this call, e.g. one fork's): the dialog's route set is its
    /// Record-Route reversed, its remote target its Contact.
    public func ack(_ response: SIPResponse) throws -> TestDialog {
        let dialog = try TestDialog(confirmedBy: response, invite: call.current, agent: agent)
        try dialog.sendAck()
        return dialog
    }

    /// Sends the CANCEL of the current INVITE (RFC 3261 §9.1: its Request-URI, Call-ID, From, To,
    /// CSeq number, top Via and Route) and returns it at once. Send it only after a provisional response.
    @discardableResult
    public func sendCancel() throws -> SIPRequest {
        let invite = call.current
        var headers = SIPHeaders()
        if let via = invite.headers.values(.via).first { headers.add(.via, via) }
        headers.add(.maxForwards, "70")
        for line in invite.headers.lines(.route) { headers.add(.route, line) }
        for key in [SIPHeaderName.from, .to, .callID] { headers.add(key, invite.headers[key] ?? "") }
        headers.add(.cseq, "\(invite.cseq?.number ?? 1) CANCEL")
        headers.add(.userAgent, agent.userAgent)
        let cancel = SIPRequest(method: .cancel, uri: invite.uri, headers: headers)
        try agent.send(cancel)
        return cancel
    }

    /// Sends the CANCEL and waits for its final response (normally 200); the INVITE's 487 then
    /// comes from `waitForFinal()`, already ACKed.
    public func cancel(timeout: Duration = .seconds(15)) throws -> SIPResponse {
        let cancel = try sendCancel()
        return try agent.waitForFinalResponse(to: cancel, timeout: timeout)
    }
}

/// The agent's record of one outgoing call: every INVITE sent for it, by branch, and its responses.
final class OutgoingInvite {
    let callID: String
    let authenticate: Bool
    var challengeAnswered = false
    private(set) var current: SIPRequest
    private(set) var sent: [String: SIPRequest] = [:]
    var responses: [SIPResponse] = []

    init(invite: SIPRequest, authenticate: Bool) {
        self.callID = invite.callID ?? ""
        self.authenticate = authenticate
        self.current = invite
        record(invite)
    }

    /// Makes `invite` the current INVITE.
    func record(_ invite: SIPRequest) {
        current = invite
        if let branch = invite.topVia?.branch { sent[branch] = invite }
    }

    func isForCurrentInvite(_ response: SIPResponse) -> Bool {
        response.callID == callID && response.cseq?.method == .invite && response.cseq?.number == current.cseq?.number
    }
}
