import Foundation

/// Authenticated REGISTERs against Rouse and Kamailio on the same machine, with the same load
/// generator, in interleaved runs (R, K, R, K, …), so that other work on the machine weighs on both
/// alike and the ratio holds.
///
/// For each mode (durable: Rouse's bindings committed with `synchronous_commit` on against
/// Kamailio's usrloc `db_mode` 1 write-through; memory: Rouse on a database with
/// `synchronous_commit=off`, Rouse's fastest setting, against Kamailio at its fastest: `db_mode` 0
/// and the HA1s in a shared-memory hash table) and each
/// transport (UDP, TCP), both servers are started afresh with no bindings, and then:
///
/// 1. phones `0..<small` learn a nonce (401) and register once (new bindings), on each server;
/// 2. measured refresh runs over those phones, alternating servers, `rounds` each;
/// 3. phones `small..<large` learn a nonce and register once (resident memory is read before and
///    after, per binding), bounded by `fillSeconds`;
/// 4. measured refresh runs over all `large` phones, alternating servers.
///
/// Every measured run is bounded by `seconds`; it reports REGISTERs answered 200 per second,
/// latency percentiles, CPU seconds per 1,000 REGISTERs of the server's processes and of
/// PostgreSQL's (the cluster is shared, and only one server is loaded at a time), failures
/// (any other final answer) and timeouts. Blocks the calling thread throughout.
enum RegisterComparison {
    /// Durable bindings, or Rouse's fastest setting against Kamailio in memory.
    enum Mode: String, Sendable {
        case durable, memory
    }

    /// What to run.
    struct Settings {
        /// Rouse's database (`synchronous_commit` on) and the one with `synchronous_commit=off`.
        var rouseDatabaseURL: String
        var rouseMemoryDatabaseURL: String?
        var rouseExecutable: String
        /// Kamailio and its database; nil runs Rouse alone.
        var kamailio: KamailioChild.Settings?
        var modes: [Mode] = [.durable, .memory]
        var transports: [RegisterLoadGenerator.Transport] = [.udp, .tcp]
        /// The two extension counts measured (phones the refreshes cycle through).
        var small = 10_000
        var large = 100_000
        /// Length of each measured run, and runs per server and cell.
        var seconds = 8.0
        var rounds = 2
        /// Upper bound on each pass that registers new phones.
        var fillSeconds = 100.0
        var window = 64
        /// Open-loop rate of the measured runs instead of the window, if set.
        var rate: Double?
        var tcpConnections = 64
    }

    /// Why the comparison could not run.
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// One measured run of refreshes.
    struct Run: Sendable {
        var server: String
        var mode: Mode
        var transport: RegisterLoadGenerator.Transport
        var extensions: Int
        var round: Int
        /// Position in the order runs were made within its cell (0, 1, 2, …).
        var order: Int
        /// REGISTERs answered 200 per second.
        var rate: Double
        var p50: Double
        var p99: Double
        var p999: Double
        var serverCPUPer1000: Double
        var postgresCPUPer1000: Double
        var generatorCPUPer1000: Double
        var sent: Int
        var succeeded: Int
        var failed: Int
        var timedOut: Int
        var otherStatuses: String
    }

    /// One pass registering phones for the first time (bindings made).
    struct Fill: Sendable {
        var server: String
        var mode: Mode
        var transport: RegisterLoadGenerator.Transport
        var phones: Int
        var challenged: Int
        var registered: Int
        /// New bindings per second, and that pass's CPU per 1,000.
        var rate: Double
        var serverCPUPer1000: Double
        var postgresCPUPer1000: Double
        var timedOut: Int
        var failed: Int
    }

    /// Resident memory of a server holding its bindings.
    struct Memory: Sendable {
        var server: String
        var mode: Mode
        var transport: RegisterLoadGenerator.Transport
        var bindings: Int
        /// Proportional set size with no bindings, before and after the group registered, and
        /// with every binding held.
        var idleBytes: Double
        var beforeGroupBytes: Double
        var afterGroupBytes: Double
        var groupBindings: Int
        var perBinding: Double { groupBindings > 0 ? (afterGroupBytes - beforeGroupBytes) / Double(groupBindings) : .nan }
    }

    /// Everything measured.
    struct Result: Sendable {
        var runs: [Run] = []
        var fills: [Fill] = []
        var memory: [Memory] = []
        var notes: [String] = []
        var kamailioVersion: String?
    }

    static let domain = "bench.rouse.test"
    static let password = "bench-secret"
    static let firstNumber = 20_000_000

    static func run(_ settings: Settings) throws -> Result {
        var result = Result()
        let numbers = (0..<settings.large).map { String(firstNumber + $0) }
        let setupStart = Date()
        var databases = [settings.rouseDatabaseURL]
        if let memoryURL = settings.rouseMemoryDatabaseURL { databases.append(memoryURL) }
        for database in databases {
            try BenchDirectory.prepare(database, domain: domain, password: password, numbers: numbers)
        }
        if let kamailio = settings.kamailio {
            try KamailioDirectory.prepare(kamailio.databaseConninfo, domain: domain, password: password, first: firstNumber, count: settings.large)
            result.kamailioVersion = KamailioChild.version(executable: kamailio.executable)
        }
        progress(
            "register: \(settings.large) extensions in \(databases.count) Rouse database(s)"
                + (settings.kamailio == nil ? "" : " and Kamailio's subscriber table")
                + " in \(String(format: "%.1f", Date().timeIntervalSince(setupStart))) s")
        let cluster = PostgresCluster(conninfo: settings.rouseDatabaseURL)
        if cluster == nil { result.notes.append("PostgreSQL's CPU was not measured (its postmaster.pid was not found).") }

        for mode in settings.modes {
            let rouseURL: String
            switch mode {
            case .durable: rouseURL = settings.rouseDatabaseURL
            case .memory:
                guard let memoryURL = settings.rouseMemoryDatabaseURL else {
                    result.notes.append("The memory mode was skipped: no database with synchronous_commit=off was given.")
                    continue
                }
                rouseURL = memoryURL
            }
            for transport in settings.transports {
                try block(settings, mode: mode, transport: transport, rouseURL: rouseURL, numbers: numbers, cluster: cluster, into: &result)
            }
        }
        return result
    }

    /// One mode and transport: fresh servers, the small cell, the fill to `large`, the large cell.
    private static func block(
        _ settings: Settings, mode: Mode, transport: RegisterLoadGenerator.Transport, rouseURL: String, numbers: [String],
        cluster: PostgresCluster?, into result: inout Result
    ) throws {
        try BenchDirectory.clearBindings(rouseURL, domain: domain)
        var servers: [MeasuredServer] = []
        defer { for server in servers { server.stop() } }
        // Completed non-INVITE server transactions are kept for Timer J = 64·T1 (32 s by default),
        // several KB each; Kamailio answers REGISTER statelessly and keeps none. No retransmissions
        // happen on loopback, so a T1 of 10 ms (Timer J 640 ms) changes nothing else measured.
        servers.append(try RouseServerUnderTest(executable: settings.rouseExecutable, databaseURL: rouseURL, environment: ["ROUSE_SIP_T1": "10ms"]))
        if var kamailio = settings.kamailio {
            try KamailioDirectory.clearLocations(kamailio.databaseConninfo)
            kamailio.databaseMode = mode == .durable ? 1 : 0
            kamailio.credentialsInMemory = mode == .memory
            servers.append(try KamailioServerUnderTest(kamailio))
        }
        Thread.sleep(forTimeInterval: 0.5)
        let idle = servers.map { $0.memoryBytes() ?? .nan }
        progress(
            "register \(mode.rawValue)/\(transport.rawValue): "
                + servers.map { "\($0.name) on \($0.endpoint(transport).map { "\($0.host):\($0.port)" } ?? "?")" }.joined(separator: ", "))

        var generators: [RegisterLoadGenerator] = []
        for server in servers {
            guard let endpoint = server.endpoint(transport) else {
                throw Failure(description: "\(server.name) serves no \(transport.rawValue) listen point")
            }
            var configuration = RegisterLoadGenerator.Configuration(host: endpoint.host, port: endpoint.port, domain: domain, window: settings.window)
            configuration.transport = transport
            configuration.connections = settings.tcpConnections
            generators.append(try RegisterLoadGenerator(configuration: configuration, phones: numbers.map { ($0, password) }))
        }

        let small = 0..<min(settings.small, numbers.count)
        for (server, generator) in zip(servers, generators) {
            result.fills.append(try fill(server, generator, small, mode: mode, transport: transport, settings: settings, cluster: cluster).fill)
        }
        try cell(servers, generators, phones: small, mode: mode, transport: transport, settings: settings, cluster: cluster, into: &result)

        if settings.large > small.upperBound {
            let rest = small.upperBound..<numbers.count
            for (index, (server, generator)) in zip(servers, generators).enumerated() {
                let before = server.memoryBytes() ?? .nan
                // The challenge pass has raised the heap to its high-water mark of live
                // transactions already, so the growth is the bindings' own.
                let filled = try fill(server, generator, rest, mode: mode, transport: transport, settings: settings, cluster: cluster) {
                    server.memoryBytes() ?? .nan
                }
                result.fills.append(filled.fill)
                // Let Rouse's Timer J (640 ms here) release the completed transactions.
                Thread.sleep(forTimeInterval: 1.5)
                let after = server.memoryBytes() ?? .nan
                result.memory.append(
                    Memory(
                        server: server.name, mode: mode, transport: transport, bindings: small.count + filled.fill.registered,
                        idleBytes: idle[index], beforeGroupBytes: filled.beforeRegistering ?? before, afterGroupBytes: after,
                        groupBindings: filled.fill.registered))
            }
            try cell(servers, generators, phones: 0..<numbers.count, mode: mode, transport: transport, settings: settings, cluster: cluster, into: &result)
        }
        for server in servers {
            let problems = server.outputText.split(separator: "\n").filter {
                $0.contains("level=error") || $0.contains("ERROR:") || $0.contains("CRITICAL:")
            }
            if !problems.isEmpty {
                result.notes.append("\(server.name) (\(mode.rawValue)/\(transport.rawValue)) logged \(problems.count) error line(s), the first: \(problems[0].prefix(300))")
            }
        }
    }

    /// Challenges `phones` and registers each once, bounded by `fillSeconds`; `beforeRegistering`
    /// is read between the two passes.
    private static func fill(
        _ server: MeasuredServer, _ generator: RegisterLoadGenerator, _ phones: Range<Int>, mode: Mode,
        transport: RegisterLoadGenerator.Transport, settings: Settings, cluster: PostgresCluster?,
        beforeRegistering: () -> Double = { .nan }
    ) throws -> (fill: Fill, beforeRegistering: Double?) {
        let deadline = Date().addingTimeInterval(settings.fillSeconds)
        let challenges = try generator.challengeAll(phones, duration: seconds(until: deadline))
        let memory = beforeRegistering()
        let cpu = server.cpuSeconds() ?? .nan
        let postgres = cluster?.cpuSeconds() ?? .nan
        let registered = try generator.register(phones, maxRequests: phones.count, duration: seconds(until: deadline))
        let answered = Double(max(registered.load.succeeded + registered.load.failed, 1))
        let fill = Fill(
            server: server.name, mode: mode, transport: transport, phones: phones.count, challenged: challenges.load.succeeded,
            registered: registered.load.succeeded,
            rate: registered.load.seconds > 0 ? Double(registered.load.succeeded) / registered.load.seconds : .nan,
            serverCPUPer1000: ((server.cpuSeconds() ?? .nan) - cpu) / answered * 1_000,
            postgresCPUPer1000: ((cluster?.cpuSeconds() ?? .nan) - postgres) / answered * 1_000,
            timedOut: registered.load.timedOut + challenges.load.timedOut, failed: registered.load.failed + challenges.load.failed)
        progress(
            "register \(mode.rawValue)/\(transport.rawValue) \(server.name): \(phones.count) phones challenged (\(challenges.load.succeeded) nonces),"
                + " \(registered.load.succeeded) new bindings at \(Int(fill.rate.isFinite ? fill.rate : 0)) REGISTER/s"
                + (registered.load.succeeded < phones.count ? " (stopped at \(Int(settings.fillSeconds)) s or by failures: \(registered.otherStatuses(expected: 200)))" : ""))
        return (fill, memory.isNaN ? nil : memory)
    }

    /// Interleaved measured runs over `phones`: round by round, each server once.
    private static func cell(
        _ servers: [MeasuredServer], _ generators: [RegisterLoadGenerator], phones: Range<Int>, mode: Mode,
        transport: RegisterLoadGenerator.Transport, settings: Settings, cluster: PostgresCluster?, into result: inout Result
    ) throws {
        let duration = Duration.milliseconds(Int64((max(settings.seconds, 0.1) * 1_000).rounded()))
        var order = 0
        for round in 0..<max(settings.rounds, 1) {
            for (server, generator) in zip(servers, generators) {
                let cpu = server.cpuSeconds() ?? .nan
                let postgres = cluster?.cpuSeconds() ?? .nan
                let own = PushBenchmark.ownCPUSeconds()
                let report: RegisterLoadGenerator.Report
                if let rate = settings.rate {
                    report = try generator.register(phones, maxRequests: Int(rate * settings.seconds) + 1, duration: duration)
                } else {
                    report = try generator.register(phones, maxRequests: 5_000_000, duration: duration)
                }
                let load = report.load
                let answered = Double(max(load.succeeded + load.failed, 1))
                let run = Run(
                    server: server.name, mode: mode, transport: transport, extensions: phones.count, round: round, order: order,
                    rate: load.seconds > 0 ? Double(load.succeeded) / load.seconds : .nan,
                    p50: load.latencyMicroseconds(atPercentile: 0.5) ?? .nan,
                    p99: load.latencyMicroseconds(atPercentile: 0.99) ?? .nan,
                    p999: load.latencyMicroseconds(atPercentile: 0.999) ?? .nan,
                    serverCPUPer1000: ((server.cpuSeconds() ?? .nan) - cpu) / answered * 1_000,
                    postgresCPUPer1000: ((cluster?.cpuSeconds() ?? .nan) - postgres) / answered * 1_000,
                    generatorCPUPer1000: (PushBenchmark.ownCPUSeconds() - own) / answered * 1_000,
                    sent: load.sent, succeeded: load.succeeded, failed: load.failed, timedOut: load.timedOut,
                    otherStatuses: report.otherStatuses(expected: 200))
                order += 1
                result.runs.append(run)
                progress(
                    "register \(mode.rawValue)/\(transport.rawValue)/\(phones.count) round \(round + 1) \(server.name): "
                        + "\(Int(run.rate.isFinite ? run.rate.rounded() : 0)) REGISTER/s, p50 \(Int(run.p50.isFinite ? run.p50 : 0)) µs,"
                        + " p99 \(Int(run.p99.isFinite ? run.p99 : 0)) µs, p99.9 \(Int(run.p999.isFinite ? run.p999 : 0)) µs;"
                        + " CPU s per 1000: \(server.name) \(String(format: "%.3f", run.serverCPUPer1000)),"
                        + " PostgreSQL \(String(format: "%.3f", run.postgresCPUPer1000)),"
                        + " load generator \(String(format: "%.3f", run.generatorCPUPer1000));"
                        + " \(load.sent) sent, \(load.failed) failed\(run.otherStatuses.isEmpty ? "" : " (\(run.otherStatuses))"), \(load.timedOut) timed out"
                        + (generator.connectionsClosed > 0 ? ", \(generator.connectionsClosed) TCP connections closed" : ""))
            }
        }
    }

    private static func seconds(until deadline: Date) -> Duration {
        .milliseconds(Int64(max(deadline.timeIntervalSinceNow, 0.1) * 1_000))
    }

    /// The median of `values` (the mean of the middle two for an even count); NaN for none.
    static func median(_ values: [Double]) -> Double {
        let sorted = values.filter(\.isFinite).sorted()
        guard !sorted.isEmpty else { return .nan }
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }
}
