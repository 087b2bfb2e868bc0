public import RouseVocabulary
import SIPMessage

/// Names a flow (RFC 5626 §3): a UDP listening socket and one peer, or one TCP/TLS connection.
/// Opaque, and meaningful only to the `SIPTransportLayer` that issued it; connection numbers are
/// never reused. A value type, safe to share between threads.
public struct FlowID: Hashable, Sendable, CustomStringConvertible {
    enum Key: Hashable, Sendable {
        /// A UDP listening socket (index into the layer's UDP sockets) and a peer.
        case datagram(socket: Int, peer: SocketAddress)
        /// A TCP or TLS connection, by its number.
        case connection(UInt64)
    }

    let key: Key
    /// The transport of the flow.
    public let transport: SIPTransportKind

    init(_ key: Key, transport: SIPTransportKind) {
        self.key = key
        self.transport = transport
    }

    /// Whether the flow is a TCP or TLS connection.
    public var isReliable: Bool { transport.isReliable }

    /// The peer of a UDP flow; nil for a connection.
    public var datagramPeer: SocketAddress? {
        if case .datagram(_, let peer) = key { return peer }
        return nil
    }

    /// Reads back what `description` wrote (`udp#0/127.0.0.1:40000`, `tls#12`); nil otherwise.
    /// Only meaningful to the layer that issued the flow: callers must check that the text came
    /// from this process (e.g. a signed token).
    public init?(description text: String) {
        guard let hash = text.firstIndex(of: "#"), let transport = SIPTransportKind(rawValue: String(text[..<hash])) else { return nil }
        let rest = text[text.index(after: hash)...]
        if transport == .udp {
            guard let slash = rest.firstIndex(of: "/"), let socket = Int(rest[..<slash]), socket >= 0,
                let peer = SocketAddress(parsing: String(rest[rest.index(after: slash)...]))
            else { return nil }
            self.init(.datagram(socket: socket, peer: peer), transport: .udp)
        } else {
            guard let number = UInt64(rest) else { return nil }
            self.init(.connection(number), transport: transport)
        }
    }

    /// `udp#0/127.0.0.1:40000` or `tls#12`. Written as bytes into one buffer and made a String
    /// once (a binding records it on every REGISTER; appending to a String piece by piece cost
    /// 3k instructions).
    public var description: String {
        var out: [UInt8] = []
        out.reserveCapacity(56)
        out.append(contentsOf: transport.rawValue.utf8)
        out.append(UInt8(ascii: "#"))
        switch key {
        case .datagram(let socket, let peer):
            SIPHeaderValueScanner.appendDecimal(socket, to: &out)
            out.append(UInt8(ascii: "/"))
            if peer.isIPv6 { out.append(UInt8(ascii: "[")) }
            out.append(contentsOf: peer.ip.utf8)
            if peer.isIPv6 { out.append(UInt8(ascii: "]")) }
            out.append(UInt8(ascii: ":"))
            SIPHeaderValueScanner.appendDecimal(Int(peer.port), to: &out)
        case .connection(let number):
            SIPHeaderValueScanner.appendDecimal(Int(number), to: &out)
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// One SIP message (or datagram) received, with the flow to answer on. A value type, safe to share
/// between threads.
public struct InboundPacket: Sendable {
    /// A whole message for TCP/TLS (framed by Content-Length); a whole datagram for UDP.
    public let bytes: [UInt8]
    public let flow: FlowID
    public let transport: SIPTransportKind
    /// The peer's address (for a connection, its remote end).
    public let source: SocketAddress
    /// The listen point it arrived on, with its bound port. For a connection Rouse opened, the listen
    /// point of the same transport and address family, else the connection's local address.
    public let local: ListenPoint

    public init(bytes: [UInt8], flow: FlowID, transport: SIPTransportKind, source: SocketAddress, local: ListenPoint) {
        self.bytes = bytes
        self.flow = flow
        self.transport = transport
        self.source = source
        self.local = local
    }

    /// Whether it came over TCP or TLS.
    public var isReliable: Bool { transport.isReliable }
}
