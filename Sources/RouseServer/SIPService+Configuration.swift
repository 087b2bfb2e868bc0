public import CallRouting
public import Crypto
public import Foundation
public import Metrics
public import Registrar
public import RouseLog
public import SIPService
import SIPTransaction
import SIPTransport

extension SIPServiceSettings {
    /// The SIP service's settings as `rouse serve` is configured: `sip_listen`, `sip_aliases`, TLS,
    /// the TCP and parser limits, T1/T2/T4, `sip_rate_limit`, `sip_threads`, and this build's Server header.
    public init(configuration: RouseConfiguration) {
        let tls: TLSConfiguration? =
            if let certificate = configuration.tlsCertificatePath, let key = configuration.tlsKeyPath {
                TLSConfiguration(
                    certificatePath: certificate, privateKeyPath: key, clientCertificateAuthorityPath: configuration.tlsClientCAPath,
                    requiresClientCertificate: configuration.tlsRequireClientCertificate)
            } else {
                nil
            }
        self.init(
            listen: configuration.sipListen, aliases: configuration.sipAliases, tls: tls,
            limits: TransportLimits(
                maxConnections: configuration.tcpMaxConnections, idleTimeout: configuration.tcpIdleTimeout,
                tlsHandshakeTimeout: configuration.tlsHandshakeTimeout, framing: configuration.parserLimits),
            timers: TransactionTimers(t1: configuration.timerT1, t2: configuration.timerT2, t4: configuration.timerT4),
            rateLimit: configuration.sipRateLimit, serverName: "Rouse/\(CommandLineInterface.version)", dnsServers: configuration.dnsServers,
            threads: configuration.effectiveSIPThreads)
    }
}

extension SIPService {
    /// A SIP service configured as `rouse serve` is (`SIPServiceSettings(configuration:)`); the
    /// other parameters are `init(settings:…)`'s.
    public convenience init(
        configuration: RouseConfiguration, logger: Logger, registrar: Registrar? = nil, instanceID: String = UUID().uuidString,
        metrics: MetricsRegistry? = nil, coordinator: CallCoordinator<SIPService>? = nil, flowTokenKey: [UInt8] = SecureRandom.bytes(32),
        forwardSecret: [UInt8] = SecureRandom.bytes(32), gateway: UpstreamGateway? = nil
    ) {
        self.init(
            settings: SIPServiceSettings(configuration: configuration), logger: logger, registrar: registrar, instanceID: instanceID,
            metrics: metrics, coordinator: coordinator, flowTokenKey: flowTokenKey, forwardSecret: forwardSecret, gateway: gateway)
    }
}
