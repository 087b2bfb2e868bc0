import Foundation
import Glibc
import RouseTestSupport

/// The SIPp ladders of `make bench` (issue 21): a generator nobody here wrote, Debian's
/// `sip-tester` (SIPp), offering fixed rates step by step to Rouse (durable: bindings committed
/// with `synchronous_commit` on before the 200) and to Kamailio twice: at its fastest (`memory`:
/// usrloc `db_mode` 0 and the HA1s in a shared-memory hash table) and durable (`db_mode` 1 with
/// auth_db reading `subscriber`), interleaved step by step (R, Km, Kd at each rate, so the
/// machine's other load weighs on all three alike).
///
/// Two ladders, scenarios in `bench/sipp/`:
/// - **register**: each SIPp call is one phone's registration with digest, REGISTER → 401 →
///   REGISTER with SIPp's `[authentication]` (username and password from the injection CSV) →
///   200; phones taken in turn from the CSV;
/// - **calls**: a SIPp registers `callees` extensions through the server and answers their calls
///   from the same address (register.xml, `-oocsf uas.xml`); the SIPp UAC sends INVITE → 200 →
///   ACK → BYE → 200 through the server (which trusts loopback: no 407), callees taken in turn.
///
/// Each step offers `rate` calls per second for `seconds` (`-r`, `-m rate·seconds`); it records the
/// passed rate (successful calls ÷ the step's wall time), failures, retransmissions, the response
/// time percentiles (`-trace_rtt`: INVITE/first REGISTER → final 200), and CPU µs per successful
/// call of the server's processes, of PostgreSQL's backends (`ProcessTree`) and of SIPp itself.
/// A server that passes less than 90 % of the offered rate (or fails more than 1 %) is not offered
/// the higher steps. Blocks the calling thread throughout.
enum SIPpLadder {
    /// What to run.
    struct Settings {
        var sipp = "/usr/bin/sipp"
        var scenarios = "bench/sipp"
        var rouseExecutable: String
        /// Rouse's durable database (`synchronous_commit` on).
        var rouseDatabaseURL: String
        /// Kamailio; its `databaseMode` and `credentialsInMemory` are set per server.
        var kamailio: KamailioChild.Settings?
        var registerRates: [Double] = [1_000, 2_000, 4_000, 6_000, 8_000, 12_000]
        var callRates: [Double] = [100, 200, 400, 600, 800, 1_200]
        var seconds = 5.0
        /// Phones the register ladder cycles through, and callees of the call ladder.
        var phones = 10_000
        var callees = 1_000
    }

    /// Why a ladder could not run.
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// One step: one server at one offered rate.
    struct Step: Sendable {
        /// `register` or `calls`.
        var ladder: String
        /// `rouse`, `kamailio.memory` or `kamailio.durable`.
        var server: String
        var offered: Double
        var attempted: Int
        var succeeded: Int
        var failed: Int
        var retransmissions: Int
        /// Successful calls per second of the step's wall time.
        var passed: Double
        var p50Milliseconds: Double
        var p99Milliseconds: Double
        /// CPU µs per successful call (a registration: two REGISTERs; a call: INVITE, ACK, BYE).
        var serverMicros: Double
        var postgresMicros: Double
        var sippMicros: Double
        var totalMicros: Double { serverMicros + (postgresMicros.isFinite ? postgresMicros : 0) }
        /// True when the step met the bar for the next one (≥ 90 % passed, ≤ 1 % failed).
        var kept: Bool { passedFraction >= 0.9 && failureFraction <= 0.01 }
        var passedFraction: Double { offered > 0 ? passed / offered : 0 }
        var failureFraction: Double { attempted > 0 ? Double(failed) / Double(attempted) : 1 }
    }

    /// Every step, and what went wrong.
    struct Result: Sendable {
        var steps: [Step] = []
        var notes: [String] = []
        var sippVersion: String?

        /// The highest rate `server` passed on `ladder` with at most 1 % of calls failed (a step
        /// kept or the slower step after it), or the best passed rate of any step.
        func highest(_ ladder: String, _ server: String) -> Double {
            let mine = steps.filter { $0.ladder == ladder && $0.server == server }
            return mine.filter { $0.failureFraction <= 0.01 }.map(\.passed).max() ?? mine.map(\.passed).max() ?? .nan
        }
    }

    /// One server under the ladder and its name.
    private struct Contender {
        var name: String
        var server: MeasuredServer
    }

    static let domain = RegisterComparison.domain
    static let password = RegisterComparison.password

    static func run(_ settings: Settings) throws -> Result {
        guard FileManager.default.isExecutableFile(atPath: settings.sipp) else {
            throw Failure(description: "no SIPp at \(settings.sipp) (apt-get install sip-tester; scripts/bench.sh installs it)")
        }
        var result = Result()
        result.sippVersion = version(settings.sipp)
        let work = NSTemporaryDirectory() + "rouse-bench-sipp-\(getpid())"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: work) }

        let count = max(settings.phones, settings.callees)
        let numbers = (0..<count).map { String(RegisterComparison.firstNumber + $0) }
        try BenchDirectory.prepare(settings.rouseDatabaseURL, domain: domain, password: password, numbers: numbers)
        if let kamailio = settings.kamailio {
            try KamailioDirectory.prepare(
                kamailio.databaseConninfo, domain: domain, password: password, first: RegisterComparison.firstNumber, count: count)
        }
        let cluster = PostgresCluster(conninfo: settings.rouseDatabaseURL)
        if cluster == nil { result.notes.append("SIPp ladder: PostgreSQL's CPU was not measured (its postmaster.pid was not found).") }

        if !settings.registerRates.isEmpty {
            let phones = Array(numbers.prefix(settings.phones))
            try withServers(settings, rouseEnvironment: ["ROUSE_SIP_T1": "10ms"]) { contenders in
                for rate in settings.registerRates {
                    for contender in contenders where !gaveUp(result, "register", contender.name) {
                        let port = try FreePort.pick()
                        let csv = work + "/phones-\(contender.name).csv"
                        try injection(phones.map { "\($0);[authentication username=\($0) password=\(password)];127.0.0.1:\(port)" }, to: csv)
                        let step = try self.step(
                            "register", contender, rate: rate, scenario: "register.xml", csv: csv, port: port, settings: settings,
                            cluster: cluster, work: work, notes: &result.notes)
                        result.steps.append(step)
                    }
                }
            }
        }
        if !settings.callRates.isEmpty {
            let callees = Array(numbers.prefix(settings.callees))
            // The callers' INVITEs come from loopback, trusted as Kamailio's route trusts it.
            try withServers(settings, rouseEnvironment: ["ROUSE_TRUSTED_PEERS": "127.0.0.1"]) { contenders in
                var answering: [String: ChildProcess] = [:]
                defer { for (_, uas) in answering { uas.stop() } }
                for contender in contenders {
                    answering[contender.name] = try registerCallees(callees, with: contender, settings: settings, work: work)
                }
                let targets = work + "/targets.csv"
                try injection(callees, to: targets)
                for rate in settings.callRates {
                    for contender in contenders where !gaveUp(result, "calls", contender.name) {
                        let step = try self.step(
                            "calls", contender, rate: rate, scenario: "uac.xml", csv: targets, port: try FreePort.pick(), settings: settings,
                            cluster: cluster, work: work, also: answering[contender.name], notes: &result.notes)
                        result.steps.append(step)
                        // Rouse writes each call's journey after the call, off the signalling
                        // path: let that finish before the next server's step.
                        Thread.sleep(forTimeInterval: 1)
                    }
                }
            }
        }
        return result
    }

    /// True when `server`'s last step on `ladder` missed the bar (it is offered no higher rate).
    private static func gaveUp(_ result: Result, _ ladder: String, _ server: String) -> Bool {
        guard let last = result.steps.last(where: { $0.ladder == ladder && $0.server == server }) else { return false }
        return !last.kept
    }

    /// Starts Rouse (durable, with `rouseEnvironment`) and both Kamailios, runs `body`, and stops
    /// them. The register ladder runs Rouse as the REGISTER comparison does, with a T1 of 10 ms:
    /// Timer J of 640 ms instead of 32 s, so completed REGISTER transactions (Kamailio keeps none)
    /// do not pile up, and no retransmission happens on loopback within 10 ms. The call ladder
    /// keeps the default T1 (INVITEs wait on the callee).
    private static func withServers(_ settings: Settings, rouseEnvironment environment: [String: String], _ body: ([Contender]) throws -> Void)
        throws
    {
        try BenchDirectory.clearBindings(settings.rouseDatabaseURL, domain: domain)
        var contenders = [
            Contender(
                name: "rouse",
                server: try RouseServerUnderTest(executable: settings.rouseExecutable, databaseURL: settings.rouseDatabaseURL, environment: environment))
        ]
        defer { for contender in contenders { contender.server.stop() } }
        if let kamailio = settings.kamailio {
            try KamailioDirectory.clearLocations(kamailio.databaseConninfo)
            var memory = kamailio
            memory.databaseMode = 0
            memory.credentialsInMemory = true
            contenders.append(Contender(name: "kamailio.memory", server: try KamailioServerUnderTest(memory)))
            var durable = kamailio
            durable.databaseMode = 1
            durable.credentialsInMemory = false
            contenders.append(Contender(name: "kamailio.durable", server: try KamailioServerUnderTest(durable)))
        }
        try body(contenders)
        for contender in contenders where contender.server.outputText.contains("level=error") || contender.server.outputText.contains("ERROR:") {
            progress("sipp: \(contender.name) logged errors; the last: \(contender.server.outputText.suffix(300))")
        }
    }

    /// The callees' SIPp: it registers every callee through `contender` from its own address
    /// (register.xml at 500 per second, each registration then held for an hour with `-d`) and
    /// answers the INVITEs that come to that address with uas.xml (`-oocsf`): a server that sends
    /// to the flow a REGISTER came from (Rouse) and one that sends to the Contact (Kamailio) both
    /// reach it. Returns it once its counts show every 200.
    private static func registerCallees(_ callees: [String], with contender: Contender, settings: Settings, work: String) throws -> ChildProcess {
        guard let endpoint = contender.server.endpoint(.udp) else { throw Failure(description: "\(contender.name) serves no UDP") }
        let port = try FreePort.pick()
        let csv = work + "/callees-\(contender.name).csv"
        try injection(callees.map { "\($0);[authentication username=\($0) password=\(password)];127.0.0.1:\(port)" }, to: csv)
        let folder = work + "/callees-\(contender.name)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        var arguments = sippArguments(settings, scenario: "register.xml", csv: csv, port: port, rate: 500, calls: callees.count, endpoint: endpoint, work: folder)
        // Before the target (the last argument): answer calls, hold each registration, count.
        arguments.insert(contentsOf: ["-oocsf", scenarioPath(settings, "uas.xml"), "-d", "3600000", "-trace_counts", "-timeout", "3600s"], at: arguments.count - 1)
        let callee = try ChildProcess(arguments, environment: ProcessInfo.processInfo.environment, outputPath: folder + "/sipp.out")
        let deadline = Date().addingTimeInterval(Double(callees.count) / 500 + 30)
        var registered = 0
        while callee.isRunning && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.2)
            registered = registeredCount(in: folder)
            if registered >= callees.count { break }
        }
        guard registered >= callees.count, callee.isRunning else {
            callee.stop()
            throw Failure(description: "SIPp registered \(registered) of \(callees.count) callees through \(contender.name)")
        }
        progress("sipp calls: \(callees.count) callees registered through \(contender.name) by the answering SIPp on port \(port)")
        return callee
    }

    /// The 200s to authenticated REGISTERs so far, from SIPp's `-trace_counts` file in `folder`
    /// (the last column named `<index>_200_Recv`).
    private static func registeredCount(in folder: String) -> Int {
        for file in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] where file.hasSuffix("_counts.csv") {
            let counts = lastStatistics(folder + "/" + file)
            guard let column = counts.keys.filter({ $0.hasSuffix("_200_Recv") }).max(by: { (Int($0.prefix { $0.isNumber }) ?? 0) < (Int($1.prefix { $0.isNumber }) ?? 0) })
            else { continue }
            return counts[column].flatMap { Int($0) } ?? 0
        }
        return 0
    }

    /// One step: SIPp offers `rate` per second for `seconds` to `contender`; `also` is another
    /// SIPp whose CPU counts as the generator's (the answering UAS of the call ladder).
    private static func step(
        _ ladder: String, _ contender: Contender, rate: Double, scenario: String, csv: String, port: UInt16, settings: Settings,
        cluster: PostgresCluster?, work: String, also: ChildProcess? = nil, notes: inout [String]
    ) throws -> Step {
        guard let endpoint = contender.server.endpoint(.udp) else { throw Failure(description: "\(contender.name) serves no UDP") }
        let calls = max(Int((rate * settings.seconds).rounded()), 1)
        try? FileManager.default.removeItem(atPath: work + "/stat.csv")
        try? FileManager.default.removeItem(atPath: work + "/errors.log")
        for rtt in (try? FileManager.default.contentsOfDirectory(atPath: work)) ?? [] where rtt.hasSuffix("_rtt.csv") {
            try? FileManager.default.removeItem(atPath: work + "/" + rtt)
        }
        let serverBefore = contender.server.cpuSeconds() ?? .nan
        let postgresBefore = cluster?.cpuSeconds() ?? .nan
        let childrenBefore = childrenCPUSeconds()
        let alsoBefore = also.flatMap { ProcessTree.cpuSeconds(of: $0.processIdentifier) } ?? 0
        let started = Date()
        let sipp = try ChildProcess(
            sippArguments(settings, scenario: scenario, csv: csv, port: port, rate: rate, calls: calls, endpoint: endpoint, work: work),
            environment: ProcessInfo.processInfo.environment, outputPath: work + "/\(ladder)-\(contender.name).out")
        // Bounded: the offered stretch, then at most the receive timeout of the last calls.
        let deadline = started.addingTimeInterval(settings.seconds + 20)
        while sipp.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        let stillRunning = sipp.isRunning
        sipp.stop()
        let sippCPU = childrenCPUSeconds() - childrenBefore + ((also.flatMap { ProcessTree.cpuSeconds(of: $0.processIdentifier) } ?? 0) - alsoBefore)
        let serverCPU = (contender.server.cpuSeconds() ?? .nan) - serverBefore
        let postgresCPU = (cluster?.cpuSeconds() ?? .nan) - postgresBefore

        let stats = lastStatistics(work + "/stat.csv")
        func value(_ name: String) -> Int { stats[name].flatMap { Int($0) } ?? 0 }
        // SIPp's own clock, from its start to its last statistics (the fractional epoch ends each
        // time field): not the process's start-up, reading the CSV and binding its socket.
        func epoch(_ name: String) -> Double? { stats[name].flatMap { $0.split(separator: "\t").last }.flatMap { Double($0) } }
        let elapsed = (epoch("CurrentTime").flatMap { end in epoch("StartTime").map { end - $0 } }) ?? Date().timeIntervalSince(started)
        let succeeded = value("SuccessfulCall(C)")
        let failed = value("FailedCall(C)")
        let times = responseTimes(in: work).sorted()
        let divisor = Double(max(succeeded, 1))
        let step = Step(
            ladder: ladder, server: contender.name, offered: rate, attempted: value("OutgoingCall(C)"), succeeded: succeeded, failed: failed,
            retransmissions: value("Retransmissions(C)"), passed: Double(succeeded) / max(elapsed, settings.seconds),
            p50Milliseconds: percentile(times, 0.5), p99Milliseconds: percentile(times, 0.99),
            serverMicros: serverCPU / divisor * 1e6, postgresMicros: postgresCPU / divisor * 1e6, sippMicros: sippCPU / divisor * 1e6)
        if failed > 0, let errors = try? String(contentsOfFile: work + "/errors.log", encoding: .utf8) {
            // The first call SIPp aborted says why; "dead call" lines are late answers to calls
            // already ended (retransmissions), a symptom.
            let lines = errors.split(separator: "\n").dropFirst()
            let start = lines.firstIndex { $0.contains("Aborting call") } ?? lines.startIndex
            let first = lines[start...].prefix(4).joined(separator: " ").prefix(400)
            notes.append("SIPp \(ladder) \(contender.name) at \(Int(rate))/s: \(failed) failed; SIPp's first error: \(first)")
        }
        progress(
            "sipp \(ladder) \(contender.name) at \(Int(rate))/s: passed \(Int(step.passed.rounded()))/s (\(succeeded) of \(step.attempted),"
                + " \(failed) failed, \(step.retransmissions) retransmissions\(stillRunning ? ", stopped at the deadline" : "")),"
                + " response p50 \(format(step.p50Milliseconds)) ms p99 \(format(step.p99Milliseconds)) ms;"
                + " CPU µs per \(ladder == "register" ? "registration" : "call"): server \(Int(step.serverMicros.isFinite ? step.serverMicros : -1)),"
                + " PostgreSQL \(Int(step.postgresMicros.isFinite ? step.postgresMicros : -1)), SIPp \(Int(step.sippMicros.isFinite ? step.sippMicros : -1))")
        return step
    }

    /// SIPp's command line for one run; it runs in `work` (its `-trace_rtt` file lands there).
    private static func sippArguments(
        _ settings: Settings, scenario: String, csv: String, port: UInt16, rate: Double, calls: Int, endpoint: (host: String, port: UInt16),
        work: String
    ) -> [String] {
        let sipp = [
            settings.sipp, "-sf", scenarioPath(settings, scenario), "-inf", csv, "-key", "domain", domain, "-i", "127.0.0.1", "-p", String(port), "-t", "u1",
            "-r", String(Int(rate.rounded())), "-rp", "1000", "-m", String(calls), "-l", String(max(Int(rate) * 4, 200)),
            "-recv_timeout", "4000", "-timeout", String(Int(settings.seconds) + 15) + "s", "-nostdin", "-max_socket", "1024",
            "-trace_stat", "-stf", work + "/stat.csv", "-fd", "1", "-trace_rtt", "-rtt_freq", "1",
            "-trace_err", "-error_file", work + "/errors.log",
            "\(endpoint.host):\(endpoint.port)",
        ]
        // `sh -c 'cd work && exec sipp …'`: SIPp names its rtt file after the scenario, in the
        // current directory.
        return ["/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", work] + sipp
    }

    private static func scenarioPath(_ settings: Settings, _ scenario: String) -> String {
        settings.scenarios.hasPrefix("/") ? settings.scenarios + "/" + scenario
            : FileManager.default.currentDirectoryPath + "/" + settings.scenarios + "/" + scenario
    }

    private static func injection(_ lines: [String], to path: String) throws {
        try ("SEQUENTIAL\n" + lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
    }

    /// The last line of SIPp's `-trace_stat` file, by column name.
    static func lastStatistics(_ path: String) -> [String: String] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [:] }
        let lines = text.split(separator: "\n")
        guard lines.count >= 2, let header = lines.first, let last = lines.last else { return [:] }
        return Dictionary(zip(header.split(separator: ";", omittingEmptySubsequences: false).map(String.init),
                              last.split(separator: ";", omittingEmptySubsequences: false).map(String.init)), uniquingKeysWith: { $1 })
    }

    /// Response times in milliseconds from SIPp's `-trace_rtt` files in `directory`
    /// (`date_ms;date_s;rtd_name;response_time_ms`; the column layout is read from the header).
    static func responseTimes(in directory: String) -> [Double] {
        var times: [Double] = []
        for file in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] where file.hasSuffix("_rtt.csv") {
            guard let text = try? String(contentsOfFile: directory + "/" + file, encoding: .utf8) else { continue }
            var lines = text.split(separator: "\n")
            guard !lines.isEmpty else { continue }
            let header = lines.removeFirst().split(separator: ";").map { $0.lowercased() }
            let column = header.firstIndex(where: { $0.contains("response_time") }) ?? 1
            for line in lines {
                let fields = line.split(separator: ";", omittingEmptySubsequences: false)
                if fields.count > column, let value = Double(fields[column]) { times.append(value) }
            }
        }
        return times
    }

    static func percentile(_ sorted: [Double], _ fraction: Double) -> Double {
        guard !sorted.isEmpty else { return .nan }
        return sorted[min(Int((Double(sorted.count - 1) * fraction).rounded()), sorted.count - 1)]
    }

    /// CPU seconds of this process's reaped children (SIPp runs, once reaped).
    private static func childrenCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_CHILDREN.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6 + Double(usage.ru_stime.tv_sec)
            + Double(usage.ru_stime.tv_usec) / 1e6
    }

    private static func version(_ sipp: String) -> String? {
        let output = NSTemporaryDirectory() + "rouse-bench-sipp-version-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: output) }
        guard let probe = try? ChildProcess([sipp, "-v"], environment: [:], outputPath: output) else { return nil }
        probe.waitForExit()
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").first { $0.contains("SIPp v") }.map { $0.trimmingCharacters(in: .whitespaces) }
    }

    private static func format(_ value: Double) -> String { value.isFinite ? String(format: "%.1f", value) : "–" }
}
