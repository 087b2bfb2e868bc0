import CLinuxShims
import CallRouting
import Crypto
import Dispatch
import Foundation
import Glibc
import HTTPAPI
import HTTPServer
import Metrics
import Push
import Registrar
public import RouseLog
import SIPDNS
import SIPProxy
import SIPService
import RouseVocabulary
public import SIPTransport
import Storage

/// A whole Rouse instance: checks PostgreSQL and applies migrations, loads the directory and the
/// live bindings, then serves SIP until told to stop. Blocking: `start()` talks to the database on
/// the calling thread (start-up only); serving runs on the services' own threads.
public final class RouseService: @unchecked Sendable {
    // @unchecked: the stored properties below are set once in `start()`, before any other thread
    // sees the service, and only read afterwards.
    public let configuration: RouseConfiguration
    private let logger: Logger
    private var sip: SIPService?
    private var registrar: Registrar?
    private var locationStore: PostgresLocationStore?
    private var listener: PostgresNotificationListener?
    private var replica: PostgresReplica?
    private var http: HTTPAPIService?
    /// The HTTP API's PostgreSQL workers.
    private var httpPool: PostgresWorkerPool?
    private var callPool: PostgresWorkerPool?
    private var coordinator: CallCoordinator<SIPService>?
    private var journeyStore: PostgresJourneyStore?
    private var pushService: PushService?
    private var pushStores: PostgresPushStores?
    private var refresher: BindingRefresher?
    private var databaseSettings: PostgresSettings?
    private var gateway: UpstreamGateway?
    private var retention: HistoryRetentionJob?

    public init(configuration: RouseConfiguration, logger: Logger) throws {
        self.configuration = configuration
        self.logger = logger
    }

    /// Connects to PostgreSQL (one clear error naming host and port when it cannot), applies
    /// migrations, loads extensions and bindings, binds the SIP listen points, then starts the HTTP
    /// API on `httpListen` (its own threads; see `HTTPAPIService`).
    public func start() throws {
        let started = ContinuousClock.now
        // Rouse stores secrets (its own keys at least) from the start: never without a key.
        guard configuration.secrets != nil else { throw SealedSecrets.missingKey }
        let connection = try PostgresConnection(
            conninfo: configuration.databaseURL, connectTimeout: configuration.databaseConnectTimeout)
        connection.secrets = configuration.secrets
        let applied = try Migrator.migrate(connection)
        let version = try Migrator.currentVersion(connection)
        logger.info(
            "database.ready",
            ["database": connection.endpoint, "schema_version": String(version), "applied": applied.map(String.init).joined(separator: ",")])
        // Secrets stored before version 740 are sealed now, once, in one transaction.
        let sealed = try SealedSecrets.sealPlainValues(on: connection)
        if sealed.sealed > 0 { logger.info("secrets.sealed", ["count": String(sealed.sealed), "key": configuration.secrets?.current.id ?? ""]) }

        let settings = configuration.databaseSettings
        let directory = PostgresDirectory(settings: settings)
        let instanceID = UUID().uuidString.lowercased()
        let store = PostgresLocationStore(settings: settings, origin: instanceID)
        let policy = RegistrationPolicy(
            defaultExpires: configuration.registrationDefaultExpires, minExpires: configuration.registrationMinExpires,
            maxExpires: configuration.registrationMaxExpires, pushMinExpires: configuration.pushBindingMinExpires,
            pushMaxExpires: configuration.pushBindingMaxExpires, maxBindingsPerExtension: configuration.maxBindingsPerExtension,
            flowTimer: configuration.effectiveFlowTimer)
        let secret = try RouseService.sharedSecret(named: "digest_nonce_secret", connection)
        // Listening for directory changes from before the load: the listener's first LISTEN reads
        // the directory again only when one was announced meanwhile.
        let directoryWatch = try PostgresDirectoryWatch(settings: settings)
        let loadStarted = ContinuousClock.now
        let loadedDirectory = try directory.loadDirectory()
        let directoryLoaded = ContinuousClock.now
        var core = RegistrarCore(
            policy: policy, directory: loadedDirectory,
            supportedPushProviders: try PostgresPushApps.providerFamilies(on: connection),
            authenticator: DigestAuthenticator(secret: secret, nonceLifetime: Double(configuration.nonceLifetime.components.seconds),
                algorithms: configuration.digestAlgorithms),
            serverName: "Rouse/\(CommandLineInterface.version)")
        // Web push needs no push app: Rouse's own VAPID key, made once and shared by every instance.
        let vapid = try PostgresVAPIDKeys.loadOrCreate(on: connection)
        core.vapidPublicKey = vapid.publicKeyBase64URL
        // One throttle for SIP and HTTP: guesses on either count against both (issue 5).
        let authFailureThrottle = AuthFailureThrottle(
            limit: configuration.authFailureLimit, window: configuration.authFailureWindow / .seconds(1),
            blockFor: configuration.authBlockDuration / .seconds(1))
        // Wake credentials share the call tokens' secret, under a key and audience of their own.
        let callTokenSecret = try RouseService.sharedSecret(named: "call_token_secret", connection)
        let wakeSigner = configuration.wakeCredentials ? WakeCredentialSigner(secret: callTokenSecret) : nil
        core.wakeCredentials = wakeSigner.map { WakeCredentialGate(signer: $0, instanceID: instanceID) }
        let metrics = MetricsRegistry()
        let registrar = Registrar(core: core, store: store, authFailureThrottle: authFailureThrottle, shards: configuration.effectiveSIPThreads)
        metrics.gauge("rouse_bindings", help: "Live bindings (registered contacts) held by this instance.") {
            Double(registrar.bindingCount)
        }

        // Calls: the push service, the coordinator, and what they read and write.
        let callPool = PostgresWorkerPool(settings: settings, threads: 2, name: "rouse-calls-postgres")
        self.callPool = callPool
        // Push records and dead marks are queued and retried, so a push made while PostgreSQL is
        // away is recorded when it is back (issue 9).
        let pushStores = PostgresPushStores(settings: settings)
        self.pushStores = pushStores
        let pushService = PushService(
            settings: configuration.pushSettings, apps: try PostgresPushApps(connection: connection).all(), deadTokens: pushStores,
            records: pushStores,
            webPush: WebPushClient(
                vapid: vapid, contact: configuration.webPushSubject(domains: core.directory.domains), caFile: configuration.pushCAFile,
                timeout: configuration.pushTimeout, subscriptions: PostgresWebPushSubscriptions(pool: callPool),
                allowedHosts: WebPushHostPolicy(entries: configuration.webPushAllowedHosts), retry: configuration.pushSettings.retry,
                breaker: configuration.pushSettings.breaker, proxy: configuration.pushProxy))
        let logger = self.logger
        RouseService.logBrokenPushApps(pushService, logger)
        let journeyStore = PostgresJourneyStore(settings: settings)
        self.journeyStore = journeyStore
        RouseService.registerFaultMetrics(metrics, pushService: pushService)
        // Posted tokens and dead marks are held in memory (the replica), so a call reads no
        // PostgreSQL before its pushes.
        let wakeTokens = RouseService.makeWakeTokenReplica(logger)
        let callTokens = CallTokenSigner(secret: callTokenSecret)
        let coordinator = CallCoordinator<SIPService>(
            directory: registrar, tokens: wakeTokens, pusher: pushService, journeys: journeyStore,
            authenticator: DigestAuthenticator(secret: secret, nonceLifetime: Double(configuration.nonceLifetime.components.seconds),
                algorithms: configuration.digestAlgorithms),
            throttle: authFailureThrottle,
            settings: CallSettings(
                wakeWait: configuration.wakeWait, wakeWaitWithDeskPhone: configuration.wakeWaitWithDeskPhone,
                ringTimeout: configuration.ringTimeout, cancelGrace: configuration.cancelGrace,
                trustedPeers: try TrustedPeers(parsing: configuration.trustedPeers), endedCallKeep: configuration.timerT1 * 64,
                declineIsBusy: configuration.declineIsBusy, maxDiversions: configuration.maxDiversions,
                outsideCallLimits: configuration.outsideCallLimits),
            ownNames: SIPService.ownNames(listen: configuration.sipListen, aliases: configuration.sipAliases),
            serverName: "Rouse/\(CommandLineInterface.version)", instanceID: instanceID, metrics: metrics, callTokens: callTokens,
            wakeCredentials: wakeSigner.map { signer in WakeCredentialMinting(signer: signer, retire: { registrar.retireWakeCredentials($0, until: $1) }) },
            logger: logger,
            liveness: RouseService.makeLiveness(configuration: configuration, pool: callPool, replica: wakeTokens, metrics: metrics, logger: logger),
            shards: configuration.effectiveSIPThreads)
        self.coordinator = coordinator
        self.pushService = pushService
        let outsideClass = configuration.outsideCallClass
        let gatewayRoutes = configuration.gatewayPBXs.enumerated().map { index, pbx in (RouseService.route(to: pbx, id: -1 - index), pbx.password) }
        try RouseService.loadOutsidePolicy(connection, defaultClass: outsideClass, gateways: gatewayRoutes, into: coordinator, logger: logger)
        // Gateway mode: extensions of organisations with a PBX are registered there (one instance each).
        let gateway = configuration.gatewayPBXs.isEmpty ? nil : UpstreamGateway(
            pbxs: configuration.gatewayPBXs, registrar: registrar, leases: PostgresGatewayLeases(pool: callPool, holder: instanceID), logger: logger)
        self.gateway = gateway
        let replica = PostgresReplica(
            settings: settings, origin: instanceID,
            bindings: RouseService.replicaTarget(registrar: registrar, coordinator: coordinator, gateway: gateway),
            tokens: wakeTokens)
        self.replica = replica
        try replica.start()
        // The shards index what it read on their queues: counted in the stage, so ready means ready.
        registrar.waitForQueuedWork()
        let bindingsLoaded = ContinuousClock.now
        RouseService.returnFreedMemory()
        replica.startPruning()
        RouseService.registerReplicaMetrics(metrics, replica: replica)
        registrar.startExpiryTimer()
        retention = RouseService.startRetention(configuration: configuration, settings: settings, logger: logger)
        logger.info(
            "registrar.ready",
            [
                "bindings": String(registrar.bindingCount), "replica_seq": String(replica.lastSeen),
                "extensions": String(loadedDirectory.extensions.count), "before_ms": String((loadStarted - started).wholeMilliseconds),
                "directory_ms": String((directoryLoaded - loadStarted).wholeMilliseconds),
                "bindings_ms": String((bindingsLoaded - directoryLoaded).wholeMilliseconds),
            ])
        self.databaseSettings = settings
        let refresher = BindingRefresher(
            source: registrar, claims: PostgresRefreshClaims(pool: callPool), pusher: pushService,
            lead: configuration.bindingRefreshLead.timeInterval, logger: logger)
        self.refresher = refresher
        registrar.subscribe { event in
            coordinator.bindingsChanged(event.binding.aor)
            gateway?.bindingsChanged(event.binding.aor)
            if event.kind != .removed, event.kind != .expired { refresher.bindingChanged(event.binding) }
        }
        refresher.start()

        let sip = SIPService(
            configuration: configuration, logger: logger, registrar: registrar, instanceID: instanceID, metrics: metrics,
            coordinator: coordinator, flowTokenKey: try RouseService.sharedSecret(named: "flow_token_secret", connection),
            forwardSecret: try RouseService.sharedSecret(named: "instance_forward_secret", connection), gateway: gateway)
        self.sip = sip
        self.registrar = registrar
        self.locationStore = store
        listener = startListening(
            settings: settings, directory: directory, directoryWatch: directoryWatch, registrar: registrar, replica: replica,
            instanceID: instanceID, pushService: pushService, coordinator: coordinator, outsideClass: outsideClass, gatewayRoutes: gatewayRoutes)
        try sip.start()
        for point in sip.listeningPoints {
            logger.info("sip.listening", ["listen": point.description])
        }
        var httpSettings = settings
        httpSettings.statementTimeout = min(settings.statementTimeout, 5)
        // Each post is its own durable commit; PostgreSQL flushes concurrent commits together, so
        // more connections in flight means more posts per fsync (make bench: 1,200 → 1,500/s).
        let httpPool = PostgresWorkerPool(settings: httpSettings, threads: 8, name: "rouse-http-postgres")
        self.httpPool = httpPool
        let http = try HTTPAPIService(
            listen: configuration.httpListen, pool: httpPool, directory: registrar,
            limits: HTTPServer.Limits(requestsPerSecond: configuration.httpRateLimit),
            pushSettings: configuration.pushSettings,
            adminSessionLifetime: configuration.adminSessionLifetime.timeInterval,
            authFailureThrottle: authFailureThrottle, metrics: metrics,
            trustedProxies: try TrustedPeers(parsing: configuration.httpTrustedProxies),
            calls: CallAPIParts(signer: callTokens, control: coordinator, instanceID: instanceID),
            healthProblems: RouseService.healthProblems(pushService: pushService, journeys: journeyStore, pushRecords: pushStores),
            pushService: pushService, testPushInterval: configuration.testPushInterval.timeInterval,
            outsideCallSurges: { coordinator.outsideCallSurges }, historyRetention: configuration.historyRetention.timeInterval, logger: logger)
        self.http = http
        logger.info("http.listening", ["listen": http.listenAddress, "started_ms": String((ContinuousClock.now - started).wholeMilliseconds)])
    }

    /// The HTTP API's `host:port` as bound, once started.
    public var httpListenAddress: String? { http?.listenAddress }

    /// The SIP points bound.
    public var listeningPoints: [ListenPoint] { sip?.listeningPoints ?? [] }

    /// The routes (with their passwords) and classes of service as PostgreSQL holds them now, put
    /// in force on `coordinator` (logged as `routes.loaded`).
    static func loadOutsidePolicy(
        _ connection: PostgresConnection, defaultClass: ClassOfService, gateways: [(route: OutboundRoute, password: String?)],
        into coordinator: CallCoordinator<SIPService>, logger: Logger
    ) throws {
        let routes = try PostgresRoutes(connection: connection).credentials()
        let classes = try PostgresCallClasses(connection: connection).load()
        coordinator.updateOutsidePolicy(OutsideCallPolicy(
            routes: routes, classes: classes.classes, national: classes.national, defaultClass: defaultClass, gateways: gateways))
        logger.info("routes.loaded", ["routes": String(routes.count), "classes": String(classes.classes.count)])
    }

    /// Gateway mode: the route that takes every call of `pbx`'s organisation to the PBX (after the
    /// organisation's own routes for numbers outside), with its domain in the Request-URI, its
    /// credentials for the PBX's challenge, and the caller's From as it came.
    static func route(to pbx: UpstreamPBX, id: Int) -> OutboundRoute {
        let hop = RouteHop(SIPServerTarget(host: pbx.host, port: UInt16(clamping: pbx.port), transport: pbx.transport == .tcp ? .tcp : .udp))
        return OutboundRoute(
            id: id, organisation: pbx.organisation, name: "pbx", position: Int.max, pattern: .prefix(""), hops: [hop], username: pbx.username,
            callerIdentity: .unchanged, requestHost: pbx.domain)
    }

    /// Gives the operating system back the heap pages the start-up's loads freed (every page of
    /// rows read and decoded: hundreds of MiB with a million bindings), which glibc's `free` keeps.
    static func returnFreedMemory() {
        _ = malloc_trim(0)
    }

    /// A random secret shared by every instance through `rouse_settings`, made by whichever starts
    /// first (decisions.md: nonces work across instances), stored sealed.
    static func sharedSecret(named name: String, _ connection: PostgresConnection) throws -> [UInt8] {
        try SealedSecrets.sharedSecret(named: name, on: connection)
    }

    /// Follows changes made elsewhere: the directory (extensions added, passwords changed), push
    /// apps (which providers Rouse can wake), and the replica's change log (bindings, posted tokens
    /// and dead marks written anywhere). After every (re)connect of the listener the replica
    /// catches up from the last change it applied and the directory is read again, since what was
    /// announced while the connection was down is lost (the first time only when `directoryWatch`
    /// saw a change announced since the start-up's load).
    private func startListening(
        settings: PostgresSettings, directory: PostgresDirectory, directoryWatch: PostgresDirectoryWatch, registrar: Registrar, replica: PostgresReplica, instanceID: String,
        pushService: PushService, coordinator: CallCoordinator<SIPService>, outsideClass: ClassOfService,
        gatewayRoutes: [(route: OutboundRoute, password: String?)]
    ) -> PostgresNotificationListener {
        let logger = self.logger
        let work = DispatchQueue(label: "rouse.notifications")
        let channels = [
            PostgresDirectory.notificationChannel, PostgresReplica.notificationChannel, PostgresPushApps.notificationChannel,
            CallAPI.controlChannel, PostgresRoutes.notificationChannel,
        ]
        let listener = PostgresNotificationListener(
            settings: settings, channels: channels,
            onListening: { [work] in
                replica.listening()
                work.async {
                    do {
                        if directoryWatch.changedSinceLoad() { try RouseService.reloadDirectory(directory, into: registrar, logger: logger) }
                        try RouseService.loadOutsidePolicy(try settings.connect(), defaultClass: outsideClass, gateways: gatewayRoutes, into: coordinator, logger: logger)
                    } catch {
                        logger.warning("database.directory_reload_failed", ["error": "\(error)"])
                    }
                }
            }
        ) { notification in
            if notification.channel == PostgresReplica.notificationChannel { return replica.notified(payload: notification.payload) }
            work.async {
                do {
                    if notification.channel == CallAPI.controlChannel {
                        // A decline made on another instance's HTTP API for a call held here.
                        if let notice = CallControlNotice(payload: notification.payload), notice.claims.instanceID == instanceID {
                            coordinator.decline(notice.claims, reason: notice.reason) { _ in }
                        }
                    } else if notification.channel == PostgresDirectory.notificationChannel {
                        try RouseService.reloadDirectory(directory, into: registrar, logger: logger)
                    } else if notification.channel == PostgresRoutes.notificationChannel {
                        try RouseService.loadOutsidePolicy(try settings.connect(), defaultClass: outsideClass, gateways: gatewayRoutes, into: coordinator, logger: logger)
                    } else if notification.channel == PostgresPushApps.notificationChannel {
                        let connection = try settings.connect()
                        registrar.updateSupportedPushProviders(try PostgresPushApps.providerFamilies(on: connection))
                        pushService.replaceApps(try PostgresPushApps(connection: connection).all())
                        RouseService.logBrokenPushApps(pushService, logger)
                    }
                } catch {
                    logger.warning("database.notification_failed", ["channel": notification.channel, "error": "\(error)"])
                }
            }
        }
        listener.start()
        return listener
    }

    /// Reads the directory again and swaps it into the registrar (an extension was added, removed
    /// or changed), logging `directory.loaded` with the count and the time the read took, so an
    /// operator (and a test) sees when a change made elsewhere took effect here.
    private static func reloadDirectory(_ directory: PostgresDirectory, into registrar: Registrar, logger: Logger) throws {
        let started = ContinuousClock.now
        let snapshot = try directory.loadDirectory()
        registrar.updateDirectory(snapshot)
        logger.info("directory.loaded", [
            "extensions": String(snapshot.extensions.count), "ms": String((ContinuousClock.now - started).wholeMilliseconds),
        ])
    }

    /// Serves until SIGINT or SIGTERM, reloading on SIGHUP, then stops gracefully: new
    /// transactions outside a dialog get 503, calls still ringing get up to `shutdown_grace` to
    /// finish and are then ended (their journeys recorded), pending journey writes are flushed,
    /// and every socket closes.
    public func waitForStopSignal(_ stopSignal: StopSignal) {
        while stopSignal.wait() == .reload {
            reload()
        }
        logger.info("rouse.stopping", ["live_calls": String(coordinator?.liveCallCount ?? 0)])
        sip?.beginDraining()
        let deadline = Date().addingTimeInterval(configuration.shutdownGrace.timeInterval)
        while let coordinator, coordinator.liveCallCount > 0, Date() < deadline {
            Thread.sleep(forTimeInterval: 0.05)
        }
        if let ended = coordinator?.endAll(reason: "Rouse is stopping"), ended > 0 {
            logger.info("rouse.calls_ended", ["calls": String(ended)])
            // Let the final responses and CANCELs leave before the sockets close.
            Thread.sleep(forTimeInterval: 0.2)
        }
        refresher?.stop()
        sip?.shutdown()
        http?.stop()
        httpPool?.shutdown()
        registrar?.stopExpiryTimer()
        listener?.stop()
        replica?.stop()
        retention?.stop()
        locationStore?.shutdown()
        callPool?.shutdown()
        // Journeys still queued (PostgreSQL slow or away) get a last chance to be written.
        if let journeyStore, !journeyStore.flush(timeout: 5) {
            logger.warning("calls.journeys_unwritten", ["pending": String(journeyStore.pendingCount)])
        }
        journeyStore?.shutdown()
        if let pushStores, !pushStores.flush(timeout: 5) {
            logger.warning("push.records_unwritten", ["pending": String(pushStores.queue.pendingCount)])
        }
        pushStores?.shutdown()
        logger.info("rouse.stopped", [:])
    }

    /// One loud line per problem of a stored push app that cannot push (checked without sending a
    /// push when the apps are loaded): `push.app_broken` with the app's id, kind, field and the
    /// problem in words, never the key. `/health` lists the same problems.
    static func logBrokenPushApps(_ pushService: PushService, _ logger: Logger) {
        for broken in pushService.brokenApps {
            logger.error("push.app_broken", [
                "app": broken.appID.map(String.init) ?? "?", "kind": broken.kind, "names": broken.names,
                "field": broken.problem.field, "problem": broken.problem.problem,
            ])
        }
    }

    /// SIGHUP: the TLS certificate and key are read again (new connections use them; calls and
    /// open connections are untouched) and push apps are reloaded from PostgreSQL.
    public func reload() {
        do {
            try sip?.reloadTLS()
            logger.info("rouse.tls_reloaded", [:])
        } catch {
            logger.error("rouse.tls_reload_failed", ["error": "\(error)", "kept": "the previous certificate"])
        }
        do {
            guard let databaseSettings else { return }
            let connection = try databaseSettings.connect()
            let apps = try PostgresPushApps(connection: connection).all()
            pushService?.replaceApps(apps)
            registrar?.updateSupportedPushProviders(try PostgresPushApps.providerFamilies(on: connection))
            logger.info("rouse.push_apps_reloaded", ["apps": String(apps.count)])
            if let pushService { RouseService.logBrokenPushApps(pushService, logger) }
        } catch {
            logger.error("rouse.push_apps_reload_failed", ["error": "\(error)"])
        }
    }
}

/// SIGINT and SIGTERM as one event, SIGHUP as another. The handlers are installed when it is
/// made, before anything is served, so a signal that comes early is not lost to the default action
/// (which would end the process without a clean stop); `wait()` blocks until one arrives.
public final class StopSignal: @unchecked Sendable {
    // @unchecked: `sources` is set in init and only read afterwards; DispatchSource is thread-safe;
    // `pending` is only touched under `lock`.
    public enum Event: Sendable { case stop, reload }

    private let semaphore = DispatchSemaphore(value: 0)
    private let lock = NSLock()
    private var pending: [Event] = []
    private var sources: [any DispatchSourceSignal] = []

    public init() {
        signal(SIGINT, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        signal(SIGHUP, SIG_IGN)
        signal(SIGPIPE, SIG_IGN)
        let queue = DispatchQueue(label: "rouse.signals")
        sources = [(SIGINT, Event.stop), (SIGTERM, .stop), (SIGHUP, .reload)].map { number, event in
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { [weak self] in self?.deliver(event) }
            source.resume()
            return source
        }
    }

    private func deliver(_ event: Event) {
        lock.lock()
        pending.append(event)
        lock.unlock()
        semaphore.signal()
    }

    /// Blocks until SIGINT or SIGTERM (`.stop`) or SIGHUP (`.reload`).
    public func wait() -> Event {
        semaphore.wait()
        lock.lock()
        let event = pending.isEmpty ? Event.stop : pending.removeFirst()
        lock.unlock()
        if event == .stop { sources.forEach { $0.cancel() } }
        return event
    }
}
