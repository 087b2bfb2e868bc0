import Foundation
import Registrar
import RouseTestSupport
import Storage
import XCTest

/// A property-based run of Rouse's own OpenAPI document (issue 5 item 7): `rouse serve` on a fresh
/// database with one extension and one administrator, and schemathesis (from
/// Tests/PropertyTests/requirements.txt, in the venv scripts/property-venv.sh makes) generating
/// requests for every operation of GET /api/v1/openapi.json and checking each answer against the
/// document: no 5xx, only documented status codes and content types, bodies matching their schemas.
///
/// Bounded: a few examples per operation, a fixed seed (the same run each time, so a failure
/// reproduces), and a timeout on the schemathesis process. ROUSE_PROPERTY_SEED and
/// ROUSE_PROPERTY_EXAMPLES override the seed and the examples per operation for a longer hunt.
final class OpenAPIPropertyTests: XCTestCase {
    var database: TestDatabase!
    var rouse: RouseProcess?
    var port: UInt16 = 0
    let admin = ("prop-admin", "prop-admin-pw")
    let extensionUser = ("1001@example.com", "s3cret-1001")

    /// The checkout this file was compiled from: Tests/RouseServerTests/OpenAPIPropertyTests.swift.
    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    override func setUpWithError() throws {
        database = try TestDatabase()
        let connection = try database.connect()
        try Migrator.migrate(connection)
        try PostgresAdmins.add(name: admin.0, password: admin.1, on: connection)
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        try directory.addExtension(AddressOfRecord(number: "1001", domain: "example.com"), password: extensionUser.1)
        let process = try RouseProcess(
            arguments: ["serve"],
            environment: [
                "ROUSE_DATABASE_URL": database.conninfo,
                "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0",
                "ROUSE_HTTP_LISTEN": "127.0.0.1:0",
                // Generated requests with wrong or missing credentials are many; the run must not
                // get its own address blocked (429) part way through.
                "ROUSE_AUTH_FAILURE_LIMIT": "1000000",
                // No push request may leave the machine: every push host is a closed loopback port
                // (and the test-push operation, which could reach an FCM token URI, is left out).
                "ROUSE_APNS_PRODUCTION_URL": "https://127.0.0.1:9",
                "ROUSE_APNS_SANDBOX_URL": "https://127.0.0.1:9",
                "ROUSE_FCM_URL": "https://127.0.0.1:9",
                "ROUSE_PUSH_TIMEOUT": "1",
                "ROUSE_LOG_LEVEL": "warning",
            ])
        rouse = process
        XCTAssertTrue(process.waitForOutput(containing: "serving HTTP on"), process.outputText)
        let line = try XCTUnwrap(process.outputText.split(separator: "\n").first { $0.contains("serving HTTP on") })
        let address = line.components(separatedBy: "serving HTTP on ").last ?? ""
        port = try XCTUnwrap(address.split(separator: ":").last.flatMap { UInt16($0) })
    }

    override func tearDown() {
        XCTAssertEqual(rouse?.stop(), 0)
        rouse = nil
        database?.drop()
    }

    /// The venv's schemathesis, made or checked by scripts/property-venv.sh.
    func schemathesis() throws -> String {
        let python = try RouseProcess.venvPython(script: "property-venv.sh", repositoryRoot: Self.repositoryRoot)
        let tool = (python as NSString).deletingLastPathComponent + "/schemathesis"
        guard FileManager.default.isExecutableFile(atPath: tool) else {
            return try XCTUnwrap(nil, "no schemathesis in the venv (scripts/property-venv.sh printed \(python))")
        }
        return tool
    }

    func testEveryOperationAnswersAsTheDocumentSays() throws {
        let tool = try schemathesis()
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("rouse-schemathesis-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let log = work.appendingPathComponent("output")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let handle = try FileHandle(forWritingTo: log)

        // Credentials per security scheme of the document: the admin routes get the
        // administrator's, the push routes the extension's (one --auth would send the admin's to both).
        let config = work.appendingPathComponent("schemathesis.toml")
        try Data("""
            [auth.openapi.adminBasic]
            username = "\(admin.0)"
            password = "\(admin.1)"

            [auth.openapi.extensionBasic]
            username = "\(extensionUser.0)"
            password = "\(extensionUser.1)"

            """.utf8).write(to: config)

        // ROUSE_PROPERTY_SEED and ROUSE_PROPERTY_EXAMPLES explore beyond the fixed run by hand.
        var environment = ProcessInfo.processInfo.environment
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = [
            "--config-file", config.path,
            "run", "http://127.0.0.1:\(port)/api/v1/openapi.json",
            "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
            "--max-examples", environment["ROUSE_PROPERTY_EXAMPLES"] ?? "25",
            "--seed", environment["ROUSE_PROPERTY_SEED"] ?? "7",
            "--workers", "1",
            "--request-timeout", "10",
            // A test push goes to a push host, and for FCM first to the token URI of the app's
            // service account, which no setting keeps on this machine; its 400 and 404 answers
            // are checked in AdminAPITests (no generated app gets past key validation anyway).
            "--exclude-path", "/api/v1/admin/push-apps/{id}/test",
        ]
        // A scratch working directory: schemathesis writes its .hypothesis database and any
        // reports there; its home and temporary files go there too.
        process.currentDirectoryURL = work
        let scratch = work.appendingPathComponent("tmp")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        environment["HOME"] = work.path
        environment["TMPDIR"] = scratch.path
        environment["NO_COLOR"] = "1"
        environment["COLUMNS"] = "120"
        process.environment = environment
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(120)
        while process.isRunning, Date() < deadline { Thread.sleep(forTimeInterval: 0.1) }
        let timedOut = process.isRunning
        if timedOut {
            process.terminate()
            process.waitUntilExit()
        }
        try handle.close()
        let output = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        // Its report (warnings, operations, test cases) goes to the test log either way.
        print(output)
        XCTAssertFalse(timedOut, "schemathesis ran past its timeout:\n\(output)")
        XCTAssertEqual(process.terminationStatus, 0, output)
    }
}
