public import SIPMessage
public import SIPTransport

/// The INVITEs forwarded statefully outside the call coordinator (an INVITE another instance sent
/// through this instance's flow to a phone), by the server transaction they came in on, so the
/// caller's CANCEL can follow them (RFC 3261 §16.10). Entries go when the INVITE gets a final
/// response or is cancelled.
///
/// A value (`Key` is the server transaction's handle; tests use any key); `SIPService` keeps it
/// behind a lock.
public struct ForwardedInvites<Key: Hashable & Sendable>: Sendable {
    private var entries: [Key: (sent: SIPRequest, flow: FlowID)] = [:]

    public init() {}

    /// Remembers the INVITE as it was sent over `flow`, for the transaction `key`.
    public mutating func add(_ sent: SIPRequest, over flow: FlowID, for key: Key) {
        entries[key] = (sent, flow)
    }

    /// Forgets the INVITE of `key` (its final response came, or it could not be sent).
    public mutating func remove(_ key: Key) {
        entries[key] = nil
    }

    /// The caller's CANCEL matched the transaction `key`: the CANCEL to send downstream (§9.1,
    /// `ProxyRules.cancel`, with the caller's `reason`) and its flow, and the entry goes; nil when
    /// that INVITE was not forwarded here.
    public mutating func cancel(_ key: Key, reason: String?) -> (cancel: SIPRequest, flow: FlowID)? {
        guard let entry = entries.removeValue(forKey: key) else { return nil }
        return (ProxyRules.cancel(of: entry.sent, reason: reason), entry.flow)
    }

    /// INVITEs waiting for a final response.
    public var count: Int { entries.count }
}
