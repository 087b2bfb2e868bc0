public import SIPMessage

/// The non-INVITE client transaction of RFC 3261 §17.1.2: a value whose `mutating` event methods
/// return the actions its owner must carry out. It does no I/O and reads no clock; it is not
/// shared, its owner serialises the calls.
public struct NonInviteClientTransaction: Hashable, Sendable {
    /// The states of Figure 6 of RFC 3261.
    public enum State: Hashable, Sendable {
        case trying, proceeding, completed, terminated
    }

    public private(set) var state: State = .trying
    /// The request this transaction sends.
    public let request: SIPRequest
    /// True on TCP/TLS: no retransmission (timer E) and timer K is zero (§17.1.2.2).
    public let isReliable: Bool
    public let timers: TransactionTimers
    /// The next interval of timer E.
    private var timerEInterval: Duration

    public init(request: SIPRequest, isReliable: Bool, timers: TransactionTimers) {
        self.request = request
        self.isReliable = isReliable
        self.timers = timers
        self.timerEInterval = timers.t1
    }

    /// Sends the request: §17.1.2.2, timer E (T1, unreliable only) and timer F (64*T1).
    public mutating func start() -> [ClientTransactionAction] {
        var actions: [ClientTransactionAction] = [.send(request)]
        if !isReliable { actions.append(.startTimer(.e, after: timerEInterval)) }
        actions.append(.startTimer(.f, after: timers.transactionTimeout))
        return actions
    }

    /// A response matched this transaction (§17.1.3).
    public mutating func receivedResponse(_ response: SIPResponse) -> [ClientTransactionAction] {
        switch state {
        case .trying, .proceeding:
            if response.statusCode < 200 {
                // §17.1.2.2: provisional responses move to Proceeding and go to the TU.
                state = .proceeding
                return [.passToCore(.response(response))]
            }
            // §17.1.2.2: a final response goes to the TU and moves to Completed; timer K (T4
            // unreliable, zero reliable) absorbs response retransmissions.
            var actions: [ClientTransactionAction] = []
            if !isReliable { actions.append(.cancelTimer(.e)) }
            actions += [.cancelTimer(.f), .passToCore(.response(response))]
            if isReliable {
                state = .terminated
                actions.append(.terminated)
            } else {
                state = .completed
                actions.append(.startTimer(.k, after: timers.t4))
            }
            return actions
        case .completed, .terminated:
            // §17.1.2.2: retransmitted responses are absorbed in Completed.
            return []
        }
    }

    /// A timer this transaction started fired.
    public mutating func timerFired(_ timer: TransactionTimer) -> [ClientTransactionAction] {
        switch (state, timer) {
        case (.trying, .e) where !isReliable:
            // §17.1.2.2: retransmit, doubling E up to T2.
            timerEInterval = min(timerEInterval * 2, timers.t2)
            return [.send(request), .startTimer(.e, after: timerEInterval)]
        case (.proceeding, .e) where !isReliable:
            // §17.1.2.2: in Proceeding, E is reset to T2.
            timerEInterval = timers.t2
            return [.send(request), .startTimer(.e, after: timerEInterval)]
        case (.trying, .f), (.proceeding, .f):
            // §17.1.2.2: timer F: tell the TU of a timeout (a 408, §8.1.3.1).
            state = .terminated
            var actions: [ClientTransactionAction] = []
            if !isReliable { actions.append(.cancelTimer(.e)) }
            let timeout = SIPResponse(replyingTo: request, statusCode: 408)
            return actions + [.passToCore(.timedOut(timeout)), .terminated]
        case (.completed, .k):
            state = .terminated
            return [.terminated]
        default:
            return []
        }
    }

    /// The transport failed to send (§17.1.2.2, §17.1.4): the TU gets a 503 (§8.1.3.1) unless a
    /// final response already came; the transaction terminates.
    public mutating func transportError() -> [ClientTransactionAction] {
        switch state {
        case .trying, .proceeding:
            state = .terminated
            let failure = SIPResponse(replyingTo: request, statusCode: 503)
            return [.passToCore(.transportError(failure)), .terminated]
        case .completed:
            state = .terminated
            return [.terminated]
        case .terminated:
            return []
        }
    }
}
