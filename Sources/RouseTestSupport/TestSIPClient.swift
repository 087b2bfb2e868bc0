import CLinuxShims
import COpenSSL
import Glibc
public import SIPMessage

/// What went wrong in a `TestSIPClient`.
public enum TestSIPClientError: Error, Hashable, Sendable, CustomStringConvertible {
    case invalidAddress(String)
    case connectFailed(String)
    case timedOut(String)
    case closedByPeer
    case io(String)
    case tls(String)
    case framing(String)

    public var description: String {
        switch self {
        case .invalidAddress(let host): return "\"\(host)\" is not an IP address"
        case .connectFailed(let reason): return "connect failed: \(reason)"
        case .timedOut(let operation): return "\(operation) timed out"
        case .closedByPeer: return "closed by peer"
        case .io(let reason): return reason
        case .tls(let reason): return "TLS: \(reason)"
        case .framing(let reason): return "framing: \(reason)"
        }
    }
}

/// A blocking SIP client for tests, on plain sockets (not the event loop): UDP, TCP, or TLS through
/// OpenSSL without certificate verification. Every wait polls with a deadline. Owns its socket and
/// `SSL` and frees them in `close()`/deinit. Not thread-safe: use it from one thread.
public final class TestSIPClient {
    /// The transport the client speaks.
    public enum Transport: String, Hashable, Sendable {
        case udp, tcp, tls
    }

    public let transport: Transport
    private var fd: Int32
    private var ssl: OpaquePointer?
    private var framer: SIPStreamFramer

    /// Connects to `host` (an IPv4 or IPv6 literal) and `port`; for TLS, also completes the handshake.
    /// Blocks for at most `timeout`.
    public init(
        transport: Transport, host: String, port: UInt16, timeout: Duration = .seconds(5),
        limits: SIPParserLimits = .default
    ) throws {
        _ = ignoreSIGPIPE
        self.transport = transport
        self.framer = SIPStreamFramer(limits: limits)
        var storage = sockaddr_storage()
        let (family, length) = try TestSIPClient.fill(&storage, host: host, port: port)
        let type = transport == .udp ? SOCK_DGRAM : SOCK_STREAM
        fd = socket(family, Int32(type.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestSIPClientError.io("socket: \(TestSIPClient.errnoText())") }
        let deadline = ContinuousClock.now + timeout
        let connected = withUnsafePointer(to: &storage) { raw in
            raw.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, length) }
        }
        if connected != 0 {
            guard errno == EINPROGRESS else { throw TestSIPClientError.connectFailed(TestSIPClient.errnoText()) }
            guard try wait(for: Int16(POLLOUT), until: deadline) else { throw TestSIPClientError.timedOut("connect") }
            var error: Int32 = 0
            var size = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size)
            guard error == 0 else { throw TestSIPClientError.connectFailed(TestSIPClient.errnoText(error)) }
        }
        if transport == .tls { try handshake(until: deadline) }
    }

    deinit {
        close()
    }

    /// The local port of the socket.
    public var localPort: UInt16 {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) { raw in
            raw.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        let family = Int32(storage.ss_family)
        return withUnsafePointer(to: &storage) { raw in
            if family == AF_INET6 {
                return raw.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) }
            }
            return raw.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
        }
    }

    /// Sends `text` as UTF-8 (write line ends as \r\n).
    public func send(_ text: String, timeout: Duration = .seconds(5)) throws {
        try send(Array(text.utf8), timeout: timeout)
    }

    /// Sends all of `bytes` (one datagram on UDP), waiting at most `timeout` for room.
    public func send(_ bytes: [UInt8], timeout: Duration = .seconds(5)) throws {
        let deadline = ContinuousClock.now + timeout
        var offset = 0
        while offset < bytes.count {
            let result: Int = bytes.withUnsafeBytes { raw in
                if let ssl {
                    return Int(SSL_write(ssl, raw.baseAddress! + offset, Int32(raw.count - offset)))
                }
                return Glibc.send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
            }
            if result > 0 {
                offset += result
            } else {
                try waitAfterFailure(result, writing: true, until: deadline, operation: "send")
            }
        }
    }

    /// One whole message: a datagram on UDP, a message framed by Content-Length on TCP/TLS (keep-alive
    /// pongs skipped). Nil when nothing whole arrives within `timeout`; throws `closedByPeer` at end of stream.
    public func receive(timeout: Duration) throws -> [UInt8]? {
        let deadline = ContinuousClock.now + timeout
        if transport == .udp { return try readSome(until: deadline) }
        while true {
            do {
                switch try framer.next() {
                case .message(let message): return message
                case .keepAlivePing: continue
                case nil: break
                }
            } catch {
                throw TestSIPClientError.framing(error.description)
            }
            guard let chunk = try readSome(until: deadline) else { return nil }
            framer.append(chunk)
        }
    }

    /// `receive(timeout:)` as text.
    public func receiveText(timeout: Duration) throws -> String? {
        try receive(timeout: timeout).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The next bytes as they come off the socket (or out of TLS), unframed: to see a CRLF pong. Nil on timeout.
    public func receiveRaw(timeout: Duration) throws -> [UInt8]? {
        try readSome(until: ContinuousClock.now + timeout)
    }

    /// Reads and discards until the peer closes (true) or `timeout` passes (false).
    public func waitUntilClosed(timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while true {
            do {
                guard try readSome(until: deadline) != nil else { return false }
            } catch {
                return true
            }
        }
    }

    /// Closes the connection (sending a TLS close_notify first). Idempotent.
    public func close() {
        if let ssl {
            _ = SSL_shutdown(ssl)
            SSL_free(ssl)
            ERR_clear_error()
            self.ssl = nil
        }
        if fd >= 0 {
            Glibc.close(fd)
            fd = -1
        }
    }

    // MARK: internals

    private func handshake(until deadline: ContinuousClock.Instant) throws {
        guard let context = TestTLSClientContext.shared else { throw TestSIPClientError.tls("cannot make a client context") }
        ERR_clear_error()
        guard let ssl = SSL_new(context.pointer) else { throw TestSIPClientError.tls("SSL_new failed") }
        self.ssl = ssl
        SSL_set_fd(ssl, fd)
        SSL_set_connect_state(ssl)
        while true {
            ERR_clear_error()
            let result = SSL_do_handshake(ssl)
            if result == 1 { return }
            try waitAfterFailure(Int(result), writing: false, until: deadline, operation: "TLS handshake")
        }
    }

    /// Bytes from the socket or TLS; nil at the deadline; throws `closedByPeer` at end of stream.
    private func readSome(until deadline: ContinuousClock.Instant) throws -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let result: Int = buffer.withUnsafeMutableBytes { raw in
                if let ssl {
                    ERR_clear_error()
                    return Int(SSL_read(ssl, raw.baseAddress, Int32(raw.count)))
                }
                return Glibc.recv(fd, raw.baseAddress, raw.count, 0)
            }
            if result > 0 {
                buffer.removeSubrange(result...)
                return buffer
            }
            if result == 0 && ssl == nil && transport != .udp { throw TestSIPClientError.closedByPeer }
            if result == 0 && transport == .udp { return [] }
            do {
                try waitAfterFailure(result, writing: false, until: deadline, operation: "receive")
            } catch TestSIPClientError.timedOut {
                return nil
            }
        }
    }

    /// After a call returned `result` (≤ 0): waits for the socket when the call would block, else throws.
    private func waitAfterFailure(_ result: Int, writing: Bool, until deadline: ContinuousClock.Instant, operation: String) throws {
        var events = Int16(writing ? POLLOUT : POLLIN)
        if let ssl {
            let error = SSL_get_error(ssl, Int32(result))
            switch error {
            case SSL_ERROR_WANT_READ: events = Int16(POLLIN)
            case SSL_ERROR_WANT_WRITE: events = Int16(POLLOUT)
            case SSL_ERROR_ZERO_RETURN: throw TestSIPClientError.closedByPeer
            case SSL_ERROR_SYSCALL:
                if result == 0 || errno == ECONNRESET || errno == EPIPE { throw TestSIPClientError.closedByPeer }
                throw TestSIPClientError.io("\(operation): \(TestSIPClient.errnoText())")
            default:
                var reasons: [String] = []
                while case let code = ERR_get_error(), code != 0 {
                    var text = [CChar](repeating: 0, count: 256)
                    text.withUnsafeMutableBufferPointer { ERR_error_string_n(code, $0.baseAddress, $0.count - 1) }
                    reasons.append(TestSIPClient.cText(text))
                }
                if reasons.isEmpty { throw TestSIPClientError.closedByPeer }
                throw TestSIPClientError.tls("\(operation): \(reasons.joined(separator: "; "))")
            }
        } else {
            let code = errno
            if code == EINTR { return }
            if code == ECONNRESET || code == EPIPE || code == ECONNREFUSED { throw TestSIPClientError.closedByPeer }
            guard code == EAGAIN || code == EWOULDBLOCK else {
                throw TestSIPClientError.io("\(operation): \(TestSIPClient.errnoText(code))")
            }
        }
        guard try wait(for: events, until: deadline) else { throw TestSIPClientError.timedOut(operation) }
    }

    /// Polls the socket for `events` until the deadline; false when it passes first.
    private func wait(for events: Int16, until deadline: ContinuousClock.Instant) throws -> Bool {
        while true {
            let remaining = ContinuousClock.now.duration(to: deadline)
            if remaining <= .zero { return false }
            let (seconds, attoseconds) = remaining.components
            let milliseconds = Int32(min(seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1, 60_000))
            var request = pollfd(fd: fd, events: events, revents: 0)
            let ready = poll(&request, 1, milliseconds)
            if ready > 0 { return true }
            if ready < 0, errno != EINTR { throw TestSIPClientError.io("poll: \(TestSIPClient.errnoText())") }
        }
    }

    private static func fill(_ storage: inout sockaddr_storage, host: String, port: UInt16) throws -> (Int32, socklen_t) {
        try withUnsafeMutablePointer(to: &storage) { raw in
            if host.contains(":") {
                return try raw.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 in
                    sin6.pointee.sin6_family = sa_family_t(AF_INET6)
                    sin6.pointee.sin6_port = port.bigEndian
                    guard inet_pton(AF_INET6, host, &sin6.pointee.sin6_addr) == 1 else {
                        throw TestSIPClientError.invalidAddress(host)
                    }
                    return (AF_INET6, socklen_t(MemoryLayout<sockaddr_in6>.size))
                }
            }
            return try raw.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                sin.pointee.sin_family = sa_family_t(AF_INET)
                sin.pointee.sin_port = port.bigEndian
                guard inet_pton(AF_INET, host, &sin.pointee.sin_addr) == 1 else {
                    throw TestSIPClientError.invalidAddress(host)
                }
                return (AF_INET, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
    }

    private static func errnoText(_ code: Int32 = errno) -> String {
        guard let text = strerror(code) else { return "error \(code)" }
        return String(decoding: UnsafeRawBufferPointer(start: text, count: strlen(text)), as: UTF8.self)
    }

    private static func cText(_ text: [CChar]) -> String {
        String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// OpenSSL writes to the socket with write(2): a peer that closed would raise SIGPIPE and end the test
/// process, so test processes ignore it (once).
private let ignoreSIGPIPE: Void = {
    _ = signal(SIGPIPE, SIG_IGN)
}()

/// The client `SSL_CTX` shared by every `TestSIPClient` (no verification). Owns the context; immutable
/// after creation, which OpenSSL allows to share between threads.
private final class TestTLSClientContext: @unchecked Sendable {
    // @unchecked Sendable: configured once in init, then only passed to SSL_new, which is thread-safe.
    let pointer: OpaquePointer

    static let shared: TestTLSClientContext? = TestTLSClientContext()

    private init?() {
        guard let context = SSL_CTX_new(TLS_client_method()) else { return nil }
        SSL_CTX_set_verify(context, SSL_VERIFY_NONE, nil)
        // A write retried after WANT_WRITE may come from a different address of the same Swift array.
        _ = rouse_SSL_CTX_set_mode(context, Int(SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
        pointer = context
    }

    deinit {
        SSL_CTX_free(pointer)
    }
}
