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
    /// The request that created the transaction, until it completes. Then it is let go: Timer J
    /// holds a completed transaction for 64·T1 on UDP, and matching needs no more of it than the
    /// key and, for an RFC 2543 key, its To tag (`requestToTag`, §17.2.3).
    public private(set) var request: SIPRequest?
    /// The To tag of the request, kept once Completed when the key is an RFC 2543 one.
    public private(set) var requestToTag: String?
    /// True when the transaction is matched by an RFC 2543 key (§17.2.3): its request's To tag
    /// is then kept past completion.
    public let matchesToTag: Bool
    /// True on TCP/TLS: timer J is zero (§17.2.2).
    public let isReliable: Bool
    public let timers: TransactionTimers
    /// The latest response sent, as its bytes, resent when the request is retransmitted.
    public private(set) var lastResponse: SentResponse?

    public init(request: SIPRequest, isReliable: Bool, timers: TransactionTimers, matchesToTag: Bool = false) {
        self.request = request
        self.matchesToTag = matchesToTag
        self.isReliable = isReliable
        self.timers = timers
    }

    /// The transaction was just created by `request`: §17.2.2, the request goes to the TU.
    public mutating func start() -> [ServerTransactionAction] {
        request.map { [.passToCore($0)] } ?? []
    }

    /// A retransmission of the request matched this transaction (§17.2.3).
    public mutating func receivedRequest(_ incoming: SIPRequest) -> [ServerTransactionAction] {
        switch state {
        case .proceeding, .completed:
            // §17.2.2: resend the latest response (provisional in Proceeding, final in Completed).
            return lastResponse.map { [.sendBytes($0.bytes)] } ?? []
        case .trying, .terminated:
            // §17.2.2: in Trying, retransmissions are discarded.
            return []
        }
    }

    /// The core (TU) sends a response through this transaction (serialized by the caller, outside
    /// any lock its owner holds).
    public mutating func sendResponse(_ response: SentResponse) -> [ServerTransactionAction] {
        switch state {
        case .trying, .proceeding:
            lastResponse = response
            if response.statusCode < 200 {
                // §17.2.2: a provisional response moves Trying to Proceeding.
                state = .proceeding
                return [.sendBytes(response.bytes)]
            }
            // §17.2.2: a final response moves to Completed; timer J (64*T1 unreliable, zero
            // reliable, which terminates at once) absorbs request retransmissions.
            if isReliable {
                state = .terminated
                return [.sendBytes(response.bytes), .terminated]
            }
            state = .completed
            if matchesToTag { requestToTag = request?.to?.tag }
            request = nil
            return [.sendBytes(response.bytes), .startTimer(.j, after: timers.transactionTimeout)]
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

/// A response a non-INVITE server transaction sent: its status code (what the state needs) and
/// its bytes as they went out (what a retransmitted request gets again). Kept instead of the
/// parsed response: Timer J holds it for 64·T1, and freeing one array costs far less than
/// destroying a response's header lines one by one. A value.
public struct SentResponse: Hashable, Sendable {
    public let statusCode: Int
    public let bytes: [UInt8]

    public init(_ response: SIPResponse) {
        statusCode = response.statusCode
        bytes = SIPSerializer.serialize(response)
    }
}
