import Foundation

/// What `rouse-bench` was asked to do, from its command line.
struct BenchOptions {
    /// How long each OPTIONS phase lasts.
    var seconds = 3.0
    /// Where to write the figures as JSON, if anywhere.
    var jsonPath: String?
    /// How the OPTIONS throughput phase releases requests.
    var pacing = UDPLoadGenerator.Pacing.window(64)
    /// Which phases run, in this order: parser, options, register, posting, push, calls.
    var phases: Set<String> = ["parser", "options", "register", "posting", "push", "calls"]
    /// libpq conninfo of a scratch database; without it the REGISTER and posting phases are skipped.
    var databaseURL: String?
    /// The `rouse` executable the REGISTER phase starts; by default the one beside rouse-bench.
    var rouseExecutable = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        .appendingPathComponent("rouse").path
    var registerExtensions = 10_000
    var registerSeconds = 5.0
    var registerWindow = 64
    var memoryBindings = 100_000
    /// The push phase: pushes in the throughput pass and how many are in flight.
    var pushCount = 5_000
    var pushWindow = 100
    /// The posting phase: extensions the posts cycle through, length of the measured load and
    /// keep-alive connections.
    var postingExtensions = 1_000
    var postingSeconds = 5.0
    var postingConnections = 8
    /// The calls phase: desk-phone callees, calls in flight and the bounds of the proxy pass, and
    /// the samples of the push and wake latency passes.
    var callsCallees = 1_000
    var callsWindow = 64
    var callsCount = 20_000
    var callsSeconds = 10.0
    var callsPushSamples = 300
    var callsWakeSamples = 100

    static let phaseNames: Set<String> = ["parser", "options", "register", "posting", "push", "calls"]

    static let usage = """
        usage: rouse-bench [--seconds N] [--json FILE] [--window N | --rate R] [--phases LIST]
                           [--database-url CONNINFO] [--rouse PATH] [--register-extensions N]
                           [--register-seconds N] [--register-window N] [--memory-bindings N]
                           [--posting-extensions N] [--posting-seconds N]
                           [--posting-connections N] [--push-count N] [--push-window N]
                           [--calls-callees N] [--calls-window N] [--calls-count N]
                           [--calls-seconds N] [--calls-push-samples N] [--calls-wake-samples N]

          --seconds N   duration of each OPTIONS phase, in seconds (default 3); the parser
                        benchmarks always take about 1.5 s each
          --json FILE   also write the figures to FILE as JSON
          --window N    requests kept in flight in the OPTIONS throughput phase (default 64)
          --rate R      instead of a window, send R OPTIONS requests per second
          --phases LIST comma list of parser, options, register, posting, push, calls (default all)

        REGISTER phase (needs PostgreSQL; `make bench` starts one and passes its database):
          --database-url CONNINFO   a scratch database to fill; without it the phase is skipped
          --rouse PATH              the rouse executable to serve (default: beside rouse-bench)
          --register-extensions N   phones (extensions) in the measured passes (default 10000)
          --register-seconds N      length of the refresh phase in seconds (default 5)
          --register-window N       REGISTERs kept in flight (default 64)
          --memory-bindings N       bindings held for the memory-per-binding figure (default
                                    100000, sending for at most 60 s; 0 skips the memory pass)

        posting phase (POST /api/v1/push/register over HTTP/1.1 keep-alive; needs --database-url):
          --posting-extensions N    extensions the posts cycle through (default 1000)
          --posting-seconds N       length of the measured posting load (default 5); then SIP
                                    OPTIONS latency is measured for 2 s idle and 2 s under posts
          --posting-connections N   keep-alive connections, one post in flight each (default 8)

        push phase (needs the stand-ins' Python venv, scripts/standins-venv.sh, and curl):
          --push-count N            pushes in the throughput pass, at most 10 s (default 5000)
          --push-window N           pushes in flight on the one HTTP/2 connection (default 100)

        calls phase (INVITEs through rouse serve; needs --database-url, and the stand-ins' venv for
        the push and wake passes):
          --calls-callees N         extensions with a desk phone over UDP that the proxy pass
                                    calls in turn (default 1000)
          --calls-window N          calls in flight in the proxy pass, INVITE to BYE (default 64)
          --calls-count N           most calls of the proxy pass (default 20000)
          --calls-seconds N         most seconds the proxy pass places calls (default 10)
          --calls-push-samples N    calls, one at a time, timed INVITE → push at the APNs
                                    stand-in (default 300, at most 10 s)
          --calls-wake-samples N    calls, one at a time, timed woken REGISTER → INVITE
                                    (default 100, at most 15 s)
        """

    /// Reads the arguments (without the program name); the error is a message for the user.
    static func parse(_ arguments: [String]) throws(UsageError) -> BenchOptions {
        var options = BenchOptions()
        var index = 0
        func value(_ flag: String) throws(UsageError) -> String {
            index += 1
            guard index < arguments.count else { throw UsageError(message: "\(flag) needs a value") }
            return arguments[index]
        }
        while index < arguments.count {
            let flag = arguments[index]
            switch flag {
            case "--seconds":
                guard let seconds = Double(try value(flag)), seconds > 0, seconds <= 3_600 else {
                    throw UsageError(message: "--seconds needs a number of seconds between 0 and 3600")
                }
                options.seconds = seconds
            case "--json":
                options.jsonPath = try value(flag)
            case "--window":
                guard let size = Int(try value(flag)), size > 0, size <= 100_000 else {
                    throw UsageError(message: "--window needs a whole number between 1 and 100000")
                }
                options.pacing = .window(size)
            case "--rate":
                guard let rate = Double(try value(flag)), rate > 0, rate <= 10_000_000 else {
                    throw UsageError(message: "--rate needs a number of requests per second")
                }
                options.pacing = .rate(perSecond: rate, maxInFlight: 10_000)
            case "--phases":
                let names = Set(try value(flag).split(separator: ",").map { String($0) })
                guard !names.isEmpty, names.isSubset(of: phaseNames) else {
                    throw UsageError(message: "--phases takes a comma list of parser, options, register, posting, push, calls")
                }
                options.phases = names
            case "--database-url":
                options.databaseURL = try value(flag)
            case "--rouse":
                options.rouseExecutable = try value(flag)
            case "--register-extensions":
                guard let count = Int(try value(flag)), count > 0, count <= 1_000_000 else {
                    throw UsageError(message: "--register-extensions needs a whole number between 1 and 1000000")
                }
                options.registerExtensions = count
            case "--register-seconds":
                guard let seconds = Double(try value(flag)), seconds > 0, seconds <= 3_600 else {
                    throw UsageError(message: "--register-seconds needs a number of seconds between 0 and 3600")
                }
                options.registerSeconds = seconds
            case "--register-window":
                guard let size = Int(try value(flag)), size > 0, size <= 10_000 else {
                    throw UsageError(message: "--register-window needs a whole number between 1 and 10000")
                }
                options.registerWindow = size
            case "--memory-bindings":
                guard let count = Int(try value(flag)), count >= 0, count <= 1_000_000 else {
                    throw UsageError(message: "--memory-bindings needs a whole number between 0 and 1000000")
                }
                options.memoryBindings = count
            case "--posting-extensions":
                guard let count = Int(try value(flag)), count > 0, count <= 1_000_000 else {
                    throw UsageError(message: "--posting-extensions needs a whole number between 1 and 1000000")
                }
                options.postingExtensions = count
            case "--posting-seconds":
                guard let seconds = Double(try value(flag)), seconds > 0, seconds <= 3_600 else {
                    throw UsageError(message: "--posting-seconds needs a number of seconds between 0 and 3600")
                }
                options.postingSeconds = seconds
            case "--posting-connections":
                guard let count = Int(try value(flag)), count > 0, count <= 1_000 else {
                    throw UsageError(message: "--posting-connections needs a whole number between 1 and 1000")
                }
                options.postingConnections = count
            case "--push-count":
                guard let count = Int(try value(flag)), count > 0, count <= 80_000 else {
                    throw UsageError(message: "--push-count needs a whole number between 1 and 80000")
                }
                options.pushCount = count
            case "--push-window":
                guard let size = Int(try value(flag)), size > 0, size <= 300 else {
                    throw UsageError(message: "--push-window needs a whole number between 1 and 300")
                }
                options.pushWindow = size
            case "--calls-callees":
                guard let count = Int(try value(flag)), count > 0, count <= 100_000 else {
                    throw UsageError(message: "--calls-callees needs a whole number between 1 and 100000")
                }
                options.callsCallees = count
            case "--calls-window":
                guard let size = Int(try value(flag)), size > 0, size <= 10_000 else {
                    throw UsageError(message: "--calls-window needs a whole number between 1 and 10000")
                }
                options.callsWindow = size
            case "--calls-count":
                guard let count = Int(try value(flag)), count > 0, count <= 1_000_000 else {
                    throw UsageError(message: "--calls-count needs a whole number between 1 and 1000000")
                }
                options.callsCount = count
            case "--calls-seconds":
                guard let seconds = Double(try value(flag)), seconds > 0, seconds <= 3_600 else {
                    throw UsageError(message: "--calls-seconds needs a number of seconds between 0 and 3600")
                }
                options.callsSeconds = seconds
            case "--calls-push-samples":
                guard let count = Int(try value(flag)), count > 0, count <= 100_000 else {
                    throw UsageError(message: "--calls-push-samples needs a whole number between 1 and 100000")
                }
                options.callsPushSamples = count
            case "--calls-wake-samples":
                guard let count = Int(try value(flag)), count > 0, count <= 10_000 else {
                    throw UsageError(message: "--calls-wake-samples needs a whole number between 1 and 10000")
                }
                options.callsWakeSamples = count
            case "--help", "-h":
                throw UsageError(message: nil)
            default:
                throw UsageError(message: "unknown option '\(flag)'")
            }
            index += 1
        }
        return options
    }
}

/// A command line `rouse-bench` cannot follow; a nil message asks for the usage text alone.
struct UsageError: Error {
    var message: String?
}

/// Prints figures as an aligned table and writes them as JSON.
enum FigureReport {
    static func table(_ figures: [BenchFigure]) -> String {
        let nameWidth = max(figures.map(\.name.count).max() ?? 0, 6)
        let values = figures.map { format($0.value) }
        let valueWidth = max(values.map(\.count).max() ?? 0, 5)
        var lines = [pad("figure", nameWidth) + "  " + padLeft("value", valueWidth) + "  unit"]
        lines.append(String(repeating: "-", count: nameWidth + valueWidth + 8))
        for (figure, value) in zip(figures, values) {
            lines.append(pad(figure.name, nameWidth) + "  " + padLeft(value, valueWidth) + "  " + figure.unit)
        }
        return lines.joined(separator: "\n")
    }

    /// `{"seconds": …, "figures": [{"name": …, "value": …, "unit": …}, …]}`; a figure that is
    /// not a finite number is left out.
    static func writeJSON(_ figures: [BenchFigure], seconds: Double, to path: String) throws {
        let entries: [[String: Any]] = figures.filter(\.value.isFinite).map {
            ["name": $0.name, "value": $0.value, "unit": $0.unit]
        }
        let document: [String: Any] = ["seconds": seconds, "figures": entries]
        let data = try JSONSerialization.data(withJSONObject: document, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        try data.write(to: URL(fileURLWithPath: path), options: .atomic)
    }

    /// Whole numbers from 100 up with thousands separators, smaller ones with one or two decimals.
    static func format(_ value: Double) -> String {
        guard value.isFinite else { return "-" }
        if value.magnitude >= 100 || value == value.rounded() {
            let digits = String(Int64(value.rounded()).magnitude)
            var grouped = ""
            for (offset, digit) in digits.enumerated() {
                if offset > 0 && (digits.count - offset) % 3 == 0 { grouped.append(",") }
                grouped.append(digit)
            }
            return (value < 0 ? "-" : "") + grouped
        }
        return String(format: value.magnitude >= 10 ? "%.1f" : "%.2f", value)
    }

    private static func pad(_ text: String, _ width: Int) -> String {
        text + String(repeating: " ", count: max(width - text.count, 0))
    }

    private static func padLeft(_ text: String, _ width: Int) -> String {
        String(repeating: " ", count: max(width - text.count, 0)) + text
    }
}

let options: BenchOptions
do {
    options = try BenchOptions.parse(Array(CommandLine.arguments.dropFirst()))
} catch {
    if let message = error.message {
        FileHandle.standardError.write(Data("rouse-bench: \(message)\n\(BenchOptions.usage)\n".utf8))
        exit(2)
    }
    print(BenchOptions.usage)
    exit(0)
}

var figures: [BenchFigure] = []
if options.phases.contains("parser") {
    print("parser and serializer, one core…")
    figures += ParserBenchmark.run()
}
if options.phases.contains("options") {
    print("OPTIONS over UDP on loopback, \(options.seconds) s per phase…")
    do {
        figures += try OptionsBenchmark.run(seconds: options.seconds, pacing: options.pacing)
    } catch {
        FileHandle.standardError.write(Data("rouse-bench: \(error)\n".utf8))
        exit(1)
    }
}
if options.phases.contains("register") {
    if let databaseURL = options.databaseURL {
        print("REGISTER with digest over UDP on loopback to rouse serve and PostgreSQL, \(options.registerExtensions) phones…")
        do {
            figures += try RegisterBenchmark.run(
                RegisterBenchmark.Settings(
                    databaseURL: databaseURL, rouseExecutable: options.rouseExecutable,
                    extensions: options.registerExtensions, seconds: options.registerSeconds,
                    window: options.registerWindow, memoryBindings: options.memoryBindings))
        } catch {
            FileHandle.standardError.write(Data("rouse-bench: REGISTER benchmark: \(error)\n".utf8))
            exit(1)
        }
    } else {
        print("REGISTER phase skipped: it needs --database-url (make bench starts PostgreSQL and passes one)")
    }
}

if options.phases.contains("posting") {
    if let databaseURL = options.databaseURL {
        print(
            "POST /api/v1/push/register over HTTP/1.1 keep-alive to rouse serve and PostgreSQL, \(options.postingExtensions)"
                + " extensions, \(options.postingConnections) connections, and SIP OPTIONS beside it…")
        do {
            figures += try PostingBenchmark.run(
                PostingBenchmark.Settings(
                    databaseURL: databaseURL, rouseExecutable: options.rouseExecutable,
                    extensions: options.postingExtensions, seconds: options.postingSeconds,
                    connections: options.postingConnections))
        } catch {
            FileHandle.standardError.write(Data("rouse-bench: posting benchmark: \(error)\n".utf8))
            exit(1)
        }
    } else {
        print("posting phase skipped: it needs --database-url (make bench starts PostgreSQL and passes one)")
    }
}

if options.phases.contains("push") {
    print("VoIP pushes to the APNs stand-in over HTTP/2 + TLS on loopback, \(options.pushCount) with \(options.pushWindow) in flight…")
    do {
        figures += try PushBenchmark.run(PushBenchmark.Settings(pushes: options.pushCount, window: options.pushWindow))
    } catch {
        FileHandle.standardError.write(Data("rouse-bench: \(error)\n".utf8))
        exit(1)
    }
}

if options.phases.contains("calls") {
    if let databaseURL = options.databaseURL {
        print(
            "calls through rouse serve and PostgreSQL on loopback: \(options.callsCallees) desk phones with \(options.callsWindow)"
                + " calls in flight, then INVITE → push and woken REGISTER → INVITE, one call at a time…")
        do {
            figures += try CallBenchmark.run(
                CallBenchmark.Settings(
                    databaseURL: databaseURL, rouseExecutable: options.rouseExecutable, callees: options.callsCallees,
                    window: options.callsWindow, maxCalls: options.callsCount, seconds: options.callsSeconds,
                    pushSamples: options.callsPushSamples, wakeSamples: options.callsWakeSamples))
        } catch {
            FileHandle.standardError.write(Data("rouse-bench: calls benchmark: \(error)\n".utf8))
            exit(1)
        }
    } else {
        print("calls phase skipped: it needs --database-url (make bench starts PostgreSQL and passes one)")
    }
}

print("")
print(FigureReport.table(figures))

if let path = options.jsonPath {
    do {
        try FigureReport.writeJSON(figures, seconds: options.seconds, to: path)
        print("figures written to \(path)")
    } catch {
        FileHandle.standardError.write(Data("rouse-bench: cannot write \(path): \(error)\n".utf8))
        exit(1)
    }
}
