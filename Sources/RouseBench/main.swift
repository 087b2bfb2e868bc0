import Foundation

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

var report = BenchReport(options: options)
var failed = false
if let threads = options.sipThreads {
    RouseChild.setCommonSetting("ROUSE_SIP_THREADS", String(threads))
}

/// Runs one phase; a failure is noted in the report and the next phase still runs.
@MainActor func phase(_ name: String, _ body: () throws -> Void) {
    do {
        try body()
    } catch {
        FileHandle.standardError.write(Data("rouse-bench: \(name): \(error)\n".utf8))
        report.notes.append("The \(name) phase failed: \(String(describing: error).prefix(600))")
        failed = true
    }
}

if options.phases.contains("parser") {
    print("parser and serializer, one core…")
    report.figures += ParserBenchmark.run()
}
if options.phases.contains("options") {
    print("OPTIONS over UDP on loopback, \(options.seconds) s per phase…")
    phase("OPTIONS benchmark") { report.figures += try OptionsBenchmark.run(seconds: options.seconds, pacing: options.pacing) }
}

let kamailio: KamailioChild.Settings? = {
    guard let executable = options.kamailioExecutable, let database = options.kamailioDatabaseURL else { return nil }
    return KamailioChild.Settings(
        executable: executable, template: options.kamailioConfig, databaseConninfo: database, children: options.kamailioChildren)
}()
if options.kamailioExecutable != nil && kamailio == nil {
    report.notes.append("Kamailio was not measured: --kamailio needs --kamailio-database-url.")
}

if options.phases.contains("register") {
    if let databaseURL = options.databaseURL {
        print(
            "REGISTER with digest on loopback: Rouse\(kamailio == nil ? "" : " and Kamailio, interleaved"), \(options.registerExtensions)"
                + " and \(options.memoryBindings) phones, \(options.registerTransports.map(\.rawValue).joined(separator: " and "))…")
        phase("REGISTER comparison") {
            let result = try RegisterComparison.run(
                RegisterComparison.Settings(
                    rouseDatabaseURL: databaseURL, rouseMemoryDatabaseURL: options.memoryDatabaseURL,
                    rouseExecutable: options.rouseExecutable, kamailio: kamailio, modes: options.registerModes,
                    transports: options.registerTransports, small: options.registerExtensions, large: options.memoryBindings,
                    seconds: options.registerSeconds, rounds: options.registerRounds, fillSeconds: options.registerFillSeconds,
                    window: options.registerWindow, rate: options.registerRate, tcpConnections: options.tcpConnections))
            report.register = result
            report.figures += BenchReport.figures(of: result)
        }
    } else {
        print("REGISTER phase skipped: it needs --database-url (make bench starts PostgreSQL and passes one)")
    }
}

if options.phases.contains("sipp") {
    if let databaseURL = options.databaseURL {
        print(
            "SIPp ladders on loopback: REGISTER with digest and call setups, Rouse durable"
                + "\(kamailio == nil ? "" : " and Kamailio in memory and durable, interleaved"), \(Int(options.sippSeconds)) s per step…")
        phase("SIPp ladders") {
            let result = try SIPpLadder.run(
                SIPpLadder.Settings(
                    sipp: options.sippExecutable, rouseExecutable: options.rouseExecutable, rouseDatabaseURL: databaseURL, kamailio: kamailio,
                    registerRates: options.sippRegisterRates, callRates: options.sippCallRates, seconds: options.sippSeconds,
                    phones: options.sippPhones, callees: options.sippCallees))
            report.sipp = result
            report.figures += BenchReport.figures(of: result)
        }
    } else {
        print("sipp phase skipped: it needs --database-url (make bench starts PostgreSQL and passes one)")
    }
}

if options.phases.contains("posting") {
    if let databaseURL = options.databaseURL {
        print(
            "POST /api/v1/push/register over HTTP/1.1 keep-alive to rouse serve and PostgreSQL, \(options.postingExtensions)"
                + " extensions, \(options.postingConnections) connections, and SIP OPTIONS beside it…")
        phase("posting benchmark") {
            report.figures += try PostingBenchmark.run(
                PostingBenchmark.Settings(
                    databaseURL: databaseURL, rouseExecutable: options.rouseExecutable,
                    extensions: options.postingExtensions, seconds: options.postingSeconds,
                    connections: options.postingConnections))
        }
    } else {
        print("posting phase skipped: it needs --database-url (make bench starts PostgreSQL and passes one)")
    }
}

if options.phases.contains("push") {
    print("VoIP pushes to the APNs stand-in over HTTP/2 + TLS on loopback, \(options.pushCount) with \(options.pushWindow) in flight…")
    phase("push benchmark") {
        report.figures += try PushBenchmark.run(PushBenchmark.Settings(pushes: options.pushCount, window: options.pushWindow))
    }
}

if options.phases.contains("calls") {
    if let databaseURL = options.databaseURL {
        print(
            "calls on loopback: \(options.callsCallees) desk phones with \(options.callsWindow) calls in flight through Rouse"
                + "\(kamailio == nil ? "" : " and Kamailio, interleaved"), then INVITE → push and woken REGISTER → INVITE, one call at a time…")
        phase("calls benchmark") {
            let outcome = try CallBenchmark.run(
                CallBenchmark.Settings(
                    databaseURL: databaseURL, rouseExecutable: options.rouseExecutable, callees: options.callsCallees,
                    window: options.callsWindow, maxCalls: options.callsCount, seconds: options.callsSeconds,
                    pushSamples: options.callsPushSamples, wakeSamples: options.callsWakeSamples, kamailio: kamailio,
                    rounds: options.registerRounds))
            report.calls = outcome
            report.figures += outcome.figures
        }
    } else {
        print("calls phase skipped: it needs --database-url (make bench starts PostgreSQL and passes one)")
    }
}

if options.phases.contains("scale") {
    if let databaseURL = options.scaleDatabaseURL {
        print("scale: \(options.scaleBindings) bindings in one instance (bulk-loaded, then reloaded at start), REGISTER latency at \(Int(options.scaleRate))/s…")
        phase("scale") {
            let result = try ScaleBenchmark.run(
                ScaleBenchmark.Settings(
                    databaseURL: databaseURL, rouseExecutable: options.rouseExecutable, bindings: options.scaleBindings,
                    phones: options.scalePhones, rate: options.scaleRate, seconds: options.scaleSeconds))
            report.scale = result
            report.figures += [
                BenchFigure(name: "scale.reload_seconds", value: result.reloadSeconds, unit: "s"),
                BenchFigure(name: "scale.resident", value: result.fullResidentBytes / 1_048_576, unit: "MiB"),
                BenchFigure(name: "scale.resident_no_bindings", value: result.emptyResidentBytes / 1_048_576, unit: "MiB"),
                BenchFigure(name: "scale.per_binding", value: result.perBinding, unit: "bytes"),
                BenchFigure(name: "scale.few.latency_p99", value: result.few?.p99 ?? .nan, unit: "µs"),
                BenchFigure(name: "scale.full.latency_p99", value: result.full?.p99 ?? .nan, unit: "µs"),
            ]
        }
    } else {
        print("scale phase skipped: it needs --scale-database-url (make bench makes one)")
    }
}

if options.phases.contains("profile") {
    if let databaseURL = options.databaseURL {
        print(
            "callgrind: instructions per REGISTER refresh, per call setup and per posted token in rouse serve, \(options.profileRegisters)"
                + " REGISTERs, \(options.profileCalls) calls, \(options.profilePosts) posts…")
        phase("profile") {
            let output = NSTemporaryDirectory() + "rouse-bench-callgrind-\(getpid())"
            defer { try? FileManager.default.removeItem(atPath: output) }
            var result = try ProfileBenchmark.run(
                ProfileBenchmark.Settings(
                    databaseURL: databaseURL, rouseExecutable: options.rouseExecutable, registers: options.profileRegisters,
                    calls: options.profileCalls, posts: options.profilePosts, outputDirectory: output))
            // The dumps are kept beside the report (`<date>.callgrind`, `<date>.invite.callgrind`,
            // `<date>.post.callgrind`, for callgrind_annotate or KCachegrind).
            if let directory = options.reportDirectory {
                try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
                let base = directory + "/" + BenchReport.day(report.started)
                func keep(_ stretch: inout ProfileBenchmark.Stretch, _ suffix: String) throws {
                    let kept = base + suffix
                    try? FileManager.default.removeItem(atPath: kept)
                    try FileManager.default.moveItem(atPath: stretch.outputFile, toPath: kept)
                    stretch.outputFile = kept
                }
                try keep(&result.register, ".callgrind")
                if result.invite != nil { try keep(&result.invite!, ".invite.callgrind") }
                if result.post != nil { try keep(&result.post!, ".post.callgrind") }
            }
            report.profile = result
            report.notes += result.notes
            report.figures.append(BenchFigure(name: "profile.instructions_per_register", value: result.instructionsPerRegister, unit: "instructions"))
            report.figures.append(BenchFigure(name: "profile.instructions_per_invite", value: result.invite?.perOperation ?? .nan, unit: "instructions"))
            report.figures.append(BenchFigure(name: "profile.instructions_per_post", value: result.post?.perOperation ?? .nan, unit: "instructions"))
            progress("profile: \(Int(result.instructionsPerRegister)) instructions per REGISTER refresh in rouse serve (\(result.outputFile))")
        }
    } else {
        print("profile phase skipped: it needs --database-url")
    }
}

report.finish()
print("")
print(FigureReport.table(report.figures))

if let path = options.jsonPath {
    do {
        try FigureReport.writeJSON(report.figures, seconds: options.seconds, to: path)
        print("figures written to \(path)")
    } catch {
        FileHandle.standardError.write(Data("rouse-bench: cannot write \(path): \(error)\n".utf8))
        exit(1)
    }
}
if let directory = options.reportDirectory {
    do {
        let written = try report.write(to: directory)
        print("report written to \(written.markdown) and \(written.json)")
    } catch {
        FileHandle.standardError.write(Data("rouse-bench: cannot write the report in \(directory): \(error)\n".utf8))
        exit(1)
    }
}
exit(failed ? 1 : 0)
