/// A SIP transport (RFC 3261 §18): datagrams over UDP, or a byte stream over TCP or TLS. A value type,
/// safe to share between threads.
public enum SIPTransportKind: String, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    case udp
    case tcp
    case tls

    /// Whether the transport delivers bytes in order without loss (TCP and TLS).
    public var isReliable: Bool { self != .udp }

    /// Whether the transport is a byte stream cut into messages by Content-Length.
    public var isStream: Bool { self != .udp }

    public var description: String { rawValue }
}
