public import SIPMessage

/// What a client transaction state machine asks its owner to do; a value, carried out in order.
public enum ClientTransactionAction: Hashable, Sendable {
    /// Send the request (the original, a retransmission, or the ACK for a non-2xx final response).
    case send(SIPRequest)
    /// Start (or restart) the timer; it fires `timerFired(_:)` after the duration.
    case startTimer(TransactionTimer, after: Duration)
    /// Stop the timer if it runs.
    case cancelTimer(TransactionTimer)
    /// Hand a result to the core (transaction user).
    case passToCore(ClientTransactionEvent)
    /// The transaction is over: cancel its timers and forget it.
    case terminated
}

/// What a client transaction tells its user: a response, real or built locally (§8.1.3.1).
public enum ClientTransactionEvent: Hashable, Sendable {
    /// A response received from the network: provisional, final, or (INVITE, RFC 6026 §7.2) a
    /// further 2xx.
    case response(SIPResponse)
    /// Timer B or F fired before a final response: a 408 built locally (§8.1.3.1, §17.1.1.2, §17.1.2.2).
    case timedOut(SIPResponse)
    /// The transport failed to send the request: a 503 built locally (§8.1.3.1, §17.1.4).
    case transportError(SIPResponse)

    /// The response, received or built locally.
    public var response: SIPResponse {
        switch self {
        case .response(let response), .timedOut(let response), .transportError(let response):
            return response
        }
    }
}
