import Dispatch
import Foundation
import Glibc
import SIPTransport
import Storage

/// A whole Rouse instance: checks PostgreSQL and applies migrations, then serves SIP until told to
/// stop. Blocking: `start()` connects to the database on the calling thread (start-up only);
/// serving runs on the SIP service's own threads.
public final class RouseService: Sendable {
    public let configuration: RouseConfiguration
    private let logger: Logger
    private let sip: SIPService

    public init(configuration: RouseConfiguration, logger: Logger) throws {
        self.configuration = configuration
        self.logger = logger
        self.sip = SIPService(configuration: configuration, logger: logger)
    }

    /// Connects to PostgreSQL (one clear error naming host and port when it cannot), applies
    /// migrations, and binds the SIP listen points.
    public func start() throws {
        let connection = try PostgresConnection(
            conninfo: configuration.databaseURL, connectTimeout: configuration.databaseConnectTimeout)
        let applied = try Migrator.migrate(connection)
        let version = try Migrator.currentVersion(connection)
        logger.info(
            "database.ready",
            ["database": connection.endpoint, "schema_version": String(version), "applied": applied.map(String.init).joined(separator: ",")])
        try sip.start()
        for point in sip.listeningPoints {
            logger.info("sip.listening", ["listen": point.description])
        }
    }

    /// The SIP points bound.
    public var listeningPoints: [ListenPoint] { sip.listeningPoints }

    /// Blocks until SIGINT or SIGTERM, then stops serving.
    public func waitForStopSignal() {
        signal(SIGINT, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        signal(SIGPIPE, SIG_IGN)
        let stop = DispatchSemaphore(value: 0)
        let queue = DispatchQueue(label: "rouse.signals")
        let sources = [SIGINT, SIGTERM].map { number -> DispatchSourceSignal in
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { stop.signal() }
            source.resume()
            return source
        }
        stop.wait()
        logger.info("rouse.stopping", [:])
        sip.shutdown()
        sources.forEach { $0.cancel() }
        logger.info("rouse.stopped", [:])
    }
}
