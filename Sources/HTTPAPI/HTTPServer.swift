import CallRouting
import CMicroHTTPD
import Foundation
import Glibc
import RouseVocabulary

/// An HTTP/1.1 server on libmicrohttpd: it reads requests (headers, then a body of at most
/// `limits.maxBodyBytes`), hands each to the `HTTPRouter`, and writes the answer the route gives,
/// now or later. Keep-alive is HTTP/1.1's default; an idle or slow connection is closed after
/// `limits.connectionTimeout` seconds.
///
/// Threading: the server owns the MHD daemon and its threads (`limits.threads` polling threads,
/// each serving many connections, event driven, so a slow client holds no thread). Routes run on
/// those threads and must not block: one that needs PostgreSQL hands the work to a worker pool and
/// answers through its `HTTPResponder` from any thread (the connection is suspended meanwhile).
/// `stop()` and `deinit` stop the daemon and wait for its threads; call them from any thread but a
/// route's own. The request log closure runs on the daemon's threads and gets no secrets (no
/// headers, no body).
public final class HTTPServer: @unchecked Sendable {
    // @unchecked: `daemon`, `waiting` and `stopping` are only touched under `lock`; the router
    // and log closure are immutable.

    /// Limits that protect the server.
    public struct Limits: Sendable {
        /// The largest request body; a larger one gets 413.
        public var maxBodyBytes: Int
        /// Seconds a connection may stay idle (or trickle) before it is closed.
        public var connectionTimeout: Int
        /// Connections open at once.
        public var maxConnections: Int
        /// Memory per connection for its headers and buffers (MHD's own limit; headers beyond it
        /// get 431/413 from MHD).
        public var connectionMemory: Int
        /// Polling threads.
        public var threads: Int
        /// Requests one client address may make per second (bursts of twice that); beyond it, 429
        /// with Retry-After. 0: no limit (setting `http_rate_limit`).
        public var requestsPerSecond: Int

        public init(
            maxBodyBytes: Int = 64 * 1024, connectionTimeout: Int = 10, maxConnections: Int = 1000,
            connectionMemory: Int = 64 * 1024, threads: Int = 2, requestsPerSecond: Int = 0
        ) {
            self.maxBodyBytes = maxBodyBytes
            self.connectionTimeout = connectionTimeout
            self.maxConnections = maxConnections
            self.connectionMemory = connectionMemory
            self.threads = threads
            self.requestsPerSecond = requestsPerSecond
        }
    }

    /// Why the server could not start.
    public struct StartError: Error, CustomStringConvertible {
        public let description: String
    }

    public let limits: Limits
    /// Reverse proxies (nginx) whose `X-Forwarded-For` names the real client.
    public let trustedProxies: TrustedPeers
    /// The host it listens on, as given.
    public let host: String
    /// The port bound (the kernel's choice when 0 was asked for).
    public private(set) var port: UInt16 = 0
    let router: HTTPRouter
    let log: @Sendable (HTTPRequestLog) -> Void
    /// `limits.requestsPerSecond` per client; nil when there is no limit.
    let rateLimiter: HTTPRateLimiter?
    private let lock = NSLock()
    private var daemon: OpaquePointer?
    /// Requests handed to a route and not yet answered: MHD aborts the process when it stops with
    /// a connection still suspended, so `stop()` answers these first.
    private var waiting: [ObjectIdentifier: HTTPExchange] = [:]
    private var stopping = false

    /// Binds `host:port` (a numeric address or a name; port 0 lets the kernel choose) and starts
    /// serving. Throws when the address cannot be bound.
    /// - Parameter trustedProxies: a request from one of these takes its client address from
    ///   `X-Forwarded-For` (the throttle and the log then see the real client).
    public init(
        host: String, port: UInt16, router: HTTPRouter, limits: Limits = Limits(), trustedProxies: TrustedPeers = TrustedPeers(),
        log: @escaping @Sendable (HTTPRequestLog) -> Void = { _ in }
    ) throws {
        self.host = host
        self.router = router
        self.limits = limits
        self.trustedProxies = trustedProxies
        self.log = log
        rateLimiter = limits.requestsPerSecond > 0 ? HTTPRateLimiter(rate: Double(limits.requestsPerSecond)) : nil
        var hints = addrinfo()
        hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var found: UnsafeMutablePointer<addrinfo>? = nil
        let status = getaddrinfo(host.isEmpty ? nil : host, String(port), &hints, &found)
        guard status == 0, let first = found, let address = first.pointee.ai_addr else {
            throw StartError(description: "cannot listen for HTTP on \(host):\(port): unknown address")
        }
        defer { freeaddrinfo(found) }
        var flags = MHD_USE_AUTO.rawValue
        if first.pointee.ai_family == AF_INET6 { flags |= MHD_USE_IPv6.rawValue }
        let context = Unmanaged.passUnretained(self).toOpaque()
        let started = rouse_mhd_start(
            flags, address, httpAccessHandler, context, httpRequestCompleted, context, UInt32(max(1, limits.threads)),
            UInt32(limits.maxConnections), UInt32(limits.connectionTimeout), limits.connectionMemory)
        guard let started else {
            throw StartError(description: "cannot listen for HTTP on \(host):\(port): the address is in use or not local")
        }
        daemon = started
        self.port = rouse_mhd_bound_port(started)
    }

    deinit {
        stop()
    }

    /// The client a request is from: the peer, or, when the peer is a trusted proxy, the rightmost
    /// `X-Forwarded-For` address that is not itself a trusted proxy (the leftmost ones are the
    /// client's to write, so they are not believed).
    public static func client(peer: String?, forwardedFor: String?, trusted: TrustedPeers) -> String? {
        guard let peer, !trusted.isEmpty, trusted.contains(peer), let forwardedFor else { return peer }
        for hop in forwardedFor.split(separator: ",").reversed() {
            let address = hop.trimmingCharacters(in: .whitespaces)
            guard TrustedPeers.isIPAddress(address) else { return peer }
            if !trusted.contains(address) { return address }
        }
        return peer
    }

    /// `host:port` as bound.
    public var listenAddress: String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// Stops listening, closes every connection and waits for the daemon's threads. Idempotent.
    public func stop() {
        lock.lock()
        let running = daemon
        daemon = nil
        stopping = true
        let unanswered = Array(waiting.values)
        waiting.removeAll()
        lock.unlock()
        for exchange in unanswered { exchange.answer(Self.shuttingDown) }
        // The daemon's threads write those 503s; stopping it at once would close the connections
        // first. Each gets until the deadline to be sent.
        let deadline = DispatchTime.now() + .seconds(2)
        for exchange in unanswered { exchange.waitUntilFinished(deadline: deadline) }
        if let running { MHD_stop_daemon(running) }
    }

    static let shuttingDown = HTTPResponse.error(503, code: "shutting_down", message: "the server is stopping; try again")

    /// Registers a request as waiting for its route; false once the server is stopping.
    private func enlist(_ exchange: HTTPExchange) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard !stopping else { return false }
        waiting[ObjectIdentifier(exchange)] = exchange
        return true
    }

    /// The request no longer waits (answered, or MHD is done with it).
    fileprivate func forget(_ exchange: HTTPExchange) {
        lock.lock()
        waiting[ObjectIdentifier(exchange)] = nil
        lock.unlock()
    }

    /// Handles one call of MHD's access handler (see `httpAccessHandler`).
    fileprivate func handle(
        connection: OpaquePointer, url: String, method: String, uploadData: UnsafePointer<CChar>?,
        uploadSize: UnsafeMutablePointer<Int>, state slot: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    ) -> MHD_Result {
        guard let raw = slot.pointee else {
            // The first call: headers only. A declared body over the limit is refused at once,
            // without reading it (MHD then closes the connection).
            let exchange = HTTPExchange(method: method, path: url, started: Date())
            slot.pointee = Unmanaged.passRetained(exchange).toOpaque()
            if let refusal = rateLimited(connection, exchange) {
                return send(refusal, for: exchange, on: connection)
            }
            if let declared = Self.header(connection, "Content-Length").flatMap(Int.init), declared > limits.maxBodyBytes {
                return send(Self.tooLarge(limits.maxBodyBytes), for: exchange, on: connection)
            }
            return MHD_Result.YES
        }
        let exchange = Unmanaged<HTTPExchange>.fromOpaque(raw).takeUnretainedValue()
        if uploadSize.pointee > 0 {
            // A chunked body may still grow past the limit: keep reading, drop it, answer 413.
            if let uploadData, !exchange.tooLarge {
                if exchange.body.count + uploadSize.pointee > limits.maxBodyBytes {
                    exchange.tooLarge = true
                    exchange.body = Data()
                } else {
                    exchange.body.append(UnsafeRawPointer(uploadData).assumingMemoryBound(to: UInt8.self), count: uploadSize.pointee)
                }
            }
            uploadSize.pointee = 0
            return MHD_Result.YES
        }
        if let ready = exchange.takeResponse() {
            // Resumed: the route has answered from another thread.
            return send(ready, for: exchange, on: connection)
        }
        guard !exchange.dispatched else { return MHD_Result.YES }
        exchange.dispatched = true
        if exchange.tooLarge { return send(Self.tooLarge(limits.maxBodyBytes), for: exchange, on: connection) }
        let headers = Self.headers(connection)
        exchange.remoteAddress = Self.client(peer: Self.clientAddress(connection), forwardedFor: headers["x-forwarded-for"], trusted: trustedProxies)
        let request = HTTPRequest(
            method: method, path: url, headers: headers, body: exchange.body,
            remoteAddress: exchange.remoteAddress, query: Self.headers(connection, kind: MHD_ValueKind.GET_ARGUMENT_KIND, lowercased: false))
        exchange.connection = connection
        let responder = HTTPResponder(exchange: exchange)
        guard enlist(exchange) else { return send(Self.shuttingDown, for: exchange, on: connection) }
        router.route(request, responder)
        if let ready = exchange.suspendUnlessAnswered(connection) {
            return send(ready, for: exchange, on: connection)
        }
        return MHD_Result.YES
    }

    private func send(_ response: HTTPResponse, for exchange: HTTPExchange, on connection: OpaquePointer) -> MHD_Result {
        forget(exchange)
        let body = response.body
        let created: OpaquePointer? = body.withUnsafeBytes { bytes in
            MHD_create_response_from_buffer(bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), MHD_ResponseMemoryMode.RESPMEM_MUST_COPY)
        }
        guard let created else { return MHD_Result.NO }
        defer { MHD_destroy_response(created) }
        for (name, value) in response.headers {
            _ = MHD_add_response_header(created, name, value)
        }
        let result = MHD_queue_response(connection, UInt32(response.status), created)
        log(
            HTTPRequestLog(
                method: exchange.method, path: exchange.path, status: response.status,
                milliseconds: Date().timeIntervalSince(exchange.started) * 1000,
                remoteAddress: exchange.remoteAddress ?? Self.clientAddress(connection) ?? "-"))
        return result
    }

    /// 429 with Retry-After when the request's client is past `limits.requestsPerSecond` (before
    /// its body is read); nil when it may go on.
    private func rateLimited(_ connection: OpaquePointer, _ exchange: HTTPExchange) -> HTTPResponse? {
        guard let rateLimiter else { return nil }
        let client = Self.client(
            peer: Self.clientAddress(connection), forwardedFor: Self.header(connection, "X-Forwarded-For"), trusted: trustedProxies)
        exchange.remoteAddress = client
        guard let client, let seconds = rateLimiter.admit(client) else { return nil }
        return .error(
            429, code: "rate_limited", message: "too many requests from this address; try again in \(seconds) s",
            headers: [("Retry-After", String(seconds))])
    }

    static func tooLarge(_ limit: Int) -> HTTPResponse {
        HTTPResponse.error(413, code: "body_too_large", message: "the request body is larger than \(limit) bytes")
    }

    static func header(_ connection: OpaquePointer, _ name: String) -> String? {
        MHD_lookup_connection_value(connection, MHD_ValueKind.HEADER_KIND, name).map { String(cString: $0) }
    }

    /// The request's headers, names in lower case (a repeated header keeps its last value); with
    /// `kind` `GET_ARGUMENT_KIND` and `lowercased` false, its query arguments as given.
    static func headers(
        _ connection: OpaquePointer, kind: MHD_ValueKind = MHD_ValueKind.HEADER_KIND, lowercased: Bool = true
    ) -> [String: String] {
        final class Collector {
            var headers: [String: String] = [:]
            var lowercased = true
        }
        let collector = Collector()
        collector.lowercased = lowercased
        let context = Unmanaged.passUnretained(collector).toOpaque()
        _ = withExtendedLifetime(collector) {
            MHD_get_connection_values(
                connection, kind,
                { context, _, key, value in
                    guard let context, let key else { return MHD_Result.YES }
                    let collector = Unmanaged<Collector>.fromOpaque(context).takeUnretainedValue()
                    let name = String(cString: key)
                    collector.headers[collector.lowercased ? name.lowercased() : name] = value.map { String(cString: $0) } ?? ""
                    return MHD_Result.YES
                }, context)
        }
        return collector.headers
    }

    static func clientAddress(_ connection: OpaquePointer) -> String? {
        guard let address = rouse_mhd_client_address(connection) else { return nil }
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        let length = socklen_t(address.pointee.sa_family == AF_INET6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
        guard getnameinfo(address, length, &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST) == 0 else { return nil }
        return String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// One line of the request log: no headers, no body, no query string.
public struct HTTPRequestLog: Sendable {
    public let method: String
    public let path: String
    public let status: Int
    public let milliseconds: Double
    public let remoteAddress: String
}

/// The state of one request while MHD serves it: its body as read, and the answer once a route
/// gives it. Threading: `body`, `tooLarge` and `dispatched` are touched only on the daemon thread
/// serving the connection; `response` and `suspended` under `lock`, since a route may answer from
/// any thread.
final class HTTPExchange: @unchecked Sendable {
    let method: String
    let path: String
    let started: Date
    var body = Data()
    var tooLarge = false
    var dispatched = false
    var remoteAddress: String?
    /// Set (on the daemon thread) before the route runs; used only under `lock` afterwards.
    var connection: OpaquePointer?
    private let lock = NSLock()
    private var response: HTTPResponse?
    private var answered = false
    private var suspended = false
    private var finished = false
    private let finishedSignal = DispatchSemaphore(value: 0)

    init(method: String, path: String, started: Date) {
        self.method = method
        self.path = path
        self.started = started
    }

    /// Records the route's answer (the first one wins); resumes the connection if it waits.
    func answer(_ response: HTTPResponse) {
        lock.lock()
        defer { lock.unlock() }
        guard !answered else { return }
        answered = true
        self.response = response
        if suspended, let connection {
            suspended = false
            MHD_resume_connection(connection)
        }
    }

    /// The answer if one came already; otherwise suspends the connection until it comes.
    func suspendUnlessAnswered(_ connection: OpaquePointer) -> HTTPResponse? {
        lock.lock()
        defer { lock.unlock() }
        if let response {
            self.response = nil
            return response
        }
        suspended = true
        MHD_suspend_connection(connection)
        return nil
    }

    /// MHD is done with the connection (answered, closed or the daemon stopping): a late answer
    /// must not touch it.
    func finish() {
        lock.lock()
        answered = true
        suspended = false
        let first = !finished
        finished = true
        lock.unlock()
        if first { finishedSignal.signal() }
    }

    /// Waits until MHD is done with the connection (its answer sent, or the connection gone), or
    /// until `deadline`.
    func waitUntilFinished(deadline: DispatchTime) {
        if finishedSignal.wait(timeout: deadline) == .success { finishedSignal.signal() }
    }

    func takeResponse() -> HTTPResponse? {
        lock.lock()
        defer { lock.unlock() }
        let taken = response
        response = nil
        return taken
    }
}

/// How a route answers its request, now or later, from any thread. Only the first answer counts.
public struct HTTPResponder: Sendable {
    let exchange: HTTPExchange

    public func callAsFunction(_ response: HTTPResponse) {
        exchange.answer(response)
    }
}

/// MHD's access handler: called for the headers, for each piece of the body, and once more at
/// its end (and again after a resume).
private let httpAccessHandler: MHD_AccessHandlerCallback = {
    context, connection, url, method, _, uploadData, uploadSize, state in
    guard let context, let connection, let url, let method, let uploadSize, let state else { return MHD_Result.NO }
    let server = Unmanaged<HTTPServer>.fromOpaque(context).takeUnretainedValue()
    return server.handle(
        connection: connection, url: String(cString: url), method: String(cString: method), uploadData: uploadData,
        uploadSize: uploadSize, state: state)
}

/// MHD's completion callback: releases the request's state; a late answer no longer touches the
/// connection.
private let httpRequestCompleted: MHD_RequestCompletedCallback = { context, _, state, _ in
    guard let state, let raw = state.pointee else { return }
    let exchange = Unmanaged<HTTPExchange>.fromOpaque(raw)
    exchange.takeUnretainedValue().finish()
    if let context { Unmanaged<HTTPServer>.fromOpaque(context).takeUnretainedValue().forget(exchange.takeUnretainedValue()) }
    exchange.release()
    state.pointee = nil
}
