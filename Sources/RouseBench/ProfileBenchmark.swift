import Foundation
import RouseVocabulary
import SIPTransport
import Storage

/// Instructions per authenticated REGISTER refresh, counted by valgrind's callgrind (stable on a
/// noisy machine, unlike time), with the functions that cost most.
///
/// It starts `rouse serve` under `valgrind --tool=callgrind` with collection off, registers
/// `phones` phones over UDP (401, then a new binding each), refreshes them once more as a
/// warm-up, switches collection on (`callgrind_control -i on`), refreshes `registers` times
/// (window 4, bounded by time), switches it off and dumps. The count covers the whole process:
/// the SIP loop, the registrar, the binding writer and libpq's side of the commits (not
/// PostgreSQL's own work). `callgrind_annotate` lists the costliest functions, self and inclusive,
/// with Swift names demangled. Blocks the calling thread throughout.
enum ProfileBenchmark {
    /// What to run.
    struct Settings {
        var databaseURL: String
        var rouseExecutable: String
        var registers = 1_000
        var phones = 500
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

    /// What the profile found.
    struct Result: Sendable {
        var registers: Int
        var totalInstructions: Double
        var instructionsPerRegister: Double { registers > 0 ? totalInstructions / Double(registers) : .nan }
        var selfCosts: [Cost]
        var inclusiveCosts: [Cost]
        /// The callgrind dump.
        var outputFile: String
    }

    /// Why the profile could not be made.
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static let domain = "profile.bench.rouse.test"
    static let password = "bench-profile-secret"

    static func run(_ settings: Settings) throws -> Result {
        guard FileManager.default.isExecutableFile(atPath: settings.valgrind) else {
            throw Failure(description: "no valgrind at \(settings.valgrind) (apt-get install valgrind)")
        }
        let numbers = (0..<settings.phones).map { String(30_000_000 + $0) }
        try BenchDirectory.prepare(settings.databaseURL, domain: domain, password: password, numbers: numbers)
        // Only this phase's bindings: the registrar's expiry sweep walks every binding it holds,
        // and the 100,000 left by the REGISTER phase would put that walk in every REGISTER's count.
        try PostgresConnection(conninfo: settings.databaseURL).query("DELETE FROM bindings")
        try FileManager.default.createDirectory(atPath: settings.outputDirectory, withIntermediateDirectories: true)
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
                "ROUSE_SIP_T1": "10ms",
            ])
        defer { rouse.stop() }
        guard let line = rouse.waitForLine(containing: "serving SIP on ", timeout: 300) else {
            throw Failure(description: "rouse serve did not start under callgrind:\n\(rouse.outputText.suffix(3_000))")
        }
        guard let point = (line.components(separatedBy: "serving SIP on ").last ?? "").components(separatedBy: ", ")
            .compactMap({ try? ListenPoint(parsing: $0) }).first(where: { $0.transport == .udp })
        else {
            throw Failure(description: "rouse serve named no UDP listen point: \(line)")
        }
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

        let pid = String(rouse.processIdentifier)
        try control(["-i", "on", pid])
        let measured = try generator.register(all, maxRequests: settings.registers, duration: .seconds(240))
        try control(["-i", "off", pid])
        try control(["-d", pid])
        progress(
            "profile: \(measured.load.succeeded) REGISTER refreshes counted under callgrind (\(measured.load.failed) failed,"
                + " \(measured.load.timedOut) timed out)")

        let dumps = (try? FileManager.default.contentsOfDirectory(atPath: settings.outputDirectory)) ?? []
        guard let dump = dumps.filter({ $0.hasPrefix("callgrind.out.\(pid).") }).sorted().last.map({ settings.outputDirectory + "/" + $0 })
        else {
            throw Failure(description: "callgrind wrote no dump in \(settings.outputDirectory)")
        }
        let total = totalInstructions(dump)
        let answered = measured.load.succeeded + measured.load.failed
        return Result(
            registers: answered, totalInstructions: total, selfCosts: annotate(dump, inclusive: false),
            inclusiveCosts: annotate(dump, inclusive: true), outputFile: dump)
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
