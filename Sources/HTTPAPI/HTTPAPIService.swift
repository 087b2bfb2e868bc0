public import CallRouting
public import Foundation
public import HTTPServer
public import Metrics
public import Push
public import Registrar
public import RouseLog
public import RouseVocabulary
public import Storage

/// Rouse's HTTP API as one piece: the server on its address and the one route table of every
/// endpoint (token posting, health, metrics, the VAPID key, the call API, the admin JSON API and
/// pages, the OpenAPI document), each with its middleware. What it needs it is given: the worker
/// pool, the process's one directory of extensions (the registrar's under `rouse serve`), the
/// throttle and the services; it makes no connection, pool or cache of its own.
///
/// Threading: `init` blocks the calling thread only for binding the port (and reading the OpenAPI
/// resource once). `stop()` may be called
/// from any thread; it stops the server and waits for its threads (the pool is its owner's to shut down).
public final class HTTPAPIService: Sendable {
    public let server: HTTPServer
    /// The route table the server answers by.
    public let router: HTTPRouter<APIContext>

    /// Starts serving on `listen` (`host:port`, port 0 for any; `[v6]:port` for IPv6).
    /// - Parameter pool: where every PostgreSQL job of the API runs (its owner shuts it down).
    /// - Parameter directory: the extensions and their hashes, held in memory (the registrar's).
    /// - Parameter limits: the server's; `requestsPerSecond` becomes the rate limiter around the table.
    /// - Parameter authFailureThrottle: refuses sources with too many failed credentials (429), shared with SIP.
    /// - Parameter metrics: served at `/metrics`; counts `rouse_http_requests_total{route,status}`.
    /// - Parameter logger: gets a line per request (`http.request`), test push and token reveal; no secrets.
    /// - Parameter pushSettings: where the admin API's and pages' test pushes go.
    /// - Parameter adminSessionLifetime: seconds an admin pages session lasts from sign-in.
    /// - Parameter healthProblems: what `/health` reports besides PostgreSQL (push providers backed
    ///   off, records waiting to be written), each in words; quick.
    /// - Parameter pushService: the instance's push service, which the admin's device test pushes
    ///   go through as a call's would; nil: one made from the stored apps for each test.
    /// - Parameter testPushInterval: seconds between two test pushes to one device token
    ///   (`test_push_interval`), counted in PostgreSQL across instances.
    /// - Parameter outsideCallSurges: extensions whose outside calls jumped (this instance's
    ///   toll-fraud guard), with their calls in the last hour; the admin pages warn of them.
    /// - Parameter adminDatabaseDeadline: seconds an admin request (API or pages) may wait for
    ///   PostgreSQL before it is answered 503 with `Retry-After`.
    public init(
        listen: String, pool: PostgresWorkerPool, directory: any ExtensionDirectory, limits: HTTPServer.Limits = HTTPServer.Limits(),
        pushSettings: PushSettings = PushSettings(), adminSessionLifetime: TimeInterval = 12 * 3600,
        authFailureThrottle: AuthFailureThrottle? = nil, metrics: MetricsRegistry = MetricsRegistry(),
        trustedProxies: TrustedPeers = TrustedPeers(), calls: CallAPIParts? = nil,
        healthProblems: @escaping @Sendable () -> [String] = { [] }, pushService: PushService? = nil, testPushInterval: TimeInterval = 30,
        outsideCallSurges: @escaping @Sendable () -> [(caller: AddressOfRecord, lastHour: Int)] = { [] },
        adminDatabaseDeadline: Double = AdminAPI.defaultDatabaseDeadline, historyRetention: TimeInterval = HistoryRetention.defaultRetention,
        logger: Logger = .discarding
    ) throws {
        guard let (host, port) = Self.splitHostPort(listen) else {
            throw HTTPServer.StartError(description: "cannot listen for HTTP on \(listen): expected host:port")
        }
        // Read at start, so a missing resource stops `rouse serve` now, not at the first request.
        guard !OpenAPIDocument.data.isEmpty else {
            throw HTTPServer.StartError(description: "the OpenAPI document is missing: Rouse_HTTPAPI.resources/openapi.json must be beside the rouse binary")
        }
        let parts = RouteParts(
            pool: pool, directory: directory, throttle: authFailureThrottle, metrics: metrics, calls: calls, healthProblems: healthProblems,
            reads: AdminReads(
                pushSettings: pushSettings, pusher: pushService, testPushInterval: testPushInterval, outsideCallSurges: outsideCallSurges,
                historyRetention: historyRetention),
            adminSessionLifetime: adminSessionLifetime, adminDatabaseDeadline: adminDatabaseDeadline, logger: logger)
        var outermost: [any HTTPMiddleware<APIContext>] = []
        if limits.requestsPerSecond > 0 {
            outermost.append(HTTPRateLimitMiddleware(limiter: HTTPRateLimiter(rate: Double(limits.requestsPerSecond))))
        }
        let router = HTTPRouter(routes: Self.routes(parts), middleware: outermost)
        let requests = metrics.counter("rouse_http_requests_total", help: "HTTP requests answered, by route pattern and status.")
        let trusted: HTTPServer.TrustedProxy? = trustedProxies.isEmpty ? nil : { @Sendable address in trustedProxies.contains(address) }
        server = try HTTPServer(host: host, port: port, responder: router, limits: limits, trustedProxy: trusted) { entry in
            requests.increment(["route": router.routePattern(for: entry.path) ?? "unmatched", "status": String(entry.status)])
            logger.request(entry)
        }
        self.router = router
    }

    /// `host:port` as bound.
    public var listenAddress: String { server.listenAddress }

    /// Stops serving and waits for the server's threads. Idempotent.
    public func stop() {
        server.stop()
    }

    deinit {
        stop()
    }

    /// What the route table is built from.
    struct RouteParts: Sendable {
        let pool: PostgresWorkerPool
        let directory: any ExtensionDirectory
        let throttle: AuthFailureThrottle?
        let metrics: MetricsRegistry
        let calls: CallAPIParts?
        let healthProblems: @Sendable () -> [String]
        let reads: AdminReads
        let adminSessionLifetime: TimeInterval
        let adminDatabaseDeadline: Double
        let logger: Logger
    }

    /// Every endpoint: method, path pattern, middleware (outermost first) and handler. The routes
    /// documented in the OpenAPI document are exactly those with `documented` true (a test checks);
    /// the admin pages are HTML for browsers, outside the API contract.
    static func routes(_ parts: RouteParts) -> [HTTPRoute<APIContext>] {
        let pool = parts.pool
        let jsonThrottle = FailureThrottleCheck(throttle: parts.throttle, refusal: FailureThrottleCheck.json)
        let storing = DatabaseDeadline(pool: pool, seconds: PushRegistrationAPI.writeDeadline) { error in PushRegistrationAPI.unavailable(error) }
        let extensionBasic: [any HTTPMiddleware<APIContext>] = [
            jsonThrottle, ExtensionAuthentication(directory: parts.directory, throttle: parts.throttle), storing,
        ]
        let health = HealthAPI(problems: parts.healthProblems)
        let vapid = VAPIDPublicKeyAPI()
        let metrics = MetricsAPI(registry: parts.metrics)

        let adminDeadline = DatabaseDeadline(pool: pool, seconds: parts.adminDatabaseDeadline) { error in AdminAPI.response(for: error) }
        let admin: [any HTTPMiddleware<APIContext>] = [
            jsonThrottle, adminDeadline, AdminAuthentication(sessions: AdminSessionCache(), throttle: parts.throttle),
        ]
        let api = AdminAPI(reads: parts.reads, logger: parts.logger)
        let a = AdminAPI.base

        let pagesDeadline = DatabaseDeadline(pool: pool, seconds: parts.adminDatabaseDeadline) { _ in AdminPages.unavailablePage() }
        let signedIn: [any HTTPMiddleware<APIContext>] = [pagesDeadline, AdminSessionCheck(checkingForm: false)]
        let form: [any HTTPMiddleware<APIContext>] = [pagesDeadline, AdminSessionCheck(checkingForm: true)]
        let pages = AdminPages(reads: parts.reads, sessionLifetime: parts.adminSessionLifetime, throttle: parts.throttle, logger: parts.logger)
        let p = AdminPages.base
        let page = AdminPages.page

        var routes: [HTTPRoute<APIContext>] = [
            HTTPRoute("POST", PushRegistrationAPI.path, middleware: extensionBasic, PushRegistrationAPI.post),
            HTTPRoute("DELETE", PushRegistrationAPI.path, middleware: extensionBasic, PushRegistrationAPI.delete),
            HTTPRoute("GET", VAPIDPublicKeyAPI.path, middleware: [
                DatabaseDeadline(pool: pool, seconds: VAPIDPublicKeyAPI.deadline) { error in VAPIDPublicKeyAPI.unavailable(error) },
            ], vapid.answer),
            HTTPRoute("GET", HealthAPI.path, middleware: [
                DatabaseDeadline(pool: pool, seconds: HealthAPI.deadline) { error in HealthAPI.degraded(["\(error)"]) },
            ], health.check),
            HTTPRoute("GET", MetricsAPI.path, metrics.scrape),
            HTTPRoute("GET", OpenAPIDocument.path, OpenAPIDocument.serve),

            HTTPRoute("GET", a + "/organisations", middleware: admin, api.listOrganisations),
            HTTPRoute("POST", a + "/organisations", middleware: admin, api.addOrganisation),
            HTTPRoute("DELETE", a + "/organisations/{domain}", middleware: admin, api.removeOrganisation),
            HTTPRoute("GET", a + "/organisations/{domain}/routes", middleware: admin, api.listRoutes),
            HTTPRoute("POST", a + "/organisations/{domain}/routes", middleware: admin, api.addRoute),
            HTTPRoute("DELETE", a + "/organisations/{domain}/routes/{name}", middleware: admin, api.removeRoute),
            HTTPRoute("GET", a + "/organisations/{domain}/national-patterns", middleware: admin, api.nationalPatterns),
            HTTPRoute("PUT", a + "/organisations/{domain}/national-patterns", middleware: admin, api.setNationalPatterns),
            HTTPRoute("GET", a + "/routes", middleware: admin, api.listRoutes),
            HTTPRoute("GET", a + "/extensions", middleware: admin, api.listExtensions),
            HTTPRoute("POST", a + "/extensions", middleware: admin, api.addExtension),
            HTTPRoute("GET", a + "/extensions/{address}", middleware: admin, api.extensionDetail),
            HTTPRoute("PUT", a + "/extensions/{address}/password", middleware: admin, api.changePassword),
            HTTPRoute("PUT", a + "/extensions/{address}/display-name", middleware: admin, api.setDisplayName),
            HTTPRoute("PUT", a + "/extensions/{address}/class-of-service", middleware: admin, api.setClassOfService),
            HTTPRoute("DELETE", a + "/extensions/{address}", middleware: admin, api.removeExtension),
            HTTPRoute("POST", a + "/extensions/{address}/devices/{id}/test", middleware: admin, api.testDevice),
            HTTPRoute("GET", a + "/push-apps", middleware: admin, api.listPushApps),
            HTTPRoute("POST", a + "/push-apps", middleware: admin, api.addPushApp),
            HTTPRoute("PUT", a + "/push-apps/{id}", middleware: admin, api.updatePushApp),
            HTTPRoute("DELETE", a + "/push-apps/{id}", middleware: admin, api.removePushApp),
            HTTPRoute("POST", a + "/push-apps/{id}/test", middleware: admin, api.testPush),
            HTTPRoute("GET", a + "/calls", middleware: admin, api.listCalls),
            HTTPRoute("GET", a + "/calls/{id}", middleware: admin, api.callDetail),

            HTTPRoute("GET", "/", documented: false, AdminPages.toSignIn),
            HTTPRoute("GET", p, documented: false, AdminPages.toSignIn),
            HTTPRoute("GET", p + "/", documented: false, AdminPages.toSignIn),
            HTTPRoute("GET", p + "/style.css", documented: false, AdminPages.style),
            HTTPRoute("GET", p + "/sign-in", documented: false, middleware: [pagesDeadline], pages.signInForm),
            HTTPRoute("POST", p + "/sign-in", documented: false, middleware: [
                FailureThrottleCheck(throttle: parts.throttle, refusal: AdminPages.throttledSignIn), pagesDeadline,
            ], pages.signIn),
            HTTPRoute("POST", p + "/sign-out", documented: false, middleware: form, page(AdminPages.signOut)),
            HTTPRoute("GET", p + "/{page}", documented: false, middleware: signedIn, page(AdminPages.noSuchPage)),
            HTTPRoute("GET", p + "/extensions", documented: false, middleware: signedIn, page { try await pages.extensionsPage($0) }),
            HTTPRoute("POST", p + "/organisations", documented: false, middleware: form, page(pages.addOrganisation)),
            HTTPRoute("POST", p + "/organisations/remove", documented: false, middleware: form, page(pages.removeOrganisation)),
            HTTPRoute("GET", p + "/organisations/{domain}", documented: false, middleware: signedIn, page { try await pages.organisationPage($0) }),
            HTTPRoute("POST", p + "/organisations/{domain}/routes", documented: false, middleware: form, page(pages.addRoute)),
            HTTPRoute("POST", p + "/organisations/{domain}/routes/{name}/remove", documented: false, middleware: form, page(pages.removeRoute)),
            HTTPRoute("POST", p + "/organisations/{domain}/national-patterns", documented: false, middleware: form, page(pages.saveNationalPatterns)),
            HTTPRoute("POST", p + "/extensions", documented: false, middleware: form, page(pages.addExtension)),
            HTTPRoute("GET", p + "/extensions/{address}", documented: false, middleware: signedIn, page {
                try await pages.extensionPage($0, address: $0.parameter("address"))
            }),
            HTTPRoute("POST", p + "/extensions/{address}/password", documented: false, middleware: form, page(pages.changePassword)),
            HTTPRoute("POST", p + "/extensions/{address}/display-name", documented: false, middleware: form, page(pages.saveDisplayName)),
            HTTPRoute("POST", p + "/extensions/{address}/remove", documented: false, middleware: form, page(pages.removeExtension)),
            HTTPRoute("POST", p + "/extensions/{address}/class-of-service", documented: false, middleware: form, page(pages.saveClassOfService)),
            HTTPRoute("POST", p + "/extensions/{address}/devices/{id}/test", documented: false, middleware: form, page(pages.testDevice)),
            HTTPRoute("POST", p + "/extensions/{address}/devices/{id}/token", documented: false, middleware: form, page(pages.showToken)),
            HTTPRoute("GET", p + "/push", documented: false, middleware: signedIn, page { try await pages.pushPage($0) }),
            HTTPRoute("GET", p + "/push/new", documented: false, middleware: signedIn, page(pages.newPushAppPage)),
            HTTPRoute("POST", p + "/push/new", documented: false, middleware: form, page(pages.addPushApp)),
            HTTPRoute("GET", p + "/push/{id}/edit", documented: false, middleware: signedIn, page(pages.editPushAppPage)),
            HTTPRoute("POST", p + "/push/{id}/edit", documented: false, middleware: form, page(pages.editPushApp)),
            HTTPRoute("POST", p + "/push/{id}/remove", documented: false, middleware: form, page(pages.removePushApp)),
            HTTPRoute("POST", p + "/push/{id}/test", documented: false, middleware: form, page(pages.testPush)),
            HTTPRoute("GET", p + "/calls", documented: false, middleware: signedIn, page(pages.callsPage)),
            HTTPRoute("GET", p + "/calls/{id}", documented: false, middleware: signedIn, page(pages.journeyPage)),
        ]
        if let calls = parts.calls {
            let api = CallAPI(control: calls.control, instanceID: calls.instanceID)
            let token = CallTokenAuthentication(signer: calls.signer)
            routes += [
                HTTPRoute("GET", "/api/v1/calls/{call}", middleware: [
                    token, DatabaseDeadline(pool: pool, seconds: CallAPI.deadline, answer: CallAPI.unavailable("the call could not be read")),
                ], api.status),
                HTTPRoute("POST", "/api/v1/calls/{call}/decline", middleware: [
                    token, DatabaseDeadline(pool: pool, seconds: CallAPI.deadline, answer: CallAPI.unavailable("the decline could not be passed on")),
                ], api.decline),
            ]
        }
        return routes
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

/// The HTTP API's log lines. None carries a secret: no headers, bodies or query strings, and
/// tokens only shortened.
extension Logger {
    /// One request answered.
    func request(_ entry: HTTPRequestLog) {
        info(
            "http.request",
            ["http.method": entry.method, "http.path": entry.path, "http.status": String(entry.status),
             "http.remote": entry.remoteAddress, "http.ms": String(format: "%.1f", entry.milliseconds)])
    }

    /// An administrator sent a test push (admin pages or API): who, to what (`push app #1`, or an
    /// extension's device), the token shortened, and the outcome's word or `limited`.
    func testPush(admin: String, target: String, token: String, outcome: String) {
        info("admin.test_push", ["admin": admin, "target": target, "token": token, "outcome": outcome])
    }

    /// An administrator had a device's whole token shown (page or API): who, and whose device;
    /// never the token.
    func tokensShown(admin: String, target: String) {
        info("admin.token_shown", ["admin": admin, "target": target])
    }
}
