public import SIPMessage

/// What the transaction layer hands the core; a value, delivered on the thread that caused it
/// (the transport's event loop, a timer, or a caller of `respond`), so the core must not block.
public enum TransactionLayerEvent<Flow: Hashable & Sendable>: Hashable, Sendable {
    /// A request created a server transaction (§17.2.1, §17.2.2); answer it with
    /// `TransactionLayer.respond(_:to:)`. CANCEL arrives here too, in its own transaction: find
    /// the INVITE it cancels with `TransactionLayer.inviteTransaction(cancelledBy:)` (§9.2).
    case request(SIPRequest, ServerTransactionHandle, flow: Flow)
    /// An ACK for a 2xx: it matched no transaction, or matched one in Accepted (RFC 6026 §7.1).
    case ack(SIPRequest, flow: Flow)
    /// A response that matched no client transaction (§17.1.3), such as a 2xx retransmission
    /// after the transaction ended; a proxy forwards it as a stateless proxy would (§16.7, §16.11).
    case strayResponse(SIPResponse, flow: Flow)
    /// A server transaction ended without completing (timer H, or a transport error).
    case serverTransactionFailed(ServerTransactionHandle, ServerTransactionFailure)
}

/// Names one server transaction of a `TransactionLayer`; a value, usable from any thread. A
/// handle never reaches a later transaction that happens to reuse the same key.
public struct ServerTransactionHandle: Hashable, Sendable, CustomStringConvertible {
    /// The key the transaction is matched by.
    public let key: TransactionKey
    @usableFromInline let serial: UInt64
    /// The transaction's slot in its shard (`TransactionLayer.Table`): answering it finds it there,
    /// with no lookup of the key (the serial tells a later transaction in that slot apart).
    @usableFromInline let slot: Int

    @usableFromInline
    init(key: TransactionKey, serial: UInt64, slot: Int) {
        self.key = key
        self.serial = serial
        self.slot = slot
    }

    public var description: String { "\(key) #\(serial)" }
}

/// Names one client transaction of a `TransactionLayer`; a value, usable from any thread.
public struct ClientTransactionHandle: Hashable, Sendable, CustomStringConvertible {
    /// The key responses are matched by (§17.1.3).
    public let key: TransactionKey
    @usableFromInline let serial: UInt64

    @usableFromInline
    init(key: TransactionKey, serial: UInt64) {
        self.key = key
        self.serial = serial
    }

    public var description: String { "\(key) #\(serial)" }
}

/// Why `TransactionLayer.sendRequest` refused a request; a value.
public enum TransactionLayerError: Error, Hashable, Sendable {
    /// The top Via has no branch starting with `z9hG4bK`, or there is no CSeq (§8.1.1.7: the
    /// caller puts a unique branch in the Via it adds).
    case missingBranch
    /// An ACK for a 2xx is not a transaction (§17.1.1.3): send it directly through the transport.
    case ackIsNotATransaction
    /// A client transaction with this branch and method already exists.
    case duplicateTransaction
}
