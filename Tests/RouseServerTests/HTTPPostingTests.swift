import Foundation
import Registrar
import RouseTestSupport
import Storage
import XCTest

/// `rouse serve` with its HTTP API on a free port: an app posts and deletes its token with the
/// extension's credentials, `rouse registrations` shows the posted token, `/health` answers.
final class HTTPPostingTests: XCTestCase {
    var database: TestDatabase!
    var rouse: RouseProcess?
    var port: UInt16 = 0

    override func setUpWithError() throws {
        database = try TestDatabase()
        try Migrator.migrate(try database.connect())
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        try directory.addExtension(AddressOfRecord(number: "1001", domain: "example.com"), password: "s3cret-1001")
        let process = try RouseProcess(
            arguments: ["serve"],
            environment: [
                "ROUSE_DATABASE_URL": database.conninfo,
                "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0",
                "ROUSE_HTTP_LISTEN": "127.0.0.1:0",
            ])
        rouse = process
        XCTAssertTrue(process.waitForOutput(containing: "serving HTTP on"), process.outputText)
        let lines = process.outputText.split(separator: "\n")
        XCTAssertNotNil(lines.first { $0.contains("serving SIP on udp:127.0.0.1:") }, process.outputText)
        let line = try XCTUnwrap(lines.first { $0.contains("serving HTTP on") })
        let address = line.components(separatedBy: "serving HTTP on ").last ?? ""
        XCTAssertTrue(address.hasPrefix("127.0.0.1:"), address)
        port = try XCTUnwrap(address.split(separator: ":").last.flatMap { UInt16($0) })
        XCTAssertNotEqual(port, 0)
    }

    override func tearDown() {
        XCTAssertEqual(rouse?.stop(), 0)
        rouse = nil
        database?.drop()
    }

    func registrations() throws -> String {
        let process = try RouseProcess(
            arguments: ["registrations", "1001@example.com"], environment: ["ROUSE_DATABASE_URL": database.conninfo])
        XCTAssertEqual(process.waitForExit(), 0, process.outputText)
        return process.outputText
    }

    func testAnAppPostsAndDeletesItsTokenAndHealthAnswers() throws {
        let http = try TestHTTPClient(port: port)
        let auth = ("Authorization", TestHTTPClient.basic("1001@example.com", "s3cret-1001"))
        let token = "0123456789ABCDEF0123456789ABCDEF"
        let body = Data(#"{"token": "\#(token)", "sipUser": "1001@example.com", "platform": "ios"}"#.utf8)
        let stored = try http.send("POST", "/api/v1/push/register", headers: [auth, ("Content-Type", "application/json")], body: body)
        XCTAssertEqual(stored.status, 200, String(decoding: stored.body, as: UTF8.self))
        XCTAssertEqual(stored.json["status"] as? String, "stored")

        let shown = try registrations()
        XCTAssertTrue(shown.contains("can be woken by push (posted):"), shown)
        XCTAssertTrue(shown.contains("1001@example.com  push apns / 01234567…cdef / - / voip"), shown)

        let wrong = try http.send(
            "POST", "/api/v1/push/register", headers: [("Authorization", TestHTTPClient.basic("1001@example.com", "nope"))], body: body)
        XCTAssertEqual(wrong.status, 401)
        XCTAssertEqual(wrong.header("WWW-Authenticate"), "Basic realm=\"rouse\"")

        let health = try http.send("GET", "/health")
        XCTAssertEqual(health.status, 200)
        XCTAssertEqual(health.json["status"] as? String, "ok")

        let removed = try http.send("DELETE", "/api/v1/push/register", headers: [auth], body: Data(#"{"token": "\#(token)"}"#.utf8))
        XCTAssertEqual(removed.status, 200)
        XCTAssertFalse(try registrations().contains("can be woken by push (posted):"))

        // Requests are logged without secrets.
        let output = rouse?.outputText ?? ""
        XCTAssertTrue(output.contains("http.path=/api/v1/push/register"), output)
        XCTAssertFalse(output.contains("s3cret-1001"))
        XCTAssertFalse(output.contains(token))
    }
}
