import Crypto
import Foundation
import SIPTransport
import Storage

/// Authenticated REGISTERs over UDP on loopback against a real `rouse serve` process and
/// PostgreSQL: throughput, latency, CPU and memory of the whole registrar path, where a 200 means
/// the binding is durable.
///
/// It creates the extensions in the database it is given (one statement with bind parameters),
/// starts the `rouse` executable beside `rouse-bench` on `udp:127.0.0.1:0`, and then:
/// 1. challenge pass: each of `extensions` phones sends one REGISTER and learns a nonce from its 401;
/// 2. new bindings: each phone registers once with digest credentials (a binding INSERTed);
/// 3. refreshes: the phones register again in turn for `seconds` (bindings UPDATEd);
/// 4. memory pass (when `memoryBindings` > `extensions`): the remaining phones up to
///    `memoryBindings` are challenged and registered once, bounded by `memorySeconds`.
///
/// Memory: `memory_per_binding` is the growth of resident memory while a group of phones (the
/// memory pass, else the first pass) registers, divided by its bindings; `rss_growth_per_binding`
/// is all growth over the idle process divided by all bindings, an upper bound that also holds the
/// heap's high-water mark of completed transactions (kept for Timer J, ~4 KB each, and not given
/// back to the system by glibc once freed). The first may fall short (bindings can reuse heap the
/// transactions freed), the second overshoots: the truth lies between them.
///
/// CPU figures are the `rouse` process's own (user + system), not PostgreSQL's nor the load
/// generator's, which share the machine. Blocks the calling thread throughout.
enum RegisterBenchmark {
    /// What to run.
    struct Settings {
        /// libpq conninfo of a database the benchmark may fill (`make bench` makes a fresh one).
        var databaseURL: String
        /// The `rouse` executable.
        var rouseExecutable: String
        /// Phones in the measured passes.
        var extensions = 10_000
        /// Length of the refresh phase, in seconds.
        var seconds = 5.0
        var window = 64
        /// Bindings held at the end of the memory pass; at most `extensions` skips it.
        var memoryBindings = 100_000
        /// Upper bound on the memory pass's sending time, in seconds.
        var memorySeconds = 60.0
    }

    /// Why the benchmark could not run.
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static let domain = "bench.rouse.test"
    static let password = "bench-secret"

    /// Runs the passes and returns their figures.
    static func run(_ settings: Settings) throws -> [BenchFigure] {
        let total = max(settings.extensions, settings.memoryBindings)
        let numbers = (0..<total).map { String(20_000_000 + $0) }
        let setupStart = Date()
        try BenchDirectory.prepare(settings.databaseURL, domain: domain, password: password, numbers: numbers)
        progress("register: \(total) extensions created in \(String(format: "%.1f", Date().timeIntervalSince(setupStart))) s")

        let rouse = try RouseChild(
            executable: settings.rouseExecutable, arguments: ["serve"],
            environment: [
                "ROUSE_DATABASE_URL": settings.databaseURL,
                "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0",
                "ROUSE_HTTP_LISTEN": "127.0.0.1:0",
                "ROUSE_LOG_LEVEL": "warning",
                // Completed non-INVITE server transactions are kept for Timer J = 64·T1 (32 s by
                // default), several KB each: at thousands of REGISTERs a second they would outweigh
                // the bindings in the memory figures. No retransmissions happen on loopback, so a
                // T1 of 10 ms (Timer J 640 ms) changes nothing else the benchmark measures.
                "ROUSE_SIP_T1": "10ms",
            ])
        defer { rouse.stop() }
        guard let line = rouse.waitForLine(containing: "serving SIP on ", timeout: 120) else {
            throw Failure(description: "rouse serve did not start:\n\(rouse.outputText)")
        }
        let points = (line.components(separatedBy: "serving SIP on ").last ?? "").components(separatedBy: ", ")
            .compactMap { try? ListenPoint(parsing: $0) }
        guard let point = points.first(where: { $0.transport == .udp }) else {
            throw Failure(description: "rouse serve named no UDP listen point: \(line)")
        }

        let generator: RegisterLoadGenerator
        do {
            generator = try RegisterLoadGenerator(
                configuration: .init(host: point.host, port: point.port, domain: domain, window: settings.window),
                phones: numbers.map { ($0, password) })
        } catch {
            throw Failure(description: "register load generator: \(error)")
        }
        Thread.sleep(forTimeInterval: 0.5)
        let baseMemory = rouse.residentBytes() ?? .nan
        var figures = [BenchFigure(name: "register.rss_idle", value: baseMemory / 1_048_576, unit: "MiB")]
        progress("register: rouse serve up on \(point), \(format(megabytes: baseMemory)) resident with \(total) extensions and no bindings")

        let measured = 0..<settings.extensions
        let challenges = try measure(rouse, "register.challenge", expected: 401) {
            try generator.challengeAll(measured, duration: .seconds(60))
        }
        figures += challenges.figures
        let afterChallenges = rouse.residentBytes() ?? .nan
        figures.append(BenchFigure(name: "register.rss_after_challenges", value: afterChallenges / 1_048_576, unit: "MiB"))
        guard generator.phonesWithNonce >= measured.count else {
            throw Failure(description: "only \(generator.phonesWithNonce) of \(measured.count) phones got a nonce; rouse said:\n\(rouse.outputText.suffix(2_000))")
        }

        let created = try measure(rouse, "register.new_binding", expected: 200) {
            try generator.register(measured, maxRequests: measured.count, duration: .seconds(60))
        }
        figures += created.figures
        let afterCreated = rouse.residentBytes() ?? .nan
        figures.append(BenchFigure(name: "register.rss_after_new_bindings", value: afterCreated / 1_048_576, unit: "MiB"))
        let refreshDuration = Duration.milliseconds(Int64((max(settings.seconds, 0.1) * 1_000).rounded()))
        let refreshed = try measure(rouse, "register.refresh", expected: 200) {
            try generator.register(measured, maxRequests: 5_000_000, duration: refreshDuration)
        }
        figures += refreshed.figures
        let afterMeasured = rouse.residentBytes() ?? .nan
        figures.append(BenchFigure(name: "register.rss_after_refreshes", value: afterMeasured / 1_048_576, unit: "MiB"))
        progress("register: \(format(megabytes: afterMeasured)) resident after \(created.report.load.succeeded) bindings and \(refreshed.report.load.sent) refreshes")

        // Memory per binding is measured as the growth while a group of phones registers, after
        // the same phones were challenged: the challenge pass (faster than registering) has already
        // raised the heap to the high-water mark of live transactions (each kept for Timer J), so
        // the growth is the bindings' own (with their nonce counts and storage buffers).
        var bindings = created.report.load.succeeded
        var groupBefore = afterChallenges
        var groupBindings = created.report.load.succeeded
        var groupAfter = afterCreated
        if settings.memoryBindings > settings.extensions {
            let rest = settings.extensions..<settings.memoryBindings
            let deadline = Date().addingTimeInterval(settings.memorySeconds)
            progress("register: memory pass, \(rest.count) more phones…")
            let restChallenges = try generator.challengeAll(rest, duration: seconds(until: deadline))
            groupBefore = rouse.residentBytes() ?? .nan
            let restRegistered = try generator.register(
                rest, maxRequests: rest.count, duration: seconds(until: deadline))
            bindings += restRegistered.load.succeeded
            groupBindings = restRegistered.load.succeeded
            let rate = restRegistered.load.roundTripsPerSecond
            progress(
                "register: memory pass: \(restChallenges.load.succeeded) challenged, \(restRegistered.load.succeeded) registered"
                    + " (\(Int(rate.rounded())) REGISTER/s)"
                    + (restRegistered.load.succeeded < rest.count ? ", stopped by the time bound" : ""))
            figures.append(BenchFigure(name: "register.memory_pass.registers", value: rate, unit: "REGISTER/s"))
        }
        let loaded = rouse.residentBytes() ?? .nan
        // Let Timer J (64·T1 = 640 ms here) release the completed transactions.
        Thread.sleep(forTimeInterval: 1.5)
        let settled = rouse.residentBytes() ?? .nan
        if settings.memoryBindings > settings.extensions { groupAfter = settled }
        figures.append(BenchFigure(name: "register.bindings", value: Double(bindings), unit: "bindings"))
        figures.append(BenchFigure(name: "register.rss_loaded", value: loaded / 1_048_576, unit: "MiB"))
        figures.append(BenchFigure(name: "register.rss_settled", value: settled / 1_048_576, unit: "MiB"))
        let perBinding = groupBindings > 0 ? (groupAfter - groupBefore) / Double(groupBindings) : .nan
        let overIdle = bindings > 0 ? (settled - baseMemory) / Double(bindings) : .nan
        figures.append(BenchFigure(name: "register.memory_per_binding", value: perBinding, unit: "bytes"))
        figures.append(BenchFigure(name: "register.rss_growth_per_binding", value: overIdle, unit: "bytes"))
        progress(
            "register: \(bindings) bindings: \(format(megabytes: loaded)) resident at once, \(format(megabytes: settled)) settled;"
                + " \(Int(perBinding.isFinite ? perBinding.rounded() : 0)) bytes per binding while \(groupBindings) registered,"
                + " \(Int(overIdle.isFinite ? overIdle.rounded() : 0)) bytes per binding of growth over the idle \(format(megabytes: baseMemory))"
                + " (that includes the heap's high-water mark of live transactions, which glibc keeps)")

        let status = rouse.stop()
        if status != 0 {
            progress("register: rouse serve exited with status \(status.map(String.init) ?? "unknown")")
        }
        return figures
    }

    /// A pass with its CPU cost and figures, and a one-line summary on standard output.
    private static func measure(
        _ rouse: RouseChild, _ name: String, expected: Int, _ body: () throws -> RegisterLoadGenerator.Report
    ) throws -> (report: RegisterLoadGenerator.Report, figures: [BenchFigure]) {
        let cpuBefore = rouse.cpuSeconds() ?? .nan
        let report = try body()
        let cpu = (rouse.cpuSeconds() ?? .nan) - cpuBefore
        let load = report.load
        let answered = load.succeeded + load.failed
        var figures = [BenchFigure(name: name + ".rate", value: load.roundTripsPerSecond, unit: "REGISTER/s")]
        var summary = "\(name): \(Int(load.roundTripsPerSecond.rounded())) REGISTER/s"
        for (label, fraction) in [("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)] {
            if let microseconds = load.latencyMicroseconds(atPercentile: fraction) {
                figures.append(BenchFigure(name: "\(name).latency_\(label)", value: microseconds, unit: "µs"))
                summary += ", \(label) \(Int(microseconds.rounded())) µs"
            }
        }
        let cpuPerThousand = answered > 0 ? cpu / Double(answered) * 1_000 : .nan
        figures.append(BenchFigure(name: name + ".rouse_cpu_per_1000", value: cpuPerThousand, unit: "CPU s"))
        figures.append(BenchFigure(name: name + ".sent", value: Double(load.sent), unit: "requests"))
        figures.append(BenchFigure(name: name + ".other_answers", value: Double(load.failed), unit: "requests"))
        figures.append(BenchFigure(name: name + ".timeouts", value: Double(load.timedOut), unit: "requests"))
        summary += "; rouse \(String(format: "%.3f", cpuPerThousand)) CPU s per 1000"
        summary += "; \(load.sent) sent, \(load.succeeded) \(expected), \(load.failed) other, \(load.timedOut) timed out"
        let others = report.otherStatuses(expected: expected)
        if !others.isEmpty { summary += " (\(others))" }
        if load.unmatched > 0 { summary += ", \(load.unmatched) unmatched" }
        if load.sendErrors > 0 { summary += ", \(load.sendErrors) send errors" }
        progress(summary)
        return (report, figures)
    }

    private static func seconds(until deadline: Date) -> Duration {
        .milliseconds(Int64(max(deadline.timeIntervalSinceNow, 0.1) * 1_000))
    }

    private static func format(megabytes bytes: Double) -> String {
        bytes.isFinite ? String(format: "%.1f MiB", bytes / 1_048_576) : "? MiB"
    }
}

/// Prints a line and flushes it, so progress shows at once even when standard output is a pipe.
func progress(_ line: String) {
    print(line)
    fflush(nil)
}
