import CallRouting
import Dispatch
import Foundation
import HTTPAPI
import HTTPServer
import Metrics
import Push
import Registrar
import RouseLog
import RouseVocabulary
import Storage

/// The HTTP API run on its own for a test, wired as `rouse serve` wires it but without a
/// registrar: a worker pool (statements bounded at 5 s, as in production), a `CredentialCache`
/// loaded from PostgreSQL and reloaded on `NOTIFY rouse_directory`, and the service on them.
/// `stop()` stops the service, the listener and the pool.
final class StandaloneHTTPAPI: @unchecked Sendable {
    // @unchecked: every stored property is set in init and never changed.
    let service: HTTPAPIService
    let pool: PostgresWorkerPool
    let listener: PostgresNotificationListener
    let credentials: CredentialCache

    var server: HTTPServer { service.server }
    var router: HTTPRouter<APIContext> { service.router }

    init(
        listen: String, settings: PostgresSettings, pushSettings: PushSettings = PushSettings(), adminSessionLifetime: TimeInterval = 12 * 3600,
        authFailureThrottle: AuthFailureThrottle? = nil, metrics: MetricsRegistry = MetricsRegistry(),
        trustedProxies: TrustedPeers = TrustedPeers(), calls: CallAPIParts? = nil, pushService: PushService? = nil,
        testPushInterval: TimeInterval = 30, outsideCallSurges: @escaping @Sendable () -> [(caller: AddressOfRecord, lastHour: Int)] = { [] },
        logger: Logger = .discarding
    ) throws {
        var poolSettings = settings
        poolSettings.statementTimeout = min(settings.statementTimeout, 5)
        pool = PostgresWorkerPool(settings: poolSettings, threads: 8, name: "test-http-postgres")
        let cache = CredentialCache()
        let directory = PostgresDirectory(settings: settings)
        let reloads = DispatchQueue(label: "test.http.directory")
        let reload: @Sendable () -> Void = { reloads.async { if let snapshot = try? directory.loadDirectory() { cache.update(snapshot) } } }
        listener = PostgresNotificationListener(
            settings: settings, channels: [PostgresDirectory.notificationChannel], onListening: reload
        ) { _ in reload() }
        if let snapshot = try? directory.loadDirectory() { cache.update(snapshot) }
        credentials = cache
        do {
            service = try HTTPAPIService(
                listen: listen, pool: pool, directory: cache, pushSettings: pushSettings, adminSessionLifetime: adminSessionLifetime,
                authFailureThrottle: authFailureThrottle, metrics: metrics, trustedProxies: trustedProxies, calls: calls,
                pushService: pushService, testPushInterval: testPushInterval, outsideCallSurges: outsideCallSurges, logger: logger)
        } catch {
            pool.shutdown()
            throw error
        }
        listener.start()
    }

    func stop() {
        service.stop()
        listener.stop()
        pool.shutdown()
    }
}
