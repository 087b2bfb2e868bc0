public import Foundation
import Crypto
public import Registrar
public import SIPDNS
public import SIPMessage
public import SIPProxy
public import SIPTransaction

/// One call from an extension to a number or domain outside Rouse, through an outbound route
/// (issue 19), as a value: events go in with the time, actions come out. `HopFailover` walks the
/// route's next hops; this adds what a call needs around it: the request each attempt sends (the
/// number as the route translates it, the caller identity the route asks for), the trunk's digest
/// challenge answered with the route's credentials, the caller's CANCEL, and what the caller hears.
/// The shell (`CallCoordinator`) resolves, sends, times and relays.
///
/// A 401 or 407 is answered once per hop with the route's credentials, in a new transaction with the
/// same CSeq (as Kamailio's `uac_auth` does by default: the caller's dialog knows nothing of it, so
/// its later requests keep their CSeq order). A trunk that still refuses, or a route without
/// credentials, gives the caller 403: the caller cannot answer a trunk's challenge.
///
/// Threading: a value; the coordinator keeps each outside call's machine on its queue.
public struct OutsideCall<Flow: Hashable & Sendable>: Sendable {
    /// What the call is given when it is admitted; fixed for its life.
    public struct Setup: Sendable {
        public var id: UUID
        public var invite: SIPRequest
        public var caller: AddressOfRecord
        public var target: DialledTarget
        public var route: OutboundRoute
        /// The route's digest password (with `route.username`), when it has credentials.
        public var password: String?
        /// The To tag of Rouse's own answers (503 when every hop failed, 487).
        public var toTag: String
        public var serverName: String
        /// Hops a 503's Retry-After still holds calls off.
        public var heldOff: Set<ResolvedHop>
        /// A forwarded call's: the caller it asserts (the original caller, not the extension that
        /// forwarded it), and the answer the caller gets when every hop fails (the one the call
        /// would have had without the forwarding).
        public var forwarded: (identity: SIPNameAddress?, fallback: SIPResponse)?

        public init(
            id: UUID = UUID(), invite: SIPRequest, caller: AddressOfRecord, target: DialledTarget, route: OutboundRoute, password: String?,
            toTag: String, serverName: String, heldOff: Set<ResolvedHop> = [], forwarded: (identity: SIPNameAddress?, fallback: SIPResponse)? = nil
        ) {
            self.forwarded = forwarded
            self.id = id
            self.invite = invite
            self.caller = caller
            self.target = target
            self.route = route
            self.password = password
            self.toTag = toTag
            self.serverName = serverName
            self.heldOff = heldOff
        }
    }

    public enum Event: Sendable {
        case start
        /// The route hop the machine asked to resolve, resolved (empty: nothing found).
        case resolved([ResolvedHop])
        /// Leg `leg`'s INVITE went out (its request and flow), or could not (nil).
        case sent(leg: Int, SentRequest<Flow>?)
        /// Leg `leg`'s client transaction reported a response or a failure.
        case response(leg: Int, ClientTransactionEvent)
        case hopTimerFired(attempt: Int)
        case callerCanceled(reason: String?)
        /// Rouse is stopping: a call not yet answered ends with 503.
        case stopping(reason: String)
    }

    public enum Action: Sendable {
        /// A response to the caller through its INVITE server transaction.
        case respond(SIPResponse)
        /// A 2xx upstream (through the server transaction, or over the caller's flow).
        case relay2xx(SIPResponse)
        case resolve(RouteHop)
        /// Sends leg `leg`'s INVITE to `hop` in a new client transaction; the send's result comes
        /// back as `.sent`.
        case send(leg: Int, request: SIPRequest, to: ResolvedHop)
        case cancel(SIPRequest, over: Flow)
        case startHopTimer(attempt: Int, after: Duration)
        case stopHopTimer(attempt: Int)
        case holdOff(ResolvedHop, for: Duration)
        /// A line of the journey.
        case record(OutsideCallFact)
        /// The call is over for the caller (answered, refused or given up): how.
        case ended(outcome: CallOutcome, status: Int, reason: String)
    }

    /// One client transaction: an attempt's INVITE, or its second go with credentials.
    struct Leg: Sendable {
        let attempt: Int
        let hop: ResolvedHop
        let request: SIPRequest
        let authenticated: Bool
        var sent: SIPRequest?
        var flow: Flow?
        var provisional = false
        var final: Int?
        /// HopFailover left it (silence) or the call ended: CANCEL it if it answers 1xx (§9.1).
        var abandoned = false
        var cancelSent = false
    }

    public let setup: Setup
    private var failover: HopFailover
    private var legs: [Int: Leg] = [:]
    private var currentRouteHop: RouteHop?
    private var finished = false
    private var canceled = false
    private var out: [Action] = []

    public init(_ setup: Setup) {
        self.setup = setup
        failover = HopFailover(hops: setup.route.hops, hopTimeout: setup.route.hopTimeout, heldOff: setup.heldOff)
    }

    /// The call ended for the caller.
    public var isFinished: Bool { finished }

    public mutating func handle(_ event: Event, at now: Date) -> [Action] {
        out = []
        defer { out = [] }
        switch event {
        case .start:
            out.append(.record(.routed(route: setup.route.name, dialled: setup.target.description, sentAs: setup.route.translated(setup.target))))
            apply(failover.start(), response: nil)
        case .resolved(let hops):
            apply(failover.handle(.resolved(hops)), response: nil)
        case .sent(let leg, let result):
            sent(leg, result)
        case .response(let leg, let event):
            response(leg, event)
        case .hopTimerFired(let attempt):
            apply(failover.handle(.hopTimerFired(attempt: attempt)), response: nil)
        case .callerCanceled(let reason):
            guard !finished else { break }
            canceled = true
            cancelReason = reason
            apply(failover.handle(.callerCancelled), response: nil)
            if !finished { finish(own(487, "Request Terminated"), outcome: .canceled, reason: "the caller hung up") }
        case .stopping(let reason):
            guard !finished else { break }
            canceled = true
            apply(failover.handle(.callerCancelled), response: nil)
            var response = own(503, "Service Unavailable")
            response.headers.add(.retryAfter, "5")
            response.headers.add(.reason, ProxyRules.reason(cause: 503, text: reason))
            finish(response, outcome: .unanswered, reason: reason)
        }
        return out
    }

    private var cancelReason: String?

    // MARK: - Legs

    private mutating func sent(_ number: Int, _ result: SentRequest<Flow>?) {
        guard var leg = legs[number] else { return }
        guard let result else {
            leg.final = 503
            legs[number] = leg
            apply(failover.handle(.transportFailed(attempt: leg.attempt, reason: "could not send")), response: nil)
            return
        }
        leg.sent = result.request
        leg.flow = result.flow
        legs[number] = leg
    }

    private mutating func response(_ number: Int, _ event: ClientTransactionEvent) {
        guard var leg = legs[number] else { return }
        let response = event.response
        let status = response.statusCode
        if status < 200 {
            guard status > 100 else {
                if !leg.abandoned { apply(failover.handle(.response(attempt: leg.attempt, status: 100, retryAfter: nil)), response: nil) }
                return
            }
            leg.provisional = true
            legs[number] = leg
            if leg.abandoned || finished {
                cancelLeg(number, reason: cancelReason)
                return
            }
            out.append(.record(.hopResponse(hop: leg.hop.description, attempt: leg.attempt, status: status, reason: response.reasonPhrase)))
            apply(failover.handle(.response(attempt: leg.attempt, status: status, retryAfter: nil)), response: response)
            return
        }
        let success = (200..<300).contains(status)
        guard leg.final == nil || success else { return }
        let firstFinal = leg.final == nil
        leg.final = status
        legs[number] = leg
        if success, finished || leg.abandoned {
            // §16.7 step 5: every 2xx goes upstream, one that crossed the caller's CANCEL too (the
            // caller ACKs and BYEs it); only a hop left for silence, whose place another took, is not.
            if leg.abandoned && !canceled {
                if firstFinal { out.append(.record(.lateAnswerIgnored(hop: leg.hop.description))) }
            } else {
                var upstream = ProxyRules.upstream(response)
                restoreFrom(in: &upstream)
                out.append(.relay2xx(upstream))
            }
            return
        }
        if leg.abandoned || finished { return }
        switch event {
        case .timedOut:
            apply(failover.handle(.transportFailed(attempt: leg.attempt, reason: "no final answer (transaction timed out)")), response: nil)
            return
        case .transportError:
            apply(failover.handle(.transportFailed(attempt: leg.attempt, reason: "the connection failed")), response: nil)
            return
        case .response:
            out.append(.record(.hopResponse(hop: leg.hop.description, attempt: leg.attempt, status: status, reason: response.reasonPhrase)))
        }
        if (status == 401 || status == 407), !leg.authenticated, !canceled, let retry = authenticatedRetry(of: leg, answering: response) {
            // The challenge is the hop's answer (it is alive): its hop timer stops, and the
            // authenticated INVITE goes to the same address.
            out.append(.record(.hopOutcome(hop: leg.hop.description, outcome: "\(status): answered with the route's credentials")))
            apply(failover.handle(.response(attempt: leg.attempt, status: 100, retryAfter: nil)), response: nil)
            startLeg(attempt: leg.attempt, hop: leg.hop, request: retry, authenticated: true)
            return
        }
        var relayed = response
        if status == 401 || status == 407 {
            // The caller cannot answer the trunk's challenge: it is Rouse's credentials that failed.
            relayed = own(403, "Forbidden")
            relayed.headers.add(.reason, ProxyRules.reason(cause: 403, text: "the trunk refused the route's credentials"))
        }
        let retryAfter = status == 503 ? response.headers[.retryAfter].flatMap(Self.retryAfter) : nil
        apply(failover.handle(.response(attempt: leg.attempt, status: status, retryAfter: retryAfter)), response: relayed)
    }

    private mutating func startLeg(attempt: Int, hop: ResolvedHop, request: SIPRequest, authenticated: Bool) {
        let number = (legs.keys.max() ?? 0) + 1
        legs[number] = Leg(attempt: attempt, hop: hop, request: request, authenticated: authenticated)
        out.append(.send(leg: number, request: request, to: hop))
    }

    private func currentLeg(of attempt: Int) -> Int? {
        legs.filter { $0.value.attempt == attempt }.keys.max()
    }

    private mutating func cancelLeg(_ number: Int, reason: String?) {
        guard var leg = legs[number] else { return }
        leg.abandoned = true
        if leg.provisional, leg.final == nil, !leg.cancelSent, let sent = leg.sent, let flow = leg.flow {
            leg.cancelSent = true
            out.append(.cancel(ProxyRules.cancel(of: sent, reason: reason), over: flow))
        }
        legs[number] = leg
    }

    // MARK: - Failover actions

    private mutating func apply(_ actions: [HopFailover.Action], response: SIPResponse?) {
        for action in actions {
            switch action {
            case .resolve(let hop):
                currentRouteHop = hop
                out.append(.resolve(hop))
            case .send(let attempt, let hop):
                out.append(.record(.hopTried(hop: hop.description, attempt: attempt)))
                startLeg(attempt: attempt, hop: hop, request: request(to: hop), authenticated: false)
            case .startHopTimer(let attempt, let after):
                out.append(.startHopTimer(attempt: attempt, after: after))
            case .stopHopTimer(let attempt):
                out.append(.stopHopTimer(attempt: attempt))
            case .abandon(let attempt), .cancel(let attempt):
                if let leg = currentLeg(of: attempt) { cancelLeg(leg, reason: cancelReason) }
            case .holdOff(let hop, let duration):
                out.append(.holdOff(hop, for: duration))
            case .record(let attempt):
                out.append(.record(.hopOutcome(hop: attempt.hop, outcome: attempt.outcome)))
            case .relay:
                guard let response, !finished else { continue }
                relay(response)
            case .exhausted(let status, let reason):
                guard !finished else { continue }
                if canceled { continue }
                var answer = own(status, reason)
                let words = status == 408 ? "no hop of route \(setup.route.name) answered" : "every hop of route \(setup.route.name) failed"
                answer.headers.add(.reason, ProxyRules.reason(cause: status, text: words))
                finish(setup.forwarded?.fallback ?? answer, outcome: .failed, reason: words)
            }
        }
    }

    private mutating func relay(_ response: SIPResponse) {
        var upstream = ProxyRules.upstream(response)
        restoreFrom(in: &upstream)
        let status = response.statusCode
        if status < 200 {
            out.append(.respond(upstream))
        } else if status < 300 {
            out.append(.relay2xx(upstream))
            finished = true
            out.append(.ended(outcome: .answered, status: status, reason: "answered"))
        } else {
            let canceledAnswer = canceled && status == 487
            finish(upstream, outcome: canceledAnswer ? .canceled : .failed, reason: canceledAnswer ? "the caller hung up" : "\(status) \(response.reasonPhrase)")
        }
    }

    private mutating func finish(_ response: SIPResponse, outcome: CallOutcome, reason: String) {
        guard !finished else { return }
        finished = true
        out.append(.respond(response))
        out.append(.ended(outcome: outcome, status: response.statusCode, reason: reason))
        for (number, leg) in legs where leg.final == nil { cancelLeg(number, reason: cancelReason) }
    }

    // MARK: - Requests

    /// The INVITE of an attempt: the Request-URI as the route translates the number, at the route
    /// hop's host (a domain route keeps the dialled URI), Max-Forwards one less, the caller's
    /// credentials for Rouse removed, and the caller identity the route asks for.
    func request(to hop: ResolvedHop) -> SIPRequest {
        var uri = setup.invite.uri
        if case .domain = setup.route.pattern {
            uri.scheme = uri.scheme == .tel ? .sip : uri.scheme
        } else {
            let target = currentRouteHop?.target
            let host = target.map { $0.host.contains(":") ? "[\($0.host)]" : $0.host } ?? (hop.ip.contains(":") ? "[\(hop.ip)]" : hop.ip)
            let scheme: SIPURI.Scheme = target?.secure == true ? .sips : .sip
            let user = setup.route.translated(setup.target)
            uri = setup.route.requestHost.map { SIPURI(scheme: scheme, user: user, host: $0) }
                ?? SIPURI(scheme: scheme, user: user, host: host, port: target?.port.map(Int.init))
        }
        var request = HistoryInfo.routed(ProxyRules.branchRequest(from: setup.invite, to: uri), from: setup.invite.uri)
        if setup.route.diversionHeader, request.headers.values(HistoryInfo.diversionHeader).isEmpty,
            let diversion = HistoryInfo.lastDiversion(of: setup.invite)
        {
            request = HistoryInfo.addingDiversion(to: request, from: diversion.from, cause: diversion.cause)
        }
        request.headers.remove(.authorization)
        request.headers.remove(Self.assertedIdentity)
        request.headers.remove(Self.preferredIdentity)
        switch setup.route.callerIdentity {
        case .assertedIdentity:
            let name = setup.invite.from?.displayName
            let identity = setup.forwarded.map { $0.identity }
                ?? SIPNameAddress(displayName: name, uri: SIPURI(user: setup.caller.number, host: setup.caller.domain))
            if let identity { request.headers.add(Self.assertedIdentity, identity.description) }
        case .fromNumber(let number):
            if var from = setup.invite.from {
                from.uri = SIPURI(user: number, host: setup.caller.domain)
                request.headers.set(.from, from.description)
            }
        case .unchanged:
            break
        }
        return request
    }

    /// The leg's INVITE again, with the route's answer to the trunk's challenge.
    private func authenticatedRetry(of leg: Leg, answering challenge: SIPResponse) -> SIPRequest? {
        guard let username = setup.route.username, let password = setup.password else { return nil }
        var client = DigestClient(username: username, password: password)
        let request = leg.request
        guard let header = client.authorization(answering: challenge, method: request.method.rawValue, uri: request.uri.description) else { return nil }
        var retry = request
        retry.headers.add(header.name, header.value)
        return retry
    }

    /// A From the route rewrote goes back to the caller as the caller sent it (the tag is the
    /// same either way; a strict UA also compares the URI).
    private func restoreFrom(in response: inout SIPResponse) {
        guard case .fromNumber = setup.route.callerIdentity, let from = setup.invite.headers[.from] else { return }
        response.headers.set(.from, from)
    }

    /// An answer of Rouse's own to the caller.
    private func own(_ status: Int, _ phrase: String) -> SIPResponse {
        var response = SIPResponse(replyingTo: setup.invite, statusCode: status, reasonPhrase: phrase, toTag: setup.toTag)
        response.headers.add(.server, setup.serverName)
        return response
    }

    static var assertedIdentity: SIPHeaderName { SIPHeaderName("P-Asserted-Identity") }
    static var preferredIdentity: SIPHeaderName { SIPHeaderName("P-Preferred-Identity") }

    /// `Retry-After: 120 (maintenance);duration=3600` → 120 s.
    static func retryAfter(_ value: String) -> Duration? {
        let digits = value.prefix { $0.isASCII && $0.isNumber }
        return Int(digits).map { .seconds($0) }
    }
}

/// A fact of an outside call's journey; the coordinator puts it in words.
public enum OutsideCallFact: Sendable, Equatable {
    case routed(route: String, dialled: String, sentAs: String)
    case hopTried(hop: String, attempt: Int)
    case hopResponse(hop: String, attempt: Int, status: Int, reason: String)
    case hopOutcome(hop: String, outcome: String)
    case lateAnswerIgnored(hop: String)

    /// The journey line.
    public var words: String {
        switch self {
        case .routed(let route, let dialled, let sentAs):
            return "outside call to \(dialled) by route \(route)" + (sentAs == dialled ? "" : ", sent as \(sentAs)")
        case .hopTried(let hop, let attempt): return "hop \(attempt): INVITE to \(hop)"
        case .hopResponse(let hop, _, let status, let reason): return "\(hop) answered \(status) \(reason)"
        case .hopOutcome(let hop, let outcome): return "\(hop): \(outcome)"
        case .lateAnswerIgnored(let hop): return "\(hop) answered 2xx after it was left for the next hop; not relayed"
        }
    }
}
