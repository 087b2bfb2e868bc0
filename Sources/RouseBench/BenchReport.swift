import Foundation
import Storage

/// The published report of a `make bench` run: `<YYYY-MM-DD>.md` for people and `<YYYY-MM-DD>.json`
/// for machines, written side by side. It holds the machine and versions, the aims of issue 10
/// with what was measured against each, the REGISTER comparison cell by cell (medians of the
/// interleaved runs, and every run in the order it was made), call setups side by side, the
/// wake-then-ring timings, memory at the large cell, the callgrind profile, the notes of the run
/// (failures, skipped parts) and every other figure. Built on the benchmark's one thread.
struct BenchReport {
    let options: BenchOptions
    let started = Date()
    var finished: Date?
    var figures: [BenchFigure] = []
    var register: RegisterComparison.Result?
    var calls: CallBenchmark.Outcome?
    var sipp: SIPpLadder.Result?
    var scale: ScaleBenchmark.Result?
    var profile: ProfileBenchmark.Result?
    var notes: [String] = []
    private let loadBefore: String
    private var loadAfter = "?"

    init(options: BenchOptions) {
        self.options = options
        loadBefore = Self.loadAverage()
    }

    mutating func finish() {
        finished = Date()
        loadAfter = Self.loadAverage()
    }

    // MARK: Summaries

    /// One cell of the REGISTER comparison: medians of each server's runs.
    struct Cell {
        var mode: RegisterComparison.Mode
        var transport: RegisterLoadGenerator.Transport
        var extensions: Int
        var rouse: [RegisterComparison.Run]
        var kamailio: [RegisterComparison.Run]

        var rouseRate: Double { RegisterComparison.median(rouse.map(\.rate)) }
        var kamailioRate: Double { RegisterComparison.median(kamailio.map(\.rate)) }
        var ratio: Double { kamailioRate > 0 ? rouseRate / kamailioRate : .nan }
        /// The ratio issue 10 aims at in this mode.
        var aim: Double { mode == .durable ? 1.5 : 1.0 }
    }

    static func cells(of result: RegisterComparison.Result) -> [Cell] {
        var cells: [Cell] = []
        for run in result.runs {
            if let index = cells.firstIndex(where: { $0.mode == run.mode && $0.transport == run.transport && $0.extensions == run.extensions }) {
                if run.server == "rouse" { cells[index].rouse.append(run) } else { cells[index].kamailio.append(run) }
            } else {
                cells.append(
                    Cell(
                        mode: run.mode, transport: run.transport, extensions: run.extensions,
                        rouse: run.server == "rouse" ? [run] : [], kamailio: run.server == "rouse" ? [] : [run]))
            }
        }
        return cells
    }

    /// The comparison as named figures (medians per cell and server), for the table and the JSON.
    static func figures(of result: RegisterComparison.Result) -> [BenchFigure] {
        var figures: [BenchFigure] = []
        for cell in cells(of: result) {
            let prefix = "register.\(cell.mode.rawValue).\(cell.transport.rawValue).\(cell.extensions)"
            for (server, runs) in [("rouse", cell.rouse), ("kamailio", cell.kamailio)] where !runs.isEmpty {
                figures += [
                    BenchFigure(name: "\(prefix).\(server).rate", value: RegisterComparison.median(runs.map(\.rate)), unit: "REGISTER/s"),
                    BenchFigure(name: "\(prefix).\(server).latency_p50", value: RegisterComparison.median(runs.map(\.p50)), unit: "µs"),
                    BenchFigure(name: "\(prefix).\(server).latency_p99", value: RegisterComparison.median(runs.map(\.p99)), unit: "µs"),
                    BenchFigure(name: "\(prefix).\(server).latency_p99.9", value: RegisterComparison.median(runs.map(\.p999)), unit: "µs"),
                    BenchFigure(name: "\(prefix).\(server).cpu_per_1000", value: RegisterComparison.median(runs.map(\.serverCPUPer1000)), unit: "CPU s"),
                    BenchFigure(
                        name: "\(prefix).\(server).postgres_cpu_per_1000", value: RegisterComparison.median(runs.map(\.postgresCPUPer1000)),
                        unit: "CPU s"),
                ]
            }
            if !cell.kamailio.isEmpty { figures.append(BenchFigure(name: "\(prefix).ratio", value: cell.ratio, unit: "×")) }
        }
        for memory in result.memory {
            figures.append(
                BenchFigure(name: "register.memory.\(memory.mode.rawValue).\(memory.transport.rawValue).\(memory.server).per_binding", value: memory.perBinding, unit: "bytes"))
            figures.append(
                BenchFigure(
                    name: "register.memory.\(memory.mode.rawValue).\(memory.transport.rawValue).\(memory.server).resident", value: memory.afterGroupBytes / 1_048_576,
                    unit: "MiB"))
        }
        return figures
    }

    /// Rouse's and Kamailio's memory figures of the same mode and transport.
    static func memoryPairs(_ result: RegisterComparison.Result) -> [(rouse: RegisterComparison.Memory, kamailio: RegisterComparison.Memory)] {
        result.memory.filter { $0.server == "rouse" }.compactMap { rouse in
            result.memory.first { $0.server == "kamailio" && $0.mode == rouse.mode && $0.transport == rouse.transport }.map { (rouse, $0) }
        }
    }

    /// The notes of the run and of every phase.
    var allNotes: [String] { notes + (register?.notes ?? []) + (calls?.notes ?? []) + (sipp?.notes ?? []) + (scale?.notes ?? []) }

    // MARK: Writing

    /// Writes `<date>.md` and `<date>.json` in `directory` (made if missing); returns their paths.
    func write(to directory: String) throws -> (markdown: String, json: String) {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let base = directory + "/" + Self.day(started)
        try markdown().write(toFile: base + ".md", atomically: true, encoding: .utf8)
        try json().write(to: URL(fileURLWithPath: base + ".json"), options: .atomic)
        return (base + ".md", base + ".json")
    }

    func markdown() -> String {
        var text = "# Rouse benchmark, \(Self.day(started))\n\n"
        text += "Written by `make bench` (`scripts/bench.sh` → `rouse-bench`); [docs/benchmarks.md](../../docs/benchmarks.md) says how to run it"
        text += " and how to read each table. Figures are measured, never asserted.\n\n"
        text += machineSection()
        text += issue21AimsSection()
        text += aimsSection()
        text += registerSection()
        text += sippSection()
        text += callsSection()
        text += wakeSection()
        text += memorySection()
        text += scaleSection()
        text += profileSection()
        if !allNotes.isEmpty {
            text += "## Notes of this run\n\n"
            for note in allNotes { text += "- \(note)\n" }
            text += "\n"
        }
        text += "## Every figure\n\n```\n" + FigureReport.table(figures) + "\n```\n"
        return text
    }

    private func machineSection() -> String {
        var text = "## Machine and versions\n\n"
        text += "| | |\n| --- | --- |\n"
        text += "| started | \(Self.timestamp(started)) |\n"
        if let finished { text += "| finished | \(Self.timestamp(finished)) (\(Int(finished.timeIntervalSince(started))) s) |\n" }
        text += "| CPU | \(ProcessInfo.processInfo.activeProcessorCount) cores, \(Self.cpuModel()) |\n"
        text += "| memory | \(String(format: "%.1f", Double(ProcessInfo.processInfo.physicalMemory) / 1_073_741_824)) GiB |\n"
        text += "| kernel | \(ProcessInfo.processInfo.operatingSystemVersionString) |\n"
        text += "| load average | \(loadBefore) before, \(loadAfter) after |\n"
        text += "| Rouse | \(Self.rouseVersion(options.rouseExecutable)) |\n"
        text += "| Rouse's `sip_threads` | \(options.sipThreads.map { "\($0) (`--sip-threads`)" } ?? "Rouse's default: one per core") |\n"
        if let version = register?.kamailioVersion ?? calls?.kamailioVersion { text += "| Kamailio | \(version), \(options.kamailioChildren) children (UDP receivers and TCP workers each) |\n" }
        if let database = options.databaseURL, let version = Self.postgresVersion(database) {
            text += "| PostgreSQL | \(version), one cluster for both servers, fsync on |\n"
        }
        text += "\nThe machine is shared (other engineers build Swift on it while the bench runs): absolute figures move from run to run."
        text += " Rouse and Kamailio are measured in alternating runs (R, K, R, K) on the same load generator, so what weighs on one weighs on"
        text += " the other, and the ratios are the figures to quote. Load generator, server and PostgreSQL share the \(ProcessInfo.processInfo.activeProcessorCount) cores.\n\n"
        return text
    }

    private func aimsSection() -> String {
        var rows: [(String, String, String)] = []
        if let register {
            let cells = Self.cells(of: register).filter { !$0.kamailio.isEmpty }
            for mode in [RegisterComparison.Mode.durable, .memory] {
                let ofMode = cells.filter { $0.mode == mode }
                guard !ofMode.isEmpty else { continue }
                let aim = mode == .durable ? 1.5 : 1.0
                let worst = ofMode.map(\.ratio).filter(\.isFinite).min() ?? .nan
                let list = ofMode.map { "\($0.transport.rawValue.uppercased()) \(Self.count($0.extensions)): \(Self.ratio($0.ratio))" }.joined(separator: ", ")
                let label = mode == .durable
                    ? "REGISTER/s, auth and durable bindings ≥ 1.5× Kamailio write-through (db_mode 1)"
                    : "REGISTER/s in memory ≥ 1.0× Kamailio db_mode 0 (Rouse: synchronous_commit=off)"
                rows.append((label, list, worst >= aim ? "met" : "not met (lowest \(Self.ratio(worst)))"))
            }
            let pairs = Self.memoryPairs(register)
            if !pairs.isEmpty {
                let list = pairs.map { "\($0.rouse.mode.rawValue) \($0.rouse.transport.rawValue.uppercased()): \(Self.bytes($0.rouse.perBinding)) vs \(Self.bytes($0.kamailio.perBinding))" }
                let short = pairs.filter { !($0.rouse.perBinding <= $0.kamailio.perBinding) }.count
                rows.append(
                    (
                        "memory per binding ≤ Kamailio's (Rouse vs Kamailio)", list.joined(separator: ", "),
                        short == 0 ? "met" : "not met in \(short) of \(pairs.count)"
                    ))
            }
        }
        if let wake = calls?.wake, !wake.overhead.isEmpty {
            // Issue 17 item 5.
            let handOff = zip(wake.registerToInvite, wake.registerToOK).map { $0 - $1 }
            for (label, values, aim) in [
                ("INVITE → push on the wire ≤ 2 ms p99", wake.inviteToPushWire, 2_000.0),
                ("woken REGISTER's 200 → INVITE out ≤ 1 ms p99", handOff, 1_000),
                ("wake overhead a caller feels (INVITE → push on the wire + woken REGISTER → INVITE) ≤ 5 ms p99", wake.overhead, 5_000),
            ] {
                let p99 = CallBenchmark.percentile(values, 0.99)
                rows.append((label, "p99 \(Self.micro(p99)), p50 \(Self.micro(CallBenchmark.percentile(values, 0.5)))", p99 <= aim ? "met" : "not met"))
            }
        }
        guard !rows.isEmpty else { return "" }
        var text = "## Aims (issues 10 and 17)\n\n| aim | measured | |\n| --- | --- | --- |\n"
        for row in rows { text += "| \(row.0) | \(row.1) | \(row.2) |\n" }
        text += "\n" + shortfalls() + "\n"
        return text
    }

    /// Where the time goes, for each aim not met, from the figures of this run.
    private func shortfalls() -> String {
        var text = ""
        if let register {
            for cell in Self.cells(of: register) where !cell.kamailio.isEmpty && !(cell.ratio >= cell.aim) {
                let rouseCPU = RegisterComparison.median(cell.rouse.map(\.serverCPUPer1000))
                let rousePG = RegisterComparison.median(cell.rouse.map(\.postgresCPUPer1000))
                let kamailioCPU = RegisterComparison.median(cell.kamailio.map(\.serverCPUPer1000))
                let kamailioPG = RegisterComparison.median(cell.kamailio.map(\.postgresCPUPer1000))
                let generator = RegisterComparison.median(cell.rouse.map(\.generatorCPUPer1000))
                text += "- **\(cell.mode.rawValue), \(cell.transport.rawValue.uppercased()), \(Self.count(cell.extensions)) extensions: \(Self.ratio(cell.ratio))**"
                text += " (aim \(Self.ratio(cell.aim))). Per REGISTER, Rouse's process used \(Self.micro(rouseCPU * 1_000)) of CPU and PostgreSQL"
                text += " \(Self.micro(rousePG * 1_000)) on its behalf; Kamailio's processes used \(Self.micro(kamailioCPU * 1_000)) and PostgreSQL"
                text += " \(Self.micro(kamailioPG * 1_000)). The load generator used \(Self.micro(generator * 1_000)) per REGISTER."
                let rouseTotal = rouseCPU + (rousePG.isFinite ? rousePG : 0)
                let kamailioTotal = kamailioCPU + (kamailioPG.isFinite ? kamailioPG : 0)
                if rouseCPU > kamailioCPU {
                    text += " Rouse's own CPU per REGISTER is the larger part of the gap: it runs its SIP loop on one thread while Kamailio spreads"
                    text += " REGISTERs over \(options.kamailioChildren) processes; the profile below names the costliest functions."
                } else if rouseTotal > kamailioTotal {
                    text += " PostgreSQL's share is the larger part of the gap."
                } else {
                    text += " Rouse uses less CPU per REGISTER in all, so the gap is latency, not work: see the p50/p99 columns."
                }
                text += "\n"
            }
            for pair in Self.memoryPairs(register) where pair.rouse.perBinding > pair.kamailio.perBinding {
                text += "- **Memory per binding, \(pair.rouse.mode.rawValue) \(pair.rouse.transport.rawValue.uppercased())**: Rouse"
                text += " \(Self.bytes(pair.rouse.perBinding)), Kamailio \(Self.bytes(pair.kamailio.perBinding))."
                text += " Rouse keeps each binding in its in-memory index as Swift values (Strings for AOR, contact, Call-ID, instance and"
                text += " push parameters, each its own heap block), with its flow and nonce-count window; Kamailio keeps one `ucontact` in shared memory.\n"
            }
            if let idle = register.memory.first(where: { $0.server == "rouse" }), let rival = register.memory.first(where: { $0.server == "kamailio" }),
                idle.idleBytes > 2 * rival.idleBytes
            {
                text += "- **Resident memory before any binding**: Rouse \(Self.mebibytes(idle.idleBytes)) MiB, Kamailio \(Self.mebibytes(rival.idleBytes)) MiB."
                text += " Rouse holds every extension's HA1s in memory (the registrar's directory and the HTTP API's credential cache) and reads"
                text += " none per REGISTER; Kamailio holds none and reads one from PostgreSQL per REGISTER (its PostgreSQL CPU column)."
                text += " With \(Self.count(register.memory.first?.bindings ?? 0)) bindings the totals are in the memory table below.\n"
            }
        }
        if let wake = calls?.wake, !wake.overhead.isEmpty, CallBenchmark.percentile(wake.overhead, 0.99) > 5_000 {
            let wire = wake.inviteToPushWire
            let ok = wake.registerToOK
            let handOff = zip(wake.registerToInvite, wake.registerToOK).map { $0 - $1 }
            text += "- **Wake-to-ring overhead**: p99 \(Self.micro(CallBenchmark.percentile(wake.overhead, 0.99))). Its parts, p50/p99:"
            text += " INVITE → push on the wire \(Self.micro(CallBenchmark.percentile(wire, 0.5)))/\(Self.micro(CallBenchmark.percentile(wire, 0.99)))"
            text += " (of which INVITE → 180, which Rouse sends as it starts the pushes,"
            text += " \(Self.micro(CallBenchmark.percentile(wake.inviteToRinging, 0.5)))/\(Self.micro(CallBenchmark.percentile(wake.inviteToRinging, 0.99))));"
            text += " woken REGISTER → its 200 (digest check and the durable commit of the binding, fsync included)"
            text += " \(Self.micro(CallBenchmark.percentile(ok, 0.5)))/\(Self.micro(CallBenchmark.percentile(ok, 0.99)));"
            text += " 200 → INVITE on the app's connection \(Self.micro(CallBenchmark.percentile(handOff, 0.5)))/\(Self.micro(CallBenchmark.percentile(handOff, 0.99))).\n"
        }
        return text
    }

    private func registerSection() -> String {
        guard let register else { return "" }
        var text = "## REGISTER with digest authentication\n\n"
        text += "Each phone is an extension with its own nonce (learnt from a 401 first); every measured REGISTER carries MD5 digest"
        text += " credentials with qop=auth and a nonce count one higher than its last, so it is one round trip. **durable**: Rouse commits"
        text += " the binding (group commit, `synchronous_commit` on) before its 200; Kamailio runs usrloc `db_mode` 1 (write-through: each"
        text += " save is its own INSERT or UPDATE, autocommitted) and reads the HA1 with one SELECT per REGISTER (auth_db). **memory**: Rouse"
        text += " has no memory-only mode, so its fastest setting is used: the same commits on a database with `synchronous_commit=off`"
        text += " (no wait for the WAL flush; a crash may lose the last few hundred milliseconds of bindings); Kamailio runs `db_mode` 0"
        text += " (bindings in shared memory only; HA1s still read from PostgreSQL). Refreshes cycle through the extensions of the cell,"
        text += " each run \(Self.number(options.registerSeconds)) s, "
        text += options.registerRate.map { "open loop at \(Int($0)) REGISTER/s" } ?? "closed loop with \(options.registerWindow) in flight"
        text += "; TCP phones share \(options.tcpConnections) connections. Rate = REGISTERs answered 200 per second; medians of"
        text += " \(options.registerRounds) runs per server.\n\n"
        text += "| mode | transport | extensions | Rouse REGISTER/s | Kamailio REGISTER/s | Rouse ÷ Kamailio | Rouse p50 / p99 / p99.9 | Kamailio p50 / p99 / p99.9 | CPU s per 1000, Rouse + its PostgreSQL | CPU s per 1000, Kamailio + its PostgreSQL |\n"
        text += "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        for cell in Self.cells(of: register) {
            func latency(_ runs: [RegisterComparison.Run]) -> String {
                runs.isEmpty
                    ? "–"
                    : [runs.map(\.p50), runs.map(\.p99), runs.map(\.p999)].map { Self.micro(RegisterComparison.median($0)) }.joined(separator: " / ")
            }
            func cpu(_ runs: [RegisterComparison.Run]) -> String {
                runs.isEmpty
                    ? "–"
                    : "\(Self.seconds(RegisterComparison.median(runs.map(\.serverCPUPer1000)))) + \(Self.seconds(RegisterComparison.median(runs.map(\.postgresCPUPer1000))))"
            }
            text += "| \(cell.mode.rawValue) | \(cell.transport.rawValue.uppercased()) | \(Self.count(cell.extensions))"
            text += " | \(Self.rate(cell.rouseRate)) | \(cell.kamailio.isEmpty ? "–" : Self.rate(cell.kamailioRate))"
            text += " | \(cell.kamailio.isEmpty ? "–" : Self.ratio(cell.ratio)) | \(latency(cell.rouse)) | \(latency(cell.kamailio))"
            text += " | \(cpu(cell.rouse)) | \(cpu(cell.kamailio)) |\n"
        }
        text += "\nLatencies in µs. Every run, in the order it was made (failures are final answers other than 200; timeouts had no answer"
        text += " within 2 s):\n\n"
        text += "| mode | transport | extensions | round | server | REGISTER/s | p50 | p99 | p99.9 | CPU s/1000 server | PostgreSQL | load generator | sent | failed | timed out |\n"
        text += "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        for run in register.runs {
            text += "| \(run.mode.rawValue) | \(run.transport.rawValue.uppercased()) | \(Self.count(run.extensions)) | \(run.round + 1) | \(run.server)"
            text += " | \(Self.rate(run.rate)) | \(Self.micro(run.p50)) | \(Self.micro(run.p99)) | \(Self.micro(run.p999))"
            text += " | \(Self.seconds(run.serverCPUPer1000)) | \(Self.seconds(run.postgresCPUPer1000)) | \(Self.seconds(run.generatorCPUPer1000))"
            text += " | \(run.sent) | \(run.failed)\(run.otherStatuses.isEmpty ? "" : " (\(run.otherStatuses))") | \(run.timedOut) |\n"
        }
        if !register.fills.isEmpty {
            text += "\nFirst registrations (each phone's first authenticated REGISTER makes its binding; bounded by"
            text += " \(Int(options.registerFillSeconds)) s per pass):\n\n"
            text += "| mode | transport | server | phones | registered | new bindings/s | CPU s/1000 server | PostgreSQL | failed | timed out |\n"
            text += "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
            for fill in register.fills {
                text += "| \(fill.mode.rawValue) | \(fill.transport.rawValue.uppercased()) | \(fill.server) | \(Self.count(fill.phones)) | \(Self.count(fill.registered))"
                text += " | \(Self.rate(fill.rate)) | \(Self.seconds(fill.serverCPUPer1000)) | \(Self.seconds(fill.postgresCPUPer1000)) | \(fill.failed) | \(fill.timedOut) |\n"
            }
        }
        return text + "\n"
    }

    private func callsSection() -> String {
        guard let calls, !calls.proxyRuns.isEmpty else { return "" }
        var text = "## Call setups through the proxy to awake phones\n\n"
        text += "\(options.callsCallees) desk phones registered over UDP; the caller keeps \(options.callsWindow) calls in flight"
        text += " (INVITE → 180, 200 → ACK and BYE at once), each run at most \(Self.number(options.callsSeconds)) s. INVITEs from loopback are"
        text += " trusted by both (Rouse's `trusted_peers`, Kamailio's `$si` check): no 407. Both record-route and relay statefully; Rouse"
        text += " also writes each call's journey to PostgreSQL after it ends (not in the signalling path; the bench waits for the writer"
        text += " between runs). Setup = INVITE sent → 200 received.\n\n"
        text += "| server | call setups/s (median) | setup p50 / p99 / p99.9 µs | CPU µs per call, server + PostgreSQL | runs |\n"
        text += "| --- | ---: | ---: | ---: | --- |\n"
        for server in ["rouse", "kamailio"] {
            let runs = calls.proxyRuns.filter { $0.server == server }
            guard !runs.isEmpty else { continue }
            let median = { (values: [Double]) in RegisterComparison.median(values) }
            text += "| \(server) | \(Self.rate(median(runs.map(\.rate)))) | \(Self.micro(median(runs.map(\.p50)))) / \(Self.micro(median(runs.map(\.p99)))) / \(Self.micro(median(runs.map(\.p999))))"
            text += " | \(Self.number(median(runs.map(\.serverCPUPerCall)))) + \(Self.number(median(runs.map(\.postgresCPUPerCall))))"
            text += " | " + runs.map { "\(Self.rate($0.rate))/s (\($0.failed) failed, \($0.timedOut) timed out)" }.joined(separator: "; ") + " |\n"
        }
        let rouse = RegisterComparison.median(calls.proxyRuns.filter { $0.server == "rouse" }.map(\.rate))
        let kamailio = RegisterComparison.median(calls.proxyRuns.filter { $0.server == "kamailio" }.map(\.rate))
        if rouse.isFinite && kamailio.isFinite && kamailio > 0 { text += "\nRouse ÷ Kamailio: \(Self.ratio(rouse / kamailio)).\n" }
        return text + "\n"
    }

    private func wakeSection() -> String {
        guard let calls else { return "" }
        guard let wake = calls.wake, !wake.overhead.isEmpty else {
            return calls.pushWire.isEmpty ? "" : "## Wake-then-ring\n\nINVITE → push on the wire p50 \(Self.micro(CallBenchmark.percentile(calls.pushWire, 0.5))).\n\n"
        }
        func pair(_ values: [Double]) -> String {
            "\(Self.micro(CallBenchmark.percentile(values, 0.5))) | \(Self.micro(CallBenchmark.percentile(values, 0.99)))"
        }
        let handOff = zip(wake.registerToInvite, wake.registerToOK).map { $0 - $1 }
        var text = "## Wake-then-ring\n\n"
        text += "An iPhone app registered over TCP with an APNs VoIP token, then its connection closed (the app is suspended). A call"
        text += " comes; Rouse pushes, the push reaches the APNs stand-in, the app registers again over a new connection (401 first, then"
        text += " the timed, authenticated REGISTER) and gets the INVITE on it. One call at a time, \(wake.overhead.count) calls after warm-up."
        text += " The push is timed as it leaves Rouse: Rouse reaches the stand-in through a relay in the bench that notes when"
        text += " each write passes (TLS stays end to end), so the stand-in's own work is not in the figure.\n\n"
        text += "| | p50 | p99 |\n| --- | ---: | ---: |\n"
        text += "| INVITE sent → push on the wire | \(pair(wake.inviteToPushWire)) |\n"
        text += "| of which INVITE sent → 180 at the caller (sent as the pushes start) | \(pair(wake.inviteToRinging)) |\n"
        text += "| woken REGISTER sent → its 200 (binding committed) | \(pair(wake.registerToOK)) |\n"
        text += "| woken REGISTER sent → INVITE received | \(pair(wake.registerToInvite)) |\n"
        text += "| of which 200 → INVITE | \(pair(handOff)) |\n"
        text += "| **Rouse's overhead: push on the wire + REGISTER → INVITE** | \(pair(wake.overhead)) |\n\n"
        if !wake.credentialRegisterToInvite.isEmpty {
            text += "Wake in one round trip: every other woken app presented its push's wake credential (`X-Rouse-Wake`) and was answered"
            text += " without the 401. From the first REGISTER sent to the INVITE received (\(wake.firstRegisterToInvite.count) calls with"
            text += " digest, \(wake.credentialRegisterToInvite.count) with the credential; on loopback, so the round trip saved is Rouse's"
            text += " side of it only, where a cellular network adds 100–300 ms):\n\n"
            text += "| | p50 | p99 |\n| --- | ---: | ---: |\n"
            text += "| digest: first REGISTER → 401 → authenticated REGISTER → INVITE | \(pair(wake.firstRegisterToInvite)) |\n"
            text += "| wake credential: REGISTER → its 200 (binding committed) | \(pair(wake.credentialRegisterToOK)) |\n"
            text += "| wake credential: REGISTER → INVITE | \(pair(wake.credentialRegisterToInvite)) |\n\n"
        }
        if !calls.pushWire.isEmpty {
            text += "For comparison, the push pass (calls one after another to apps registered once, each call cancelled) measured INVITE → push"
            text += " on the wire p50 \(Self.micro(CallBenchmark.percentile(calls.pushWire, 0.5))), p99 \(Self.micro(CallBenchmark.percentile(calls.pushWire, 0.99))).\n\n"
        }

        text += "The time a caller waits beyond the app's own wake-up (the push's trip through APNs and the app's start are not Rouse's) is"
        text += " the last line: the two stretches where the call waits on Rouse.\n\n"
        return text
    }

    private func memorySection() -> String {
        guard let register, !register.memory.isEmpty else { return "" }
        var text = "## Resident memory\n\n"
        text += "Proportional set size (`Pss`, summed over every process of the server, so Kamailio's shared memory counts once),"
        text += " idle with the extensions loaded, and holding every binding of the large cell. Per binding: the growth while the phones"
        text += " beyond the small cell registered, after they had been challenged (so the heap already held the challenges' transactions),"
        text += " divided by their bindings. Kamailio maps \(1_024) MiB of shared memory at start; only the pages it touches count.\n\n"
        text += "| mode | transport | server | bindings | idle MiB | with bindings MiB | bytes per binding |\n"
        text += "| --- | --- | --- | ---: | ---: | ---: | ---: |\n"
        for memory in register.memory {
            text += "| \(memory.mode.rawValue) | \(memory.transport.rawValue.uppercased()) | \(memory.server) | \(Self.count(memory.bindings))"
            text += " | \(Self.mebibytes(memory.idleBytes)) | \(Self.mebibytes(memory.afterGroupBytes)) | \(Self.bytes(memory.perBinding)) |\n"
        }
        return text + "\n"
    }

    private func profileSection() -> String {
        var text = ""
        if let profile {
            text += "## Where a REGISTER's instructions go (callgrind)\n\n"
            text += "`rouse serve` under valgrind's callgrind, collection switched on for \(profile.registers) REGISTER refreshes (UDP, digest,"
            text += " durable commit): **\(Self.count(Int(profile.instructionsPerRegister.isFinite ? profile.instructionsPerRegister : 0))) instructions per REGISTER**"
            text += " in Rouse's process (PostgreSQL's own work is not counted). Instruction counts do not move with the machine's load, so"
            text += " they compare across runs. Before issue 21's work (main at 67c82ed, or `--profile-before`): \(Self.count(Int(options.profileBefore)))"
            text += " instructions per REGISTER; now ÷\(String(format: "%.2f", options.profileBefore / profile.instructionsPerRegister)) (the aim: ÷4)."
            text += " The dump is written beside this report as `\((profile.outputFile as NSString).lastPathComponent)` (for callgrind_annotate; not kept in git). Costliest functions, self cost:\n\n"
            text += "| % | instructions per REGISTER | function |\n| ---: | ---: | --- |\n"
            for cost in profile.selfCosts.prefix(15) {
                text += "| \(String(format: "%.2f", cost.percent)) | \(Self.count(Int(cost.instructions / Double(max(profile.registers, 1))))) | `\(Self.cell(cost.function))` |\n"
            }
            text += "\nInclusive cost (the function and what it calls):\n\n| % | instructions per REGISTER | function |\n| ---: | ---: | --- |\n"
            for cost in profile.inclusiveCosts.prefix(15) {
                text += "| \(String(format: "%.2f", cost.percent)) | \(Self.count(Int(cost.instructions / Double(max(profile.registers, 1))))) | `\(Self.cell(cost.function))` |\n"
            }
            text += "\n"
            for (stretch, what, before) in [
                (profile.invite, "call setup", options.profileBeforeInvite), (profile.post, "posted token", options.profileBeforePost),
            ] {
                guard let stretch else { continue }
                text += what == "call setup"
                    ? "### Where a call setup's instructions go\n\nThe same process, collection switched on for \(stretch.operations) calls from loopback"
                        + " (a trusted peer: no 407) to desk phones over UDP, 4 in flight, each INVITE → 180 and 200 from the phone → ACK → BYE → 200,"
                        + " until every call's journey was written to PostgreSQL: "
                    : "### Where a posted token's instructions go\n\nThe same process, collection switched on for \(stretch.operations)"
                        + " `POST /api/v1/push/register` (HTTP Basic checked, keep-alive, 4 connections; each re-posts an extension's token: a durable refresh): "
                text += "**\(Self.count(Int(stretch.perOperation.isFinite ? stretch.perOperation : 0))) instructions per \(what)**"
                text += " (before this session's work, e145fc6, or `--profile-before-\(what == "call setup" ? "invite" : "post")`: \(Self.instructions(before))"
                text += ", now ÷\(String(format: "%.2f", before / stretch.perOperation))); dump `\((stretch.outputFile as NSString).lastPathComponent)`."
                if let messages = stretch.messages {
                    text += " The load sent Rouse \(Self.count(messages)) SIP messages in the window"
                        + " (\(String(format: "%.2f", Double(messages) / Double(max(stretch.operations, 1)))) a call; 6 without retransmissions)."
                }
                text += " Inclusive cost:\n\n| % | instructions per \(what) | function |\n| ---: | ---: | --- |\n"
                for cost in stretch.inclusiveCosts.prefix(12) {
                    text += "| \(String(format: "%.2f", cost.percent)) | \(Self.count(Int(cost.instructions / Double(max(stretch.operations, 1))))) | `\(Self.cell(cost.function))` |\n"
                }
                text += "\n"
            }
        }
        if let notesFile = options.profileNotes, let written = try? String(contentsOfFile: notesFile, encoding: .utf8) {
            // Its headings go one level down, under the report's own.
            text += ("\n" + written.trimmingCharacters(in: .whitespacesAndNewlines)).replacingOccurrences(of: "\n#", with: "\n##")
                .trimmingCharacters(in: .newlines) + "\n\n"
        }
        return text
    }

    /// The report as JSON: the run, the machine, every figure, and the structured comparison.
    func json() throws -> Data {
        var document: [String: Any] = [
            "date": Self.day(started),
            "started": Self.timestamp(started),
            "finished": finished.map(Self.timestamp) ?? NSNull(),
            "machine": [
                "cores": ProcessInfo.processInfo.activeProcessorCount, "cpu": Self.cpuModel(),
                "memory_bytes": ProcessInfo.processInfo.physicalMemory, "kernel": ProcessInfo.processInfo.operatingSystemVersionString,
                "load_average_before": loadBefore, "load_average_after": loadAfter,
            ] as [String: Any],
            "rouse": Self.rouseVersion(options.rouseExecutable),
            "sip_threads": options.sipThreads.map { $0 as Any } ?? NSNull(),
            "figures": figures.filter(\.value.isFinite).map { ["name": $0.name, "value": $0.value, "unit": $0.unit] as [String: Any] },
            "notes": allNotes,
        ]
        if let register {
            document["kamailio"] = register.kamailioVersion ?? NSNull()
            document["register"] = [
                "cells": Self.cells(of: register).map { cell -> [String: Any] in
                    [
                        "mode": cell.mode.rawValue, "transport": cell.transport.rawValue, "extensions": cell.extensions,
                        "rouse_rate_median": Self.finite(cell.rouseRate), "kamailio_rate_median": Self.finite(cell.kamailioRate),
                        "ratio": Self.finite(cell.ratio), "aim": cell.aim,
                    ]
                },
                "runs": register.runs.map { run -> [String: Any] in
                    [
                        "server": run.server, "mode": run.mode.rawValue, "transport": run.transport.rawValue, "extensions": run.extensions,
                        "round": run.round + 1, "order": run.order, "rate": Self.finite(run.rate), "p50_us": Self.finite(run.p50),
                        "p99_us": Self.finite(run.p99), "p999_us": Self.finite(run.p999), "server_cpu_s_per_1000": Self.finite(run.serverCPUPer1000),
                        "postgres_cpu_s_per_1000": Self.finite(run.postgresCPUPer1000),
                        "load_generator_cpu_s_per_1000": Self.finite(run.generatorCPUPer1000), "sent": run.sent, "succeeded": run.succeeded,
                        "failed": run.failed, "timed_out": run.timedOut,
                    ]
                },
                "first_registrations": register.fills.map { fill -> [String: Any] in
                    [
                        "server": fill.server, "mode": fill.mode.rawValue, "transport": fill.transport.rawValue, "phones": fill.phones,
                        "registered": fill.registered, "rate": Self.finite(fill.rate), "server_cpu_s_per_1000": Self.finite(fill.serverCPUPer1000),
                        "postgres_cpu_s_per_1000": Self.finite(fill.postgresCPUPer1000), "failed": fill.failed, "timed_out": fill.timedOut,
                    ]
                },
                "memory": register.memory.map { memory -> [String: Any] in
                    [
                        "server": memory.server, "mode": memory.mode.rawValue, "transport": memory.transport.rawValue, "bindings": memory.bindings,
                        "idle_bytes": Self.finite(memory.idleBytes), "resident_bytes": Self.finite(memory.afterGroupBytes),
                        "bytes_per_binding": Self.finite(memory.perBinding),
                    ]
                },
            ] as [String: Any]
        }
        if let calls {
            document["calls"] = [
                "proxy_runs": calls.proxyRuns.map { run -> [String: Any] in
                    [
                        "server": run.server, "round": run.round + 1, "setups_per_second": Self.finite(run.rate), "p50_us": Self.finite(run.p50),
                        "p99_us": Self.finite(run.p99), "p999_us": Self.finite(run.p999), "server_cpu_us_per_call": Self.finite(run.serverCPUPerCall),
                        "postgres_cpu_us_per_call": Self.finite(run.postgresCPUPerCall), "calls": run.calls, "answered": run.answered,
                        "failed": run.failed, "timed_out": run.timedOut,
                    ]
                },
                "wake": calls.wake.map { wake -> [String: Any] in
                    [
                        "calls": wake.overhead.count,
                        "invite_to_push_wire_p50_us": Self.finite(CallBenchmark.percentile(wake.inviteToPushWire, 0.5)),
                        "invite_to_push_wire_p99_us": Self.finite(CallBenchmark.percentile(wake.inviteToPushWire, 0.99)),
                        "invite_to_ringing_p50_us": Self.finite(CallBenchmark.percentile(wake.inviteToRinging, 0.5)),
                        "invite_to_ringing_p99_us": Self.finite(CallBenchmark.percentile(wake.inviteToRinging, 0.99)),
                        "register_to_200_p50_us": Self.finite(CallBenchmark.percentile(wake.registerToOK, 0.5)),
                        "register_to_200_p99_us": Self.finite(CallBenchmark.percentile(wake.registerToOK, 0.99)),
                        "register_to_invite_p50_us": Self.finite(CallBenchmark.percentile(wake.registerToInvite, 0.5)),
                        "register_to_invite_p99_us": Self.finite(CallBenchmark.percentile(wake.registerToInvite, 0.99)),
                        "overhead_p50_us": Self.finite(CallBenchmark.percentile(wake.overhead, 0.5)),
                        "overhead_p99_us": Self.finite(CallBenchmark.percentile(wake.overhead, 0.99)),
                        "first_register_to_invite_p50_us": Self.finite(CallBenchmark.percentile(wake.firstRegisterToInvite, 0.5)),
                        "first_register_to_invite_p99_us": Self.finite(CallBenchmark.percentile(wake.firstRegisterToInvite, 0.99)),
                        "credential_calls": wake.credentialRegisterToInvite.count,
                        "credential_register_to_200_p50_us": Self.finite(CallBenchmark.percentile(wake.credentialRegisterToOK, 0.5)),
                        "credential_register_to_invite_p50_us": Self.finite(CallBenchmark.percentile(wake.credentialRegisterToInvite, 0.5)),
                        "credential_register_to_invite_p99_us": Self.finite(CallBenchmark.percentile(wake.credentialRegisterToInvite, 0.99)),
                    ]
                } ?? NSNull(),
            ] as [String: Any]
        }
        addIssue21(to: &document)
        if let profile {
            document["profile"] = [
                "registers": profile.registers, "instructions_per_register": Self.finite(profile.instructionsPerRegister),
                "self": profile.selfCosts.map { ["function": $0.function, "percent": $0.percent, "instructions": $0.instructions] as [String: Any] },
                "inclusive": profile.inclusiveCosts.map { ["function": $0.function, "percent": $0.percent, "instructions": $0.instructions] as [String: Any] },
                "calls": profile.invite.map { $0.operations as Any } ?? NSNull(), "instructions_per_invite": profile.invite.map { Self.finite($0.perOperation) } ?? NSNull(), "invite_messages": profile.invite?.messages.map { $0 as Any } ?? NSNull(),
                "posts": profile.post.map { $0.operations as Any } ?? NSNull(), "instructions_per_post": profile.post.map { Self.finite($0.perOperation) } ?? NSNull(),
            ] as [String: Any]
        }
        return try JSONSerialization.data(withJSONObject: document, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
    }

    // MARK: Formatting and facts

    static func finite(_ value: Double) -> Any { value.isFinite ? value : NSNull() }
    /// An instruction count, or "–" when not measured.
    static func instructions(_ value: Double) -> String { value.isFinite ? count(Int(value.rounded())) : "–" }
    static func rate(_ value: Double) -> String { value.isFinite ? FigureReport.format(value.rounded()) : "–" }
    static func ratio(_ value: Double) -> String { value.isFinite ? String(format: "%.2f×", value) : "–" }
    static func micro(_ value: Double) -> String { value.isFinite ? FigureReport.format(value.rounded()) + " µs" : "–" }
    static func seconds(_ value: Double) -> String { value.isFinite ? String(format: "%.3f", value) : "–" }
    static func number(_ value: Double) -> String { value.isFinite ? FigureReport.format(value) : "–" }
    static func count(_ value: Int) -> String { FigureReport.format(Double(value)) }
    static func bytes(_ value: Double) -> String { value.isFinite ? FigureReport.format(value.rounded()) + " B" : "–" }
    static func mebibytes(_ value: Double) -> String { value.isFinite ? String(format: "%.1f", value / 1_048_576) : "–" }
    static func cell(_ text: String) -> String {
        let flat = text.replacingOccurrences(of: "|", with: "\\|").replacingOccurrences(of: "`", with: "'")
        return flat.count > 140 ? String(flat.prefix(137)) + "…" : flat
    }

    static func day(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd"
        return formatter.string(from: date)
    }

    private static func timestamp(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter.string(from: date)
    }

    private static func loadAverage() -> String {
        (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").prefix(3).joined(separator: " ") ?? "?"
    }

    private static func cpuModel() -> String {
        guard let info = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8),
            let line = info.split(separator: "\n").first(where: { $0.hasPrefix("model name") }),
            let colon = line.firstIndex(of: ":")
        else { return "?" }
        return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
    }

    /// `rouse version` and the checkout's commit, when there is one.
    private static func rouseVersion(_ executable: String) -> String {
        func output(_ path: String, _ arguments: [String]) -> String? {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: path)
            process.arguments = arguments
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = FileHandle.nullDevice
            guard (try? process.run()) != nil else { return nil }
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            guard process.terminationStatus == 0 else { return nil }
            return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let version = output(executable, ["version"]) ?? "rouse"
        // A tree outside git (an archive of a commit) may name its commit in ROUSE_BENCH_REVISION.
        if let revision = ProcessInfo.processInfo.environment["ROUSE_BENCH_REVISION"], !revision.isEmpty {
            return "\(version), \(revision), release build"
        }
        if let commit = output("/usr/bin/git", ["rev-parse", "--short", "HEAD"]) {
            let dirty = output("/usr/bin/git", ["status", "--porcelain", "--untracked-files=no"]).map { $0.isEmpty ? "" : " with local changes" } ?? ""
            return "\(version), commit \(commit)\(dirty), release build"
        }
        return "\(version), release build"
    }

    private static func postgresVersion(_ conninfo: String) -> String? {
        guard let connection = try? PostgresConnection(conninfo: conninfo),
            let rows = try? connection.query("SHOW server_version"), let value = rows.rows.first?.first ?? nil
        else { return nil }
        return value
    }
}
