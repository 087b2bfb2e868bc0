import Foundation
import RouseTestSupport
import XCTest

/// The `rouse` command line as an operator meets it: help, bad settings, an unreachable database,
/// migrations.
final class CommandLineTests: XCTestCase {
    func run(_ arguments: [String], environment: [String: String] = [:]) throws -> (Int32?, String) {
        let process = try RouseProcess(arguments: arguments, environment: environment)
        let status = process.waitForExit(timeout: 60)
        return (status, process.outputText)
    }

    func testHelpListsCommandsAndEverySetting() throws {
        let (status, output) = try run(["--help"])
        XCTAssertEqual(status, 0)
        for command in ["serve", "migrate", "check-config"] { XCTAssertTrue(output.contains(command), output) }
        let (serveStatus, serveHelp) = try run(["serve", "--help"])
        XCTAssertEqual(serveStatus, 0)
        for name in ["ROUSE_DATABASE_URL", "ROUSE_SIP_LISTEN", "ROUSE_TLS_CERT", "ROUSE_TLS_KEY", "ROUSE_HTTP_LISTEN", "--sip-listen"] {
            XCTAssertTrue(serveHelp.contains(name), "serve --help lacks \(name)")
        }
    }

    func testBadSettingsStopStartWithOneMessageNamingEach() throws {
        let (status, output) = try run(
            ["serve", "--sip-listen", "sctp:1.2.3.4:5060", "--tcp-idle-timeout", "soon"],
            environment: ["ROUSE_HTTP_LISTEN": "nowhere", "ROUSE_DATABASE_URL": "host=/nonexistent"])
        XCTAssertEqual(status, 1)
        XCTAssertTrue(output.contains("invalid configuration"), output)
        XCTAssertTrue(output.contains("sip_listen"), output)
        XCTAssertTrue(output.contains("tcp_idle_timeout"), output)
        XCTAssertTrue(output.contains("http_listen"), output)
        XCTAssertFalse(output.contains("serving SIP"), output)
    }

    func testTLSListenPointWithoutCertificateIsRefused() throws {
        let (status, output) = try run(["check-config", "--sip-listen", "tls:127.0.0.1:0"])
        XCTAssertEqual(status, 1)
        XCTAssertTrue(output.contains("tls_cert"), output)
        XCTAssertTrue(output.contains("tls_key"), output)
    }

    func testUnreachableDatabaseNamesHostAndPortNotPassword() throws {
        let (status, output) = try run(
            ["serve", "--sip-listen", "udp:127.0.0.1:0"],
            environment: ["ROUSE_DATABASE_URL": "postgresql://rouse:s3cret-pw@127.0.0.1:1/rouse"])
        XCTAssertEqual(status, 1)
        XCTAssertTrue(output.contains("127.0.0.1:1"), output)
        XCTAssertFalse(output.contains("s3cret-pw"), output)
        XCTAssertEqual(output.split(separator: "\n").filter { $0.contains("127.0.0.1:1") }.count, 1, output)
    }

    func testMigrateAppliesOnceThenReportsUpToDate() throws {
        let database = try TestDatabase()
        defer { database.drop() }
        let (first, firstOutput) = try run(["migrate"], environment: ["ROUSE_DATABASE_URL": database.conninfo])
        XCTAssertEqual(first, 0, firstOutput)
        XCTAssertTrue(firstOutput.contains("applied migrations"), firstOutput)
        let (second, secondOutput) = try run(["migrate"], environment: ["ROUSE_DATABASE_URL": database.conninfo])
        XCTAssertEqual(second, 0, secondOutput)
        XCTAssertTrue(secondOutput.contains("up to date"), secondOutput)
    }

    func testUnknownCommandFails() throws {
        let (status, output) = try run(["frobnicate"])
        XCTAssertEqual(status, 2)
        XCTAssertTrue(output.contains("unknown command"), output)
    }
}
