public import RouseVocabulary

/// What went wrong in the transport layer; `description` is a one-line message fit for a log. A value
/// type, safe to share between threads.
public enum SIPTransportError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A listen point could not be parsed; `text` is what was given.
    case invalidListenPoint(text: String, reason: String)
    /// Binding or listening failed.
    case cannotListen(ListenPoint, reason: String)
    /// The certificate, the key or the OpenSSL context could not be set up.
    case tlsSetup(String)
    /// `start()` was called twice, or after `shutdown()`.
    case alreadyStarted
    /// The layer is not running (before `start()`, or after `shutdown()`).
    case notRunning
    /// The flow is unknown or already closed.
    case flowNotOpen(FlowID)
    /// The connection closed before the bytes were written.
    case connectionClosed(FlowID, FlowCloseReason)
    /// No listening socket can send this datagram (no UDP point of the address family).
    case noSocket(SIPTransportKind, SocketAddress)
    /// The connection limit is reached; no new outbound connection is opened.
    case tooManyConnections
    /// A socket call failed.
    case io(String)

    public var description: String {
        switch self {
        case .invalidListenPoint(let text, let reason): return "invalid listen point \"\(text)\": \(reason)"
        case .cannotListen(let point, let reason): return "cannot listen on \(point): \(reason)"
        case .tlsSetup(let reason): return "TLS setup failed: \(reason)"
        case .alreadyStarted: return "the transport layer was already started"
        case .notRunning: return "the transport layer is not running"
        case .flowNotOpen(let flow): return "flow \(flow) is not open"
        case .connectionClosed(let flow, let reason): return "flow \(flow) closed: \(reason)"
        case .noSocket(let transport, let address): return "no \(transport) socket can reach \(address)"
        case .tooManyConnections: return "too many connections"
        case .io(let reason): return reason
        }
    }
}

/// Why a TCP or TLS connection closed. A value type, safe to share between threads.
public enum FlowCloseReason: Hashable, Sendable, CustomStringConvertible {
    /// The peer closed or reset the connection.
    case peerClosed
    /// Nothing was received for `TransportLimits.idleTimeout`.
    case idleTimeout
    /// The TLS handshake (or an outbound connect) did not finish within its deadline.
    case handshakeTimeout
    /// The stream could not be cut into messages (RFC 3261 §18.3).
    case framingError(String)
    /// The peer did not read: more than `TransportLimits.maxWriteQueueBytes` waited to be sent.
    case writeQueueFull
    /// An outbound connect failed.
    case connectFailed(String)
    /// OpenSSL refused the handshake or the records.
    case tlsError(String)
    /// A socket call failed.
    case ioError(String)
    /// The transport layer shut down.
    case shutdown

    public var description: String {
        switch self {
        case .peerClosed: return "closed by peer"
        case .idleTimeout: return "idle timeout"
        case .handshakeTimeout: return "handshake timeout"
        case .framingError(let reason): return "framing error: \(reason)"
        case .writeQueueFull: return "write queue full"
        case .connectFailed(let reason): return "connect failed: \(reason)"
        case .tlsError(let reason): return "TLS error: \(reason)"
        case .ioError(let reason): return "I/O error: \(reason)"
        case .shutdown: return "shutdown"
        }
    }
}
