import Foundation

/// The parts of the report that issue 21 added: its aims as ratios with "met"/"missed", the SIPp
/// ladders, the scale phase, and the profile's before/after. Built on the benchmark's one thread.
extension BenchReport {
    /// One row of the aims table.
    struct AimRow {
        var aim: String
        var measured: String
        /// nil: not measured in this run (the phase did not run, or the run was too small).
        var met: Bool?
        var note = ""
        /// A figure the issue asks to record, with no aim of its own: its verdict says so.
        var recorded = false

        var verdict: String {
            if recorded { return "recorded" }
            switch met {
            case true?: return "met"
            case false?: return "missed" + (note.isEmpty ? "" : " (\(note))")
            case nil: return "not measured" + (note.isEmpty ? "" : " (\(note))")
            }
        }
    }

    /// The SIPp ladders as named figures: each step's passed rate and CPU per call, and the
    /// highest rate each server passed.
    static func figures(of sipp: SIPpLadder.Result) -> [BenchFigure] {
        var figures: [BenchFigure] = []
        for step in sipp.steps {
            let prefix = "sipp.\(step.ladder).\(step.server).offered\(Int(step.offered))"
            figures.append(BenchFigure(name: prefix + ".passed", value: step.passed, unit: "/s"))
            figures.append(BenchFigure(name: prefix + ".failed", value: Double(step.failed), unit: "calls"))
            figures.append(BenchFigure(name: prefix + ".cpu_us", value: step.totalMicros, unit: "µs server + PostgreSQL"))
        }
        for ladder in ["register", "calls"] {
            for server in Set(sipp.steps.filter { $0.ladder == ladder }.map(\.server)).sorted() {
                figures.append(BenchFigure(name: "sipp.\(ladder).\(server).highest_passed", value: sipp.highest(ladder, server), unit: "/s"))
            }
        }
        return figures
    }

    /// The aims of issue 21, each with what this run measured.
    func issue21Aims() -> [AimRow] {
        var rows: [AimRow] = []
        let kamailioFast = "kamailio.memory"

        // REGISTER/s, Rouse durable against Kamailio in memory: SIPp ladder.
        if let sipp, sipp.steps.contains(where: { $0.ladder == "register" && $0.server == kamailioFast }) {
            let rouse = sipp.highest("register", "rouse")
            let kamailio = sipp.highest("register", kamailioFast)
            rows.append(
                ladderAim(
                    "REGISTER/s with digest, Rouse durable ≥ 1.0× Kamailio in memory (SIPp ladder)", sipp, "register", rouse: rouse,
                    kamailio: kamailio))
        }
        // The same with the bench's own generator (refreshes, closed loop).
        if let register {
            let cells = Self.cells(of: register)
            var pairs: [String] = []
            var worst = Double.infinity
            for durable in cells where durable.mode == .durable && !durable.rouse.isEmpty {
                guard let memory = cells.first(where: { $0.mode == .memory && $0.transport == durable.transport && $0.extensions == durable.extensions }),
                    !memory.kamailio.isEmpty
                else { continue }
                let ratio = durable.rouseRate / memory.kamailioRate
                worst = min(worst, ratio.isFinite ? ratio : 0)
                pairs.append("\(durable.transport.rawValue.uppercased()) \(Self.count(durable.extensions)): \(Self.ratio(ratio))")
            }
            if !pairs.isEmpty {
                rows.append(
                    AimRow(
                        aim: "REGISTER/s, Rouse durable ≥ 1.0× Kamailio in memory (own generator, refreshes)", measured: pairs.joined(separator: ", "),
                        met: worst >= 1.0, note: worst.isFinite ? "lowest \(Self.ratio(worst))" : ""))
            }
        }
        // CPU per REGISTER at the same fixed offered rates (SIPp steps both passed).
        if let sipp {
            var compared: [String] = []
            var worse = 0
            for rouse in sipp.steps where rouse.ladder == "register" && rouse.server == "rouse" && rouse.kept {
                guard let kamailio = sipp.steps.first(where: { $0.ladder == "register" && $0.server == kamailioFast && $0.offered == rouse.offered && $0.kept })
                else { continue }
                compared.append("\(Int(rouse.offered))/s: \(Self.number(rouse.totalMicros.rounded())) vs \(Self.number(kamailio.totalMicros.rounded())) µs")
                if !(rouse.totalMicros <= kamailio.totalMicros) { worse += 1 }
            }
            if !compared.isEmpty {
                rows.append(
                    AimRow(
                        aim: "CPU µs per registration (server + PostgreSQL for it), Rouse durable ≤ Kamailio in memory, same offered rate (SIPp)",
                        measured: compared.joined(separator: "; "), met: worse == 0, note: worse == 0 ? "" : "higher at \(worse) of \(compared.count) rates"))
            }
        }
        // Call setups.
        if let sipp, sipp.steps.contains(where: { $0.ladder == "calls" && $0.server == kamailioFast }) {
            let rouse = sipp.highest("calls", "rouse")
            let kamailio = sipp.highest("calls", kamailioFast)
            rows.append(ladderAim("call setups/s ≥ 1.0× Kamailio in memory (SIPp UAC → server → SIPp UAS)", sipp, "calls", rouse: rouse, kamailio: kamailio))
        }
        if let calls, !calls.proxyRuns.isEmpty {
            let rouse = RegisterComparison.median(calls.proxyRuns.filter { $0.server == "rouse" }.map(\.rate))
            let kamailio = RegisterComparison.median(calls.proxyRuns.filter { $0.server == "kamailio" }.map(\.rate))
            if kamailio.isFinite {
                rows.append(
                    AimRow(
                        aim: "call setups/s ≥ 1.0× Kamailio (own generator, 64 in flight)",
                        measured: "Rouse \(Self.rate(rouse))/s, Kamailio \(Self.rate(kamailio))/s: \(Self.ratio(rouse / kamailio))", met: rouse / kamailio >= 1.0))
            }
        }
        // Posted tokens.
        if let posted = figures.first(where: { $0.name == "posting.keepalive.rate" })?.value {
            let first = figures.first(where: { $0.name == "posting.first_posts.rate" })?.value ?? .nan
            let wide = figures.first(where: { $0.name == "posting.keepalive_wide.rate" })?.value ?? .nan
            rows.append(
                AimRow(
                    aim: "posted push tokens ≥ 2,000/s",
                    measured: "\(Self.rate(wide))/s over 64 keep-alive connections, \(Self.rate(posted))/s over 8 (first posts \(Self.rate(first))/s)",
                    met: max(posted, wide) >= 2_000))
        }
        // Memory.
        if let register, let rouse = register.memory.filter({ $0.server == "rouse" }).max(by: { $0.perBinding < $1.perBinding }) {
            rows.append(
                AimRow(
                    aim: "memory per binding ≤ 1 KB (REGISTER phase)", measured: "\(Self.bytes(rouse.perBinding)) (\(rouse.mode.rawValue) \(rouse.transport.rawValue.uppercased()), the highest cell)",
                    met: rouse.perBinding <= 1_024))
            let extensions = options.memoryBindings
            let idle = register.memory.filter { $0.server == "rouse" }.map(\.idleBytes).max() ?? .nan
            rows.append(
                AimRow(
                    aim: "resident memory with 100,000 extensions and no bindings ≤ 100 MiB",
                    measured: "\(Self.mebibytes(idle)) MiB with \(Self.count(extensions)) extensions",
                    met: extensions >= 100_000 ? idle <= 100 * 1_048_576 : nil, note: extensions >= 100_000 ? "" : "this run had \(Self.count(extensions))"))
        }
        if let scale {
            rows.append(
                AimRow(
                    aim: "memory per binding ≤ 1 KB (scale phase)", measured: "\(Self.bytes(scale.perBinding)) over \(Self.count(scale.loaded)) bindings",
                    met: scale.perBinding.isFinite ? scale.perBinding <= 1_024 : nil))
            let started = scale.reloadFailure == nil
            let full = scale.bindings >= 1_000_000 && started
            let note = !started ? "Rouse did not start" : full ? "" : "this run had \(Self.count(scale.bindings)) bindings"
            if let failure = scale.reloadFailure {
                rows.append(
                    AimRow(
                        aim: "1,000,000 bindings: reload at start-up ≤ 30 s",
                        measured: "Rouse did not serve SIP with \(Self.count(scale.loaded)) bindings: \(Self.cell(failure))",
                        met: scale.bindings >= 1_000_000 ? false : nil))
            } else {
                rows.append(
                    AimRow(
                        aim: "1,000,000 bindings: reload at start-up ≤ 30 s", measured: "\(String(format: "%.1f", scale.reloadSeconds)) s for \(Self.count(scale.loaded))",
                        met: full ? scale.reloadSeconds <= 30 : nil, note: note))
            }
            rows.append(
                AimRow(
                    aim: "1,000,000 bindings: resident memory ≤ 1.2 GB", measured: "\(Self.mebibytes(scale.fullResidentBytes)) MiB",
                    met: full ? scale.fullResidentBytes <= 1.2e9 : nil, note: note))
            if let few = scale.few, let many = scale.full {
                // "Unchanged": within a quarter, or within a millisecond, of the p99 with few bindings.
                let same = many.p99 <= max(few.p99 * 1.25, few.p99 + 1_000)
                rows.append(
                    AimRow(
                        aim: "REGISTER p99 under load unchanged with every binding held (within 25 % or 1 ms)",
                        measured: "\(Self.micro(few.p99)) with \(Self.count(few.bindings)) bindings, \(Self.micro(many.p99)) with \(Self.count(many.bindings)), at \(Int(options.scaleRate))/s",
                        met: full ? same : nil, note: note))
            }
        }
        // Instructions.
        if let profile {
            let after = profile.instructionsPerRegister
            let before = options.profileBefore
            rows.append(
                AimRow(
                    aim: "instructions per REGISTER refresh ÷ 4 (≤ \(Self.count(Int(before / 4))))",
                    measured: "\(Self.count(Int(before))) before → \(Self.count(Int(after.isFinite ? after : 0))) now: ÷\(String(format: "%.2f", before / after))",
                    met: after <= before / 4))
            for (stretch, what, before) in [
                (profile.invite, "call setup (INVITE … BYE, journey written)", options.profileBeforeInvite),
                (profile.post, "posted token (POST /api/v1/push/register)", options.profileBeforePost),
            ] {
                guard let stretch else { continue }
                let now = stretch.perOperation
                rows.append(
                    AimRow(
                        aim: "instructions per \(what), before → after",
                        measured: "\(Self.instructions(before)) before (e145fc6) → \(Self.instructions(now)) now: ÷\(String(format: "%.2f", before / now))",
                        met: nil, recorded: true))
            }
        }
        return rows
    }

    /// A ladder's ratio as an aim. When both servers passed the ladder's top step, neither was
    /// pushed to its limit and the ratio of their passed rates says nothing: not measured.
    private func ladderAim(_ aim: String, _ sipp: SIPpLadder.Result, _ ladder: String, rouse: Double, kamailio: Double) -> AimRow {
        let top = sipp.steps.filter { $0.ladder == ladder }.map(\.offered).max() ?? 0
        func keptTop(_ server: String) -> Bool { sipp.steps.contains { $0.ladder == ladder && $0.server == server && $0.offered == top && $0.kept } }
        let measured = "Rouse \(Self.rate(rouse))/s, Kamailio \(Self.rate(kamailio))/s: \(Self.ratio(rouse / kamailio))"
        if keptTop("rouse") && keptTop("kamailio.memory") {
            return AimRow(aim: aim, measured: measured, met: nil, note: "both passed the top step, \(Int(top))/s: offer more")
        }
        if keptTop("kamailio.memory") {
            return AimRow(aim: aim, measured: measured + " (Kamailio passed the top step)", met: false)
        }
        return AimRow(aim: aim, measured: measured, met: rouse / kamailio >= 1.0)
    }

    func issue21AimsSection() -> String {
        let rows = issue21Aims()
        guard !rows.isEmpty else { return "" }
        var text = "## Aims (issue 21)\n\n"
        text += "Each aim as measured in this run; \"not measured\" where the run was too small to say (a quick run) or the phase did not run."
        text += " The wake figures of issue 17 follow in the next table.\n\n"
        text += "| aim | measured | |\n| --- | --- | --- |\n"
        for row in rows { text += "| \(row.aim) | \(row.measured) | \(row.verdict) |\n" }
        if rows.contains(where: { $0.met == false }) { text += "\nWhere the time goes:\n\n" + issue21Shortfalls() }
        return text + "\n"
    }

    /// For the aims missed: the CPU of each side per registration and per call at the highest
    /// rate both passed, per call setup with the own generator, per posted token, where a
    /// REGISTER's instructions go, and the start-up's share of the reload.
    private func issue21Shortfalls() -> String {
        var text = ""
        if let profile, profile.instructionsPerRegister > options.profileBefore / 4 {
            let registers = Double(max(profile.registers, 1))
            let parts = profile.inclusiveCosts.prefix(4).map { "`\(Self.shortFunction($0.function))` \(Self.instructions($0.instructions / registers))" }
            text += "- **Instructions per REGISTER**: \(Self.instructions(profile.instructionsPerRegister)) against at most"
            text += " \(Self.instructions(options.profileBefore / 4)); the largest parts (inclusive, they overlap): \(parts.joined(separator: ", "))."
            text += " The profile section below names the costliest functions by their own cost.\n"
        }
        if let calls, !calls.proxyRuns.isEmpty {
            func median(_ server: String, _ value: (CallBenchmark.ProxyRun) -> Double) -> Double {
                RegisterComparison.median(calls.proxyRuns.filter { $0.server == server }.map(value))
            }
            let rouse = median("rouse", \.rate)
            let kamailio = median("kamailio", \.rate)
            if kamailio.isFinite, rouse < kamailio {
                text += "- **Call setups, own generator**: per call Rouse used \(Self.micro(median("rouse", \.serverCPUPerCall))) of CPU and PostgreSQL"
                text += " \(Self.micro(median("rouse", \.postgresCPUPerCall))) (the journey's write); Kamailio \(Self.micro(median("kamailio", \.serverCPUPerCall)))"
                text += " and \(Self.micro(median("kamailio", \.postgresCPUPerCall))). Kamailio keeps no record of a call.\n"
            }
        }
        if let posted = figures.first(where: { $0.name == "posting.keepalive.rate" })?.value, posted < 2_000,
            let perThousand = figures.first(where: { $0.name == "posting.keepalive.rouse_cpu_per_1000" })?.value, perThousand.isFinite
        {
            let busy = posted * perThousand / 1_000
            text += "- **Posted tokens**: \(Self.rate(posted))/s with Rouse at \(String(format: "%.2f", perThousand)) CPU s per 1,000 posts,"
            text += " \(String(format: "%.2f", busy)) of the machine's \(ProcessInfo.processInfo.activeProcessorCount) cores busy in Rouse's process"
            text += busy < 0.75 * Double(ProcessInfo.processInfo.activeProcessorCount)
                ? ": Rouse's CPU is not the bound. The rest of each post's time is PostgreSQL's (its statement, triggers included, and its batch's commit)"
                    + " and the generator's (one post in flight per connection).\n"
                : ": Rouse's CPU is the bound; the profile's posted-token stretch names where it goes.\n"
        }
        if let sipp {
            for ladder in ["register", "calls"] {
                let both = sipp.steps.filter { $0.ladder == ladder && $0.server == "rouse" && $0.kept }.compactMap { rouse in
                    sipp.steps.first { $0.ladder == ladder && $0.server == "kamailio.memory" && $0.offered == rouse.offered && $0.kept }.map { (rouse, $0) }
                }
                guard let pair = both.last, !(pair.0.totalMicros <= pair.1.totalMicros) else { continue }
                let (rouse, kamailio) = pair
                let what = ladder == "register" ? "registration (401 and authenticated REGISTER)" : "call (INVITE, ACK, BYE)"
                text += "- **SIPp \(ladder), \(Int(rouse.offered))/s**: per \(what) Rouse used \(Self.micro(rouse.serverMicros)) of CPU and PostgreSQL"
                text += " \(Self.micro(rouse.postgresMicros)) for it; Kamailio in memory \(Self.micro(kamailio.serverMicros)) and \(Self.micro(kamailio.postgresMicros))."
                text += rouse.serverMicros > kamailio.serverMicros
                    ? " Rouse's own process is the larger part: the profile below names its costliest functions.\n"
                    : " PostgreSQL's work for Rouse (the durable commit of each binding) is the larger part.\n"
            }
        }
        if let scale, scale.reloadFailure != nil || scale.reloadSeconds > 30 || scale.emptyStartSeconds > 10 {
            text += "- **Start-up**: with \(Self.count(scale.extensions)) extensions and no binding Rouse took \(String(format: "%.1f", scale.emptyStartSeconds)) s"
            text += " to serve SIP; with \(Self.count(scale.loaded)) bindings "
            text += scale.reloadFailure == nil ? "\(String(format: "%.1f", scale.reloadSeconds)) s." : "it did not start (the load of the bindings failed)."
            text += " The first figure is loading the extensions (their sealed HA1s); the rest is reading and indexing the bindings,"
            text += " in pages of 5,000 rows by key, each page one statement under Rouse's statement timeout (10 s).\n"
        }
        if let register, let idle = register.memory.filter({ $0.server == "rouse" }).map(\.idleBytes).max(), idle > 100 * 1_048_576 {
            text += "- **Resident memory at rest**: \(Self.mebibytes(idle)) MiB with \(Self.count(options.memoryBindings)) extensions and no binding:"
            text += " the extensions' HA1s held by the registrar and the HTTP API, and the process's own heap and libraries.\n"
        }
        return text
    }

    /// A callgrind function name without its file and its argument labels:
    /// `closure #2 in PostgresLocationStore.init` for `Storage/PostgresLocationStore.swift:closure #2 in PostgresLocationStore.init(settings:…)`.
    static func shortFunction(_ function: String) -> String {
        var name = Substring(function)
        if let file = name.range(of: ".swift:") { name = name[file.upperBound...] }
        if let arguments = name.firstIndex(of: "(") { name = name[..<arguments] }
        return cell(String(name))
    }

    func sippSection() -> String {
        guard let sipp, !sipp.steps.isEmpty else { return "" }
        var text = "## SIPp ladders\n\n"
        text += "\(sipp.sippVersion ?? "SIPp") (Debian's `sip-tester`), scenarios in `bench/sipp/`, UDP. Each step offers a fixed rate for"
        text += " \(Self.number(options.sippSeconds)) s (`-r`, `-m rate × seconds`), to the three servers in turn at each rate: **rouse** (durable:"
        text += " each binding committed with `synchronous_commit` on before the 200), **kamailio.memory** (Kamailio at its fastest: usrloc"
        text += " `db_mode` 0, HA1s in a shared-memory `htable` loaded at start) and **kamailio.durable** (`db_mode` 1 write-through, auth_db"
        text += " SELECT per REGISTER). A server that passed under 90 % of the offer or failed over 1 % is offered no higher step."
        text += " **register**: one SIPp call is one phone's registration, REGISTER → 401 → REGISTER with SIPp's `[authentication]`"
        text += " (credentials from the injection CSV) → 200, over \(Self.count(options.sippPhones)) phones in turn; CPU is per registration (two REGISTERs)."
        text += " **calls**: one SIPp registered \(Self.count(options.sippCallees)) callees through each server and answers their calls from that address;"
        text += " the caller SIPp sends INVITE → 200 → ACK → BYE → 200 through the server (which trusts loopback: no 407)."
        text += " Passed = successful calls ÷ SIPp's elapsed time; response time ="
        text += " first request → final 200 (SIPp's `-trace_rtt`). CPU µs per successful call of the server's processes, PostgreSQL's"
        text += " backends, and SIPp (both SIPps in the call ladder).\n\n"
        for ladder in ["register", "calls"] {
            let steps = sipp.steps.filter { $0.ladder == ladder }
            guard !steps.isEmpty else { continue }
            text += ladder == "register" ? "### REGISTER with digest\n\n" : "### Call setups\n\n"
            text += "| offered/s | server | passed/s | succeeded | failed | retrans. | response p50 / p99 ms | CPU µs server | PostgreSQL | server + PostgreSQL | SIPp |\n"
            text += "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
            for step in steps {
                text += "| \(Int(step.offered)) | \(step.server) | \(Self.rate(step.passed)) | \(step.succeeded) | \(step.failed) | \(step.retransmissions)"
                text += " | \(String(format: "%.1f", step.p50Milliseconds)) / \(String(format: "%.1f", step.p99Milliseconds))"
                text += " | \(Self.number(step.serverMicros.rounded())) | \(Self.number(step.postgresMicros.rounded())) | \(Self.number(step.totalMicros.rounded()))"
                text += " | \(Self.number(step.sippMicros.rounded())) |\n"
            }
            let servers = Set(steps.map(\.server)).sorted()
            text += "\nHighest rate passed: " + servers.map { "\($0) \(Self.rate(sipp.highest(ladder, $0)))/s" }.joined(separator: ", ") + ".\n\n"
        }
        return text
    }

    func scaleSection() -> String {
        guard let scale else { return "" }
        var text = "## Scale: one instance holding many bindings\n\n"
        text += "A database of its own with \(Self.count(scale.extensions)) extensions (made in \(String(format: "%.0f", scale.directorySeconds)) s)."
        text += " Rouse started with no binding; \(Self.count(options.scalePhones)) phones registered and refreshed at \(Int(options.scaleRate)) REGISTER/s"
        text += " (the bench's own generator, UDP, open loop). Then every other extension got one binding, bulk-inserted in PostgreSQL as"
        text += " copies of a binding Rouse had written (\(String(format: "%.0f", scale.insertSeconds)) s), and Rouse started again: it reloads"
        text += " every binding before it serves SIP. The phones registered again and refreshed at the same rate.\n\n"
        text += "| | no bindings | \(Self.count(scale.loaded)) bindings loaded |\n| --- | ---: | ---: |\n"
        text += "| start → serving SIP | \(String(format: "%.2f", scale.emptyStartSeconds)) s | \(String(format: "%.2f", scale.reloadSeconds)) s |\n"
        text += "| resident memory (VmRSS) | \(Self.mebibytes(scale.emptyResidentBytes)) MiB | \(Self.mebibytes(scale.fullResidentBytes)) MiB |\n"
        if let few = scale.few, let full = scale.full {
            text += "| REGISTER refreshes passed/s (offered \(Int(options.scaleRate))) | \(Self.rate(few.rate)) | \(Self.rate(full.rate)) |\n"
            text += "| REGISTER p50 / p99 / p99.9 | \(Self.micro(few.p50)) / \(Self.micro(few.p99)) / \(Self.micro(few.p999))"
            text += " | \(Self.micro(full.p50)) / \(Self.micro(full.p99)) / \(Self.micro(full.p999)) |\n"
            text += "| failed / timed out | \(few.failed) / \(few.timedOut) | \(full.failed) / \(full.timedOut) |\n"
        }
        if let failure = scale.reloadFailure {
            text += "\n**Rouse did not serve SIP with every binding to reload**: \(Self.cell(failure))\n"
        }
        text += "\nMemory per binding: \(Self.bytes(scale.perBinding)) (the growth over the instance with no binding, ÷ the bindings loaded).\n\n"
        return text
    }

    /// Adds the issue 21 parts to the report's JSON document.
    func addIssue21(to document: inout [String: Any]) {
        document["aims_issue21"] = issue21Aims().map { row -> [String: Any] in
            ["aim": row.aim, "measured": row.measured, "met": row.met.map { $0 as Any } ?? NSNull(), "verdict": row.verdict]
        }
        if let sipp {
            document["sipp"] = [
                "version": sipp.sippVersion ?? NSNull(),
                "steps": sipp.steps.map { step -> [String: Any] in
                    [
                        "ladder": step.ladder, "server": step.server, "offered_per_second": step.offered, "attempted": step.attempted,
                        "succeeded": step.succeeded, "failed": step.failed, "retransmissions": step.retransmissions,
                        "passed_per_second": Self.finite(step.passed), "response_p50_ms": Self.finite(step.p50Milliseconds),
                        "response_p99_ms": Self.finite(step.p99Milliseconds), "server_cpu_us": Self.finite(step.serverMicros),
                        "postgres_cpu_us": Self.finite(step.postgresMicros), "sipp_cpu_us": Self.finite(step.sippMicros), "kept": step.kept,
                    ]
                },
            ] as [String: Any]
        }
        if let scale {
            func run(_ run: ScaleBenchmark.Run?) -> Any {
                guard let run else { return NSNull() }
                return [
                    "bindings": run.bindings, "passed_per_second": Self.finite(run.rate), "p50_us": Self.finite(run.p50), "p99_us": Self.finite(run.p99),
                    "p999_us": Self.finite(run.p999), "sent": run.sent, "failed": run.failed, "timed_out": run.timedOut,
                ] as [String: Any]
            }
            document["scale"] = [
                "extensions": scale.extensions, "bindings": scale.bindings, "bindings_loaded": scale.loaded,
                "empty_start_seconds": Self.finite(scale.emptyStartSeconds), "reload_seconds": Self.finite(scale.reloadSeconds),
                "empty_resident_bytes": Self.finite(scale.emptyResidentBytes), "full_resident_bytes": Self.finite(scale.fullResidentBytes),
                "bytes_per_binding": Self.finite(scale.perBinding), "few": run(scale.few), "full": run(scale.full),
            ] as [String: Any]
        }
        if let profile {
            document["profile_before_after"] = [
                "before": options.profileBefore, "after": Self.finite(profile.instructionsPerRegister),
                "factor": Self.finite(options.profileBefore / profile.instructionsPerRegister),
                "invite_before": Self.finite(options.profileBeforeInvite), "invite_after": profile.invite.map { Self.finite($0.perOperation) } ?? NSNull(),
                "post_before": Self.finite(options.profileBeforePost), "post_after": profile.post.map { Self.finite($0.perOperation) } ?? NSNull(),
            ] as [String: Any]
        }
    }
}
