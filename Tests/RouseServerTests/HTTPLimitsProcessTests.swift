import Foundation
import RouseTestSupport
import Storage
import XCTest

/// The HTTP API's limits against a running `rouse serve` (issue 9 item 4): `http_rate_limit` answers
/// a client past its allowance 429 with Retry-After while another client is served, counting the
/// X-Forwarded-For client behind a trusted proxy; and wrong admin credentials on the admin JSON API
/// block the address (429 with Retry-After, even with the right password), as wrong SIP and posting
/// credentials do.
final class HTTPLimitsProcessTests: XCTestCase {
    var database: TestDatabase!
    var rouse: RouseProcess?
    var httpPort: UInt16 = 0

    override func setUpWithError() throws {
        database = try TestDatabase()
        try Migrator.migrate(try database.connect())
        try PostgresAdmins.add(name: "ops", password: "admin-pw-1", on: try database.connect())
    }

    override func tearDown() {
        _ = rouse?.stop()
        database?.drop()
    }

    func start(_ extra: [String: String]) throws {
        var environment = ["ROUSE_DATABASE_URL": database.conninfo, "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0"]
        environment.merge(extra) { $1 }
        let process = try RouseProcess(arguments: ["serve"], environment: environment)
        rouse = process
        XCTAssertTrue(process.waitForOutput(containing: "serving HTTP on"), process.outputText)
        let line = try XCTUnwrap(process.outputText.split(separator: "\n").first { $0.contains("serving HTTP on") })
        httpPort = try XCTUnwrap(UInt16(line.split(separator: ":").last ?? ""))
    }

    func get(_ path: String, forwardedFor: String? = nil, headers: [(String, String)] = []) throws -> TestHTTPClient.Response {
        var all = headers
        if let forwardedFor { all.append(("X-Forwarded-For", forwardedFor)) }
        return try TestHTTPClient(port: httpPort).send("GET", path, headers: all)
    }

    func testAClientPastTheRateLimitGets429WhileAnotherIsServed() throws {
        try start(["ROUSE_HTTP_RATE_LIMIT": "5", "ROUSE_HTTP_TRUSTED_PROXIES": "127.0.0.1"])
        // One burst, sent far faster than 5 a second: a burst of 10 goes through, then 429.
        var statuses: [Int] = []
        var retryAfter: String?
        for _ in 0..<30 {
            let answer = try get("/health", forwardedFor: "198.51.100.7")
            statuses.append(answer.status)
            if answer.status == 429, retryAfter == nil { retryAfter = answer.header("Retry-After") }
        }
        let served = statuses.filter { $0 == 200 }.count
        XCTAssertGreaterThanOrEqual(served, 10, "\(statuses)")
        XCTAssertLessThan(served, 30, "\(statuses)")
        XCTAssertEqual(Set(statuses), [200, 429])
        XCTAssertNotNil(retryAfter.flatMap { Int($0) }, "429 says when to come back")
        // Another client behind the same proxy is not held back.
        XCTAssertEqual(try get("/health", forwardedFor: "198.51.100.8").status, 200)
        let metrics = String(decoding: try get("/metrics", forwardedFor: "198.51.100.9").body, as: UTF8.self)
        XCTAssertTrue(metrics.contains(#"rouse_http_requests_total{route="/health",status="429"} \#(30 - served)"#), metrics)
    }

    func testWrongAdminPasswordsBlockTheAddressOnTheAdminAPI() throws {
        try start(["ROUSE_AUTH_FAILURE_LIMIT": "3", "ROUSE_AUTH_BLOCK_DURATION": "120"])
        let path = "/api/v1/admin/organisations"
        XCTAssertEqual(try get(path, headers: [("Authorization", TestHTTPClient.basic("ops", "admin-pw-1"))]).status, 200)
        for guess in 1...3 {
            XCTAssertEqual(try get(path, headers: [("Authorization", TestHTTPClient.basic("ops", "guess-\(guess)"))]).status, 401)
        }
        let blocked = try get(path, headers: [("Authorization", TestHTTPClient.basic("ops", "admin-pw-1"))])
        XCTAssertEqual(blocked.status, 429, "blocked even with the right password")
        let seconds = try XCTUnwrap(Int(blocked.header("Retry-After") ?? ""))
        XCTAssertTrue((1...120).contains(seconds), "\(seconds)")
    }
}
