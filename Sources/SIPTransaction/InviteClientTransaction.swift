public import SIPMessage

/// The INVITE client transaction of RFC 3261 §17.1.1 with the Accepted state of RFC 6026 §7.2: a
/// value whose `mutating` event methods return the actions its owner must carry out. It does no
/// I/O and reads no clock; it is not shared, its owner serialises the calls.
public struct InviteClientTransaction: Hashable, Sendable {
    /// The states of Figure 5 of RFC 3261 as amended by RFC 6026 (Figure 4).
    public enum State: Hashable, Sendable {
        case calling, proceeding, completed, accepted, terminated
    }

    public private(set) var state: State = .calling
    /// The INVITE this transaction sends.
    public let request: SIPRequest
    /// True on TCP/TLS: no retransmission (timer A) and timer D is zero (§17.1.1.2).
    public let isReliable: Bool
    public let timers: TransactionTimers
    /// The ACK sent for the non-2xx final response, resent for its retransmissions.
    public private(set) var ack: SIPRequest?
    /// The next interval of timer A.
    private var timerAInterval: Duration

    public init(request: SIPRequest, isReliable: Bool, timers: TransactionTimers) {
        self.request = request
        self.isReliable = isReliable
        self.timers = timers
        self.timerAInterval = timers.t1
    }

    /// Sends the INVITE: §17.1.1.2, timer A (T1, unreliable only) and timer B (64*T1).
    public mutating func start() -> [ClientTransactionAction] {
        var actions: [ClientTransactionAction] = [.send(request)]
        if !isReliable { actions.append(.startTimer(.a, after: timerAInterval)) }
        actions.append(.startTimer(.b, after: timers.transactionTimeout))
        return actions
    }

    /// A response matched this transaction (§17.1.3).
    public mutating func receivedResponse(_ response: SIPResponse) -> [ClientTransactionAction] {
        let code = response.statusCode
        switch state {
        case .calling, .proceeding:
            var actions: [ClientTransactionAction] = []
            if state == .calling {
                // §17.1.1.2: any response stops retransmissions; timer B only runs in Calling.
                if !isReliable { actions.append(.cancelTimer(.a)) }
                actions.append(.cancelTimer(.b))
            }
            if code < 200 {
                // §17.1.1.2: provisional responses move to Proceeding and go to the TU.
                state = .proceeding
                return actions + [.passToCore(.response(response))]
            }
            if code < 300 {
                // RFC 6026 §7.2: a 2xx moves to Accepted; timer M lets further 2xx through.
                state = .accepted
                return actions + [
                    .passToCore(.response(response)), .startTimer(.m, after: timers.transactionTimeout),
                ]
            }
            // §17.1.1.2, §17.1.1.3: a 300-699 response is acknowledged by the transaction and
            // moves to Completed; timer D (32 s unreliable, zero reliable) absorbs retransmissions.
            // The ACK goes out before the TU hears of the response, so whatever the TU sends next
            // (a new INVITE answering a 401/407, the next hop) follows it on the wire, as a UAS
            // that waits for the ACK expects.
            let ack = request.acknowledgement(for: response)
            self.ack = ack
            actions += [.send(ack), .passToCore(.response(response))]
            if isReliable {
                state = .terminated
                actions.append(.terminated)
            } else {
                state = .completed
                actions.append(.startTimer(.d, after: timers.timerDUnreliable))
            }
            return actions
        case .completed where code >= 300:
            // §17.1.1.2: a retransmitted final response gets the ACK again, not the TU.
            return ack.map { [.send($0)] } ?? []
        case .accepted where (200..<300).contains(code):
            // RFC 6026 §7.2: every 2xx in Accepted goes to the TU (it may come from another fork).
            return [.passToCore(.response(response))]
        case .completed, .accepted, .terminated:
            return []
        }
    }

    /// A timer this transaction started fired.
    public mutating func timerFired(_ timer: TransactionTimer) -> [ClientTransactionAction] {
        switch (state, timer) {
        case (.calling, .a) where !isReliable:
            // §17.1.1.2: retransmit and double timer A (no cap; timer B ends it).
            timerAInterval = timerAInterval * 2
            return [.send(request), .startTimer(.a, after: timerAInterval)]
        case (.calling, .b):
            // §17.1.1.2: timer B in Calling: tell the TU of a timeout (a 408, §8.1.3.1).
            state = .terminated
            var actions: [ClientTransactionAction] = []
            if !isReliable { actions.append(.cancelTimer(.a)) }
            return actions + [.passToCore(.timedOut(timeoutResponse)), .terminated]
        case (.completed, .d), (.accepted, .m):
            // §17.1.1.2 timer D; RFC 6026 §7.2 timer M.
            state = .terminated
            return [.terminated]
        default:
            return []
        }
    }

    /// The transport failed to send (§17.1.1.2, §17.1.4): before a final response the TU is told
    /// with a 503 (§8.1.3.1); the transaction terminates in any state.
    public mutating func transportError() -> [ClientTransactionAction] {
        switch state {
        case .calling, .proceeding:
            state = .terminated
            let failure = SIPResponse(replyingTo: request, statusCode: 503)
            return [.passToCore(.transportError(failure)), .terminated]
        case .completed, .accepted:
            state = .terminated
            return [.terminated]
        case .terminated:
            return []
        }
    }

    private var timeoutResponse: SIPResponse { SIPResponse(replyingTo: request, statusCode: 408) }
}
