import CallRouting
import Foundation
import Glibc
import Registrar
import RouseTestSupport
import RouseVocabulary
import SIPTransport
import Storage
import XCTest

/// What the interop tests with third-party SIP stacks share: a database with extensions 1001,
/// 1002 and 1003 of example.com, `rouse serve` on loopback, a workspace folder for the stacks' files (removed
/// afterwards; every tool gets its `HOME` and `TMPDIR` in it), SIPp runs of the scenarios in
/// `Tests/Interop/sipp`, and reads of what Rouse stored.
///
/// Threading: used from one test's thread.
final class InteropBed {
    let database: TestDatabase
    private(set) var rouse: RouseProcess?
    private(set) var points: [ListenPoint] = []
    let workspace: URL
    private let workspaceFolder: TemporaryFolder
    private var tools: [RouseProcess] = []

    static let domain = "example.com"
    static let passwords = ["1001": "interop-1001", "1002": "interop-1002", "1003": "interop-1003"]

    init() throws {
        database = try TestDatabase()
        try Migrator.migrate(try database.connect())
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain(Self.domain)
        for (number, password) in Self.passwords {
            try directory.addExtension(AddressOfRecord(number: number, domain: Self.domain), password: password)
        }
        workspaceFolder = try TemporaryFolder(prefix: "rouse-interop")
        workspace = URL(fileURLWithPath: workspaceFolder.path, isDirectory: true)
        try FileManager.default.createDirectory(at: workspace.appendingPathComponent("tmp"), withIntermediateDirectories: true)
    }

    /// Stops every tool and Rouse, drops the database and removes the workspace.
    func tearDown() {
        for tool in tools { _ = tool.stop() }
        tools = []
        _ = rouse?.stop()
        rouse = nil
        database.drop()
        workspaceFolder.remove()
    }

    /// `rouse serve` on UDP and TCP ports of 127.0.0.1, with `settings` (ROUSE_* variables).
    func startRouse(_ settings: [String: String] = [:]) throws {
        let process = try RouseProcess(
            arguments: ["serve"],
            environment: ["ROUSE_DATABASE_URL": database.conninfo, "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0,tcp:127.0.0.1:0"]
                .merging(settings) { $1 })
        rouse = process
        XCTAssertTrue(process.waitForOutput(containing: "serving SIP on"), process.outputText)
        let line = try XCTUnwrap(process.outputText.split(separator: "\n").first { $0.contains("serving SIP on") })
        points = try (line.components(separatedBy: "serving SIP on ").last ?? "").components(separatedBy: ", ")
            .map { try ListenPoint(parsing: $0) }
    }

    func port(_ transport: SIPTransportKind) throws -> UInt16 {
        try XCTUnwrap(points.first { $0.transport == transport }).port
    }

    /// `HOME` and `TMPDIR` for a tool: the workspace and its `tmp` folder, removed at `tearDown`.
    var scratchEnvironment: [String: String] {
        ["HOME": workspace.path, "TMPDIR": workspace.appendingPathComponent("tmp").path]
    }

    /// Starts a third-party program in the workspace, with `environment` added to the test's (`HOME`
    /// is the workspace and `TMPDIR` its `tmp` folder unless `environment` says otherwise); it is
    /// stopped at `tearDown` if still running. With `keepsInputOpen`, its standard input stays open
    /// for `send(_:)`.
    func launch(_ path: String, _ arguments: [String], environment: [String: String] = [:], keepsInputOpen: Bool = false) throws -> RouseProcess {
        let process = try RouseProcess(
            arguments: arguments, environment: scratchEnvironment.merging(environment) { $1 }, keepsInputOpen: keepsInputOpen,
            executable: URL(fileURLWithPath: path), workingDirectory: workspace)
        tools.append(process)
        return process
    }

    /// The scenario `name` of `Tests/Interop/sipp`.
    static func scenario(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Interop/sipp/\(name).xml").path
    }

    /// Starts SIPp as extension `number` with `scenario` against Rouse's `transport` listen point.
    /// Its `<log>` actions go to `<name>.log` in the workspace, its errors to `<name>-errors.log`.
    func sipp(_ name: String, scenario: String, number: String, transport: SIPTransportKind, arguments: [String] = []) throws -> RouseProcess {
        try launch(
            "/usr/bin/sipp",
            [
                "-sf", Self.scenario(scenario), "-m", "1", "-i", "127.0.0.1", "-p", String(try Self.freePort()),
                "-t", transport == .udp ? "u1" : "t1", "-nostdin", "-timeout", "60s", "-timeout_error",
                "-au", number, "-ap", Self.passwords[number]!, "-key", "domain", Self.domain, "-key", "number", number,
                "-trace_logs", "-log_file", workspace.appendingPathComponent("\(name).log").path,
                "-trace_err", "-error_file", workspace.appendingPathComponent("\(name)-errors.log").path,
            ] + arguments + ["127.0.0.1:\(try port(transport))"])
    }

    /// The first binding of extension `number`, once `tool` (named `name` in the failure's report,
    /// with its file `file`) has registered it.
    @discardableResult
    func registered(_ number: String, by name: String, _ tool: RouseProcess, file: String? = nil) throws -> Binding {
        XCTAssertTrue(try waitUntil { try !self.bindings(number).isEmpty }, report(name, tool, file: file))
        return try XCTUnwrap(try bindings(number).first)
    }

    /// A SIPp phone registered as `number` (1002) over `transport` that takes calls with the
    /// out-of-call scenario `scenario` (`callee-answer`, `callee-cancel`, …), logging each step to
    /// `<name>.log` (SIPp `arguments` added); returns once its binding is in PostgreSQL.
    func sippCallee(
        over transport: SIPTransportKind, scenario: String = "callee-answer", number: String = "1002", name: String = "callee",
        arguments: [String] = []
    ) throws -> RouseProcess {
        let callee = try sipp(
            name, scenario: "register", number: number, transport: transport,
            arguments: ["-oocsf", Self.scenario(scenario), "-d", "120000"] + arguments)
        try registered(number, by: "SIPp \(name)", callee, file: "\(name)-errors.log")
        return callee
    }

    /// SIPp as 1001 calls 1002 over `transport` and hangs up the `hangup` way (`answer`: BYE after
    /// `pause` ms; `cancel`: CANCEL once it rings); its scenario must end well. `callee` names the
    /// phone called, for the failure's report.
    func assertSIPpCall(over transport: SIPTransportKind, hangup: String = "answer", pause: Int = 500, callee: (String, RouseProcess)) throws {
        let caller = try sipp(
            "caller", scenario: "caller", number: "1001", transport: transport,
            arguments: ["-s", "1002", "-set", "hangup", hangup, "-d", String(pause)])
        XCTAssertEqual(
            caller.waitForExit(timeout: 90), 0,
            report("SIPp caller", caller, file: "caller-errors.log") + "\n" + report(callee.0, callee.1, file: "callee-errors.log"))
    }

    /// What a tool run left to read when it went wrong: its output, a file of its in the workspace
    /// and Rouse's log.
    func report(_ name: String, _ process: RouseProcess, file: String? = nil) -> String {
        let extra = file.flatMap { try? String(contentsOf: workspace.appendingPathComponent($0), encoding: .utf8) } ?? ""
        return "\(name) said:\n\(process.outputText.suffix(3000))\n\(extra.suffix(3000))\nrouse said:\n\(rouse?.outputText.suffix(3000) ?? "")"
    }

    /// The lines SIPp's `<log>` actions wrote for `name`.
    func logged(_ name: String) -> [String] {
        let text = (try? String(contentsOf: workspace.appendingPathComponent("\(name).log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
    }

    /// The bindings of extension `number` in PostgreSQL.
    func bindings(_ number: String) throws -> [Binding] {
        try PostgresLocationStore.loadBindings(on: try database.connect(), for: AddressOfRecord(number: number, domain: Self.domain), now: Date())
    }

    /// The journey of the first call that has ended (of extension `number`, when given, and
    /// once `extra` holds for it), waiting for it to be written.
    func endedCall(of number: String? = nil, where extra: @escaping (CallJourney) -> Bool = { _ in true }) throws -> CallJourney? {
        let aor = number.map { AddressOfRecord(number: $0, domain: Self.domain) }
        var journey: CallJourney?
        _ = try waitUntil {
            journey = try PostgresCalls.recent(on: try self.database.connect(), aor: aor, limit: 5).first { $0.outcome != .ringing && extra($0) }
            return journey != nil
        }
        return journey
    }

    /// Polls `condition` until it holds or 30 s pass.
    func waitUntil(_ condition: () throws -> Bool) throws -> Bool {
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if try condition() { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return try condition()
    }

    /// A port free for both UDP and TCP on 127.0.0.1 (SIPp and baresip listen on both), as the
    /// kernel hands one out.
    static func freePort() throws -> UInt16 {
        for _ in 0..<20 {
            let udp = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
            defer { close(udp) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(udp, $0, length) == 0 && getsockname(udp, $0, &length) == 0 }
            }
            guard bound else { continue }
            let tcp = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(tcp) }
            let tcpFree = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(tcp, $0, length) == 0 }
            }
            if tcpFree { return UInt16(bigEndian: address.sin_port) }
        }
        throw NoFreePort()
    }

    struct NoFreePort: Error {}
}
