public import SIPMessage

/// The INVITE server transaction of RFC 3261 §17.2.1 with the Accepted state of RFC 6026 §7.1: a
/// value whose `mutating` event methods return the actions its owner must carry out. It does no
/// I/O and reads no clock; it is not shared, its owner serialises the calls.
public struct InviteServerTransaction: Hashable, Sendable {
    /// The states of Figure 7 of RFC 3261 as amended by RFC 6026 (Figure 5).
    public enum State: Hashable, Sendable {
        case proceeding, completed, confirmed, accepted, terminated
    }

    public private(set) var state: State = .proceeding
    /// The INVITE that created the transaction.
    public let request: SIPRequest
    /// True on TCP/TLS: no retransmission of the final response and timer I is zero (§17.2.1).
    public let isReliable: Bool
    public let timers: TransactionTimers
    /// The response a retransmitted INVITE gets back: the latest provisional in Proceeding, the
    /// final response in Completed.
    public private(set) var lastResponse: SIPResponse?
    /// The next interval of timer G.
    private var timerGInterval: Duration

    public init(request: SIPRequest, isReliable: Bool, timers: TransactionTimers) {
        self.request = request
        self.isReliable = isReliable
        self.timers = timers
        self.timerGInterval = timers.t1
    }

    /// The final response sent, once there is one.
    public var finalResponse: SIPResponse? {
        guard let lastResponse, lastResponse.statusCode >= 200 else { return nil }
        return lastResponse
    }

    /// The transaction was just created by `request`.
    public mutating func start() -> [ServerTransactionAction] {
        // §17.2.1: the server transaction MUST send 100 (Trying) unless the TU answers within
        // 200 ms; the core may wait seconds for a phone woken by push, so it is always sent.
        let trying = SIPResponse(replyingTo: request, statusCode: 100)
        lastResponse = trying
        return [.send(trying), .passToCore(request)]
    }

    /// A request matched this transaction (§17.2.3): a retransmitted INVITE or an ACK.
    public mutating func receivedRequest(_ incoming: SIPRequest) -> [ServerTransactionAction] {
        let isACK = incoming.method == .ack
        switch state {
        case .proceeding where !isACK, .completed where !isACK:
            // §17.2.1: a retransmitted INVITE gets the latest provisional (Proceeding) or the
            // final response (Completed) again; it never reaches the TU.
            return lastResponse.map { [.send($0)] } ?? []
        case .completed:
            // §17.2.1: ACK in Completed moves to Confirmed; timer I absorbs ACK retransmissions
            // (T4 on unreliable transports, zero on reliable ones, which terminates at once).
            state = .confirmed
            var actions: [ServerTransactionAction] = []
            if !isReliable { actions.append(.cancelTimer(.g)) }
            actions.append(.cancelTimer(.h))
            if isReliable {
                state = .terminated
                actions.append(.terminated)
            } else {
                actions.append(.startTimer(.i, after: timers.t4))
            }
            return actions
        case .accepted where isACK:
            // RFC 6026 §7.1: an ACK for the 2xx matching the transaction in Accepted goes to the TU.
            return [.passToCore(incoming)]
        case .proceeding, .confirmed, .accepted, .terminated:
            // ACK before a final response, anything in Confirmed, and INVITE retransmissions in
            // Accepted (RFC 6026 §7.1) are absorbed.
            return []
        }
    }

    /// The core (TU) sends a response through this transaction.
    public mutating func sendResponse(_ response: SIPResponse) -> [ServerTransactionAction] {
        let code = response.statusCode
        switch state {
        case .proceeding where code < 200:
            // §17.2.1: provisional responses are sent and remembered for INVITE retransmissions.
            lastResponse = response
            return [.send(response)]
        case .proceeding where code < 300:
            // RFC 6026 §7.1: a 2xx moves to Accepted (no longer Terminated as in RFC 3261); the
            // TU retransmits the 2xx itself, timer L bounds the wait for INVITE retransmissions.
            lastResponse = response
            state = .accepted
            return [.send(response), .startTimer(.l, after: timers.transactionTimeout)]
        case .proceeding:
            // §17.2.1: a 300-699 response moves to Completed; timer G retransmits it on
            // unreliable transports, timer H bounds the wait for the ACK.
            lastResponse = response
            state = .completed
            var actions: [ServerTransactionAction] = [.send(response)]
            if !isReliable { actions.append(.startTimer(.g, after: timerGInterval)) }
            actions.append(.startTimer(.h, after: timers.transactionTimeout))
            return actions
        case .accepted where (200..<300).contains(code):
            // RFC 6026 §7.1: the TU's 2xx retransmissions pass through in Accepted.
            return [.send(response)]
        case .accepted, .completed, .confirmed, .terminated:
            return []
        }
    }

    /// A timer this transaction started fired.
    public mutating func timerFired(_ timer: TransactionTimer) -> [ServerTransactionAction] {
        switch (state, timer) {
        case (.completed, .g) where !isReliable:
            // §17.2.1: retransmit the final response and double G, capped at T2.
            timerGInterval = min(timerGInterval * 2, timers.t2)
            return (lastResponse.map { [.send($0)] } ?? []) + [.startTimer(.g, after: timerGInterval)]
        case (.completed, .h):
            // §17.2.1: no ACK within 64*T1: terminate and tell the TU.
            state = .terminated
            let stopG: [ServerTransactionAction] = isReliable ? [] : [.cancelTimer(.g)]
            return stopG + [.reportFailure(.timedOut), .terminated]
        case (.confirmed, .i), (.accepted, .l):
            // §17.2.1 timer I; RFC 6026 §7.1 timer L.
            state = .terminated
            return [.terminated]
        default:
            return []
        }
    }

    /// The transport failed to deliver a response (§17.2.4): terminate and tell the TU.
    public mutating func transportError() -> [ServerTransactionAction] {
        switch state {
        case .proceeding, .completed, .accepted:
            state = .terminated
            return [.reportFailure(.transportError), .terminated]
        case .confirmed, .terminated:
            return []
        }
    }
}
