/// The transport's name for the connection (or UDP socket and peer) a flow runs over, on the
/// instance that holds it (`tls#12`, `udp#0/192.0.2.7:5060`): opaque to everyone but that
/// transport, which finds the connection by it. A value, safe to share.
public struct FlowConnectionID: Hashable, Sendable, CustomStringConvertible {
    /// The name as the transport wrote it (and as stored with a binding).
    public let name: String

    public init(_ name: String) {
        self.name = name
    }

    public var description: String { name }
}
