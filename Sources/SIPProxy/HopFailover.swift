import RouseVocabulary
public import SIPDNS

/// An outside call's way through its route's next hops, one at a time (RFC 3263 §4.3 and the
/// field's habit, Kamailio's dispatcher and drouting alike): a hop is left for the next on a
/// transport error, on silence (no response at all within the route's hop timer) and on 408 or
/// 503 (a 503's `Retry-After` keeps every call off that hop for that long); never once a hop has
/// sent a provisional 18x, since the callee may be ringing. Each route hop is resolved when it is
/// reached (a name may give several addresses, each tried in turn). A value: events and the time in,
/// actions out; the shell sends, times, resolves and relays. Not thread-safe (a value).
public struct HopFailover: Sendable {
    /// What happened on the attempt in progress.
    public enum Event: Sendable, Hashable {
        /// The route hop asked for was resolved (empty: nothing found).
        case resolved([ResolvedHop])
        /// The request could not be sent, or the connection failed.
        case transportFailed(attempt: Int, reason: String)
        /// The hop timer of an attempt fired.
        case hopTimerFired(attempt: Int)
        /// A response to an attempt; `retryAfter` from a 503's header.
        case response(attempt: Int, status: Int, retryAfter: Duration?)
        /// The caller gave up (CANCEL).
        case callerCancelled
    }

    public enum Action: Sendable, Hashable {
        /// Resolve this route hop (RFC 3263), then feed `.resolved`.
        case resolve(RouteHop)
        /// Send the INVITE to `hop` as attempt `attempt` (a new client transaction, a new branch).
        case send(attempt: Int, to: ResolvedHop)
        case startHopTimer(attempt: Int, after: Duration)
        case stopHopTimer(attempt: Int)
        /// Stop the attempt's transaction without waiting for it: a CANCEL is due if it answers 1xx later (§9.1).
        case abandon(attempt: Int)
        /// CANCEL the attempt (it has answered provisionally).
        case cancel(attempt: Int)
        /// Keep every call off `hop` for `duration` (a 503 with Retry-After).
        case holdOff(ResolvedHop, for: Duration)
        /// Pass the response just given to the caller.
        case relay(attempt: Int)
        /// A line of the journey: the hop and what became of it.
        case record(HopAttempt)
        /// Every hop failed: answer the caller `status`.
        case exhausted(status: Int, reason: String)
    }

    /// One hop tried, for the journey and the admin pages.
    public struct HopAttempt: Sendable, Hashable {
        public var hop: String
        public var outcome: String
    }

    private let hops: [RouteHop]
    private let hopTimeout: Duration
    private let heldOff: Set<ResolvedHop>
    private var nextRouteHop = 0
    private var resolvedQueue: [ResolvedHop] = []
    private var attempt = 0
    private var current: ResolvedHop?
    private var provisional = false
    private var sawResponse = false
    private var finished = false
    /// What every failed attempt came to: all silence gives 408, anything else 503.
    private var onlySilence = true

    /// - Parameter heldOff: hops a 503's Retry-After still holds calls off (skipped while others remain).
    public init(hops: [RouteHop], hopTimeout: Duration, heldOff: Set<ResolvedHop> = []) {
        self.hops = hops
        self.hopTimeout = hopTimeout
        self.heldOff = heldOff
    }

    /// The attempt in progress, if any.
    public var currentAttempt: Int? { current == nil ? nil : attempt }

    public mutating func start() -> [Action] { advance() }

    public mutating func handle(_ event: Event) -> [Action] {
        guard !finished else { return [] }
        switch event {
        case .resolved(let found):
            guard current == nil, nextRouteHop > 0 else { return [] }
            if found.isEmpty {
                onlySilence = false
                return [.record(HopAttempt(hop: hops[nextRouteHop - 1].description, outcome: "not resolved"))] + advance()
            }
            // Held-off addresses are skipped while anything else remains; the last hop's are tried anyway.
            let usable = found.filter { !heldOff.contains($0) }
            let isLast = nextRouteHop == hops.count
            resolvedQueue = usable.isEmpty && isLast ? found : usable
            let skipped = usable.isEmpty && isLast ? [] : found.filter { heldOff.contains($0) }
            return skipped.map { .record(HopAttempt(hop: $0.description, outcome: "skipped: held off by Retry-After")) } + advance()
        case .transportFailed(let number, let reason):
            guard number == attempt, let hop = current, !sawResponse else { return [] }
            onlySilence = false
            return [.stopHopTimer(attempt: number), .record(HopAttempt(hop: hop.description, outcome: "transport error: \(reason)"))] + next()
        case .hopTimerFired(let number):
            guard number == attempt, let hop = current, !sawResponse else { return [] }
            return [.abandon(attempt: number), .record(HopAttempt(hop: hop.description, outcome: "no response in \(Self.seconds(hopTimeout))"))] + next()
        case .response(let number, let status, let retryAfter):
            guard number == attempt, let hop = current else { return [] }
            var actions: [Action] = []
            if !sawResponse {
                sawResponse = true
                actions.append(.stopHopTimer(attempt: number))
            }
            if status < 200 {
                if status >= 180 { provisional = true }
                return actions + (status == 100 ? [] : [.relay(attempt: number)])
            }
            if (status == 408 || status == 503) && !provisional {
                onlySilence = onlySilence && status == 408
                if status == 503, let retryAfter, retryAfter > .zero { actions.append(.holdOff(hop, for: retryAfter)) }
                return actions + [.record(HopAttempt(hop: hop.description, outcome: "\(status)"))] + next()
            }
            finished = true
            current = nil
            return actions + [.record(HopAttempt(hop: hop.description, outcome: "\(status)")), .relay(attempt: number)]
        case .callerCancelled:
            finished = true
            guard current != nil else { return [.exhausted(status: 487, reason: "Request Terminated")] }
            current = nil
            return sawResponse ? [.cancel(attempt: attempt)] : [.stopHopTimer(attempt: attempt), .abandon(attempt: attempt)]
        }
    }

    /// The attempt failed: on to the next address or route hop.
    private mutating func next() -> [Action] {
        current = nil
        return advance()
    }

    private mutating func advance() -> [Action] {
        if let hop = resolvedQueue.first {
            resolvedQueue.removeFirst()
            attempt += 1
            current = hop
            sawResponse = false
            return [.send(attempt: attempt, to: hop), .startHopTimer(attempt: attempt, after: hopTimeout)]
        }
        if nextRouteHop < hops.count {
            nextRouteHop += 1
            return [.resolve(hops[nextRouteHop - 1])]
        }
        finished = true
        return onlySilence && attempt > 0
            ? [.exhausted(status: 408, reason: "Request Timeout")] : [.exhausted(status: 503, reason: "Service Unavailable")]
    }

    /// `4 s`, `2.5 s`: a hop timeout in the journey's words.
    public static func seconds(_ duration: Duration) -> String {
        let milliseconds = duration.wholeMilliseconds
        return milliseconds % 1000 == 0 ? "\(milliseconds / 1000) s" : "\(Double(milliseconds) / 1000) s"
    }
}
