import CCurl
import Foundation
import RouseVocabulary

/// One HTTP request for `HTTP2Client`. A value; thread-safe.
public struct HTTP2Request: Sendable {
    public var method: String
    public var url: String
    /// Header lines in order (names as sent; HTTP/2 lower-cases them on the wire).
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// The whole request, connect included, must finish within this (CURLOPT_TIMEOUT_MS).
    public var timeout: Duration

    public init(method: String = "POST", url: String, headers: [(name: String, value: String)] = [], body: [UInt8] = [], timeout: Duration) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
    }
}

/// The answer to an `HTTP2Request`. A value; thread-safe.
public struct HTTP2Response: Sendable {
    public let status: Int
    /// Response headers in order, names in lower case.
    public let headers: [(name: String, value: String)]
    public let body: [UInt8]
    /// From `send` being called to the last byte of the answer.
    public let latency: Duration
    /// 2 for HTTP/2, 1 for HTTP/1.x.
    public let httpMajorVersion: Int

    /// The first value of a header (name in any case).
    public func header(_ name: String) -> String? {
        let lower = name.lowercased()
        return headers.first { $0.name == lower }?.value
    }

    public var bodyText: String { String(decoding: body, as: UTF8.self) }
}

/// Why a request got no HTTP answer. The description names the host, never a header value.
public struct HTTP2Error: Error, Sendable, CustomStringConvertible {
    /// What went wrong, in the terms an operator acts on.
    public enum Kind: String, Sendable {
        /// Could not reach the host (DNS, refused, unreachable).
        case connect
        /// The TLS handshake or certificate check failed.
        case tls
        /// The request's deadline passed.
        case timeout
        /// The connection broke during the request.
        case connectionLost = "connection lost"
        /// The client was stopped with the request in flight.
        case stopped
        /// Anything else libcurl reports.
        case other
    }

    public let kind: Kind
    public let message: String
    public let latency: Duration

    public var description: String { "\(kind.rawValue): \(message)" }
}

/// Where one request was at each step inside Rouse, for `make bench`'s push figures
/// (docs/testing.md): reported to the observer set with `HTTP2Client.observeTimings`. A value;
/// thread-safe.
public struct HTTP2Timing: Sendable {
    /// `send` was called.
    public let submitted: ContinuousClock.Instant
    /// The client's thread took the request from its queue, set up its easy handle and gave it to
    /// libcurl (`curl_multi_add_handle`).
    public let started: ContinuousClock.Instant
    /// libcurl was about to write the request to the connection: the start of the first
    /// `curl_multi_perform` that ran it plus libcurl's own `CURLINFO_PRETRANSFER_TIME_T` (on a
    /// reused connection, its per-transfer setup). When one `curl_multi_perform` starts many
    /// requests, each one's time spent waiting for the earlier ones in that call is not counted.
    public let sent: ContinuousClock.Instant
    /// The answer was complete (or the request failed).
    public let completed: ContinuousClock.Instant
    /// Whether libcurl got an HTTP answer (any status).
    public let answered: Bool
}

/// The process-wide timing observer (`HTTP2Client.observeTimings`); a lock guards it.
private final class TimingObserver: @unchecked Sendable {
    static let shared = TimingObserver()
    private let lock = NSLock()
    private var handler: (@Sendable (HTTP2Timing) -> Void)?

    var current: (@Sendable (HTTP2Timing) -> Void)? {
        lock.lock()
        defer { lock.unlock() }
        return handler
    }

    func set(_ observer: (@Sendable (HTTP2Timing) -> Void)?) {
        lock.lock()
        handler = observer
        lock.unlock()
    }
}

/// An HTTP/2-over-TLS client on libcurl's multi interface: many requests multiplexed on one
/// long-lived connection per host (ALPN h2, `CURLOPT_PIPEWAIT`), each with its own deadline. A
/// connection that drops is replaced on the next request.
///
/// Threading: thread-safe. `send` may be called from any thread or task; it only queues the request
/// and wakes the client's own thread, which alone touches libcurl (the `CURLM` and every easy
/// handle). Completion handlers run on that thread, so they must be quick and must not block.
/// Dropping the last reference stops the thread: requests still in flight complete with `.stopped`.
public final class HTTP2Client: Sendable {
    /// Settings for every request of this client.
    public struct Options: Sendable {
        /// A PEM CA file to trust instead of the system's (test stand-ins with a self-signed CA); it is
        /// read again for each new connection. nil = the system's CAs.
        public var caFile: String?
        /// Cap on connecting (TCP + TLS); each request's own deadline still applies.
        public var connectTimeout: Duration
        /// The proxy every request is tunnelled through (HTTP CONNECT); nil: no proxy set here
        /// (libcurl then honours the `https_proxy` and `no_proxy` environment variables).
        public var proxy: PushProxy?

        public init(caFile: String? = nil, connectTimeout: Duration = .seconds(10), proxy: PushProxy? = nil) {
            self.caFile = caFile
            self.connectTimeout = connectTimeout
            self.proxy = proxy
        }
    }

    private let engine: CurlMultiEngine

    public init(options: Options = Options()) {
        engine = CurlMultiEngine(options: options)
        let engine = self.engine
        let thread = Thread { engine.run() }
        thread.name = "rouse-http2"
        thread.start()
    }

    deinit {
        engine.stop()
    }

    /// Queues `request`; `completion` runs once on the client's thread.
    public func send(_ request: HTTP2Request, completion: @escaping @Sendable (Result<HTTP2Response, HTTP2Error>) -> Void) {
        engine.submit(PendingRequest(request: request, submitted: .now, completion: completion))
    }

    /// Makes every client in the process report each finished request's `HTTP2Timing` to `observer`
    /// (nil stops it). A benchmark hook: the observer runs on the clients' threads just before each
    /// request's own completion handler, so it must be quick and must not block. Thread-safe.
    public static func observeTimings(_ observer: (@Sendable (HTTP2Timing) -> Void)?) {
        TimingObserver.shared.set(observer)
    }

    /// Sends `request` and waits (without blocking a thread) for its answer or failure.
    public func send(_ request: HTTP2Request) async -> Result<HTTP2Response, HTTP2Error> {
        await withCheckedContinuation { continuation in
            send(request) { continuation.resume(returning: $0) }
        }
    }
}

/// A request waiting for the client's thread to pick it up.
struct PendingRequest: Sendable {
    let request: HTTP2Request
    let submitted: ContinuousClock.Instant
    let completion: @Sendable (Result<HTTP2Response, HTTP2Error>) -> Void
}

/// libcurl's process-wide initialisation, run once before the first handle is made.
private let curlInitialised: Bool = curl_global_init(Int(CURL_GLOBAL_ALL)) == CURLE_OK

/// Owns the `CURLM` and the easy handles of the transfers in flight; frees them in `deinit`.
///
/// Threading: `submit` and `stop` are thread-safe (a lock guards `pending` and `stopping`); `run`
/// and everything it calls touch libcurl and `active` on the client's thread only.
final class CurlMultiEngine: @unchecked Sendable {
    private let multi: UnsafeMutableRawPointer
    private let options: HTTP2Client.Options
    private let lock = NSLock()
    private var pending: [PendingRequest] = []
    private var stopping = false
    private var loopThread: pthread_t?
    private let finished = DispatchSemaphore(value: 0)
    /// Loop thread only.
    private var active: [UnsafeMutableRawPointer: Transfer] = [:]

    init(options: HTTP2Client.Options) {
        precondition(curlInitialised, "libcurl failed to initialise")
        guard let multi = curl_multi_init() else { preconditionFailure("curl_multi_init failed") }
        self.multi = multi
        self.options = options
        _ = rouse_curl_multi_setopt_long(multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX)
    }

    deinit {
        for (easy, transfer) in active {
            curl_multi_remove_handle(multi, easy)
            transfer.release()
        }
        curl_multi_cleanup(multi)
    }

    func submit(_ request: PendingRequest) {
        lock.lock()
        if stopping {
            lock.unlock()
            request.completion(.failure(HTTP2Error(kind: .stopped, message: "the HTTP/2 client has stopped", latency: .zero)))
            return
        }
        pending.append(request)
        lock.unlock()
        curl_multi_wakeup(multi)
    }

    func stop() {
        lock.lock()
        let alreadyStopping = stopping
        stopping = true
        let thread = loopThread
        lock.unlock()
        guard !alreadyStopping else { return }
        curl_multi_wakeup(multi)
        if let thread, pthread_equal(thread, pthread_self()) != 0 { return }
        finished.wait()
    }

    func run() {
        lock.lock()
        loopThread = pthread_self()
        lock.unlock()
        while true {
            lock.lock()
            let newRequests = pending
            pending.removeAll()
            let stop = stopping
            lock.unlock()
            if stop {
                for request in newRequests {
                    request.completion(.failure(HTTP2Error(kind: .stopped, message: "the HTTP/2 client has stopped", latency: .zero)))
                }
                break
            }
            let started = newRequests.compactMap { start($0) }
            let performStarted = ContinuousClock.now
            for transfer in started { transfer.performStarted = performStarted }
            var running: Int32 = 0
            curl_multi_perform(multi, &running)
            collectFinished()
            curl_multi_poll(multi, nil, 0, 1000, nil)
        }
        for (easy, transfer) in active {
            curl_multi_remove_handle(multi, easy)
            transfer.finish(code: CURLE_ABORTED_BY_CALLBACK, stoppedByClient: true)
            transfer.release()
        }
        active.removeAll()
        finished.signal()
    }

    /// Gives `request` to libcurl; nil when its easy handle could not be set up (it has failed).
    private func start(_ request: PendingRequest) -> Transfer? {
        let transfer = Transfer(request)
        guard transfer.configure(options: options) else {
            transfer.finish(code: CURLE_FAILED_INIT, stoppedByClient: false)
            transfer.release()
            return nil
        }
        active[transfer.easy] = transfer
        transfer.started = .now
        curl_multi_add_handle(multi, transfer.easy)
        return transfer
    }

    private func collectFinished() {
        var left: Int32 = 0
        while let message = curl_multi_info_read(multi, &left) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let code = message.pointee.data.result
            curl_multi_remove_handle(multi, easy)
            guard let transfer = active.removeValue(forKey: easy) else { continue }
            transfer.finish(code: code, stoppedByClient: false)
            transfer.release()
        }
    }
}

/// One request in flight: its easy handle, header list and error buffer (freed by `release`), and
/// the answer as it arrives. Lives on the client's thread only.
final class Transfer {
    let easy: UnsafeMutableRawPointer
    private let request: PendingRequest
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE))
    private var body: [UInt8] = []
    private var headers: [(name: String, value: String)] = []
    private var released = false
    /// When the client's thread gave it to libcurl, and when the first `curl_multi_perform` after
    /// that began (`HTTP2Timing`).
    var started: ContinuousClock.Instant?
    var performStarted: ContinuousClock.Instant?
    /// Answers larger than this are cut off (APNs and FCM answers are a few hundred bytes).
    static let maxBodyBytes = 1 << 20

    init(_ request: PendingRequest) {
        guard let easy = curl_easy_init() else { preconditionFailure("curl_easy_init failed") }
        self.easy = easy
        self.request = request
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
    }

    deinit {
        release()
        errorBuffer.deallocate()
    }

    /// Frees the easy handle and header list (after the handle has left the multi handle).
    func release() {
        guard !released else { return }
        released = true
        curl_easy_cleanup(easy)
        curl_slist_free_all(headerList)
        headerList = nil
    }

    func configure(options: HTTP2Client.Options) -> Bool {
        let r = request.request
        var ok = true
        func check(_ code: CURLcode) { if code != CURLE_OK { ok = false } }
        check(rouse_curl_easy_setopt_string(easy, CURLOPT_URL, r.url))
        check(rouse_curl_easy_setopt_long(easy, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS)))
        check(rouse_curl_easy_setopt_long(easy, CURLOPT_PIPEWAIT, 1))
        check(rouse_curl_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1))
        check(rouse_curl_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, max(1, r.timeout.wholeMilliseconds)))
        check(rouse_curl_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, max(1, min(options.connectTimeout, r.timeout).wholeMilliseconds)))
        if let caFile = options.caFile, !caFile.isEmpty {
            check(rouse_curl_easy_setopt_string(easy, CURLOPT_CAINFO, caFile))
            // Read the extra CA file at each new connection, so that a replaced file applies at once.
            check(rouse_curl_easy_setopt_long(easy, CURLOPT_CA_CACHE_TIMEOUT, 0))
        }
        if let proxy = options.proxy { configureProxy(proxy, caFile: options.caFile, check) }
        switch r.method {
        case "GET": check(rouse_curl_easy_setopt_long(easy, CURLOPT_HTTPGET, 1))
        default:
            if r.method != "POST" { check(rouse_curl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, r.method)) }
            check(rouse_curl_easy_setopt_long(easy, CURLOPT_POST, 1))
            check(rouse_curl_easy_setopt_long(easy, CURLOPT_POSTFIELDSIZE, r.body.count))
            r.body.withUnsafeBufferPointer { buffer in
                // COPYPOSTFIELDS copies `POSTFIELDSIZE` bytes, so the buffer need not outlive this call.
                check(rouse_curl_easy_setopt_pointer(easy, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: buffer.baseAddress ?? UnsafePointer(bitPattern: 1)!)))
            }
        }
        for header in r.headers {
            headerList = curl_slist_append(headerList, "\(header.name): \(header.value)")
        }
        headerList = curl_slist_append(headerList, "Expect:")
        check(rouse_curl_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, headerList))
        check(rouse_curl_easy_setopt_pointer(easy, CURLOPT_ERRORBUFFER, errorBuffer))
        let me = Unmanaged.passUnretained(self).toOpaque()
        check(rouse_curl_easy_setopt_write_callback(easy, CURLOPT_WRITEFUNCTION) { data, size, count, user in
            let transfer = Unmanaged<Transfer>.fromOpaque(user!).takeUnretainedValue()
            let length = size * count
            if let data, transfer.body.count + length <= Transfer.maxBodyBytes {
                transfer.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: length))
            }
            return length
        })
        check(rouse_curl_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, me))
        check(rouse_curl_easy_setopt_write_callback(easy, CURLOPT_HEADERFUNCTION) { data, size, count, user in
            let transfer = Unmanaged<Transfer>.fromOpaque(user!).takeUnretainedValue()
            let length = size * count
            if let data { transfer.headerLine(String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)) }
            return length
        })
        check(rouse_curl_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, me))
        return ok
    }

    /// Tunnels the request through `proxy` with CONNECT, even to a cleartext URL (the proxy sees
    /// the provider's host, never a push); its credentials go as Basic to the proxy only.
    private func configureProxy(_ proxy: PushProxy, caFile: String?, _ check: (CURLcode) -> Void) {
        check(rouse_curl_easy_setopt_string(easy, CURLOPT_PROXY, proxy.address))
        check(rouse_curl_easy_setopt_long(easy, CURLOPT_HTTPPROXYTUNNEL, 1))
        // The proxy is the one set here: a `no_proxy` in the environment does not bypass it.
        check(rouse_curl_easy_setopt_string(easy, CURLOPT_NOPROXY, ""))
        if let user = proxy.user {
            check(rouse_curl_easy_setopt_string(easy, CURLOPT_PROXYUSERNAME, user))
            check(rouse_curl_easy_setopt_string(easy, CURLOPT_PROXYPASSWORD, proxy.password ?? ""))
        }
        if proxy.scheme == "https", let caFile, !caFile.isEmpty {
            check(rouse_curl_easy_setopt_string(easy, CURLOPT_PROXY_CAINFO, caFile))
        }
    }

    private func headerLine(_ line: String) {
        let trimmed = line.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.hasPrefix("HTTP/") {
            headers.removeAll()
            return
        }
        guard let colon = trimmed.firstIndex(of: ":") else { return }
        headers.append((
            name: trimmed[..<colon].lowercased(),
            value: trimmed[trimmed.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
    }

    func finish(code: CURLcode, stoppedByClient: Bool) {
        let completed = ContinuousClock.now
        let latency = completed - request.submitted
        if stoppedByClient {
            request.completion(.failure(HTTP2Error(kind: .stopped, message: "the HTTP/2 client has stopped", latency: latency)))
            return
        }
        reportTiming(completed: completed, answered: code == CURLE_OK)
        guard code == CURLE_OK else {
            let detail = String(cString: errorBuffer)
            let message = detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
            request.completion(.failure(HTTP2Error(kind: Self.kind(of: code), message: "\(Self.host(of: request.request.url)): \(message)", latency: latency)))
            return
        }
        var status = 0
        var version = 0
        _ = rouse_curl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
        _ = rouse_curl_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version)
        request.completion(.success(HTTP2Response(
            status: status, headers: headers, body: body, latency: latency,
            httpMajorVersion: version == Int(CURL_HTTP_VERSION_2_0) ? 2 : version == Int(CURL_HTTP_VERSION_3) ? 3 : 1)))
    }

    /// Hands this request's `HTTP2Timing` to the observer, if one is set and libcurl ran it.
    private func reportTiming(completed: ContinuousClock.Instant, answered: Bool) {
        guard let observer = TimingObserver.shared.current, let started, let performStarted else { return }
        // CURLINFO_PRETRANSFER_TIME_T is a curl_off_t, which is `long` on the LP64 Linux Rouse runs on,
        // so the `long` getinfo wrapper reads it.
        var pretransferMicroseconds = 0
        if MemoryLayout<curl_off_t>.size == MemoryLayout<Int>.size {
            _ = rouse_curl_easy_getinfo_long(easy, CURLINFO_PRETRANSFER_TIME_T, &pretransferMicroseconds)
        }
        observer(HTTP2Timing(
            submitted: request.submitted, started: started,
            sent: performStarted + .microseconds(max(0, pretransferMicroseconds)), completed: completed, answered: answered))
    }

    static func kind(of code: CURLcode) -> HTTP2Error.Kind {
        switch code {
        case CURLE_OPERATION_TIMEDOUT: return .timeout
        case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY, CURLE_PROXY: return .connect
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_CERTPROBLEM,
            CURLE_SSL_CIPHER, CURLE_SSL_ISSUER_ERROR:
            return .tls
        case CURLE_HTTP2, CURLE_HTTP2_STREAM, CURLE_RECV_ERROR, CURLE_SEND_ERROR, CURLE_GOT_NOTHING, CURLE_PARTIAL_FILE:
            return .connectionLost
        default: return .other
        }
    }

    /// `host:port` of a URL, for messages (never its path, which holds a device token).
    static func host(of url: String) -> String {
        guard let components = URLComponents(string: url), let host = components.host else { return "the push service" }
        return components.port.map { "\(host):\($0)" } ?? host
    }
}
