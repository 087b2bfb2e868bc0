public import SIPMessage

/// The non-INVITE server transaction of RFC 3261 §17.2.2: a value whose `mutating` event methods
/// return the actions its owner must carry out. It does no I/O and reads no clock; it is not
/// shared, its owner serialises the calls.
public struct NonInviteServerTransaction: Hashable, Sendable {
    /// The states of Figure 8 of RFC 3261.
    public enum State: Hashable, Sendable {
        case trying, proceeding, completed, terminated
    }

    public private(set) var state: State = .trying
    /// The request that created the transaction. Once Completed it keeps only the lines matching
    /// needs (§17.2.3: top Via, From, To, Call-ID, CSeq, Request-URI): Timer J holds a completed
    /// transaction for 64·T1 on UDP, and thousands of REGISTERs a second would otherwise keep
    /// every whole request alive for 32 s.
    public private(set) var request: SIPRequest
    /// True on TCP/TLS: timer J is zero (§17.2.2).
    public let isReliable: Bool
    public let timers: TransactionTimers
    /// The latest response sent, resent when the request is retransmitted.
    public private(set) var lastResponse: SIPResponse?

    public init(request: SIPRequest, isReliable: Bool, timers: TransactionTimers) {
        self.request = request
        self.isReliable = isReliable
        self.timers = timers
    }

    /// The transaction was just created by `request`: §17.2.2, the request goes to the TU.
    public mutating func start() -> [ServerTransactionAction] {
        [.passToCore(request)]
    }

    /// A retransmission of the request matched this transaction (§17.2.3).
    public mutating func receivedRequest(_ incoming: SIPRequest) -> [ServerTransactionAction] {
        switch state {
        case .proceeding, .completed:
            // §17.2.2: resend the latest response (provisional in Proceeding, final in Completed).
            return lastResponse.map { [.send($0)] } ?? []
        case .trying, .terminated:
            // §17.2.2: in Trying, retransmissions are discarded.
            return []
        }
    }

    /// The core (TU) sends a response through this transaction.
    public mutating func sendResponse(_ response: SIPResponse) -> [ServerTransactionAction] {
        switch state {
        case .trying, .proceeding:
            lastResponse = response
            if response.statusCode < 200 {
                // §17.2.2: a provisional response moves Trying to Proceeding.
                state = .proceeding
                return [.send(response)]
            }
            // §17.2.2: a final response moves to Completed; timer J (64*T1 unreliable, zero
            // reliable, which terminates at once) absorbs request retransmissions.
            if isReliable {
                state = .terminated
                return [.send(response), .terminated]
            }
            state = .completed
            request = request.keepingMatchingLines()
            return [.send(response), .startTimer(.j, after: timers.transactionTimeout)]
        case .completed, .terminated:
            // §17.2.2: further final responses from the TU are discarded.
            return []
        }
    }

    /// A timer this transaction started fired.
    public mutating func timerFired(_ timer: TransactionTimer) -> [ServerTransactionAction] {
        guard state == .completed, timer == .j else { return [] }
        state = .terminated
        return [.terminated]
    }

    /// The transport failed to deliver a response (§17.2.4): terminate and tell the TU.
    public mutating func transportError() -> [ServerTransactionAction] {
        guard state != .terminated else { return [] }
        state = .terminated
        return [.reportFailure(.transportError), .terminated]
    }
}
