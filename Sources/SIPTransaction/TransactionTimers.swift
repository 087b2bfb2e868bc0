/// The timer durations of RFC 3261 §17 (Table 4), derived from T1, T2 and T4 of one instance; a
/// value, so each transaction layer (and each test) carries its own, never a process global.
public struct TransactionTimers: Hashable, Sendable {
    /// Round-trip time estimate (§17.1.1.1), 500 ms by default.
    public var t1: Duration
    /// Longest interval between retransmissions of non-INVITE requests and INVITE responses, 4 s by default.
    public var t2: Duration
    /// Longest time a message stays in the network, 5 s by default.
    public var t4: Duration
    /// Timer D on unreliable transports: "at least 32 seconds" (§17.1.1.2), not derived from T1.
    public var timerDUnreliable: Duration

    public init(
        t1: Duration = .milliseconds(500), t2: Duration = .seconds(4), t4: Duration = .seconds(5),
        timerDUnreliable: Duration = .seconds(32)
    ) {
        self.t1 = t1
        self.t2 = t2
        self.t4 = t4
        self.timerDUnreliable = timerDUnreliable
    }

    /// 64*T1: timers B, F, H, J (unreliable), L and M (§17, Table 4; RFC 6026 §7).
    public var transactionTimeout: Duration { t1 * 64 }
}

/// The named timers of RFC 3261 §17 (Table 4) and RFC 6026 (L and M).
public enum TransactionTimer: Hashable, Sendable, CaseIterable, CustomStringConvertible {
    /// INVITE client: request retransmission (unreliable only).
    case a
    /// INVITE client: transaction timeout.
    case b
    /// INVITE client: wait time for response retransmissions in Completed.
    case d
    /// Non-INVITE client: request retransmission (unreliable only).
    case e
    /// Non-INVITE client: transaction timeout.
    case f
    /// INVITE server: final response retransmission (unreliable only).
    case g
    /// INVITE server: wait time for ACK receipt.
    case h
    /// INVITE server: wait time for ACK retransmissions in Confirmed.
    case i
    /// Non-INVITE server: wait time for request retransmissions in Completed.
    case j
    /// Non-INVITE client: wait time for response retransmissions in Completed.
    case k
    /// INVITE server: wait time for INVITE retransmissions in Accepted (RFC 6026).
    case l
    /// INVITE client: wait time for 2xx retransmissions in Accepted (RFC 6026).
    case m

    public var description: String {
        switch self {
        case .a: return "A"
        case .b: return "B"
        case .d: return "D"
        case .e: return "E"
        case .f: return "F"
        case .g: return "G"
        case .h: return "H"
        case .i: return "I"
        case .j: return "J"
        case .k: return "K"
        case .l: return "L"
        case .m: return "M"
        }
    }
}
