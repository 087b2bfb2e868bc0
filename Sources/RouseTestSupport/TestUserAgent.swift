public import Crypto
import Registrar
public import SIPMessage

/// What went wrong in a `TestUserAgent`, `TestDialog` or `TestOutgoingCall`.
public enum TestUserAgentError: Error, Hashable, Sendable, CustomStringConvertible {
    /// Nothing matching arrived in time; names what was awaited.
    case timedOut(String)
    /// The agent has no socket: after `goQuiet()` or `close()`, or the server closed the connection.
    case notConnected(String)
    /// A message the agent needs is missing or cannot be used.
    case unexpected(String)

    public var description: String {
        switch self {
        case .timedOut(let what): return "timed out waiting for \(what)"
        case .notConnected(let why): return "not connected: \(why)"
        case .unexpected(let what): return what
        }
    }
}

/// A scripted SIP user agent for end-to-end tests, on one `TestSIPClient` socket to one server
/// (UDP, TCP, or TLS without verification). It plays a **phone** (registers with digest, goes quiet,
/// reopens from a new port, receives, answers and hangs up calls) and a **caller** (INVITEs through
/// the proxy, answers a 407/401 once, ACKs, CANCELs, BYEs). Every request it sends goes to the server
/// socket; its Via carries `rport` and a fresh `z9hG4bK` branch.
///
/// Nothing happens in the background: the agent reads its socket only while one of its waits runs
/// (or while a linked agent waits, see `link(_:)`). What it reads is dispatched in arrival order:
/// - a retransmitted request (same Call-ID, top Via branch and CSeq as one already read) is dropped,
///   and the last response sent to it is sent again, as a UAS transaction would;
/// - OPTIONS are answered 200 at once (`answersOptions`), and in-dialog BYEs too when `answersBye`;
/// - a non-2xx final response to one of its INVITEs is ACKed (same branch, the response's To tag)
///   every time it arrives; a retransmitted 2xx that was ACKed is ACKed again;
/// - a 401/407 to a call started with `authenticate: true` is ACKed and the INVITE sent again with
///   CSeq + 1 and credentials, once per call;
/// - other requests and responses are kept, in arrival order, for `waitForRequest` and
///   `waitForResponse` (retransmitted final responses are dropped).
///
/// Every wait polls its socket with a deadline; nothing sleeps. Not thread-safe: use an agent, its
/// calls and dialogs, and the agents linked to it from one thread.
public final class TestUserAgent {
    public let transport: TestSIPClient.Transport
    public let serverHost: String
    public let serverPort: UInt16
    /// The extension number: the user part of the AOR and the digest username.
    public let user: String
    public let domain: String
    public let password: String
    /// `urn:uuid:…`: sent as `+sip.instance` with `reg-id` and the `ob` URI parameter.
    public let instanceID: String?
    /// The RFC 5626 `reg-id` of this agent's flow: two agents with one `instanceID` and different
    /// reg-ids are one phone registered over two flows.
    public let regID: Int
    /// URI parameters placed inside the `<…>` of the REGISTER Contact (RFC 8599 `pn-*`).
    public let contactURIParameters: String?
    public let userAgent: String
    /// The digest algorithm chosen when a challenge offers several (else the first one offered).
    public var preferredDigestAlgorithm: Digest.Algorithm = .sha256
    /// Answer OPTIONS 200 as soon as they are read (except while `waitForRequest(.options)` runs).
    public var answersOptions = true
    /// Answer in-dialog BYEs 200 as soon as they are read; they are still kept for `waitForRequest`.
    public var answersBye = false

    private var client: TestSIPClient?
    private var lastLocalPort: UInt16 = 0
    private var disconnection = "never connected"
    private var pendingRequests: [SIPRequest] = []
    private var pendingResponses: [SIPResponse] = []
    private var seenRequests: Set<RequestKey> = []
    private var lastResponses: [RequestKey: [UInt8]] = [:]
    private var seenFinalResponses: Set<ResponseKey> = []
    private var localTags: [String: String] = [:]
    private var calls: [String: OutgoingInvite] = [:]
    private var acksFor2xx: [AckKey: [UInt8]] = [:]
    /// Answers the server's challenges (and keeps each nonce's count).
    private lazy var digest = DigestClient(username: user, password: password)
    private var linked: [WeakAgent] = []
    private var awaitedMethod: SIPMethod?
    private let registrationCallID = SecureRandom.hex(12)
    private let registrationTag = SecureRandom.hex(6)
    private var registrationCSeq: UInt32 = 0

    /// Opens the socket (for TLS, completes the handshake). Nothing is sent yet.
    public init(
        transport: TestSIPClient.Transport, serverHost: String = "127.0.0.1", serverPort: UInt16,
        user: String, domain: String, password: String, instanceID: String? = nil, regID: Int = 1,
        contactURIParameters: String? = nil, userAgent: String = "RouseTestPhone/1"
    ) throws {
        self.regID = regID
        self.transport = transport
        self.serverHost = serverHost
        self.serverPort = serverPort
        self.user = user
        self.domain = domain
        self.password = password
        self.instanceID = instanceID
        self.contactURIParameters = contactURIParameters
        self.userAgent = userAgent
        try reopen()
    }

    deinit {
        client?.close()
    }

    // MARK: The socket

    /// The local port of the socket (the last one after `goQuiet()`).
    public var localPort: UInt16 { client?.localPort ?? lastLocalPort }

    /// True while the agent has a socket.
    public var isConnected: Bool { client != nil }

    /// `sip:user@domain`.
    public var addressOfRecord: String { "sip:\(user)@\(domain)" }

    /// The URI this agent is reached at: `sip:user@host:port`, with `;transport=tcp|tls` on streams.
    public var contactURI: String {
        let parameter = transport == .udp ? "" : ";transport=\(transport.rawValue)"
        return "sip:\(user)@\(localHost):\(localPort)\(parameter)"
    }

    /// The Contact of REGISTER: `contactURI`, `ob` and `contactURIParameters` inside the brackets,
    /// `+sip.instance` and `reg-id` after them when there is an instance ID.
    public var registrationContact: String {
        var uri = contactURI
        if instanceID != nil { uri += ";ob" }
        if let contactURIParameters, !contactURIParameters.isEmpty {
            uri += contactURIParameters.hasPrefix(";") ? contactURIParameters : ";" + contactURIParameters
        }
        var contact = "<\(uri)>"
        if let instanceID { contact += ";+sip.instance=\"<\(instanceID)>\";reg-id=\(regID)" }
        return contact
    }

    /// Closes the socket without unregistering (the app was killed or suspended). What was already
    /// read stays buffered.
    public func goQuiet() {
        disconnect("the agent went quiet")
    }

    /// Opens a fresh socket, as a woken app does: a new local port (a new connection on TCP/TLS).
    public func reopen() throws {
        let previous = client.map { _ in localPort } ?? lastLocalPort
        disconnect("the agent reopened")
        var attempts = 0
        while true {
            let fresh = try TestSIPClient(transport: transport, host: serverHost, port: serverPort)
            attempts += 1
            if fresh.localPort != previous || attempts >= 5 {
                client = fresh
                lastLocalPort = fresh.localPort
                return
            }
            fresh.close()
        }
    }

    /// Closes the socket and forgets the agents linked to it.
    public func close() {
        disconnect("the agent was closed")
        linked.removeAll()
    }

    /// While any of `agents` waits, it also reads the others' sockets (without blocking) and lets
    /// them do their automatic work: answer challenges, ACK, answer OPTIONS, repeat responses to
    /// retransmissions; everything else stays buffered for their own waits. This lets one test
    /// thread drive a caller and a phone without either stalling the other.
    public static func link(_ agents: TestUserAgent...) {
        for agent in agents {
            for other in agents where other !== agent && !agent.linked.contains(where: { $0.agent === other }) {
                agent.linked.append(WeakAgent(other))
            }
        }
    }

    // MARK: Registration

    /// REGISTER (`expires` 0 unregisters this Contact) with `Expires`, answering one 401/407 with
    /// digest credentials (username = `user`, realm from the challenge); returns the final response.
    @discardableResult
    public func register(expires: Int = 600, timeout: Duration = .seconds(10)) throws -> SIPResponse {
        let deadline = ContinuousClock.now + timeout
        var request = try makeRegister(expires: expires, credentials: nil)
        try send(request)
        var response = try waitForFinalResponse(to: request, timeout: ContinuousClock.now.duration(to: deadline))
        if response.statusCode == 401 || response.statusCode == 407,
            let credentials = credentials(answering: response, method: "REGISTER", uri: request.uri.description)
        {
            request = try makeRegister(expires: expires, credentials: credentials)
            try send(request)
            response = try waitForFinalResponse(to: request, timeout: ContinuousClock.now.duration(to: deadline))
        }
        return response
    }

    /// One REGISTER carrying `headers` (a woken app's `X-Rouse-Wake`), a challenge left
    /// unanswered: the final response as it came.
    public func registerOnce(headers extra: [(SIPHeaderName, String)], expires: Int = 600, timeout: Duration = .seconds(10)) throws -> SIPResponse {
        let request = try makeRegister(expires: expires, credentials: nil, extra: extra)
        try send(request)
        return try waitForFinalResponse(to: request, timeout: timeout)
    }

    private func makeRegister(expires: Int, credentials: (SIPHeaderName, String)?, extra: [(SIPHeaderName, String)] = []) throws -> SIPRequest {
        registrationCSeq += 1
        var headers = SIPHeaders()
        headers.add(.via, newVia())
        headers.add(.maxForwards, "70")
        headers.add(.from, "<\(addressOfRecord)>;tag=\(registrationTag)")
        headers.add(.to, "<\(addressOfRecord)>")
        headers.add(.callID, registrationCallID)
        headers.add(.cseq, "\(registrationCSeq) REGISTER")
        headers.add(.contact, registrationContact)
        headers.add(.expires, String(expires))
        if instanceID != nil { headers.add(.supported, "outbound") }
        headers.add(.userAgent, userAgent)
        if let credentials { headers.add(credentials.0, credentials.1) }
        for (name, value) in extra { headers.add(name, value) }
        return SIPRequest(method: .register, uri: try SIPURI(parsing: "sip:\(domain)"), headers: headers)
    }

    // MARK: Receiving

    /// The next request of `method` matching `predicate`, skipping retransmissions; requests of other
    /// methods (or not matching) that arrive meanwhile stay buffered, as do responses.
    public func waitForRequest(
        _ method: SIPMethod, timeout: Duration = .seconds(15), where predicate: (SIPRequest) -> Bool = { _ in true }
    ) throws -> SIPRequest {
        let previous = awaitedMethod
        awaitedMethod = method
        defer { awaitedMethod = previous }
        return try wait(for: "a \(method) request", timeout: timeout) {
            guard let index = pendingRequests.firstIndex(where: { $0.method == method && predicate($0) }) else { return nil }
            return pendingRequests.remove(at: index)
        }
    }

    /// The first response, in arrival order, matching `predicate` (to any of this agent's requests);
    /// the others stay buffered.
    public func waitForResponse(timeout: Duration = .seconds(15), where predicate: (SIPResponse) -> Bool) throws -> SIPResponse {
        try wait(for: "a matching response", timeout: timeout) {
            guard let index = pendingResponses.firstIndex(where: predicate) else { return nil }
            return pendingResponses.remove(at: index)
        }
    }

    /// The final response (≥ 200) to `request` (same Call-ID and CSeq); its provisional responses are
    /// dropped from the buffer with it.
    public func waitForFinalResponse(to request: SIPRequest, timeout: Duration = .seconds(15)) throws -> SIPResponse {
        let callID = request.callID
        let cseq = request.cseq
        let final: SIPResponse = try wait(for: "the final response to \(request.method) \(cseq?.description ?? "")", timeout: timeout) {
            guard let index = pendingResponses.firstIndex(where: { $0.statusCode >= 200 && $0.callID == callID && $0.cseq == cseq })
            else { return nil }
            return pendingResponses.remove(at: index)
        }
        pendingResponses.removeAll { $0.statusCode < 200 && $0.callID == callID && $0.cseq == cseq }
        return final
    }

    /// Reads for `duration` (and lets linked agents read), doing the automatic work (answers,
    /// ACKs, repeated responses) and buffering the rest; returns at once when not connected.
    public func serve(for duration: Duration) throws {
        let deadline = ContinuousClock.now + duration
        while ContinuousClock.now < deadline, client != nil {
            try readOnce(until: deadline)
        }
    }

    /// Requests and responses read but not yet taken by a wait, oldest first.
    public var buffered: (requests: [SIPRequest], responses: [SIPResponse]) { (pendingRequests, pendingResponses) }

    // MARK: Answering (phone side)

    /// Sends a response to `request`: Via, From, To, Call-ID and CSeq copied, a To tag that stays the
    /// same for the dialog (none on 100); Record-Route copied and Contact added on 101–299 to INVITE;
    /// an SDP answer when `sdp`. Repeated when the request is retransmitted.
    public func respond(
        to request: SIPRequest, status: Int, reason: String? = nil, sdp: Bool = false, headers extra: [(String, String)] = []
    ) throws {
        let tag = status == 100 ? nil : localTag(for: request)
        var response = SIPResponse(replyingTo: request, statusCode: status, reasonPhrase: reason, toTag: tag)
        if request.method == .invite, (101..<300).contains(status) {
            for line in request.headers.lines(.recordRoute) { response.headers.add(.recordRoute, line) }
            response.headers.add(.contact, "<\(contactURI)>")
        }
        if request.method == .options, (200..<300).contains(status) {
            response.headers.add(.allow, Self.allowedMethods)
            response.headers.add(.accept, "application/sdp")
        }
        response.headers.add(.server, userAgent)
        for (name, value) in extra { response.headers.add(SIPHeader(name: name, value: value)) }
        if sdp {
            response.headers.add(.contentType, "application/sdp")
            response.body = sessionDescription()
        }
        let bytes = SIPSerializer.serialize(response)
        if let key = RequestKey(request) { lastResponses[key] = bytes }
        try send(bytes)
    }

    /// Phone side: 180 (when `ringing`) then 200 with an SDP answer; returns the dialog (route set =
    /// the INVITE's Record-Route in order, remote target = its Contact). The ACK is awaited with
    /// `TestDialog.waitForAck()`.
    public func answer(_ invite: SIPRequest, ringing: Bool = true) throws -> TestDialog {
        if ringing { try respond(to: invite, status: 180) }
        try respond(to: invite, status: 200, sdp: true)
        return try TestDialog(answering: invite, localTag: localTag(for: invite), agent: self)
    }

    /// Phone side, while ringing: waits for the CANCEL of `invite` (same top Via branch), answers it
    /// 200 and the INVITE 487, then waits for the ACK of the 487 (when `waitForAck`). Returns the CANCEL.
    @discardableResult
    public func handleCancel(of invite: SIPRequest, waitForAck: Bool = true, timeout: Duration = .seconds(15)) throws -> SIPRequest {
        let deadline = ContinuousClock.now + timeout
        let callID = invite.callID
        let branch = invite.topVia?.branch
        let cancel = try waitForRequest(.cancel, timeout: timeout) { $0.callID == callID && $0.topVia?.branch == branch }
        try respond(to: cancel, status: 200)
        try respond(to: invite, status: 487)
        if waitForAck {
            let number = invite.cseq?.number
            _ = try waitForRequest(.ack, timeout: ContinuousClock.now.duration(to: deadline)) {
                $0.callID == callID && $0.topVia?.branch == branch && $0.cseq?.number == number
            }
        }
        return cancel
    }

    /// True when a response was already sent to `request` (or to an earlier copy of it).
    public func hasResponded(to request: SIPRequest) -> Bool {
        RequestKey(request).map { lastResponses[$0] != nil } ?? false
    }

    // MARK: Calling (caller side)

    /// Caller side: INVITE to `target` (Request-URI and To), sent straight to the server with no
    /// Route; From = the AOR with a new tag, Contact = `contactURI`, an SDP offer, Max-Forwards 70,
    /// then `headers`. With `authenticate`, a 407/401 is answered once (its ACK, then a new INVITE
    /// with CSeq + 1 and credentials) whenever the agent reads it. Returns as soon as it is sent.
    public func invite(_ target: String, authenticate: Bool = true, headers extra: [(String, String)] = []) throws -> TestOutgoingCall {
        let callID = SecureRandom.hex(12)
        let tag = SecureRandom.hex(6)
        var headers = SIPHeaders()
        headers.add(.via, newVia())
        headers.add(.maxForwards, "70")
        headers.add(.from, "<\(addressOfRecord)>;tag=\(tag)")
        headers.add(.to, "<\(target)>")
        headers.add(.callID, callID)
        headers.add(.cseq, "1 INVITE")
        headers.add(.contact, "<\(contactURI)>")
        headers.add(.allow, Self.allowedMethods)
        headers.add(.userAgent, userAgent)
        for (name, value) in extra { headers.add(SIPHeader(name: name, value: value)) }
        headers.add(.contentType, "application/sdp")
        let request = SIPRequest(method: .invite, uri: try SIPURI(parsing: target), headers: headers, body: sessionDescription())
        let call = OutgoingInvite(invite: request, authenticate: authenticate)
        calls[callID] = call
        try send(request)
        return TestOutgoingCall(call: call, agent: self)
    }

    // MARK: Internals shared with dialogs and calls

    static let allowedMethods = "INVITE, ACK, CANCEL, BYE, OPTIONS"

    /// A Via for a new client transaction: our transport, address, `rport`, a fresh branch.
    func newVia() -> String {
        "SIP/2.0/\(transport.rawValue.uppercased()) \(localHost):\(localPort);branch=\(SIPVia.magicCookie)\(SecureRandom.hex(10));rport"
    }

    func send(_ request: SIPRequest) throws {
        try send(SIPSerializer.serialize(request))
    }

    func send(_ bytes: [UInt8]) throws {
        guard let client else { throw TestUserAgentError.notConnected(disconnection) }
        do {
            try client.send(bytes)
        } catch TestSIPClientError.closedByPeer where transport == .udp {
            // An ICMP port unreachable reported on this send: the datagram may be lost, as UDP allows.
            try? client.send(bytes)
        } catch TestSIPClientError.closedByPeer {
            disconnect("the server closed the connection")
            throw TestUserAgentError.notConnected(disconnection)
        }
    }

    /// Remembers an ACK sent for a 2xx, to send again when that 2xx is retransmitted.
    func rememberAck(_ ack: [UInt8], callID: String, toTag: String, cseq: UInt32) {
        acksFor2xx[AckKey(callID: callID, toTag: toTag, cseq: cseq)] = ack
    }

    /// Removes `response` from the buffer when it is still there.
    func takeBuffered(_ response: SIPResponse) {
        if let index = pendingResponses.firstIndex(of: response) { pendingResponses.remove(at: index) }
    }

    /// The digest credentials answering `challenge` (401: Authorization, 407: Proxy-Authorization),
    /// or nil when it offers no digest this agent can compute.
    func credentials(answering challenge: SIPResponse, method: String, uri: String) -> (SIPHeaderName, String)? {
        digest.preferredAlgorithm = preferredDigestAlgorithm
        return digest.authorization(answering: challenge, method: method, uri: uri).map { ($0.name, $0.value) }
    }

    /// Waits until `take` finds something, reading and dispatching messages meanwhile.
    func wait<T>(for what: String, timeout: Duration, take: () throws -> T?) throws -> T {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let found = try take() { return found }
            guard client != nil else { throw TestUserAgentError.notConnected("\(disconnection), while waiting for \(what)") }
            guard ContinuousClock.now < deadline else { throw TestUserAgentError.timedOut(what) }
            try readOnce(until: deadline)
        }
    }

    // MARK: Private

    private var localHost: String { serverHost.contains(":") ? "[\(serverHost)]" : serverHost }

    private func disconnect(_ why: String) {
        guard let client else { return }
        lastLocalPort = client.localPort
        client.close()
        self.client = nil
        disconnection = why
    }

    /// The To tag this agent uses for the dialog `request` belongs to (the request's own when it has one).
    private func localTag(for request: SIPRequest) -> String {
        if let tag = request.to?.tag { return tag }
        let key = (request.callID ?? "") + "|" + (request.from?.tag ?? "")
        if let tag = localTags[key] { return tag }
        let tag = SecureRandom.hex(6)
        localTags[key] = tag
        return tag
    }

    /// A minimal audio offer/answer on our address.
    private func sessionDescription() -> [UInt8] {
        let family = serverHost.contains(":") ? "IP6" : "IP4"
        let session = UInt32.random(in: 1...UInt32.max)
        let port = 20_000 + 2 * Int(localPort % 10_000)
        let lines = [
            "v=0", "o=- \(session) \(session) IN \(family) \(serverHost)", "s=-", "c=IN \(family) \(serverHost)", "t=0 0",
            "m=audio \(port) RTP/AVP 0 8 101", "a=rtpmap:0 PCMU/8000", "a=rtpmap:8 PCMA/8000",
            "a=rtpmap:101 telephone-event/8000", "a=sendrecv",
        ]
        return Array((lines.joined(separator: "\r\n") + "\r\n").utf8)
    }

    /// Lets linked agents work without blocking, then reads this socket once (briefly when linked).
    private func readOnce(until deadline: ContinuousClock.Instant) throws {
        linked.removeAll { $0.agent == nil }
        for other in linked { other.agent?.serveWithoutWaiting() }
        guard let client else { return }
        let remaining = ContinuousClock.now.duration(to: deadline)
        let slice = linked.isEmpty ? remaining : min(remaining, .milliseconds(5))
        let bytes: [UInt8]?
        do {
            bytes = try client.receive(timeout: slice)
        } catch TestSIPClientError.closedByPeer where transport == .udp {
            return  // an ICMP port unreachable: the server is not there (yet); keep waiting
        } catch TestSIPClientError.closedByPeer {
            disconnect("the server closed the connection")
            return
        }
        if let bytes { try dispatch(bytes) }
    }

    /// Reads and dispatches what is already there, without waiting (as a linked agent).
    private func serveWithoutWaiting() {
        while let client {
            do {
                guard let bytes = try client.receive(timeout: .zero) else { return }
                try dispatch(bytes)
            } catch TestSIPClientError.closedByPeer where transport == .udp {
                return
            } catch TestSIPClientError.closedByPeer {
                disconnect("the server closed the connection")
                return
            } catch {
                return
            }
        }
    }

    private func dispatch(_ bytes: [UInt8]) throws {
        guard !bytes.isEmpty, let message = try? SIPParser.parse(bytes) else { return }
        switch message {
        case .request(let request): try dispatch(request)
        case .response(let response): try dispatch(response)
        }
    }

    private func dispatch(_ request: SIPRequest) throws {
        if let key = RequestKey(request), !seenRequests.insert(key).inserted {
            if let last = lastResponses[key] { try send(last) }
            return
        }
        if request.method == .options, answersOptions, awaitedMethod != .options {
            try respond(to: request, status: 200)
            return
        }
        if request.method == .bye, answersBye, request.to?.tag != nil {
            try respond(to: request, status: 200)
        }
        pendingRequests.append(request)
    }

    private func dispatch(_ response: SIPResponse) throws {
        guard let cseq = response.cseq, let callID = response.callID else { return }
        let branch = response.topVia?.branch ?? ""
        let toTag = response.to?.tag ?? ""
        let status = response.statusCode
        let isNew = status < 200
            || seenFinalResponses.insert(
                ResponseKey(callID: callID, branch: branch, cseq: cseq.number, method: cseq.method.rawValue, status: status, toTag: toTag)
            ).inserted
        let call = cseq.method == .invite ? calls[callID] : nil
        if let call, status >= 300, let invite = call.sent[branch] {
            try acknowledge(response, of: invite)
            guard isNew else { return }
            if status == 401 || status == 407, call.authenticate, !call.challengeAnswered,
                cseq.number == call.current.cseq?.number, try answerChallenge(response, of: call)
            {
                call.responses.append(response)
                return
            }
        } else if call != nil, (200..<300).contains(status),
            let ack = acksFor2xx[AckKey(callID: callID, toTag: toTag, cseq: cseq.number)]
        {
            try send(ack)
            return
        }
        guard isNew else { return }
        call?.responses.append(response)
        pendingResponses.append(response)
    }

    /// The ACK of a non-2xx final response (RFC 3261 §17.1.1.3): the INVITE's Request-URI, top Via,
    /// From, Call-ID, CSeq number and Route; the response's To.
    private func acknowledge(_ response: SIPResponse, of invite: SIPRequest) throws {
        var headers = SIPHeaders()
        if let via = invite.headers.values(.via).first { headers.add(.via, via) }
        headers.add(.maxForwards, "70")
        for line in invite.headers.lines(.route) { headers.add(.route, line) }
        headers.add(.from, invite.headers[.from] ?? "")
        headers.add(.to, response.headers[.to] ?? "")
        headers.add(.callID, invite.callID ?? "")
        headers.add(.cseq, "\(invite.cseq?.number ?? 1) ACK")
        headers.add(.userAgent, userAgent)
        try send(SIPRequest(method: .ack, uri: invite.uri, headers: headers))
    }

    /// Sends the call's INVITE again with CSeq + 1, a new branch and credentials; false when the
    /// challenge offers nothing this agent can answer.
    private func answerChallenge(_ challenge: SIPResponse, of call: OutgoingInvite) throws -> Bool {
        guard let credentials = credentials(answering: challenge, method: "INVITE", uri: call.current.uri.description) else {
            return false
        }
        var next = call.current
        next.headers.set(.via, newVia())
        next.headers.set(.cseq, "\((call.current.cseq?.number ?? 1) + 1) INVITE")
        next.headers.remove(.authorization)
        next.headers.remove(.proxyAuthorization)
        next.headers.add(credentials.0, credentials.1)
        call.challengeAnswered = true
        call.record(next)
        try send(next)
        return true
    }
}

/// A weak reference to a linked agent (agents link each other both ways).
private struct WeakAgent {
    weak var agent: TestUserAgent?

    init(_ agent: TestUserAgent) { self.agent = agent }
}

/// What identifies a request and its retransmissions.
private struct RequestKey: Hashable {
    let callID: String
    let branch: String
    let cseq: UInt32
    let method: String

    init?(_ request: SIPRequest) {
        guard let cseq = request.cseq else { return nil }
        self.callID = request.callID ?? ""
        self.branch = request.topVia?.branch ?? ""
        self.cseq = cseq.number
        self.method = cseq.method.rawValue
    }
}

/// What identifies a final response and its retransmissions.
private struct ResponseKey: Hashable {
    let callID: String
    let branch: String
    let cseq: UInt32
    let method: String
    let status: Int
    let toTag: String
}

/// The 2xx an ACK was sent for.
private struct AckKey: Hashable {
    let callID: String
    let toTag: String
    let cseq: UInt32
}

/// Digest arithmetic for scripted test servers (RFC 7616/8760 with `qop=auth` or none), so a test
/// that plays the server needs no hashing of its own: the challenge line to send, the parameters of
/// an Authorization, and its check. Pure functions, thread-safe.
public enum TestDigest {
    /// `Digest realm="…", nonce="…", algorithm=…, qop="auth"[, opaque="…"]`; `algorithm` is `MD5` or `SHA-256`.
    public static func challenge(realm: String, nonce: String, algorithm: String = "SHA-256", opaque: String? = nil) -> String {
        var line = "Digest realm=\"\(realm)\", nonce=\"\(nonce)\", algorithm=\(algorithm), qop=\"auth\""
        if let opaque { line += ", opaque=\"\(opaque)\"" }
        return line
    }

    /// The parameters of an Authorization/Proxy-Authorization value, names lower-cased, quotes removed;
    /// empty when it is not a digest answer.
    public static func parameters(of authorization: String) -> [String: String] {
        let text = authorization.trimmingSIPWhitespace
        guard text.count > 7, text.prefix(7).lowercased() == "digest " else { return [:] }
        var parameters: [String: String] = [:]
        for item in SIPHeaderValueScanner.splitList(String(text.dropFirst(7))) {
            guard let equals = item.firstIndex(of: "=") else { continue }
            let name = String(item[..<equals]).trimmingSIPWhitespace.lowercased()
            parameters[name] = SIPHeaderValueScanner.unquote(String(item[item.index(after: equals)...]).trimmingSIPWhitespace)
        }
        return parameters
    }

    /// True when `authorization` carries the right `response` for `method` and `password` (its own
    /// username, realm, nonce, uri, algorithm, and qop/nc/cnonce when present).
    public static func verify(authorization: String, method: String, password: String) -> Bool {
        let fields = parameters(of: authorization)
        guard let username = fields["username"], let realm = fields["realm"], let nonce = fields["nonce"],
            let uri = fields["uri"], let answer = fields["response"],
            let algorithm = Digest.Algorithm.allCases.first(where: { $0.rawValue.caseInsensitiveEquals(fields["algorithm"] ?? "MD5") })
        else { return false }
        let ha1 = Digest.hex(algorithm, "\(username):\(realm):\(password)")
        let ha2 = Digest.hex(algorithm, "\(method):\(uri)")
        let expected: String
        if let qop = fields["qop"] {
            guard qop == "auth", let nc = fields["nc"], let cnonce = fields["cnonce"] else { return false }
            expected = Digest.hex(algorithm, "\(ha1):\(nonce):\(nc):\(cnonce):auth:\(ha2)")
        } else {
            expected = Digest.hex(algorithm, "\(ha1):\(nonce):\(ha2)")
        }
        return Digest.constantTimeEquals(Array(expected.utf8), Array(answer.lowercased().utf8))
    }
}
