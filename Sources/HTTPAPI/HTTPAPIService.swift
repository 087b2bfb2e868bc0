import CallRouting
import Dispatch
import Foundation
import Metrics
import Push
import Registrar
import RouseVocabulary
import Storage

/// Rouse's HTTP API as one piece: the server on its address, the token posting endpoint, health,
/// the admin JSON API and the admin pages, and what they need (a worker pool of their own; the
/// extensions' hashes from the `directory` it is given, or, without one, a `CredentialCache`
/// loaded from PostgreSQL and reloaded on `NOTIFY rouse_directory`).
///
/// Threading: `init` blocks the calling thread for binding the port and, without a `directory`,
/// for the first directory load (bounded by the settings' connect timeout; a failure leaves the
/// cache empty until the listener connects and reloads). `stop()` may be called from any thread except the server's
/// own; it stops the server, the listener and the pool, and waits for their threads.
public final class HTTPAPIService: @unchecked Sendable {
    // @unchecked: every stored property is set in init and never changed; `stopped` is guarded by `lock`.
    public let server: HTTPServer
    public let credentials: any ExtensionDirectory
    private let pool: PostgresWorkerPool
    /// Keeps its own `CredentialCache` current; nil when given the process's directory.
    private let listener: PostgresNotificationListener?
    private let lock = NSLock()
    private var stopped = false

    /// Starts serving on `listen` (`host:port`, port 0 for any; `[v6]:port` for IPv6).
    /// - Parameter authFailureThrottle: refuses sources with too many failed credentials (429), shared with SIP.
    /// - Parameter metrics: served at `/metrics`; counts `rouse_http_requests_total{route,status}`.
    /// - Parameter log: gets one event per request and per failed directory load; no secrets.
    /// - Parameter pushSettings: where the admin API's and pages' test pushes go.
    /// - Parameter adminSessionLifetime: seconds an admin pages session lasts from sign-in.
    /// - Parameter healthProblems: what `/health` reports besides PostgreSQL (push providers backed
    ///   off, records waiting to be written), each in words; quick, called on the server's threads.
    /// - Parameter pushService: the instance's push service, which the admin's device test pushes
    ///   go through as a call's would; nil: one made from the stored apps for each test.
    /// - Parameter testPushInterval: seconds between two test pushes to one device token
    ///   (`test_push_interval`), counted in PostgreSQL across instances.
    /// - Parameter directory: the process's one directory of extensions (the registrar's under
    ///   `rouse serve`); nil: the service keeps a `CredentialCache` of its own.
    public init(
        listen: String, settings: PostgresSettings, limits: HTTPServer.Limits = HTTPServer.Limits(),
        pushSettings: PushSettings = PushSettings(), adminSessionLifetime: TimeInterval = 12 * 3600,
        authFailureThrottle: AuthFailureThrottle? = nil, metrics: MetricsRegistry = MetricsRegistry(),
        trustedProxies: TrustedPeers = TrustedPeers(), calls: CallAPIParts? = nil,
        healthProblems: @escaping @Sendable () -> [String] = { [] }, pushService: PushService? = nil, testPushInterval: TimeInterval = 30,
        directory shared: (any ExtensionDirectory)? = nil, log: @escaping @Sendable (HTTPAPIEvent) -> Void = { _ in }
    ) throws {
        guard let (host, port) = Self.splitHostPort(listen) else {
            throw HTTPServer.StartError(description: "cannot listen for HTTP on \(listen): expected host:port")
        }
        var poolSettings = settings
        poolSettings.statementTimeout = min(settings.statementTimeout, 5)
        // Each post is its own durable commit; PostgreSQL flushes concurrent commits together, so
        // more connections in flight means more posts per fsync (make bench: 1,200 → 1,500/s).
        let pool = PostgresWorkerPool(settings: poolSettings, threads: 8, name: "rouse-http-postgres")
        let credentials: any ExtensionDirectory
        let listener: PostgresNotificationListener?
        if let shared {
            credentials = shared
            listener = nil
        } else {
            (credentials, listener) = Self.ownDirectory(settings: settings, log: log)
        }

        var router = HTTPRouter()
        PushRegistrationAPI(credentials: credentials, pool: pool, throttle: authFailureThrottle).register(on: &router)
        HealthAPI(pool: pool, problems: healthProblems).register(on: &router)
        VAPIDPublicKeyAPI(pool: pool).register(on: &router)
        MetricsAPI(registry: metrics).register(on: &router)
        AdminAPI(
            pool: pool, pushSettings: pushSettings, throttle: authFailureThrottle, pusher: pushService, testPushInterval: testPushInterval,
            log: log
        ).register(on: &router)
        AdminPages(
            pool: pool, pushSettings: pushSettings, sessionLifetime: adminSessionLifetime, throttle: authFailureThrottle, pusher: pushService,
            testPushInterval: testPushInterval, log: log
        ).register(on: &router)
        OpenAPIDocument.register(on: &router)
        if let calls {
            CallAPI(signer: calls.signer, control: calls.control, instanceID: calls.instanceID, pool: pool).register(on: &router)
        }
        let server: HTTPServer
        do {
            let requests = metrics.counter("rouse_http_requests_total", help: "HTTP requests answered, by route pattern and status.")
            let routes = router
            server = try HTTPServer(host: host, port: port, router: router, limits: limits, trustedProxies: trustedProxies) { entry in
                requests.increment(["route": routes.routePattern(for: entry.path) ?? "unmatched", "status": String(entry.status)])
                log(.request(entry))
            }
        } catch {
            pool.shutdown()
            throw error
        }
        listener?.start()
        self.server = server
        self.credentials = credentials
        self.pool = pool
        self.listener = listener
    }

    /// `host:port` as bound.
    public var listenAddress: String { server.listenAddress }

    /// Stops serving and waits for every thread the service started. Idempotent.
    public func stop() {
        lock.lock()
        let first = !stopped
        stopped = true
        lock.unlock()
        guard first else { return }
        server.stop()
        listener?.stop()
        pool.shutdown()
    }

    deinit {
        stop()
    }

    /// A `CredentialCache` loaded now (a failure leaves it empty until the listener connects) and
    /// the listener that reloads it on `NOTIFY rouse_directory`.
    private static func ownDirectory(
        settings: PostgresSettings, log: @escaping @Sendable (HTTPAPIEvent) -> Void
    ) -> (CredentialCache, PostgresNotificationListener) {
        let cache = CredentialCache()
        let directory = PostgresDirectory(settings: settings)
        let reloads = DispatchQueue(label: "rouse.http.directory")
        let reload: @Sendable () -> Void = {
            reloads.async {
                do {
                    cache.update(try directory.loadDirectory())
                } catch {
                    log(.directoryLoadFailed("\(error)"))
                }
            }
        }
        let listener = PostgresNotificationListener(
            settings: settings, channels: [PostgresDirectory.notificationChannel], onListening: reload
        ) { _ in reload() }
        if let snapshot = try? directory.loadDirectory() { cache.update(snapshot) }
        return (cache, listener)
    }

    /// `host:port` or `[v6]:port` split; nil when malformed.
    static func splitHostPort(_ text: String) -> (String, UInt16)? {
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            let host = String(text[text.index(after: text.startIndex)..<close])
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":"), let port = UInt16(rest.dropFirst()) else { return nil }
            return (host, port)
        }
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]) else { return nil }
        return (String(text[..<colon]), port)
    }
}

/// What the call-token routes need from the instance: the key that checks tokens, the calls it
/// holds, and its id (a token naming another instance is passed on through PostgreSQL).
public struct CallAPIParts: Sendable {
    public var signer: CallTokenSigner
    public var control: any CallControl
    public var instanceID: String

    public init(signer: CallTokenSigner, control: any CallControl, instanceID: String) {
        self.signer = signer
        self.control = control
        self.instanceID = instanceID
    }
}

/// What the HTTP API reports to its owner's log.
public enum HTTPAPIEvent: Sendable {
    /// One request answered (no headers, no body).
    case request(HTTPRequestLog)
    /// The directory could not be reloaded; the previous credentials stay in use.
    case directoryLoadFailed(String)
    /// An administrator sent a test push (admin pages or API): who, to what (`push app #1`, or an
    /// extension's device), the token shortened, and the outcome's word or `limited`.
    case testPush(admin: String, target: String, token: String, outcome: String)
    /// An administrator had a device's whole token shown (page or API): who, and whose device;
    /// never the token.
    case tokensShown(admin: String, target: String)
}
