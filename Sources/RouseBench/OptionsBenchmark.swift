import RouseLog
import RouseServer
import RouseVocabulary
import SIPService
import SIPTransport

/// OPTIONS round trips over UDP on loopback through Rouse's whole SIP stack (transport, parser,
/// transactions, the OPTIONS handler), started in-process with no database.
///
/// Two measured phases, each as long as `seconds`: a window of requests in flight (64 unless told
/// otherwise, or a fixed rate) for throughput, then one request at a time for the latency of an
/// idle server. A short unreported warm-up precedes them. Blocks the calling thread; the server
/// runs on its own loop thread and shares the machine's cores with the load generator.
enum OptionsBenchmark {
    /// Why the benchmark could not run.
    enum Failure: Error, CustomStringConvertible {
        case configuration(ConfigurationError)
        case start(SIPTransportError)
        case noUDPListenPoint
        case loadGenerator(UDPLoadGenerator.Failure)

        var description: String {
            switch self {
            case .configuration(let error): "OPTIONS benchmark: \(error)"
            case .start(let error): "OPTIONS benchmark: cannot start the SIP service: \(error)"
            case .noUDPListenPoint: "OPTIONS benchmark: the SIP service bound no UDP listen point"
            case .loadGenerator(let error): "OPTIONS benchmark: \(error)"
            }
        }
    }

    /// Runs the phases and returns their figures; `pacing` replaces the default window of 64 in
    /// the throughput phase.
    static func run(seconds: Double, pacing: UDPLoadGenerator.Pacing = .window(64)) throws(Failure) -> [BenchFigure] {
        let configuration: RouseConfiguration
        do {
            configuration = try ConfigurationLoader.load(
                flags: ["--sip-listen", "udp:127.0.0.1:0", "--log-level", "error"], environment: [:])
        } catch {
            throw .configuration(error)
        }
        let service = SIPService(
            configuration: configuration,
            logger: Logger(level: configuration.logLevel, format: configuration.logFormat))
        do {
            try service.start()
        } catch {
            throw .start(error)
        }
        defer { service.shutdown() }
        guard let point = service.listeningPoints.first(where: { $0.transport == .udp }) else {
            throw .noUDPListenPoint
        }

        func generate(_ pacing: UDPLoadGenerator.Pacing, for duration: Duration, maxRequests: Int) throws(Failure) -> LoadReport {
            do {
                let generator = try UDPLoadGenerator(
                    configuration: .init(
                        host: point.host, port: point.port, pacing: pacing, maxRequests: maxRequests,
                        duration: duration))
                return try generator.run()
            } catch {
                throw .loadGenerator(error)
            }
        }

        let phaseDuration = Duration.milliseconds(Int64((max(seconds, 0.1) * 1_000).rounded()))
        _ = try generate(.window(64), for: .milliseconds(500), maxRequests: 50_000)

        var figures: [BenchFigure] = []
        let throughputName =
            switch pacing {
            case .window(let size): "options.udp.window\(size)"
            case .rate(let perSecond, _): "options.udp.rate\(Int(perSecond))"
            }
        let loaded = try generate(pacing, for: phaseDuration, maxRequests: 5_000_000)
        figures += describe(loaded, as: throughputName)
        let idle = try generate(.window(1), for: phaseDuration, maxRequests: 5_000_000)
        figures += describe(idle, as: "options.udp.window1")
        return figures
    }

    /// The figures of one phase, and a one-line summary of it on standard output.
    private static func describe(_ report: LoadReport, as name: String) -> [BenchFigure] {
        var figures = [BenchFigure(name: name + ".round_trips", value: report.roundTripsPerSecond, unit: "round trips/s")]
        var summary = "\(name): \(Int(report.roundTripsPerSecond.rounded())) round trips/s"
        for (label, fraction) in [("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)] {
            if let microseconds = report.latencyMicroseconds(atPercentile: fraction) {
                figures.append(BenchFigure(name: "\(name).latency_\(label)", value: microseconds, unit: "µs"))
                summary += ", \(label) \((microseconds * 10).rounded() / 10) µs"
            }
        }
        figures.append(BenchFigure(name: name + ".sent", value: Double(report.sent), unit: "requests"))
        figures.append(BenchFigure(name: name + ".non_200", value: Double(report.failed), unit: "requests"))
        figures.append(BenchFigure(name: name + ".timeouts", value: Double(report.timedOut), unit: "requests"))
        summary += "; \(report.sent) sent, \(report.succeeded) ok, \(report.failed) non-200, \(report.timedOut) timed out"
        if report.unmatched > 0 { summary += ", \(report.unmatched) unmatched" }
        if report.sendErrors > 0 { summary += ", \(report.sendErrors) send errors" }
        print(summary)
        return figures
    }
}
