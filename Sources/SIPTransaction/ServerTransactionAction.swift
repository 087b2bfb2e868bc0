public import SIPMessage

/// What a server transaction state machine asks its owner to do; a value, carried out in order.
public enum ServerTransactionAction: Hashable, Sendable {
    /// Hand the request to the core (transaction user): a new request, or an ACK for a 2xx.
    case passToCore(SIPRequest)
    /// Send the response to the transport.
    case send(SIPResponse)
    /// Send a response already serialized (a non-INVITE transaction keeps its last response so,
    /// RFC 3261 §17.2.2: a retransmitted request gets the same bytes again, never re-serialised).
    case sendBytes([UInt8])
    /// Start (or restart) the timer; it fires `timerFired(_:)` after the duration.
    case startTimer(TransactionTimer, after: Duration)
    /// Stop the timer if it runs.
    case cancelTimer(TransactionTimer)
    /// Tell the core the transaction failed (§17.2.1 timer H, §17.2.4 transport error).
    case reportFailure(ServerTransactionFailure)
    /// The transaction is over: cancel its timers and forget it.
    case terminated
}

/// Why a server transaction ended without completing.
public enum ServerTransactionFailure: Hashable, Sendable {
    /// Timer H fired: the final non-2xx response was never acknowledged (§17.2.1).
    case timedOut
    /// The transport could not deliver a response (§17.2.4).
    case transportError
}
