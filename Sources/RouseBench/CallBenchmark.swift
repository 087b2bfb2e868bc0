import Crypto
import Foundation
import Glibc
import Push
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPTransport
import Storage

/// Calls through a real `rouse serve` (issue 6 "Speed"), with its PostgreSQL and the APNs stand-in,
/// all on loopback. Three passes, each bounded in count and in time:
///
/// 1. **Call setups through the proxy to awake phones** (`calls.proxy`): `callees` extensions each
///    have one desk-phone binding over UDP (no push parameters), all registered from one UDP socket
///    that the benchmark's `ProxyCallLoad` then answers as the phones (180 and 200 at once, 200 to
///    BYE). A second UDP socket plays the callers: INVITE from 127.0.0.1, which the child trusts
///    (`ROUSE_TRUSTED_PEERS=127.0.0.1`, so no 407 round trip), ACK of the 200 and BYE at once,
///    with `window` calls in flight (a call occupies the window from its INVITE to the answer to
///    its BYE). It reports call setups per second (INVITE sent → 200 received), setup latency
///    percentiles and Rouse's CPU per call.
/// 2. **INVITE arrival → push request on the wire** (`calls.push`): extensions whose one binding is
///    an iPhone app (`pn-provider=apns`, VoIP token) registered over TCP and then closed, so each
///    call pushes. One call at a time, after warm-up calls (the HTTP/2 connection to the stand-in
///    is open and the provider token made): from the moment the INVITE is sent (wall clock, read
///    just before the send) to the `time` the stand-in logged for the push that names the call
///    (wall clock too: one machine; the stand-in takes it when its HTTP/2 library has the whole
///    request, so the figure includes its TLS and HTTP/2 work in Python, not its checks). The
///    caller's 180, which Rouse sends as it starts the pushes, is timed too: INVITE → 180 is
///    admission (the posted-token read from PostgreSQL runs beside the pushes of a callee with a
///    registered app, not before them). Each call is then cancelled (CANCEL, 487, ACK).
/// 3. **Woken REGISTER → INVITE sent to it** (`calls.wake`): a call to an app-only extension is
///    parked in the wake wait (its push seen by the stand-in); the app registers again over a new
///    TCP connection (401, then the authenticated REGISTER) and the figure runs from sending the
///    authenticated REGISTER to receiving the INVITE on that connection. The REGISTER's own round
///    trip (to its 200) is reported beside it: Rouse answers 200 only after the binding is
///    committed in PostgreSQL (fsync on under `make bench`) and the wait ends after that commit,
///    so the difference is Rouse's own hand-off from registrar to call. Every other call the app
///    instead presents the push's wake credential (`wake_credentials` is on for the phase,
///    docs/app-builders.md "Wake in one round trip"): one REGISTER, no 401. Both are timed from
///    the first REGISTER sent to the INVITE received (`first_register_to_invite`,
///    `credential.register_to_invite`): the round trip the credential saves, on loopback.
///
/// Blocks the calling thread throughout; every client here is single-threaded, sharing the
/// machine's cores with `rouse`, PostgreSQL and the stand-in.
enum CallBenchmark {
    /// What to run.
    struct Settings {
        /// libpq conninfo of a database the benchmark may fill (`make bench` makes a fresh one).
        var databaseURL: String
        /// The `rouse` executable.
        var rouseExecutable: String
        /// Extensions with a desk phone that the proxy pass calls in turn.
        var callees = 1_000
        /// Calls in flight in the proxy pass.
        var window = 64
        /// Upper bound on the calls of the proxy pass, and on its sending time in seconds.
        var maxCalls = 20_000
        var seconds = 10.0
        /// Measured samples of the push pass and the wake pass, and their time limits.
        var pushSamples = 300
        var pushSeconds = 10.0
        var wakeSamples = 200
        var wakeSeconds = 25.0
        /// Kamailio as the proxy pass's rival (nil: Rouse alone), and runs per server (R, K, R, K).
        var kamailio: KamailioChild.Settings?
        var rounds = 2
    }

    /// One measured run of the proxy pass against one server.
    struct ProxyRun: Sendable {
        var server: String
        var round: Int
        /// Call setups (INVITE → 200 at the caller) per second, and their latency in µs.
        var rate: Double
        var p50: Double
        var p99: Double
        var p999: Double
        /// CPU µs per call of the server's processes, of PostgreSQL, and of the load generator.
        var serverCPUPerCall: Double
        var postgresCPUPerCall: Double
        var generatorCPUPerCall: Double
        var calls: Int
        var answered: Int
        var failed: Int
        var timedOut: Int
    }

    /// The wake-then-ring figures of the wake pass, in µs, per call: INVITE sent → push on the
    /// wire (out of Rouse, before the stand-in), woken REGISTER sent → its 200 and → the INVITE,
    /// and their sum, Rouse's overhead on top of the app's own wake-up.
    struct WakeTimings: Sendable {
        var inviteToPushWire: [Double] = []
        /// INVITE sent → 180 at the caller (Rouse sends it as it starts the pushes).
        var inviteToRinging: [Double] = []
        var registerToOK: [Double] = []
        var registerToInvite: [Double] = []
        var overhead: [Double] = []
        /// Digest calls: the first (unauthenticated) REGISTER sent → INVITE, the 401 round trip in.
        var firstRegisterToInvite: [Double] = []
        /// Calls whose app presented its wake credential: its one REGISTER sent → 200, → INVITE.
        var credentialRegisterToOK: [Double] = []
        var credentialRegisterToInvite: [Double] = []
    }

    /// What the phase measured: figures for the table, and the structured results the report uses.
    struct Outcome: Sendable {
        var figures: [BenchFigure] = []
        var proxyRuns: [ProxyRun] = []
        var wake: WakeTimings?
        var pushWire: [Double] = []
        var kamailioVersion: String?
        var notes: [String] = []
    }

    /// Why the benchmark could not run.
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static let domain = "calls.bench.rouse.test"
    static let password = "bench-calls-secret"
    /// The push app the stand-in accepts, and the `pn-param` that names it (RFC 8599).
    static let teamID = "DEF123GHIJ"
    static let keyID = "BENCHCALL1"
    static let topic = "com.example.app"
    static let pushParam = "DEF123GHIJ.com.example.app.voip"
    /// Extensions the push pass cycles through.
    static let pushExtensions = 50
    /// Unreported calls before each latency pass.
    static let warmUpCalls = 5

    /// Runs the passes and returns what they measured.
    static func run(_ settings: Settings) throws -> Outcome {
        // Every process of the benchmark shares these cores: other work on the machine skews it.
        let load = (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").first.map(String.init) ?? "?"
        progress("calls: \(ProcessInfo.processInfo.activeProcessorCount) cores, load average \(load) before the phase")
        let desk = (0..<settings.callees).map { String(40_000_000 + $0) }
        let pushed = (0..<pushExtensions).map { String(41_000_000 + $0) }
        let woken = (0..<(settings.wakeSamples + warmUpCalls)).map { String(42_000_000 + $0) }
        let setupStart = Date()
        try BenchDirectory.prepare(settings.databaseURL, domain: domain, password: password, numbers: desk + pushed + woken)
        if let kamailio = settings.kamailio {
            try KamailioDirectory.prepare(kamailio.databaseConninfo, domain: domain, password: password, first: 40_000_000, count: desk.count)
            try KamailioDirectory.clearLocations(kamailio.databaseConninfo)
        }
        progress("calls: \(desk.count + pushed.count + woken.count) extensions created in \(String(format: "%.1f", Date().timeIntervalSince(setupStart))) s")

        // The APNs stand-in and a push app for it (passes 2 and 3 only).
        var standIn: PushStandIn?
        var tap: PushWireTap?
        var keyFile: APNsTestKey?
        do {
            let key = try PushStandIn.makeAPNsKey()
            keyFile = key
            standIn = try PushStandIn.apns(keys: [keyID: key.keyPath], teamID: teamID, topics: [topic])
            try installPushApp(settings.databaseURL, privateKeyPEM: key.privateKeyPEM)
            if let standIn { tap = try PushWireTap(upstreamPort: UInt16(standIn.port)) }
        } catch {
            tap?.stop()
            tap = nil
            standIn?.stop()
            standIn = nil
            progress(
                "calls: push and wake passes skipped: cannot start the APNs stand-in or add its push app (\(error));"
                    + " `bash scripts/standins-venv.sh` makes the stand-ins' venv")
        }
        defer {
            tap?.stop()
            standIn?.stop()
            keyFile?.remove()
        }

        var environment = [
            "ROUSE_DATABASE_URL": settings.databaseURL,
            "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0,tcp:127.0.0.1:0",
            "ROUSE_HTTP_LISTEN": "127.0.0.1:0",
            "ROUSE_LOG_LEVEL": "warning",
            // Callers on loopback need no digest: no 407 round trip in the figures.
            "ROUSE_TRUSTED_PEERS": "127.0.0.1",
            // A parked call waits for its woken app as long as the benchmark may take.
            "ROUSE_WAKE_WAIT": "30",
            // Every other woken app of the wake pass presents its push's wake credential.
            "ROUSE_WAKE_CREDENTIALS": "true",
            "ROUSE_RING_TIMEOUT": "60",
        ]
        if let standIn, let tap {
            // Rouse reaches the stand-in through the wire tap, which notes when each push leaves.
            environment["ROUSE_APNS_PRODUCTION_URL"] = "https://127.0.0.1:\(tap.port)"
            environment["ROUSE_APNS_SANDBOX_URL"] = "https://127.0.0.1:\(tap.port)"
            environment["ROUSE_PUSH_CA_FILE"] = standIn.caFile
            environment["ROUSE_PUSH_TIMEOUT"] = "5"
        }
        let rouse = try RouseChild(executable: settings.rouseExecutable, arguments: ["serve"], environment: environment)
        defer { rouse.stop() }
        guard let line = rouse.waitForLine(containing: "serving SIP on ", timeout: 120) else {
            throw Failure(description: "rouse serve did not start:\n\(rouse.outputText)")
        }
        let points = (line.components(separatedBy: "serving SIP on ").last ?? "").components(separatedBy: ", ")
            .compactMap { try? ListenPoint(parsing: $0) }
        guard let udp = points.first(where: { $0.transport == .udp }), let tcp = points.first(where: { $0.transport == .tcp }) else {
            throw Failure(description: "rouse serve named no UDP and TCP listen points: \(line)")
        }
        progress("calls: rouse serve up on \(udp) and \(tcp) (trusted peers 127.0.0.1: INVITEs from loopback need no digest)")

        var outcome = Outcome()
        try proxyPass(settings, rouse: rouse, udp: udp, callees: desk, into: &outcome)
        if let standIn, let tap {
            let log = try StandInLog(path: standIn.requestsFile)
            try pushPass(settings, udp: udp, tcp: tcp, extensions: pushed, log: log, tap: tap, into: &outcome)
            try wakePass(settings, udp: udp, tcp: tcp, extensions: woken, log: log, tap: tap, into: &outcome)
        }
        // Rouse runs at log level warning: anything it logged is worth showing.
        let logged = rouse.outputText.split(separator: "\n").filter { $0.contains("level=warning") || $0.contains("level=error") }
        if !logged.isEmpty {
            progress("calls: rouse logged \(logged.count) warning or error line(s), the first: \(logged[0])")
        }
        let status = rouse.stop()
        if status != 0 {
            progress("calls: rouse serve exited with status \(status.map(String.init) ?? "unknown")")
        }
        return outcome
    }

    /// Replaces any APNs app for the benchmark's topic left by an earlier run with one whose key
    /// the stand-in knows.
    private static func installPushApp(_ conninfo: String, privateKeyPEM: String) throws {
        let connection = try BenchDirectory.connect(conninfo)
        let apps = PostgresPushApps(connection: connection)
        for app in try apps.all() {
            if case .apns(let credentials) = app.credentials, credentials.bundleID == topic, let id = app.id {
                _ = try apps.remove(id: id)
            }
        }
        _ = try apps.add(PushApp(credentials: .apns(APNsCredentials(
            teamID: teamID, keyID: keyID, topic: topic, privateKeyPEM: privateKeyPEM, environment: .production))))
    }

    // MARK: 1. Call setups through the proxy

    /// A server the proxy pass loads: its name, its phones and callers, and its CPU so far.
    private struct ProxyContender {
        var name: String
        var load: ProxyCallLoad
        var cpuSeconds: () -> Double?
    }

    private static func proxyPass(_ settings: Settings, rouse: RouseChild, udp: ListenPoint, callees: [String], into outcome: inout Outcome) throws {
        var contenders = [
            ProxyContender(
                name: "rouse", load: try ProxyCallLoad(host: udp.host, port: udp.port, domain: domain, password: password, callees: callees),
                cpuSeconds: { rouse.cpuSeconds() })
        ]
        var kamailio: KamailioChild?
        defer { kamailio?.stop() }
        if var rival = settings.kamailio {
            rival.databaseMode = 1
            let child = try KamailioChild(rival)
            kamailio = child
            outcome.kamailioVersion = KamailioChild.version(executable: rival.executable)
            contenders.append(
                ProxyContender(
                    name: "kamailio", load: try ProxyCallLoad(host: child.host, port: child.port, domain: domain, password: password, callees: callees),
                    cpuSeconds: { child.cpuSeconds() }))
            progress("calls: kamailio on \(child.host):\(child.port) (db_mode 1, \(rival.children) children; INVITEs from loopback need no digest)")
        }
        for contender in contenders {
            let registration = try contender.load.registerPhones(window: 64, duration: .seconds(30))
            guard registration.registered == callees.count else {
                throw Failure(
                    description: "only \(registration.registered) of \(callees.count) desk phones registered with \(contender.name)"
                        + " (\(describe(registration.others))); rouse said:\n\(rouse.outputText.suffix(2_000))"
                        + (kamailio.map { "\nkamailio said:\n\($0.outputText.suffix(2_000))" } ?? ""))
            }
            progress("calls: \(callees.count) desk phones registered with \(contender.name) over UDP from one socket (port \(contender.load.phonePort))")
        }

        let cluster = PostgresCluster(conninfo: settings.databaseURL)
        for round in 0..<max(settings.rounds, 1) {
            for contender in contenders {
                let name = "calls.proxy.window\(settings.window).\(contender.name).round\(round + 1)"
                let passStart = Date()
                let cpuBefore = contender.cpuSeconds() ?? .nan
                let postgresBefore = cluster?.cpuSeconds() ?? .nan
                let ownCPUBefore = PushBenchmark.ownCPUSeconds()
                let report = try contender.load.run(
                    window: settings.window, maxCalls: settings.maxCalls,
                    duration: .milliseconds(Int64(settings.seconds * 1_000)), timeout: .seconds(5))
                let cpu = (contender.cpuSeconds() ?? .nan) - cpuBefore
                let postgresCPU = (cluster?.cpuSeconds() ?? .nan) - postgresBefore
                let ownCPU = PushBenchmark.ownCPUSeconds() - ownCPUBefore
                let rate = report.seconds > 0 ? Double(report.answered) / report.seconds : .nan
                let setup = report.setupNanoseconds.map { Double($0) / 1_000 }
                let whole = report.callNanoseconds.map { Double($0) / 1_000 }
                let perCall = { (seconds: Double) in report.calls > 0 ? seconds / Double(report.calls) * 1e6 : .nan }
                let run = ProxyRun(
                    server: contender.name, round: round, rate: rate, p50: percentile(setup, 0.5), p99: percentile(setup, 0.99),
                    p999: percentile(setup, 0.999), serverCPUPerCall: perCall(cpu), postgresCPUPerCall: perCall(postgresCPU),
                    generatorCPUPerCall: perCall(ownCPU), calls: report.calls, answered: report.answered, failed: report.failed,
                    timedOut: report.timedOut)
                outcome.proxyRuns.append(run)
                outcome.figures += [
                    BenchFigure(name: name + ".setups_per_second", value: rate, unit: "calls/s"),
                    BenchFigure(name: name + ".setup_latency_p50", value: run.p50, unit: "µs"),
                    BenchFigure(name: name + ".setup_latency_p99", value: run.p99, unit: "µs"),
                    BenchFigure(name: name + ".setup_latency_p99.9", value: run.p999, unit: "µs"),
                    BenchFigure(name: name + ".call_p50", value: percentile(whole, 0.5), unit: "µs"),
                    BenchFigure(name: name + ".server_cpu_per_call", value: run.serverCPUPerCall, unit: "µs"),
                    BenchFigure(name: name + ".postgres_cpu_per_call", value: run.postgresCPUPerCall, unit: "µs"),
                    BenchFigure(name: name + ".load_generator_cpu_per_call", value: run.generatorCPUPerCall, unit: "µs"),
                    BenchFigure(name: name + ".calls", value: Double(report.calls), unit: "calls"),
                    BenchFigure(name: name + ".answered", value: Double(report.answered), unit: "calls"),
                    BenchFigure(name: name + ".completed", value: Double(report.completed), unit: "calls"),
                    BenchFigure(name: name + ".not_answered", value: Double(report.failed), unit: "calls"),
                    BenchFigure(name: name + ".timed_out", value: Double(report.timedOut), unit: "calls"),
                ]
                var summary = "\(name): \(Int(rate.isFinite ? rate.rounded() : 0)) call setups/s (INVITE → 200 at the caller)"
                summary += ", setup p50 \(format(run.p50)) µs, p99 \(format(run.p99)) µs"
                summary += ", p99.9 \(format(run.p999)) µs; whole call (INVITE → BYE's 200) p50 \(format(percentile(whole, 0.5))) µs"
                summary += "; CPU per call: \(contender.name) \(format(run.serverCPUPerCall)) µs, PostgreSQL \(format(run.postgresCPUPerCall)) µs"
                summary += ", the load generator \(format(run.generatorCPUPerCall)) µs"
                summary += "; \(report.calls) calls, \(report.answered) answered, \(report.completed) hung up, \(report.failed) not answered"
                summary += ", \(report.timedOut) timed out"
                if !report.statuses.isEmpty { summary += " (\(describe(report.statuses)))" }
                if report.unmatched > 0 { summary += ", \(report.unmatched) unmatched datagrams" }
                if report.sendErrors > 0 { summary += ", \(report.sendErrors) send errors" }
                summary += "; the phones got \(report.phoneInvites) INVITEs, \(report.phoneAcks) ACKs, \(report.phoneByes) BYEs"
                progress(summary)
                // Rouse writes each call's journey after it ends; waiting for the writer keeps its
                // work out of the next run.
                if contender.name == "rouse",
                    let recorded = recordedJourneys(settings.databaseURL, since: passStart, expected: report.answered + report.failed)
                {
                    outcome.figures.append(BenchFigure(name: name + ".journeys_recorded", value: Double(recorded.count), unit: "calls"))
                    progress("\(name): \(recorded.count) call journeys in PostgreSQL \(String(format: "%.1f", recorded.after)) s after the load (of \(report.answered + report.failed) ended calls)")
                }
            }
        }
    }

    /// The journeys of the proxy pass's calls (to the desk-phone extensions, since `start`) in the
    /// `calls` table, waiting up to 10 s for the journey writer to catch up with `expected`; nil
    /// when the table cannot be read.
    private static func recordedJourneys(_ conninfo: String, since start: Date, expected: Int) -> (count: Int, after: Double)? {
        guard let connection = try? PostgresConnection(conninfo: conninfo) else { return nil }
        let waitStart = Date()
        var count = 0
        while true {
            guard
                let result = try? connection.query(
                    "SELECT count(*) FROM calls WHERE aor LIKE $1 AND started_at >= to_timestamp($2::double precision)",
                    ["40%@" + domain, String(start.timeIntervalSince1970 - 1)]),
                let value = result.rows.first?.first ?? nil, let number = Int(value)
            else { return nil }
            count = number
            if count >= expected || Date().timeIntervalSince(waitStart) > 10 { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return (count, Date().timeIntervalSince(waitStart))
    }

    // MARK: 2. INVITE arrival → push request on the wire

    /// The smallest write of Rouse's to the push provider taken for a push request: an HTTP/2
    /// WINDOW_UPDATE or PING in a TLS record is under 60 bytes, a push's HEADERS and DATA well over.
    static let pushWireMinimumBytes = 100

    private static func pushPass(
        _ settings: Settings, udp: ListenPoint, tcp: ListenPoint, extensions: [String], log: StandInLog, tap: PushWireTap,
        into outcome: inout Outcome
    ) throws {
        for (index, number) in extensions.enumerated() {
            try AppPhone.registerAndClose(
                host: tcp.host, port: tcp.port, number: number, token: token(family: 0, index), instance: instance(family: 0, index))
        }
        // Rouse sees the connections close (the apps are suspended) before the first call.
        Thread.sleep(forTimeInterval: 0.3)
        progress("calls: \(extensions.count) iPhone apps registered over TCP (VoIP token, \(pushParam)) and gone quiet")

        let caller = try SequentialCaller(host: udp.host, port: udp.port, domain: domain)
        defer { caller.close() }
        let deadline = Date().addingTimeInterval(settings.pushSeconds)
        var latencies: [Double] = []
        var toWire: [Double] = []
        var toRinging: [Double] = []
        var connections: Set<Int> = []
        var missing = 0
        var notCancelled = 0
        let total = warmUpCalls + settings.pushSamples
        for call in 0..<total where Date() < deadline {
            let number = extensions[call % extensions.count]
            let callID = caller.callID(call)
            let invite = caller.script.invite(call, to: number)
            let sentAt = Date().timeIntervalSince1970
            let sentMonotonic = MonotonicClock.now()
            try caller.send(invite)
            // Watch for both the caller's 180 (sent as the pushes start) and the push itself.
            var ringingAt: Double?
            var push: StandInRequest?
            let callDeadline = Date().addingTimeInterval(5)
            while push == nil || ringingAt == nil, Date() < callDeadline {
                var progressed = false
                if ringingAt == nil, try caller.nextResponse(where: { $0.callID == callID && $0.statusCode == 180 }) != nil {
                    ringingAt = Date().timeIntervalSince1970
                    progressed = true
                }
                if push == nil, let found = log.request(containing: callID) {
                    push = found
                    progressed = true
                }
                if !progressed { usleep(100) }
            }
            guard let push else {
                missing += 1
                _ = try caller.cancel(call, to: number)
                continue
            }
            if call >= warmUpCalls {
                latencies.append((push.time - sentAt) * 1e6)
                if let wire = tap.firstChunk(after: sentMonotonic, minimumBytes: pushWireMinimumBytes, timeout: 1) {
                    toWire.append(Double(wire.at &- sentMonotonic) / 1_000)
                }
                if let ringingAt { toRinging.append((ringingAt - sentAt) * 1e6) }
                connections.insert(push.connection)
            }
            if try !caller.cancel(call, to: number) { notCancelled += 1 }
        }
        let name = "calls.push.apns_sequential"
        outcome.pushWire = toWire
        progress(
            "\(name): INVITE sent → push on the wire (out of Rouse) p50 \(format(percentile(toWire, 0.5))) µs, "
                + "p99 \(format(percentile(toWire, 0.99))) µs; INVITE sent → push request at the APNs stand-in p50 \(format(percentile(latencies, 0.5))) µs, "
                + "p99 \(format(percentile(latencies, 0.99))) µs, max \(format(latencies.max() ?? .nan)) µs "
                + "(INVITE → 180 at the caller, sent as the push starts: p50 \(format(percentile(toRinging, 0.5))) µs, "
                + "p99 \(format(percentile(toRinging, 0.99))) µs); \(latencies.count) calls "
                + "one at a time after \(warmUpCalls) warm-up calls, over \(connections.count) HTTP/2 connection(s)"
                + (missing > 0 ? "; \(missing) calls without a push within 5 s" : "")
                + (notCancelled > 0 ? "; \(notCancelled) calls not ended by CANCEL → 487" : ""))
        outcome.figures += [
            BenchFigure(name: name + ".invite_to_push_wire_p50", value: percentile(toWire, 0.5), unit: "µs"),
            BenchFigure(name: name + ".invite_to_push_wire_p99", value: percentile(toWire, 0.99), unit: "µs"),
            BenchFigure(name: name + ".invite_to_push_p50", value: percentile(latencies, 0.5), unit: "µs"),
            BenchFigure(name: name + ".invite_to_push_p99", value: percentile(latencies, 0.99), unit: "µs"),
            BenchFigure(name: name + ".invite_to_push_max", value: latencies.max() ?? .nan, unit: "µs"),
            BenchFigure(name: name + ".invite_to_ringing_p50", value: percentile(toRinging, 0.5), unit: "µs"),
            BenchFigure(name: name + ".invite_to_ringing_p99", value: percentile(toRinging, 0.99), unit: "µs"),
            BenchFigure(name: name + ".calls", value: Double(latencies.count), unit: "calls"),
            BenchFigure(name: name + ".without_push", value: Double(missing), unit: "calls"),
            BenchFigure(name: name + ".connections", value: Double(connections.count), unit: "connections"),
        ]
    }

    // MARK: 3. Woken REGISTER → INVITE

    private static func wakePass(
        _ settings: Settings, udp: ListenPoint, tcp: ListenPoint, extensions: [String], log: StandInLog, tap: PushWireTap,
        into outcome: inout Outcome
    ) throws {
        for (index, number) in extensions.enumerated() {
            try AppPhone.registerAndClose(
                host: tcp.host, port: tcp.port, number: number, token: token(family: 1, index), instance: instance(family: 1, index))
        }
        Thread.sleep(forTimeInterval: 0.3)
        progress("calls: \(extensions.count) more iPhone apps registered over TCP and gone quiet, one per woken call")

        let caller = try SequentialCaller(host: udp.host, port: udp.port, domain: domain)
        defer { caller.close() }
        let deadline = Date().addingTimeInterval(settings.wakeSeconds)
        var toInvite: [Double] = []
        var toOK: [Double] = []
        var timings = WakeTimings()
        var inviteFirst = 0
        var failures: [String] = []
        // Call numbers continue after the push pass's, so Call-IDs stay unique in the journeys.
        let first = 1_000_000
        for (index, number) in extensions.enumerated() where Date() < deadline {
            let call = first + index
            let withCredential = index % 2 == 1
            do {
                let sample = try wakeOne(
                    caller: caller, call: call, number: number, token: token(family: 1, index), instance: instance(family: 1, index),
                    tcp: tcp, log: log, tap: tap, withCredential: withCredential)
                if index >= warmUpCalls, withCredential {
                    timings.credentialRegisterToInvite.append(sample.toInvite)
                    timings.credentialRegisterToOK.append(sample.toOK)
                } else if index >= warmUpCalls {
                    timings.firstRegisterToInvite.append(sample.fromFirst)
                    toInvite.append(sample.toInvite)
                    toOK.append(sample.toOK)
                    timings.registerToInvite.append(sample.toInvite)
                    timings.registerToOK.append(sample.toOK)
                    timings.inviteToRinging.append(sample.toRinging)
                    if let wire = sample.toPushWire {
                        timings.inviteToPushWire.append(wire)
                        timings.overhead.append(wire + sample.toInvite)
                    }
                    if sample.toInvite < sample.toOK { inviteFirst += 1 }
                }
            } catch {
                failures.append("\(number): \(error)")
            }
        }
        let name = "calls.wake.tcp"
        let handOff = zip(toInvite, toOK).map { $0 - $1 }
        outcome.wake = timings
        progress(
            "\(name): Rouse's overhead on a woken call (INVITE → push on the wire, plus woken REGISTER → INVITE) p50 "
                + "\(format(percentile(timings.overhead, 0.5))) µs, p99 \(format(percentile(timings.overhead, 0.99))) µs; "
                + "INVITE → push on the wire p50 \(format(percentile(timings.inviteToPushWire, 0.5))) µs, "
                + "p99 \(format(percentile(timings.inviteToPushWire, 0.99))) µs; INVITE → 180 p50 "
                + "\(format(percentile(timings.inviteToRinging, 0.5))) µs, p99 \(format(percentile(timings.inviteToRinging, 0.99))) µs")
        progress(
            "\(name): woken REGISTER sent → INVITE received on its connection p50 \(format(percentile(toInvite, 0.5))) µs, "
                + "p99 \(format(percentile(toInvite, 0.99))) µs; the REGISTER alone (→ its 200, after the durable commit) "
                + "p50 \(format(percentile(toOK, 0.5))) µs, p99 \(format(percentile(toOK, 0.99))) µs; 200 → INVITE p50 "
                + "\(format(percentile(handOff, 0.5))) µs; \(toInvite.count) calls one at a time"
                + (inviteFirst > 0 ? ", \(inviteFirst) INVITEs before the 200" : "")
                + (failures.isEmpty ? "" : "; \(failures.count) failed, the first: \(failures[0])"))
        progress(
            "\(name): first REGISTER sent → INVITE, with digest (401 round trip in) p50 \(format(percentile(timings.firstRegisterToInvite, 0.5))) µs, "
                + "p99 \(format(percentile(timings.firstRegisterToInvite, 0.99))) µs; with the wake credential (one REGISTER) p50 "
                + "\(format(percentile(timings.credentialRegisterToInvite, 0.5))) µs, p99 \(format(percentile(timings.credentialRegisterToInvite, 0.99))) µs"
                + " (\(timings.firstRegisterToInvite.count) and \(timings.credentialRegisterToInvite.count) calls)")
        outcome.figures += [
            BenchFigure(name: name + ".first_register_to_invite_p50", value: percentile(timings.firstRegisterToInvite, 0.5), unit: "µs"),
            BenchFigure(name: name + ".first_register_to_invite_p99", value: percentile(timings.firstRegisterToInvite, 0.99), unit: "µs"),
            BenchFigure(name: name + ".credential.register_to_invite_p50", value: percentile(timings.credentialRegisterToInvite, 0.5), unit: "µs"),
            BenchFigure(name: name + ".credential.register_to_invite_p99", value: percentile(timings.credentialRegisterToInvite, 0.99), unit: "µs"),
            BenchFigure(name: name + ".credential.register_to_200_p50", value: percentile(timings.credentialRegisterToOK, 0.5), unit: "µs"),
            BenchFigure(name: name + ".credential.calls", value: Double(timings.credentialRegisterToInvite.count), unit: "calls"),
            BenchFigure(name: name + ".overhead_p50", value: percentile(timings.overhead, 0.5), unit: "µs"),
            BenchFigure(name: name + ".overhead_p99", value: percentile(timings.overhead, 0.99), unit: "µs"),
            BenchFigure(name: name + ".invite_to_push_wire_p50", value: percentile(timings.inviteToPushWire, 0.5), unit: "µs"),
            BenchFigure(name: name + ".invite_to_push_wire_p99", value: percentile(timings.inviteToPushWire, 0.99), unit: "µs"),
            BenchFigure(name: name + ".invite_to_ringing_p50", value: percentile(timings.inviteToRinging, 0.5), unit: "µs"),
            BenchFigure(name: name + ".invite_to_ringing_p99", value: percentile(timings.inviteToRinging, 0.99), unit: "µs"),
            BenchFigure(name: name + ".register_to_invite_p50", value: percentile(toInvite, 0.5), unit: "µs"),
            BenchFigure(name: name + ".register_to_invite_p99", value: percentile(toInvite, 0.99), unit: "µs"),
            BenchFigure(name: name + ".register_to_200_p50", value: percentile(toOK, 0.5), unit: "µs"),
            BenchFigure(name: name + ".register_to_200_p99", value: percentile(toOK, 0.99), unit: "µs"),
            BenchFigure(name: name + ".ok_to_invite_p50", value: percentile(handOff, 0.5), unit: "µs"),
            BenchFigure(name: name + ".calls", value: Double(toInvite.count), unit: "calls"),
            BenchFigure(name: name + ".failed", value: Double(failures.count), unit: "calls"),
        ]
    }

    /// One woken call: INVITE, its 180 (the call waits), the push at the stand-in, the app back over
    /// a new connection, answered, ACKed and hung up. Returns microseconds from sending the timed
    /// REGISTER (the authenticated one, or `withCredential` the one carrying the push's wake
    /// credential) to its 200 and to the INVITE, from the first REGISTER to the INVITE, and from
    /// sending the INVITE to the push leaving Rouse (nil when the tap saw none).
    private static func wakeOne(
        caller: SequentialCaller, call: Int, number: String, token: String, instance: String, tcp: ListenPoint, log: StandInLog,
        tap: PushWireTap, withCredential: Bool
    ) throws -> (toInvite: Double, toOK: Double, fromFirst: Double, toPushWire: Double?, toRinging: Double) {
        let callID = caller.callID(call)
        let inviteSent = MonotonicClock.now()
        try caller.send(caller.script.invite(call, to: number))
        let ringing = try caller.waitForResponse(timeout: 5) { $0.callID == callID && $0.cseq?.method == .invite && $0.statusCode >= 180 }
        let ringingAt = MonotonicClock.now()
        guard ringing.statusCode == 180 else {
            if ringing.statusCode >= 300 { try caller.send(caller.script.ackFailure(call, to: number, toHeader: ringing.headers[.to] ?? "")) }
            throw Failure(description: "the call got \(ringing.statusCode) \(ringing.reasonPhrase) instead of 180")
        }
        guard let push = log.waitForRequest(containing: callID, timeout: 5) else {
            _ = try caller.cancel(call, to: number)
            throw Failure(description: "no push within 5 s")
        }
        let wire = tap.firstChunk(after: inviteSent, minimumBytes: pushWireMinimumBytes, timeout: 1)

        let app = try AppPhone(host: tcp.host, port: tcp.port, number: number, token: token, instance: instance)
        defer { app.close() }
        let first = MonotonicClock.now()
        let start: UInt64
        if withCredential {
            guard let credential = push.jsonBody?["wake_credential"]?.stringValue else {
                throw Failure(description: "the ring push carries no wake_credential")
            }
            start = first
            try app.send(app.wakeRegister(credential: credential))
        } else {
            let authenticated = try app.challengedRegister()
            start = MonotonicClock.now()
            try app.send(authenticated)
        }
        var okAt: UInt64?
        var invite: SIPRequest?
        var inviteAt: UInt64?
        let deadline = Date().addingTimeInterval(5)
        while okAt == nil || invite == nil {
            guard Date() < deadline else { throw Failure(description: okAt == nil ? "no 200 to the woken REGISTER" : "no INVITE after the woken REGISTER") }
            guard let message = try app.receive(timeout: 1) else { continue }
            let at = MonotonicClock.now()
            switch message {
            case .response(let response) where response.cseq?.method == .register:
                guard response.statusCode == 200 else { throw Failure(description: "the woken REGISTER got \(response.statusCode)") }
                okAt = at
            case .request(let request) where request.method == .invite && request.callID == callID:
                invite = request
                inviteAt = at
            default:
                continue
            }
        }
        guard let invite, let okAt, let inviteAt else { throw Failure(description: "unreachable") }

        // Answer, and let the caller ACK and hang up through Rouse.
        try app.answer(invite)
        let ok = try caller.waitForResponse(timeout: 5) { $0.callID == callID && $0.cseq?.method == .invite && $0.statusCode >= 200 }
        guard (200..<300).contains(ok.statusCode), let dialog = BenchDialog(answer: ok) else {
            throw Failure(description: "the caller got \(ok.statusCode) instead of 200")
        }
        try caller.send(caller.script.ack(call, to: number, dialog: dialog))
        try caller.send(caller.script.bye(call, to: number, dialog: dialog))
        try app.answerBye(callID: callID)
        let byeAnswer = try caller.waitForResponse(timeout: 5) { $0.callID == callID && $0.cseq?.method == .bye && $0.statusCode >= 200 }
        guard byeAnswer.statusCode == 200 else { throw Failure(description: "BYE got \(byeAnswer.statusCode)") }
        return (
            Double(inviteAt - start) / 1_000, Double(okAt - start) / 1_000, Double(inviteAt - first) / 1_000, wire.map { Double($0.at &- inviteSent) / 1_000 },
            Double(ringingAt &- inviteSent) / 1_000
        )
    }

    // MARK: Helpers

    /// A VoIP token of 64 hex digits, unique per pass (`family`) and extension, with a prefix the
    /// stand-in answers 200 to.
    static func token(family: Int, _ index: Int) -> String {
        let hex = String(index, radix: 16)
        return "c\(family)de" + String(repeating: "0", count: max(60 - hex.count, 0)) + hex
    }

    static func instance(family: Int, _ index: Int) -> String {
        let hex = String(index, radix: 16)
        return "urn:uuid:00000000-0000-4000-8\(family)00-" + String(repeating: "0", count: max(12 - hex.count, 0)) + hex
    }

    /// The value below which `fraction` of `values` lie (nearest rank); NaN for none.
    static func percentile(_ values: [Double], _ fraction: Double) -> Double {
        guard !values.isEmpty else { return .nan }
        let sorted = values.sorted()
        let rank = Int((fraction * Double(sorted.count)).rounded(.up))
        return sorted[min(max(rank - 1, 0), sorted.count - 1)]
    }

    static func format(_ value: Double) -> String {
        value.isFinite ? String(format: "%.0f", value) : "-"
    }

    /// `480×3, 503×2`, for messages (status 0: unanswered).
    static func describe(_ statuses: [Int: Int]) -> String {
        statuses.sorted { $0.key < $1.key }.map { "\($0.key == 0 ? "no answer" : String($0.key))×\($0.value)" }.joined(separator: ", ")
    }
}

// MARK: - Messages

/// The caller side of the benchmark's calls, as bytes: INVITE (with a small SDP offer), the ACK of
/// a 2xx and BYE along the dialog's route set, CANCEL, and the ACK of a final error. Each call is
/// known by its number, carried in its Call-ID (`cb<run>-<number>@rouse-bench`) and Via branches.
/// A value; thread-safe.
struct BenchCallScript: Sendable {
    let domain: String
    /// `127.0.0.1:<port>` of the caller's socket.
    let local: String
    let run: String
    let offer: [UInt8]

    init(domain: String, localPort: UInt16) {
        self.domain = domain
        local = "127.0.0.1:\(localPort)"
        var generator = SystemRandomNumberGenerator()
        run = String(generator.next() as UInt64, radix: 36)
        offer = Self.sdp(port: 30_000 + Int(localPort % 10_000))
    }

    /// A minimal audio offer or answer, as a phone would send.
    static func sdp(port: Int) -> [UInt8] {
        Array(
            ("v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio \(port) RTP/AVP 0 8 101\r\n"
                + "a=rtpmap:0 PCMU/8000\r\na=rtpmap:8 PCMA/8000\r\na=rtpmap:101 telephone-event/8000\r\na=sendrecv\r\n").utf8)
    }

    func callID(_ call: Int) -> String { "cb\(run)-\(call)@rouse-bench" }

    /// The call number a Call-ID of this script names.
    func call(ofCallID callID: String) -> Int? {
        let prefix = "cb\(run)-"
        guard callID.hasPrefix(prefix) else { return nil }
        let rest = callID.dropFirst(prefix.count)
        guard let at = rest.firstIndex(of: "@") else { return nil }
        return Int(rest[..<at])
    }

    func invite(_ call: Int, to number: String) -> [UInt8] {
        var text = "INVITE sip:\(number)@\(domain) SIP/2.0\r\n"
        text += "Via: SIP/2.0/UDP \(local);rport;branch=z9hG4bK.cb\(run)i\(call)\r\nMax-Forwards: 70\r\n"
        text += "From: \"Bench caller\" <sip:caller@\(domain)>;tag=c\(call)\r\nTo: <sip:\(number)@\(domain)>\r\n"
        text += "Call-ID: \(callID(call))\r\nCSeq: 1 INVITE\r\nContact: <sip:caller@\(local)>\r\n"
        text += "Allow: INVITE, ACK, CANCEL, BYE, OPTIONS\r\nUser-Agent: rouse-bench\r\n"
        text += "Content-Type: application/sdp\r\nContent-Length: \(offer.count)\r\n\r\n"
        return Array(text.utf8) + offer
    }

    /// CANCEL of the call's INVITE (§9.1: same Request-URI, top Via, From, To, Call-ID, CSeq number).
    func cancel(_ call: Int, to number: String) -> [UInt8] {
        var text = "CANCEL sip:\(number)@\(domain) SIP/2.0\r\n"
        text += "Via: SIP/2.0/UDP \(local);rport;branch=z9hG4bK.cb\(run)i\(call)\r\nMax-Forwards: 70\r\n"
        text += "From: \"Bench caller\" <sip:caller@\(domain)>;tag=c\(call)\r\nTo: <sip:\(number)@\(domain)>\r\n"
        text += "Call-ID: \(callID(call))\r\nCSeq: 1 CANCEL\r\nContent-Length: 0\r\n\r\n"
        return Array(text.utf8)
    }

    /// ACK of a final error to the INVITE (§17.1.1.3): the INVITE's branch, the response's To.
    func ackFailure(_ call: Int, to number: String, toHeader: String) -> [UInt8] {
        var text = "ACK sip:\(number)@\(domain) SIP/2.0\r\n"
        text += "Via: SIP/2.0/UDP \(local);rport;branch=z9hG4bK.cb\(run)i\(call)\r\nMax-Forwards: 70\r\n"
        text += "From: \"Bench caller\" <sip:caller@\(domain)>;tag=c\(call)\r\nTo: \(toHeader)\r\n"
        text += "Call-ID: \(callID(call))\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n"
        return Array(text.utf8)
    }

    /// ACK of the 2xx, along the dialog's route set (a new transaction, §13.2.2.4).
    func ack(_ call: Int, to number: String, dialog: BenchDialog) -> [UInt8] {
        inDialog("ACK", cseq: 1, branch: "a", call, to: number, dialog: dialog)
    }

    func bye(_ call: Int, to number: String, dialog: BenchDialog) -> [UInt8] {
        inDialog("BYE", cseq: 2, branch: "b", call, to: number, dialog: dialog)
    }

    private func inDialog(_ method: String, cseq: Int, branch: String, _ call: Int, to number: String, dialog: BenchDialog) -> [UInt8] {
        var text = "\(method) \(dialog.target) SIP/2.0\r\n"
        text += "Via: SIP/2.0/UDP \(local);rport;branch=z9hG4bK.cb\(run)\(branch)\(call)\r\nMax-Forwards: 70\r\n"
        for route in dialog.routes { text += "Route: \(route)\r\n" }
        text += "From: \"Bench caller\" <sip:caller@\(domain)>;tag=c\(call)\r\nTo: <sip:\(number)@\(domain)>;tag=\(dialog.toTag)\r\n"
        text += "Call-ID: \(callID(call))\r\nCSeq: \(cseq) \(method)\r\nContent-Length: 0\r\n\r\n"
        return Array(text.utf8)
    }
}

/// What the caller keeps of a 2xx to its INVITE (RFC 3261 §12.1.2): the remote tag, the remote
/// target (the Contact URI) and the route set (Record-Route reversed).
struct BenchDialog: Sendable {
    var toTag: String
    var target: String
    var routes: [String]

    init?(answer: SIPResponse) {
        guard let tag = answer.to?.tag, let contact = answer.headers.values(.contact).first else { return nil }
        toTag = tag
        if let open = contact.firstIndex(of: "<"), let close = contact[open...].firstIndex(of: ">") {
            target = String(contact[contact.index(after: open)..<close])
        } else {
            target = String(contact.split(separator: ";").first ?? "")
        }
        routes = answer.headers.values(.recordRoute).reversed()
    }
}

/// The phone side: 180 and 200 (with an SDP answer, Record-Route copied, a Contact) to an INVITE,
/// 200 to anything else. Pure.
enum BenchPhoneAnswers {
    static let tag = "benchphone"
    static let answer = BenchCallScript.sdp(port: 40_000)

    static func ringingAndOK(_ invite: SIPRequest, contact: String) -> (ringing: [UInt8], ok: [UInt8]) {
        var ringing = SIPResponse(replyingTo: invite, statusCode: 180, toTag: tag)
        var ok = SIPResponse(replyingTo: invite, statusCode: 200, toTag: tag)
        for line in invite.headers.lines(.recordRoute) {
            ringing.headers.add(.recordRoute, line)
            ok.headers.add(.recordRoute, line)
        }
        ringing.headers.add(.contact, contact)
        ok.headers.add(.contact, contact)
        ok.headers.add(.contentType, "application/sdp")
        ok.body = answer
        return (SIPSerializer.serialize(ringing), SIPSerializer.serialize(ok))
    }

    static func ok(_ request: SIPRequest) -> [UInt8] {
        SIPSerializer.serialize(SIPResponse(replyingTo: request, statusCode: 200, toTag: tag))
    }
}

// MARK: - The proxy load

/// The load of the proxy pass: many desk phones on one non-blocking UDP socket and the callers on
/// another, both connected to Rouse's UDP port, driven by one thread that polls both.
///
/// `registerPhones` registers one desk phone per callee (401, then digest MD5 with qop=auth), each
/// with its own extension and a Contact naming the phones' socket. `run` then keeps `window` calls
/// in flight: INVITE; at its 200 the ACK and the BYE at once; the call leaves the window when the
/// BYE is answered, or a final error to the INVITE arrives (ACKed), or `timeout` passes. The phones
/// answer every INVITE with 180 and 200 at once and every BYE with 200; they ignore ACKs.
///
/// Threading: not thread-safe; every method blocks the calling thread for its whole run.
final class ProxyCallLoad {
    /// What a run measured.
    struct Report {
        /// INVITEs sent.
        var calls = 0
        /// 2xx to the INVITE (call setups), BYE answered 200 (calls hung up).
        var answered = 0
        var completed = 0
        /// A final error to the INVITE, or to the BYE.
        var failed = 0
        var timedOut = 0
        var statuses: [Int: Int] = [:]
        /// INVITE sent → 2xx received, and INVITE sent → BYE's 200 received.
        var setupNanoseconds: [UInt64] = []
        var callNanoseconds: [UInt64] = []
        /// From the first INVITE to the last 2xx.
        var seconds = 0.0
        var unmatched = 0
        var sendErrors = 0
        var phoneInvites = 0
        var phoneAcks = 0
        var phoneByes = 0
        /// Datagrams sent to the server (requests from the callers, answers from the phones).
        var sentToServer = 0
    }

    private enum Stage: UInt8 {
        case inviting, hangingUp, done
    }

    let domain: String
    let password: String
    let callees: [String]
    private let phones: UDPSocket
    private let callers: UDPSocket
    private let script: BenchCallScript
    private let registrationRun: String
    private let receiveBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 8)
    /// The call number the next run starts at: every run's Call-IDs and branches are new, so a
    /// server does not take a later run's INVITE for a retransmission of an earlier one's.
    private var nextCallNumber = 0

    var phonePort: UInt16 { phones.localPort }

    init(host: String, port: UInt16, domain: String, password: String, callees: [String]) throws(UDPLoadGenerator.Failure) {
        guard host == "127.0.0.1" else { throw .notLoopback(host) }
        self.domain = domain
        self.password = password
        self.callees = callees
        phones = try UDPSocket(connectingTo: host, port: port)
        do {
            callers = try UDPSocket(connectingTo: host, port: port)
        } catch {
            phones.close()
            throw error
        }
        script = BenchCallScript(domain: domain, localPort: callers.localPort)
        var generator = SystemRandomNumberGenerator()
        registrationRun = String(generator.next() as UInt64, radix: 36)
    }

    deinit {
        phones.close()
        callers.close()
        receiveBuffer.deallocate()
    }

    // MARK: Registering the phones

    /// Registers one desk phone per callee with `window` REGISTERs in flight; returns how many got
    /// their 200 and the other final statuses (0: no answer within 5 s).
    func registerPhones(window: Int, duration: Duration) throws(UDPLoadGenerator.Failure) -> (registered: Int, others: [Int: Int]) {
        let count = callees.count
        var pending = [Bool](repeating: false, count: count)
        var sentAt = [UInt64](repeating: 0, count: count)
        var next = 0
        var inFlight = 0
        var registered = 0
        var others: [Int: Int] = [:]
        let timeout: UInt64 = 5_000_000_000
        let end = MonotonicClock.now() &+ Self.nanoseconds(duration)
        while true {
            let now = MonotonicClock.now()
            while inFlight < window && next < count && now < end {
                guard try phones.send(register(next, cseq: 1, challenge: nil)) else { break }
                pending[next] = true
                sentAt[next] = now
                next += 1
                inFlight += 1
            }
            if inFlight == 0 && (next >= count || now >= end) { break }
            var received = 0
            while let length = try phones.receive(into: receiveBuffer) {
                received += 1
                guard case .response(let response)? = try? SIPParser.parse(UnsafeRawBufferPointer(rebasing: receiveBuffer[0..<length])),
                    let phone = registrationIndex(response.callID), phone < count, pending[phone], response.statusCode >= 200
                else { continue }
                if response.statusCode == 401, response.cseq?.number == 1, let challenge = Self.md5Challenge(response) {
                    if try phones.send(register(phone, cseq: 2, challenge: challenge)) {
                        sentAt[phone] = MonotonicClock.now()
                        continue
                    }
                }
                pending[phone] = false
                inFlight -= 1
                if response.statusCode == 200 { registered += 1 } else { others[response.statusCode, default: 0] += 1 }
            }
            if received == 0 {
                let now = MonotonicClock.now()
                for phone in 0..<next where pending[phone] && sentAt[phone] &+ timeout <= now {
                    pending[phone] = false
                    inFlight -= 1
                    others[0, default: 0] += 1
                }
                try phones.waitReadable(milliseconds: 5)
            }
        }
        return (registered, others)
    }

    private func registrationIndex(_ callID: String?) -> Int? {
        guard let callID, callID.hasPrefix("rg\(registrationRun)-"), let at = callID.firstIndex(of: "@") else { return nil }
        return Int(callID[callID.index(callID.startIndex, offsetBy: 3 + registrationRun.count)..<at])
    }

    /// REGISTER of phone `index` from the phones' socket; with `challenge` (nonce, opaque), its
    /// digest answer (MD5, qop=auth, nc=1: each phone uses its own nonce once).
    private func register(_ index: Int, cseq: Int, challenge: (nonce: String, opaque: String?)?) -> [UInt8] {
        let number = callees[index]
        let local = "127.0.0.1:\(phones.localPort)"
        var text = "REGISTER sip:\(domain) SIP/2.0\r\n"
        text += "Via: SIP/2.0/UDP \(local);rport;branch=z9hG4bK.rg\(registrationRun)p\(index)c\(cseq)\r\nMax-Forwards: 70\r\n"
        text += "From: <sip:\(number)@\(domain)>;tag=r\(index)\r\nTo: <sip:\(number)@\(domain)>\r\n"
        text += "Call-ID: rg\(registrationRun)-\(index)@rouse-bench\r\nCSeq: \(cseq) REGISTER\r\n"
        text += "Contact: <sip:\(number)@\(local)>\r\nExpires: 3600\r\nUser-Agent: RouseBenchDeskPhone/1\r\n"
        if let challenge {
            text += "Authorization: " + Self.digest(number: number, password: password, realm: domain, challenge: challenge) + "\r\n"
        }
        text += "Content-Length: 0\r\n\r\n"
        return Array(text.utf8)
    }

    /// The nonce and opaque of the MD5 offer of a 401.
    static func md5Challenge(_ response: SIPResponse) -> (nonce: String, opaque: String?)? {
        for line in response.headers.lines(.wwwAuthenticate) {
            let fields = TestDigest.parameters(of: line)
            // No algorithm means MD5 (RFC 2617 §3.2.1), as Kamailio offers it.
            if (fields["algorithm"]?.uppercased() ?? "MD5") == "MD5", let nonce = fields["nonce"] { return (nonce, fields["opaque"]) }
        }
        return nil
    }

    /// An Authorization value for REGISTER to `sip:realm` (RFC 7616, MD5, qop=auth, nc=1).
    static func digest(number: String, password: String, realm: String, challenge: (nonce: String, opaque: String?)) -> String {
        let cnonce = "rb" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        let ha1 = Digest.hex(.md5, "\(number):\(realm):\(password)")
        let ha2 = Digest.hex(.md5, "REGISTER:sip:\(realm)")
        let response = Digest.hex(.md5, "\(ha1):\(challenge.nonce):00000001:\(cnonce):auth:\(ha2)")
        var value = "Digest username=\"\(number)\", realm=\"\(realm)\", nonce=\"\(challenge.nonce)\", uri=\"sip:\(realm)\""
        value += ", response=\"\(response)\", algorithm=MD5, cnonce=\"\(cnonce)\", qop=auth, nc=00000001"
        if let opaque = challenge.opaque { value += ", opaque=\"\(opaque)\"" }
        return value
    }

    // MARK: Calls

    /// Places calls to the callees in turn, `window` at a time, until `maxCalls` are placed or
    /// `duration` passes, then waits for those in flight (each at most `timeout` from its INVITE).
    func run(window: Int, maxCalls: Int, duration: Duration, timeout: Duration) throws(UDPLoadGenerator.Failure) -> Report {
        var report = Report()
        let base = nextCallNumber
        var stage: [Stage] = []
        var inviteAt: [UInt64] = []
        stage.reserveCapacity(min(maxCalls, 1 << 20))
        inviteAt.reserveCapacity(min(maxCalls, 1 << 20))
        report.setupNanoseconds.reserveCapacity(min(maxCalls, 1 << 20))
        report.callNanoseconds.reserveCapacity(min(maxCalls, 1 << 20))
        var inFlight = 0
        var oldest = 0
        let timeoutNanoseconds = Self.nanoseconds(timeout)
        let start = MonotonicClock.now()
        let sendUntil = start &+ Self.nanoseconds(duration)
        var lastSetup = start
        let phoneContactPrefix = "127.0.0.1:\(phones.localPort)>"
        func send(_ socket: UDPSocket, _ bytes: [UInt8]) throws(UDPLoadGenerator.Failure) -> Bool {
            guard try socket.send(bytes) else { return false }
            report.sentToServer += 1
            return true
        }

        while true {
            let now = MonotonicClock.now()
            let sending = stage.count < maxCalls && now < sendUntil
            if !sending && inFlight == 0 { break }
            var blockedSending = false
            if sending {
                while inFlight < window && stage.count < maxCalls {
                    let call = stage.count
                    let bytes = script.invite(base + call, to: callees[call % callees.count])
                    let sentAt = MonotonicClock.now()
                    guard try send(callers, bytes) else {
                        report.sendErrors += 1
                        blockedSending = true
                        break
                    }
                    stage.append(.inviting)
                    inviteAt.append(sentAt)
                    inFlight += 1
                }
            }

            var handled = 0
            // The phones: answer what Rouse forks to them.
            while let length = try phones.receive(into: receiveBuffer) {
                handled += 1
                guard case .request(let request)? = try? SIPParser.parse(UnsafeRawBufferPointer(rebasing: receiveBuffer[0..<length]))
                else { continue }
                switch request.method {
                case .invite:
                    report.phoneInvites += 1
                    let answers = BenchPhoneAnswers.ringingAndOK(request, contact: "<sip:\(request.uri.user ?? "phone")@\(phoneContactPrefix)")
                    if try !send(phones, answers.ringing) { report.sendErrors += 1 }
                    if try !send(phones, answers.ok) { report.sendErrors += 1 }
                case .ack:
                    report.phoneAcks += 1
                case .bye:
                    report.phoneByes += 1
                    if try !send(phones, BenchPhoneAnswers.ok(request)) { report.sendErrors += 1 }
                default:
                    if try !send(phones, BenchPhoneAnswers.ok(request)) { report.sendErrors += 1 }
                }
            }
            // The callers: setups, then hang-ups.
            while let length = try callers.receive(into: receiveBuffer) {
                handled += 1
                let at = MonotonicClock.now()
                guard case .response(let response)? = try? SIPParser.parse(UnsafeRawBufferPointer(rebasing: receiveBuffer[0..<length])),
                    let callID = response.callID, let number = script.call(ofCallID: callID), number >= base,
                    case let call = number - base, call < stage.count,
                    let cseq = response.cseq
                else {
                    report.unmatched += 1
                    continue
                }
                let status = response.statusCode
                guard status >= 200 else { continue }
                let callee = callees[call % callees.count]
                switch (cseq.method, stage[call]) {
                case (.invite, .inviting):
                    if (200..<300).contains(status), let dialog = BenchDialog(answer: response) {
                        report.answered += 1
                        report.setupNanoseconds.append(at &- inviteAt[call])
                        lastSetup = at
                        if try !send(callers, script.ack(base + call, to: callee, dialog: dialog)) { report.sendErrors += 1 }
                        if try !send(callers, script.bye(base + call, to: callee, dialog: dialog)) { report.sendErrors += 1 }
                        stage[call] = .hangingUp
                    } else {
                        if status >= 300 {
                            _ = try send(callers, script.ackFailure(base + call, to: callee, toHeader: response.headers[.to] ?? ""))
                        }
                        report.statuses[status, default: 0] += 1
                        report.failed += 1
                        stage[call] = .done
                        inFlight -= 1
                    }
                case (.invite, _):
                    // A retransmitted final answer: an error is ACKed again, a 2xx was ACKed already.
                    if status >= 300 {
                        _ = try send(callers, script.ackFailure(base + call, to: callee, toHeader: response.headers[.to] ?? ""))
                    }
                case (.bye, .hangingUp):
                    if status == 200 {
                        report.completed += 1
                        report.callNanoseconds.append(at &- inviteAt[call])
                    } else {
                        report.statuses[status, default: 0] += 1
                        report.failed += 1
                    }
                    stage[call] = .done
                    inFlight -= 1
                default:
                    report.unmatched += 1
                }
            }

            let afterReceiving = MonotonicClock.now()
            while oldest < stage.count {
                if stage[oldest] != .done {
                    guard inviteAt[oldest] &+ timeoutNanoseconds <= afterReceiving else { break }
                    stage[oldest] = .done
                    inFlight -= 1
                    report.timedOut += 1
                }
                oldest += 1
            }
            // Wait only when there is nothing to do until an answer arrives or a deadline passes.
            if handled == 0 && (blockedSending || inFlight >= window || !sending) && (sending || inFlight > 0) {
                var wait: UInt64 = 10_000_000
                if oldest < stage.count {
                    let due = inviteAt[oldest] &+ timeoutNanoseconds
                    wait = min(wait, due > afterReceiving ? due - afterReceiving : 0)
                }
                if sending { wait = min(wait, sendUntil > afterReceiving ? sendUntil - afterReceiving : 0) }
                try waitForEither(milliseconds: Int32(min(max((wait + 999_999) / 1_000_000, 1), 10)))
            }
        }
        report.calls = stage.count
        nextCallNumber = base + stage.count
        report.seconds = Double(max(lastSetup, start) &- start) / 1e9
        return report
    }

    /// Blocks until the phones' or the callers' socket has a datagram, or `milliseconds` pass.
    private func waitForEither(milliseconds: Int32) throws(UDPLoadGenerator.Failure) {
        var entries = [
            pollfd(fd: phones.descriptor, events: Int16(POLLIN), revents: 0),
            pollfd(fd: callers.descriptor, events: Int16(POLLIN), revents: 0),
        ]
        if poll(&entries, 2, milliseconds) < 0 && errno != EINTR { throw .socket(call: "poll", errno: errno) }
    }

    static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(max(seconds, 0)) * 1_000_000_000 + UInt64(max(attoseconds, 0) / 1_000_000_000)
    }
}

// MARK: - One call at a time

/// A caller for the sequential passes: one non-blocking UDP socket connected to Rouse, sending
/// `BenchCallScript` messages and waiting (polling, with deadlines) for the responses it needs;
/// responses it is not waiting for are dropped. Not thread-safe.
final class SequentialCaller {
    let socket: UDPSocket
    let script: BenchCallScript
    private let receiveBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 8)

    init(host: String, port: UInt16, domain: String) throws(UDPLoadGenerator.Failure) {
        guard host == "127.0.0.1" else { throw .notLoopback(host) }
        socket = try UDPSocket(connectingTo: host, port: port)
        script = BenchCallScript(domain: domain, localPort: socket.localPort)
    }

    deinit {
        receiveBuffer.deallocate()
    }

    func close() {
        socket.close()
    }

    func callID(_ call: Int) -> String { script.callID(call) }

    func send(_ bytes: [UInt8]) throws {
        let deadline = Date().addingTimeInterval(1)
        while try !socket.send(bytes) {
            guard Date() < deadline else { throw CallBenchmark.Failure(description: "the caller's socket refused to send for 1 s") }
            try socket.waitReadable(milliseconds: 1)
        }
    }

    /// The first response matching `predicate` within `timeout` seconds.
    func waitForResponse(timeout: TimeInterval, where predicate: (SIPResponse) -> Bool) throws -> SIPResponse {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            while let length = try socket.receive(into: receiveBuffer) {
                if case .response(let response)? = try? SIPParser.parse(UnsafeRawBufferPointer(rebasing: receiveBuffer[0..<length])),
                    predicate(response)
                {
                    return response
                }
            }
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { throw CallBenchmark.Failure(description: "no matching response within \(timeout) s") }
            try socket.waitReadable(milliseconds: Int32(min(max(left * 1_000, 1), 100)))
        }
    }

    /// The first waiting response matching `predicate`, without waiting; the others read before
    /// it are dropped.
    func nextResponse(where predicate: (SIPResponse) -> Bool) throws -> SIPResponse? {
        while let length = try socket.receive(into: receiveBuffer) {
            if case .response(let response)? = try? SIPParser.parse(UnsafeRawBufferPointer(rebasing: receiveBuffer[0..<length])),
                predicate(response)
            {
                return response
            }
        }
        return nil
    }

    /// CANCELs the call and ACKs the INVITE's final answer; true when that answer was 487.
    func cancel(_ call: Int, to number: String) throws -> Bool {
        let callID = script.callID(call)
        try send(script.cancel(call, to: number))
        let final = try waitForResponse(timeout: 5) { $0.callID == callID && $0.cseq?.method == .invite && $0.statusCode >= 200 }
        if final.statusCode >= 300 {
            try send(script.ackFailure(call, to: number, toHeader: final.headers[.to] ?? ""))
        } else if let dialog = BenchDialog(answer: final) {
            try send(script.ack(call, to: number, dialog: dialog))
            try send(script.bye(call, to: number, dialog: dialog))
        }
        return final.statusCode == 487
    }
}

/// An iPhone app over TCP (RFC 8599 `pn-*` and RFC 5626 `+sip.instance` in its Contact): registers
/// with digest (401, then MD5 with qop=auth), answers an INVITE with 180 and 200 and a BYE with
/// 200. Each value is one connection. Not thread-safe.
final class AppPhone {
    let number: String
    let token: String
    let instance: String
    private let client: TestSIPClient
    private let callID: String
    private var cseq = 0

    init(host: String, port: UInt16, number: String, token: String, instance: String) throws {
        client = try TestSIPClient(transport: .tcp, host: host, port: port)
        self.number = number
        self.token = token
        self.instance = instance
        callID = "ra" + String(UInt64.random(in: 0...UInt64.max), radix: 36) + "@rouse-bench"
    }

    func close() {
        client.close()
    }

    /// Registers (401, then credentials) and closes the connection: the app is suspended.
    static func registerAndClose(host: String, port: UInt16, number: String, token: String, instance: String) throws {
        let app = try AppPhone(host: host, port: port, number: number, token: token, instance: instance)
        defer { app.close() }
        try app.send(try app.challengedRegister())
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            guard case .response(let response)? = try app.receive(timeout: 1), response.cseq?.method == .register else { continue }
            guard response.statusCode == 200 else {
                throw CallBenchmark.Failure(description: "the app of \(number) could not register: \(response.statusCode) \(response.reasonPhrase)")
            }
            return
        }
        throw CallBenchmark.Failure(description: "the app of \(number) got no answer to its REGISTER")
    }

    /// Sends a REGISTER without credentials and returns the authenticated one answering its 401
    /// (not sent yet, so the caller can time it).
    func challengedRegister() throws -> [UInt8] {
        try send(register(authorization: nil))
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            guard case .response(let response)? = try receive(timeout: 1), response.cseq?.method == .register, response.statusCode >= 200 else {
                continue
            }
            guard response.statusCode == 401, let challenge = ProxyCallLoad.md5Challenge(response) else {
                throw CallBenchmark.Failure(description: "REGISTER of \(number) got \(response.statusCode) instead of 401")
            }
            return register(
                authorization: ProxyCallLoad.digest(number: number, password: CallBenchmark.password, realm: CallBenchmark.domain, challenge: challenge))
        }
        throw CallBenchmark.Failure(description: "no 401 to the REGISTER of \(number)")
    }

    /// The woken app's one REGISTER, carrying its push's wake credential instead of digest.
    func wakeRegister(credential: String) -> [UInt8] {
        register(authorization: nil, wakeCredential: credential)
    }

    private func register(authorization: String?, wakeCredential: String? = nil) -> [UInt8] {
        cseq += 1
        let domain = CallBenchmark.domain
        let local = "127.0.0.1:\(client.localPort)"
        var text = "REGISTER sip:\(domain) SIP/2.0\r\n"
        text += "Via: SIP/2.0/TCP \(local);rport;branch=z9hG4bK.ra\(String(UInt64.random(in: 0...UInt64.max), radix: 36))\r\n"
        text += "Max-Forwards: 70\r\nFrom: <sip:\(number)@\(domain)>;tag=a\(client.localPort)\r\nTo: <sip:\(number)@\(domain)>\r\n"
        text += "Call-ID: \(callID)\r\nCSeq: \(cseq) REGISTER\r\n"
        text += "Contact: <sip:\(number)@\(local);transport=tcp;ob;pn-provider=apns;pn-prid=\(token);pn-param=\(CallBenchmark.pushParam)>"
        text += ";+sip.instance=\"<\(instance)>\";reg-id=1\r\n"
        text += "Supported: outbound\r\nExpires: 3600\r\nUser-Agent: RouseBenchApp/1 (iPhone)\r\n"
        if let authorization { text += "Authorization: \(authorization)\r\n" }
        if let wakeCredential { text += "X-Rouse-Wake: \(wakeCredential)\r\n" }
        text += "Content-Length: 0\r\n\r\n"
        return Array(text.utf8)
    }

    func send(_ bytes: [UInt8]) throws {
        try client.send(bytes)
    }

    /// The next whole message, parsed; nil when none arrives within `timeout` seconds.
    func receive(timeout: TimeInterval) throws -> SIPMessage? {
        guard let bytes = try client.receive(timeout: .milliseconds(Int64(timeout * 1_000))) else { return nil }
        return try? SIPParser.parse(bytes)
    }

    /// 180 and 200 to `invite`, over this connection.
    func answer(_ invite: SIPRequest) throws {
        let answers = BenchPhoneAnswers.ringingAndOK(invite, contact: "<sip:\(number)@127.0.0.1:\(client.localPort);transport=tcp>")
        try send(answers.ringing)
        try send(answers.ok)
    }

    /// Waits for the BYE of the call (skipping its ACK) and answers 200.
    func answerBye(callID: String) throws {
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            guard case .request(let request)? = try receive(timeout: 1), request.callID == callID, request.method == .bye else { continue }
            try send(BenchPhoneAnswers.ok(request))
            return
        }
        throw CallBenchmark.Failure(description: "no BYE reached the app of \(number)")
    }
}

/// Reads the APNs stand-in's request log (`requests.jsonl`) as it grows, decoding only new lines.
/// Not thread-safe.
final class StandInLog {
    private let handle: FileHandle
    private var partial = Data()
    private var seen: [StandInRequest] = []

    init(path: String) throws {
        if !FileManager.default.fileExists(atPath: path) { _ = FileManager.default.createFile(atPath: path, contents: nil) }
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw CallBenchmark.Failure(description: "cannot read the stand-in's log \(path)")
        }
        self.handle = handle
    }

    deinit {
        try? handle.close()
    }

    /// Requests logged since the last call.
    func newRequests() -> [StandInRequest] {
        let data = handle.readDataToEndOfFile()
        guard !data.isEmpty else { return [] }
        partial.append(data)
        var found: [StandInRequest] = []
        let decoder = JSONDecoder()
        while let newline = partial.firstIndex(of: UInt8(ascii: "\n")) {
            let line = partial[partial.startIndex..<newline]
            if let request = try? decoder.decode(StandInRequest.self, from: Data(line)) { found.append(request) }
            partial = Data(partial[partial.index(after: newline)...])
        }
        seen += found
        return found
    }

    /// The latest logged request whose body contains `text` (a Call-ID), if one is logged yet.
    func request(containing text: String) -> StandInRequest? {
        _ = newRequests()
        return seen.last(where: { $0.body.contains(text) })
    }

    /// The first logged request whose body contains `text`, waiting up to `timeout` seconds
    /// (polling every 0.1 ms).
    func waitForRequest(containing text: String, timeout: TimeInterval) -> StandInRequest? {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let match = request(containing: text) { return match }
            guard Date() < deadline else { return nil }
            usleep(100)
        }
    }
}
