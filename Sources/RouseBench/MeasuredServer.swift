import Foundation
import RouseVocabulary
import SIPTransport

/// A SIP server under measurement, Rouse or Kamailio: where it listens, and the CPU and memory of
/// its whole process tree. Meant for the one thread that runs the benchmark.
protocol MeasuredServer: AnyObject {
    /// `rouse` or `kamailio`.
    var name: String { get }
    /// The loopback address and port it serves `transport` on.
    func endpoint(_ transport: RegisterLoadGenerator.Transport) -> (host: String, port: UInt16)?
    /// CPU seconds used so far by the server's processes (not PostgreSQL's).
    func cpuSeconds() -> Double?
    /// Proportional set size of the server's processes, in bytes.
    func memoryBytes() -> Double?
    /// Recent output, for error messages.
    var outputText: String { get }
    @discardableResult func stop() -> Int32?
}

/// `rouse serve` as a `MeasuredServer`, listening on UDP and TCP on loopback.
final class RouseServerUnderTest: MeasuredServer {
    let name = "rouse"
    let child: RouseChild
    private let points: [ListenPoint]

    /// Starts `rouse serve` on `databaseURL` with `environment` added to the benchmark's settings,
    /// and waits (up to `startTimeout` seconds) until it serves SIP.
    init(executable: String, databaseURL: String, environment: [String: String] = [:], startTimeout: TimeInterval = 120) throws {
        var settings = [
            "ROUSE_DATABASE_URL": databaseURL,
            "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0,tcp:127.0.0.1:0",
            "ROUSE_HTTP_LISTEN": "127.0.0.1:0",
            "ROUSE_LOG_LEVEL": "warning",
        ]
        settings.merge(environment) { $1 }
        child = try RouseChild(executable: executable, arguments: ["serve"], environment: settings)
        guard let line = child.waitForLine(containing: "serving SIP on ", timeout: startTimeout) else {
            throw RegisterComparison.Failure(description: "rouse serve did not start:\n\(child.outputText.suffix(3_000))")
        }
        points = (line.components(separatedBy: "serving SIP on ").last ?? "").components(separatedBy: ", ")
            .compactMap { try? ListenPoint(parsing: $0) }
    }

    func endpoint(_ transport: RegisterLoadGenerator.Transport) -> (host: String, port: UInt16)? {
        let wanted: SIPTransportKind = transport == .udp ? .udp : .tcp
        return points.first(where: { $0.transport == wanted }).map { ($0.host, $0.port) }
    }

    func cpuSeconds() -> Double? { child.cpuSeconds() }
    func memoryBytes() -> Double? { ProcessTree.proportionalBytes(of: child.processIdentifier) }
    var outputText: String { child.outputText }
    @discardableResult func stop() -> Int32? { child.stop() }
}

/// Kamailio as a `MeasuredServer` (one port for UDP and TCP).
final class KamailioServerUnderTest: MeasuredServer {
    let name = "kamailio"
    let child: KamailioChild

    init(_ settings: KamailioChild.Settings) throws {
        child = try KamailioChild(settings)
    }

    func endpoint(_ transport: RegisterLoadGenerator.Transport) -> (host: String, port: UInt16)? { (child.host, child.port) }
    func cpuSeconds() -> Double? { child.cpuSeconds() }
    func memoryBytes() -> Double? { child.memoryBytes() }
    var outputText: String { child.outputText }
    @discardableResult func stop() -> Int32? { child.stop() }
}
