import Foundation
import RouseVocabulary
import SIPTransport
import Storage

/// Instructions per authenticated REGISTER refresh, per call setup through the proxy and per
/// posted push token, counted by valgrind's callgrind (stable on a noisy machine, unlike time),
/// with the functions that cost most.
///
/// It starts `rouse serve` under `valgrind --tool=callgrind` with collection off (SIP on UDP, HTTP,
/// loopback a trusted peer so INVITEs need no digest, T1 10 ms), and counts three stretches, each
/// switched on (`callgrind_control -i on`), off and dumped on its own (the INVITE stretch in a
/// second such Rouse with T1 500 ms, started once the first is stopped):
/// 1. **REGISTER**: `phones` phones register over UDP (401, then a new binding each) and refresh
///    once more as a warm-up; then `registers` refreshes (window 4, bounded by time);
/// 2. **posted token**: `posters` extensions post their token once (`POST /api/v1/push/register`,
///    HTTP Basic, keep-alive) as a warm-up; then `posts` posts re-posting them over 4 connections
///    (each a durable refresh, batched as the posting phase's are);
/// 3. **INVITE**: `callees` desk phones (one UDP socket, as the calls phase's proxy pass) register
///    and take warm-up calls; then `calls` calls from loopback, 4 in flight, each INVITE → 180 and
///    200 from the phone → ACK → BYE → 200, and the stretch ends once every call's journey is in
///    PostgreSQL (the journey writer's work is the call's too) and its transactions are gone.
/// Each count covers the whole process: SIP loop, registrar, writers, HTTP server and libpq's side
/// of the commits (not PostgreSQL's own work). `callgrind_annotate` lists the costliest functions,
/// self and inclusive, with Swift names demangled. Blocks the calling thread throughout.
enum ProfileBenchmark {
    /// What to run.
    struct Settings {
        var databaseURL: String
        var rouseExecutable: String
        var registers = 1_000
        var phones = 500
        var calls = 300
        var callees = 100
        var posts = 1_000
        var posters = 500
        var valgrind = "/usr/bin/valgrind"
        /// Where the callgrind output is kept (the report names it).
        var outputDirectory: String
    }

    /// A function and its share of the counted instructions.
    struct Cost: Sendable {
        var instructions: Double
        var percent: Double
        var function: String
    }

    /// One counted stretch: how many operations, the instructions, the costliest functions.
    struct Stretch: Sendable {
        var operations: Int
        var totalInstructions: Double
        var perOperation: Double { operations > 0 ? totalInstructions / Double(operations) : .nan }
        var selfCosts: [Cost]
        var inclusiveCosts: [Cost]
        /// The SIP messages the load sent to Rouse in the stretch (nil when not counted).
        var messages: Int?
        /// The callgrind dump.
        var outputFile: String
    }

    /// What the profile found.
    struct Result: Sendable {
        var register: Stretch
        /// Nil when that stretch could not be made (its note says why).
        var invite: Stretch?
        var post: Stretch?
        var notes: [String] = []
        var registers: Int { register.operations }
        var instructionsPerRegister: Double { register.perOperation }
        var selfCosts: [Cost] { register.selfCosts }
        var inclusiveCosts: [Cost] { register.inclusiveCosts }
        var outputFile: String { register.outputFile }
    }

    /// Why the profile could not be made.
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static let domain = "profile.bench.rouse.test"
    static let password = "bench-profile-secret"
    /// Measured by this phase on e145fc6 (the start of session 10's work), release build (this
    /// phase's bench against e145fc6's rouse, 2026-12-02: 300 calls, 996 posts counted).
    static let beforeInvite = 3_144_035.0
    static let beforePost = 1_715_207.0

    static func run(_ settings: Settings) throws -> Result {
        guard FileManager.default.isExecutableFile(atPath: settings.valgrind) else {
            throw Failure(description: "no valgrind at \(settings.valgrind) (apt-get install valgrind)")
        }
        let numbers = (0..<settings.phones).map { String(30_000_000 + $0) }
        let callees = (0..<settings.callees).map { String(30_100_000 + $0) }
        let posters = (0..<settings.posters).map { String(30_200_000 + $0) }
        try BenchDirectory.prepare(settings.databaseURL, domain: domain, password: password, numbers: numbers + callees)
        try BenchDirectory.prepare(settings.databaseURL, domain: PostingBenchmark.domain, password: PostingBenchmark.password, numbers: posters)
        // Only this phase's bindings: the 100,000 left by the REGISTER phase would be loaded and
        // indexed at start, and their expiries handled inside the counted stretches.
        try PostgresConnection(conninfo: settings.databaseURL).query("DELETE FROM bindings")
        try FileManager.default.createDirectory(atPath: settings.outputDirectory, withIntermediateDirectories: true)
        let served = try serve(settings, t1: "10ms")
        defer { served.rouse.stop() }
        let point = served.point
        let counter = served.counter

        // 1. REGISTER refreshes.
        var configuration = RegisterLoadGenerator.Configuration(host: point.host, port: point.port, domain: domain, window: 4)
        configuration.timeout = .seconds(10)
        let generator = try RegisterLoadGenerator(configuration: configuration, phones: numbers.map { ($0, password) })
        let all = 0..<numbers.count
        _ = try generator.challengeAll(all, duration: .seconds(120))
        let created = try generator.register(all, maxRequests: numbers.count, duration: .seconds(120))
        _ = try generator.register(all, maxRequests: numbers.count, duration: .seconds(120))
        guard created.load.succeeded == numbers.count else {
            throw Failure(description: "only \(created.load.succeeded) of \(numbers.count) phones registered under callgrind")
        }
        var measured = LoadReport()
        let register = try counter.count {
            measured = try generator.register(all, maxRequests: settings.registers, duration: .seconds(240)).load
            return measured.succeeded + measured.failed
        }
        progress(
            "profile: \(measured.succeeded) REGISTER refreshes counted under callgrind (\(measured.failed) failed,"
                + " \(measured.timedOut) timed out): \(Int(register.perOperation)) instructions each")
        var result = Result(register: register)

        // 2. Posted tokens, and 3. call setups through the proxy (in a Rouse of their own): a
        // failure of one is noted and the REGISTER count kept.
        do {
            result.post = try countPosts(settings, httpLine: served.httpLine, posters: posters, counter: counter)
        } catch {
            result.notes.append("profile: the posted-token count could not be made: \(String(describing: error).prefix(400))")
        }
        served.rouse.stop()
        do {
            result.invite = try countCalls(settings, callees: callees, notes: &result.notes)
        } catch {
            result.notes.append("profile: the INVITE count could not be made: \(String(describing: error).prefix(400))")
        }
        return result
    }

    /// A `rouse serve` under callgrind, collection off, with timer T1 `t1`.
    private struct Served {
        var rouse: RouseChild
        var point: ListenPoint
        var httpLine: String
        var counter: Counter
    }

    private static func serve(_ settings: Settings, t1: String) throws -> Served {
        let outputPattern = settings.outputDirectory + "/callgrind.out.%p"
        let rouse = try RouseChild(
            executable: settings.valgrind,
            arguments: [
                "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=\(outputPattern)", settings.rouseExecutable, "serve",
            ],
            environment: [
                "ROUSE_DATABASE_URL": settings.databaseURL,
                "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0",
                "ROUSE_HTTP_LISTEN": "127.0.0.1:0",
                "ROUSE_LOG_LEVEL": "warning",
                "ROUSE_SIP_T1": t1,
                // The INVITEs come from loopback: no 407 round trip (it applies to INVITEs only).
                "ROUSE_TRUSTED_PEERS": "127.0.0.1",
            ])
        guard let line = rouse.waitForLine(containing: "serving SIP on ", timeout: 300),
            let httpLine = rouse.waitForLine(containing: "serving HTTP on ", timeout: 60)
        else {
            rouse.stop()
            throw Failure(description: "rouse serve did not start under callgrind:\n\(rouse.outputText.suffix(3_000))")
        }
        guard let point = (line.components(separatedBy: "serving SIP on ").last ?? "").components(separatedBy: ", ")
            .compactMap({ try? ListenPoint(parsing: $0) }).first(where: { $0.transport == .udp })
        else {
            rouse.stop()
            throw Failure(description: "rouse serve named no UDP listen point: \(line)")
        }
        let counter = Counter(pid: String(rouse.processIdentifier), directory: settings.outputDirectory)
        return Served(rouse: rouse, point: point, httpLine: httpLine, counter: counter)
    }

    /// Switches collection on for one stretch, off and dumps after it, and reads the dump.
    private struct Counter {
        var pid: String
        var directory: String

        /// Counts `body`, which returns the operations it made.
        func count(_ body: () throws -> Int) throws -> Stretch {
            let earlier = Set(dumps())
            try ProfileBenchmark.control(["-i", "on", pid])
            let operations: Int
            do {
                operations = try body()
            } catch {
                try? ProfileBenchmark.control(["-i", "off", pid])
                throw error
            }
            try ProfileBenchmark.control(["-i", "off", pid])
            try ProfileBenchmark.control(["-d", pid])
            guard let dump = dumps().filter({ !earlier.contains($0) }).sorted().last.map({ directory + "/" + $0 }) else {
                throw Failure(description: "callgrind wrote no dump in \(directory)")
            }
            return Stretch(
                operations: operations, totalInstructions: ProfileBenchmark.totalInstructions(dump),
                selfCosts: ProfileBenchmark.annotate(dump, inclusive: false), inclusiveCosts: ProfileBenchmark.annotate(dump, inclusive: true),
                outputFile: dump)
        }

        private func dumps() -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { $0.hasPrefix("callgrind.out.\(pid).") }
        }
    }

    /// The INVITE stretch, in a Rouse of its own with the default T1 (500 ms): under callgrind
    /// Rouse runs some 50 times slower, and with the REGISTER stretch's 10 ms its Timer A and E
    /// fired before it read the phones' answers, so each run counted its own number of
    /// retransmissions and their answers (1,999 to 2,696 messages for 300 calls, some 110k
    /// instructions each). Desk phones are registered and warmed up with calls, then
    /// `settings.calls` calls are counted until their journeys are written and 64·T1 more (each
    /// call's transactions and ended-call entry cleaned up, as they were with 10 ms).
    private static func countCalls(_ settings: Settings, callees: [String], notes: inout [String]) throws -> Stretch {
        let served = try serve(settings, t1: "500ms")
        defer { served.rouse.stop() }
        let load = try ProxyCallLoad(host: served.point.host, port: served.point.port, domain: domain, password: password, callees: callees)
        let registration = try load.registerPhones(window: 4, duration: .seconds(120))
        guard registration.registered == callees.count else {
            throw Failure(description: "only \(registration.registered) of \(callees.count) desk phones registered under callgrind")
        }
        let warmUp = try load.run(window: 4, maxCalls: callees.count, duration: .seconds(120), timeout: .seconds(30))
        guard warmUp.answered > 0 else { throw Failure(description: "no warm-up call was answered under callgrind") }
        _ = journeys(settings.databaseURL, atLeast: warmUp.answered + warmUp.failed, timeout: 120)
        // The warm-up's transactions and ended calls gone before the count starts.
        Thread.sleep(forTimeInterval: cleanUpSeconds)
        let before = journeys(settings.databaseURL, atLeast: 0, timeout: 0)
        var report = ProxyCallLoad.Report()
        var stretch = try served.counter.count {
            report = try load.run(window: 4, maxCalls: settings.calls, duration: .seconds(300), timeout: .seconds(30))
            // The journey of each ended call is written after it: wait for the writer.
            _ = journeys(settings.databaseURL, atLeast: before + report.answered + report.failed, timeout: 120)
            Thread.sleep(forTimeInterval: cleanUpSeconds)
            return report.calls
        }
        stretch.messages = report.sentToServer
        if report.phoneInvites > report.calls {
            notes.append("profile: the phones got \(report.phoneInvites) INVITEs for \(report.calls) calls (retransmissions are in the INVITE count)")
        }
        progress(
            "profile: \(report.calls) calls counted under callgrind (\(report.answered) answered, \(report.completed) hung up,"
                + " \(report.failed) not answered, \(report.timedOut) timed out; \(report.sentToServer) SIP messages sent to Rouse):"
                + " \(Int(stretch.perOperation)) instructions each")
        return stretch
    }

    /// 64·T1 of the call stretch's Rouse and a second: its transactions' last timers (J, L, M)
    /// and the shard's keep of an ended call have fired by then.
    private static let cleanUpSeconds = 33.0

    /// The calls of the profile's callees in the `calls` table, waiting up to `timeout` seconds
    /// for at least `count` of them.
    private static func journeys(_ conninfo: String, atLeast count: Int, timeout: TimeInterval) -> Int {
        guard let connection = try? PostgresConnection(conninfo: conninfo) else { return 0 }
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let found = (try? connection.query("SELECT count(*) FROM calls WHERE aor LIKE $1", ["301%@" + domain]))?.rows.first?.first
                .flatMap { $0 }.flatMap { Int($0) } ?? 0
            if found >= count || Date() >= deadline { return found }
            Thread.sleep(forTimeInterval: 0.1)
        }
    }

    /// The posted-token stretch: every poster posts once, then `settings.posts` re-posts counted.
    private static func countPosts(_ settings: Settings, httpLine: String, posters: [String], counter: Counter) throws -> Stretch {
        let address = (httpLine.components(separatedBy: "serving HTTP on ").last ?? "").trimmingCharacters(in: .whitespaces)
        guard let colon = address.lastIndex(of: ":"), let port = UInt16(address[address.index(after: colon)...]) else {
            throw Failure(description: "rouse serve named no HTTP address: \(httpLine)")
        }
        let requests = posters.map { PostingBenchmark.request(number: $0, port: port) }
        func post(_ count: Int) throws -> LoadReport {
            try PostingLoad(
                configuration: .init(host: "127.0.0.1", port: port, connections: 4, requests: requests, maxRequests: count, duration: 300)
            ).run()
        }
        let first = try post(posters.count)
        guard first.succeeded == posters.count else {
            throw Failure(description: "only \(first.succeeded) of \(posters.count) first posts were stored under callgrind")
        }
        var report = LoadReport()
        let stretch = try counter.count {
            report = try post(settings.posts)
            return report.succeeded + report.failed
        }
        progress(
            "profile: \(report.succeeded) token posts counted under callgrind (\(report.failed) non-200, \(report.timedOut) unanswered):"
                + " \(Int(stretch.perOperation)) instructions each")
        return stretch
    }

    /// Runs `callgrind_control` with `arguments`.
    private static func control(_ arguments: [String]) throws {
        let result = run("/usr/bin/callgrind_control", arguments)
        guard result.status == 0 else {
            throw Failure(description: "callgrind_control \(arguments.joined(separator: " ")) failed: \(result.output.suffix(1_000))")
        }
    }

    /// The instructions counted in a dump: its `totals:` line (`summary:` is 0 when collection
    /// started switched off).
    private static func totalInstructions(_ path: String) -> Double {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return .nan }
        var total = Double.nan
        for line in text.split(separator: "\n") where line.hasPrefix("summary:") || line.hasPrefix("totals:") {
            if let value = line.split(separator: " ").dropFirst().first, let count = Double(value), !(count <= total) { total = count }
        }
        return total
    }

    /// The 20 costliest functions by `callgrind_annotate`, demangled by `swift demangle` when it is
    /// on PATH.
    private static func annotate(_ path: String, inclusive: Bool) -> [Cost] {
        let annotated = run("/usr/bin/callgrind_annotate", ["--inclusive=\(inclusive ? "yes" : "no")", "--threshold=99", path])
        guard annotated.status == 0 else { return [] }
        var costs: [Cost] = []
        // The table after the "file:function" heading, up to the next rule or blank line.
        let lines = annotated.output.split(separator: "\n", omittingEmptySubsequences: false)
        guard let heading = lines.firstIndex(where: { $0.contains("file:function") }) else { return [] }
        for line in lines[(heading + 2)...] {
            // "12,345,678 (12.34%)  file:function [binary]"
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("----") { break }
            guard let open = trimmed.firstIndex(of: "("), let close = trimmed.firstIndex(of: ")"), open < close,
                let count = Double(trimmed[..<open].replacingOccurrences(of: ",", with: "").trimmingCharacters(in: .whitespaces)),
                let percent = Double(
                    trimmed[trimmed.index(after: open)..<close].replacingOccurrences(of: "%", with: "").trimmingCharacters(in: .whitespaces))
            else { continue }
            var function = trimmed[trimmed.index(after: close)...].trimmingCharacters(in: .whitespaces)
            if let bracket = function.range(of: " [", options: .backwards) { function = String(function[..<bracket.lowerBound]) }
            if function.hasPrefix("???:") { function.removeFirst(4) }
            if let sources = function.range(of: "Sources/") { function = String(function[sources.upperBound...]) }
            // The inclusive list names Rouse's own functions, not the threads and thunks above them.
            if inclusive && !function.contains(".swift:") { continue }
            if inclusive && (function.contains("thunk for") || function.contains("partial apply")) { continue }
            // The same function can be listed under two spellings of its file: keep the first.
            if costs.contains(where: { $0.function == function }) { continue }
            costs.append(Cost(instructions: count, percent: percent, function: function))
            if costs.count == 20 { break }
        }
        let demangled = demangle(costs.map(\.function))
        for index in costs.indices where index < demangled.count { costs[index].function = demangled[index] }
        return costs
    }

    /// Swift names demangled (one per line through `swift demangle --simplified`); the input when
    /// the tool is missing.
    private static func demangle(_ names: [String]) -> [String] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["swift", "demangle", "--simplified"]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return names }
        input.fileHandleForWriting.write(Data((names.joined(separator: "\n") + "\n").utf8))
        try? input.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let lines = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        return process.terminationStatus == 0 && lines.count >= names.count ? Array(lines.prefix(names.count)) : names
    }

    private static func run(_ executable: String, _ arguments: [String]) -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        guard (try? process.run()) != nil else { return (-1, "cannot run \(executable)") }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}
