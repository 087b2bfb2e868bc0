import Foundation
import Storage

/// The `scale` phase of `make bench` (issue 21 item 5): one Rouse instance holding many bindings.
///
/// On a database of its own, with `bindings` extensions:
/// 1. Rouse starts with every extension and no binding: the time until it serves SIP and its
///    resident memory (the "extensions, no bindings" figure);
/// 2. `phones` of them register over UDP (401, then a new binding each) with the bench's own
///    generator, and refresh at a fixed offered `rate` for `seconds`: the REGISTER p99 with few
///    bindings;
/// 3. Rouse stops; the other extensions get one binding each, bulk-inserted in PostgreSQL as
///    copies of a binding Rouse itself wrote (same contact shape, flow and expiry, its number put
///    in place), so the rows are the ones Rouse would write;
/// 4. Rouse starts again: the time to reload every binding and serve SIP, resident memory (per
///    binding: the growth over step 1 divided by the bindings), then the same phones are
///    challenged again and refresh at the same rate: the REGISTER p99 with every binding held.
///
/// Aims (issue 21): reload ≤ 30 s, resident memory ≤ 1.2 GB with 1,000,000 bindings, p99
/// unchanged. Blocks the calling thread throughout.
enum ScaleBenchmark {
    /// What to run.
    struct Settings {
        var databaseURL: String
        var rouseExecutable: String
        var bindings = 1_000_000
        var phones = 10_000
        var rate = 1_000.0
        var seconds = 8.0
    }

    /// One latency run at the fixed rate.
    struct Run: Sendable {
        var bindings: Int
        var sent: Int
        var succeeded: Int
        var failed: Int
        var timedOut: Int
        var rate: Double
        var p50: Double
        var p99: Double
        var p999: Double
    }

    /// What the phase measured.
    struct Result: Sendable {
        var extensions = 0
        var bindings = 0
        var directorySeconds = Double.nan
        var insertSeconds = Double.nan
        /// Start → serving SIP, with no binding and with every binding.
        var emptyStartSeconds = Double.nan
        var reloadSeconds = Double.nan
        /// Resident memory (VmRSS) idle with no binding, and with every binding.
        var emptyResidentBytes = Double.nan
        var fullResidentBytes = Double.nan
        var few: Run?
        var full: Run?
        /// Why Rouse did not serve SIP with every binding, if it did not.
        var reloadFailure: String?
        var notes: [String] = []
        /// Bindings Rouse loaded at its second start (every extension but the phones', which
        /// register again after it).
        var loaded = 0
        var perBinding: Double { loaded > 0 ? (fullResidentBytes - emptyResidentBytes) / Double(loaded) : .nan }
    }

    /// Why the phase could not run.
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static let domain = "scale.bench.rouse.test"
    static let password = RegisterComparison.password

    static func run(_ settings: Settings) throws -> Result {
        var result = Result()
        let count = settings.bindings
        let phones = min(settings.phones, count)
        let numbers = (0..<count).map { String(RegisterComparison.firstNumber + $0) }
        var clock = Date()
        try BenchDirectory.prepare(settings.databaseURL, domain: domain, password: password, numbers: numbers)
        try BenchDirectory.clearBindings(settings.databaseURL, domain: domain)
        result.extensions = count
        result.directorySeconds = Date().timeIntervalSince(clock)
        progress("scale: \(count) extensions in the scale database in \(String(format: "%.1f", result.directorySeconds)) s")

        let empty = try measure(settings, numbers: numbers, phones: phones, bindings: phones, holding: "\(count) extensions and no binding")
        result.emptyStartSeconds = empty.seconds
        result.emptyResidentBytes = empty.resident
        result.few = empty.run
        result.notes += empty.notes

        clock = Date()
        let inserted = try cloneBindings(settings.databaseURL)
        result.insertSeconds = Date().timeIntervalSince(clock)
        result.bindings = inserted + phones
        result.loaded = inserted
        progress("scale: \(inserted) bindings bulk-inserted in \(String(format: "%.1f", result.insertSeconds)) s (\(result.bindings) in all)")

        // What was measured so far stays in the report when Rouse cannot start with every binding.
        defer { try? BenchDirectory.clearBindings(settings.databaseURL, domain: domain) }
        do {
            let full = try measure(settings, numbers: numbers, phones: phones, bindings: result.bindings, holding: "\(inserted) bindings reloaded")
            result.reloadSeconds = full.seconds
            result.fullResidentBytes = full.resident
            result.full = full.run
            result.notes += full.notes
            progress("scale: \(Int(result.perBinding.isFinite ? result.perBinding : -1)) bytes per binding")
        } catch {
            result.reloadFailure = String(describing: error).prefix(400).trimmingCharacters(in: .whitespacesAndNewlines)
            result.notes.append("scale: rouse did not serve SIP with \(inserted) bindings to reload: \(result.reloadFailure ?? "")")
            progress("scale: rouse did not start with \(inserted) bindings: \(result.reloadFailure ?? "")")
        }
        return result
    }

    /// Starts `rouse serve` on the scale database: the seconds until it served SIP, its resident
    /// memory a second later (once what start-up freed has been given back), the latency run of
    /// the phones with `bindings` held, and the first error it logged; then stops it.
    private static func measure(_ settings: Settings, numbers: [String], phones: Int, bindings: Int, holding: String) throws -> (
        seconds: Double, resident: Double, run: Run, notes: [String]
    ) {
        let started = Date()
        let rouse = try RouseServerUnderTest(
            executable: settings.rouseExecutable, databaseURL: settings.databaseURL, environment: ["ROUSE_SIP_T1": "10ms", "ROUSE_LOG_LEVEL": "info"],
            startTimeout: 900)
        defer { rouse.stop() }
        let seconds = Date().timeIntervalSince(started)
        Thread.sleep(forTimeInterval: 1)
        let resident = rouse.child.residentBytes() ?? .nan
        progress("scale: rouse served SIP \(String(format: "%.2f", seconds)) s after start with \(holding), resident \(mebibytes(resident)) MiB")
        let stages = startStages(rouse.outputText)
        progress("scale: rouse with \(holding): \(stages)")
        let run = try latency(rouse, numbers: numbers, phones: phones, bindings: bindings, settings: settings)
        let errors = rouse.outputText.split(separator: "\n").filter { $0.contains("level=error") }
        return (
            seconds, resident, run,
            ["scale: rouse with \(holding): \(stages)"]
                + errors.prefix(1).map { "scale: rouse (\(holding)) logged \(errors.count) error line(s), the first: \($0.prefix(300))" }
        )
    }

    /// Phones `0..<phones` challenged, registered (their bindings made or refreshed), then a
    /// measured run of refreshes at the fixed rate.
    private static func latency(_ rouse: RouseServerUnderTest, numbers: [String], phones: Int, bindings: Int, settings: Settings) throws -> Run {
        guard let endpoint = rouse.endpoint(.udp) else { throw Failure(description: "rouse serves no UDP listen point") }
        // One generator at the fixed rate for the whole run: a phone's CSeq must keep rising
        // within its Call-ID, and the challenges and first registrations are paced as well.
        var configuration = RegisterLoadGenerator.Configuration(host: endpoint.host, port: endpoint.port, domain: domain, window: 64)
        configuration.rate = settings.rate
        let generator = try RegisterLoadGenerator(configuration: configuration, phones: numbers.prefix(phones).map { ($0, password) })
        let setup = Duration.milliseconds(Int64(Double(phones) / settings.rate * 1_000) + 30_000)
        _ = try generator.challengeAll(0..<phones, duration: setup)
        let registered = try generator.register(0..<phones, maxRequests: phones, duration: setup)
        guard registered.load.succeeded == phones else {
            throw Failure(description: "scale: \(registered.load.succeeded) of \(phones) phones registered (\(registered.otherStatuses(expected: 200)))")
        }
        let report = try generator.register(
            0..<phones, maxRequests: Int(settings.rate * settings.seconds),
            duration: .milliseconds(Int64(settings.seconds * 1_000) + 2_000))
        let load = report.load
        let run = Run(
            bindings: bindings, sent: load.sent, succeeded: load.succeeded, failed: load.failed, timedOut: load.timedOut,
            rate: load.seconds > 0 ? Double(load.succeeded) / load.seconds : .nan,
            p50: load.latencyMicroseconds(atPercentile: 0.5) ?? .nan, p99: load.latencyMicroseconds(atPercentile: 0.99) ?? .nan,
            p999: load.latencyMicroseconds(atPercentile: 0.999) ?? .nan)
        progress(
            "scale: \(bindings) bindings held, \(Int(settings.rate)) REGISTER/s offered: \(Int(run.rate.isFinite ? run.rate : 0))/s passed,"
                + " p50 \(Int(run.p50.isFinite ? run.p50 : -1)) µs, p99 \(Int(run.p99.isFinite ? run.p99 : -1)) µs,"
                + " p99.9 \(Int(run.p999.isFinite ? run.p999 : -1)) µs; \(load.failed) failed, \(load.timedOut) timed out")
        return run
    }

    /// One binding for every extension of the domain without one, copied from a binding Rouse
    /// wrote (the first phone's) with its number put in place in the AOR, contact and Call-ID;
    /// then the phones' own bindings are removed, so that after the restart they register anew
    /// (a new generator starts its CSeqs again) and the count ends where it was. Returns the rows
    /// inserted.
    private static func cloneBindings(_ conninfo: String) throws -> Int {
        let connection = try PostgresConnection(conninfo: conninfo)
        let template = String(RegisterComparison.firstNumber)
        // A bulk load, as an operator's restore would be: the replica triggers (one note of
        // every AOR changed, for other instances) are not for it, and no other instance runs.
        try connection.query("SET session_replication_role = replica")
        let rows = try connection.query(
            """
            WITH template AS (
                SELECT b.* FROM bindings b WHERE b.aor = $1 || '@' || $2 ORDER BY b.registered_at LIMIT 1
            ), phones AS (
                SELECT DISTINCT extension_id FROM bindings
            ), removed AS (
                DELETE FROM bindings WHERE extension_id IN (SELECT extension_id FROM phones)
            ), inserted AS (
                INSERT INTO bindings (id, extension_id, aor, contact, instance, reg_id, q, call_id, cseq, registered_at, expires_at,
                    path, user_agent, flow_transport, flow_source, flow_connection, flow_local, flow_instance)
                SELECT gen_random_uuid(), e.id, e.number || '@' || $2, replace(t.contact, $1, e.number), t.instance, t.reg_id, t.q,
                    replace(t.call_id, $1, e.number), t.cseq, t.registered_at, t.expires_at, t.path, t.user_agent, t.flow_transport,
                    t.flow_source, t.flow_connection, t.flow_local, t.flow_instance
                FROM template t, extensions e JOIN sip_domains d ON d.id = e.domain_id
                WHERE d.domain = $2 AND e.id NOT IN (SELECT extension_id FROM phones)
                RETURNING 1
            )
            SELECT count(*) FROM inserted
            """, [template, domain])
        try connection.query("ANALYZE bindings")
        guard let text = rows.rows.first?.first ?? nil, let inserted = Int(text) else {
            throw Failure(description: "scale: no binding of \(template)@\(domain) to copy")
        }
        return inserted
    }

    /// The start-up's stages as `rouse serve` logged them (`registrar.ready`): the seconds it took
    /// to load the directory and to load the bindings.
    static func startStages(_ output: String) -> String {
        guard let line = output.split(separator: "\n").first(where: { $0.contains("registrar.ready") }) else {
            return "no registrar.ready line logged"
        }
        func seconds(_ key: String) -> String {
            guard let field = line.split(separator: " ").first(where: { $0.hasPrefix(key + "=") }),
                let milliseconds = Double(field.dropFirst(key.count + 1).trimmingCharacters(in: CharacterSet(charactersIn: "\"")))
            else { return "–" }
            return String(format: "%.1f s", milliseconds / 1_000)
        }
        return "\(seconds("before_ms")) before the directory, directory loaded in \(seconds("directory_ms")), bindings in \(seconds("bindings_ms"))"
    }

    static func mebibytes(_ value: Double) -> String { value.isFinite ? String(format: "%.1f", value / 1_048_576) : "–" }
}
