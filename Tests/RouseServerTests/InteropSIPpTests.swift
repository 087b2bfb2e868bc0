import CallRouting
import Foundation
import Glibc
import Registrar
import RouseTestSupport
import SIPTransport
import Storage
import XCTest

/// SIPp 3.6.1 (Debian's sip-tester, installed by scripts/deps.sh) against `rouse serve` on
/// loopback, with the scenarios in `Tests/Interop/sipp`: it registers with digest, and one SIPp
/// calls another through Rouse (407 answered, 180, 200, ACK and BYE over the Record-Route; or a
/// CANCEL and its 487), over UDP and over TCP.
///
/// SIPp computes only MD5 (and AKAv1-MD5) answers, from the first challenge of a 401/407: it
/// registers with the default `digest_algorithms` (MD5 alone) and with `MD5,SHA-256`, but gives up
/// on `SHA-256,MD5` (`createAuthHeader: authentication must use MD5 or AKAv1-MD5`).
final class InteropSIPpTests: XCTestCase {
    var database: TestDatabase!
    var rouse: RouseProcess?
    var points: [ListenPoint] = []
    var workspace: URL!
    var tools: [RouseProcess] = []

    static let passwords = ["1001": "sipp-1001", "1002": "sipp-1002"]

    /// The scenarios, beside this file's folder.
    static func scenario(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Interop/sipp/\(name).xml").path
    }

    override func setUpWithError() throws {
        database = try TestDatabase()
        try Migrator.migrate(try database.connect())
        let directory = PostgresDirectory(settings: PostgresSettings(conninfo: database.conninfo))
        _ = try directory.addDomain("example.com")
        for (number, password) in Self.passwords {
            try directory.addExtension(AddressOfRecord(number: number, domain: "example.com"), password: password)
        }
        workspace = FileManager.default.temporaryDirectory.appendingPathComponent("rouse-sipp-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: workspace, withIntermediateDirectories: true)
    }

    override func tearDown() {
        for tool in tools { _ = tool.stop() }
        tools = []
        _ = rouse?.stop()
        rouse = nil
        database?.drop()
        if let workspace { try? FileManager.default.removeItem(at: workspace) }
    }

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

    /// Starts SIPp as extension `number` with `scenario` against Rouse's `transport` listen point.
    /// Its `<log>` actions go to `<name>.log` in the workspace.
    func sipp(
        _ name: String, scenario: String, number: String, transport: SIPTransportKind, arguments: [String] = []
    ) throws -> RouseProcess {
        let point = try XCTUnwrap(points.first { $0.transport == transport })
        let process = try RouseProcess(
            arguments: [
                "-sf", Self.scenario(scenario), "-m", "1", "-i", "127.0.0.1", "-p", String(try Self.freePort()),
                "-t", transport == .udp ? "u1" : "t1", "-nostdin", "-timeout", "60s", "-timeout_error",
                "-au", number, "-ap", Self.passwords[number]!, "-key", "domain", "example.com", "-key", "number", number,
                "-trace_logs", "-log_file", workspace.appendingPathComponent("\(name).log").path,
                "-trace_err", "-error_file", workspace.appendingPathComponent("\(name)-errors.log").path,
            ] + arguments + ["127.0.0.1:\(point.port)"],
            environment: [:], executable: URL(fileURLWithPath: "/usr/bin/sipp"), workingDirectory: workspace)
        tools.append(process)
        return process
    }

    /// What a SIPp run left to read when it went wrong: its screen, its errors and Rouse's log.
    func report(_ name: String, _ process: RouseProcess) -> String {
        let errors = (try? String(contentsOf: workspace.appendingPathComponent("\(name)-errors.log"), encoding: .utf8)) ?? ""
        return "SIPp \(name) said:\n\(process.outputText.suffix(3000))\nerrors:\n\(errors.suffix(3000))\nrouse said:\n\(rouse?.outputText.suffix(3000) ?? "")"
    }

    /// The lines SIPp's `<log>` actions wrote for `name`.
    func logged(_ name: String) -> [String] {
        let text = (try? String(contentsOf: workspace.appendingPathComponent("\(name).log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
    }

    func testSIPpRegistersWithTheDefaultChallengeOverUDP() throws {
        try startRouse()
        try assertRegisters(over: .udp)
    }

    func testSIPpRegistersWithTheDefaultChallengeOverTCP() throws {
        try startRouse()
        try assertRegisters(over: .tcp)
    }

    func testSIPpRegistersWhenSHA256IsOfferedAfterMD5() throws {
        try startRouse(["ROUSE_DIGEST_ALGORITHMS": "MD5,SHA-256"])
        try assertRegisters(over: .udp)
    }

    /// SIPp's register scenario must end well, and its binding be in PostgreSQL.
    func assertRegisters(over transport: SIPTransportKind) throws {
        let phone = try sipp("register", scenario: "register", number: "1001", transport: transport)
        XCTAssertEqual(phone.waitForExit(timeout: 90), 0, report("register", phone))
        let stored = try PostgresLocationStore.loadBindings(
            on: try database.connect(), for: AddressOfRecord(number: "1001", domain: "example.com"), now: Date())
        XCTAssertEqual(stored.map(\.userAgent), ["SIPp/3.6"])
        XCTAssertEqual(stored.first?.flow.transport, transport.rawValue)
    }

    func testSIPpCallIsAnsweredAndHungUpOverUDP() throws {
        try startRouse()
        try assertCall(over: .udp, hangup: "answer")
    }

    func testSIPpCallIsAnsweredAndHungUpOverTCP() throws {
        try startRouse()
        try assertCall(over: .tcp, hangup: "answer")
    }

    func testSIPpCallerCancelsAndGets487OverUDP() throws {
        try startRouse()
        try assertCall(over: .udp, hangup: "cancel")
    }

    func testSIPpCallerCancelsAndGets487OverTCP() throws {
        try startRouse()
        try assertCall(over: .tcp, hangup: "cancel")
    }

    /// 1002 registers with SIPp and takes calls with the out-of-call scenario for `hangup`; 1001
    /// calls it with SIPp. The caller's scenario must end well (its 200 and BYE, or its 487), the
    /// callee must have seen each step, and the journey must say how the call ended.
    func assertCall(over transport: SIPTransportKind, hangup: String) throws {
        let calleeScenario = hangup == "answer" ? "callee-answer" : "callee-cancel"
        let callee = try sipp(
            "callee", scenario: "register", number: "1002", transport: transport,
            arguments: ["-oocsf", Self.scenario(calleeScenario), "-d", "120000"])
        let aor = AddressOfRecord(number: "1002", domain: "example.com")
        XCTAssertTrue(
            try waitUntil { try !PostgresLocationStore.loadBindings(on: try self.database.connect(), for: aor, now: Date()).isEmpty },
            report("callee", callee))

        let caller = try sipp(
            "caller", scenario: "caller", number: "1001", transport: transport,
            arguments: ["-s", "1002", "-set", "hangup", hangup, "-d", "200"])
        XCTAssertEqual(caller.waitForExit(timeout: 90), 0, report("caller", caller) + "\n" + report("callee", callee))
        let expected = hangup == "answer" ? ["invite received", "ack received", "bye received"] : ["invite received", "cancel received", "ack received"]
        XCTAssertTrue(try waitUntil { self.logged("callee") == expected }, "callee logged \(logged("callee"))")

        var journey: CallJourney?
        XCTAssertTrue(try waitUntil {
            journey = try PostgresCalls.recent(on: try self.database.connect(), limit: 5).first { $0.outcome != .ringing }
            return journey != nil
        })
        XCTAssertEqual(journey?.callee.number, "1002")
        XCTAssertEqual(journey?.outcome, hangup == "answer" ? .answered : .canceled)
        XCTAssertEqual(journey?.finalStatus, hangup == "answer" ? 200 : 487, "what the caller was answered")
        XCTAssertEqual(journey?.branches.count, 1, "one branch: the SIPp phone")
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

    /// A port free for both UDP and TCP on 127.0.0.1 (SIPp listens on both with `-p`), as the
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
