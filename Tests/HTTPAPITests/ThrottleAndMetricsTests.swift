import CallRouting
import Foundation
import HTTPAPI
import HTTPServer
import Metrics
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// Throttling of failed credentials on the posting endpoint (429 with Retry-After) and `/metrics`,
/// served in-process on port 0 against a fresh PostgreSQL database over real TCP.
final class ThrottleAndMetricsTests: XCTestCase {
    var database: TestDatabase!
    var service: StandaloneHTTPAPI!
    var throttle: AuthFailureThrottle!
    let alice = AddressOfRecord(number: "1001", domain: "example.com")

    override func setUpWithError() throws {
        database = try TestDatabase()
        try Migrator.migrate(try database.connect())
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        try directory.addExtension(alice, password: "s3cret-1001")
        throttle = AuthFailureThrottle(limit: 3, window: 60, blockFor: 300)
        service = try StandaloneHTTPAPI(
            listen: "127.0.0.1:0", settings: database.settings(connectTimeout: 3),
            authFailureThrottle: throttle, metrics: MetricsRegistry())
    }

    override func tearDown() {
        service?.stop()
        service = nil
        database?.drop()
    }

    func post(_ client: TestHTTPClient, password: String) throws -> TestHTTPClient.Response {
        let body = try JSONSerialization.data(withJSONObject: ["token": "fcm-token-1", "sipUser": "1001@example.com"])
        return try client.send(
            "POST", "/api/v1/push/register",
            headers: [("Authorization", TestHTTPClient.basic("1001@example.com", password)), ("Content-Type", "application/json")],
            body: body)
    }

    func testWrongPasswordsPastTheLimitGet429EvenWithTheRightPassword() throws {
        let http = try TestHTTPClient(port: service.server.port)
        XCTAssertEqual(try post(http, password: "s3cret-1001").status, 200)  // a success before counts for nothing
        for index in 0..<3 {
            XCTAssertEqual(try post(http, password: "wrong-\(index)").status, 401)
        }
        for password in ["wrong-again", "s3cret-1001"] {
            let refused = try post(http, password: password)
            XCTAssertEqual(refused.status, 429, String(decoding: refused.body, as: UTF8.self))
            let retryAfter = try XCTUnwrap(Int(refused.header("Retry-After") ?? ""))
            XCTAssertTrue((1...300).contains(retryAfter), "\(retryAfter)")
            XCTAssertEqual(refused.header("Content-Type"), "application/json")
            let error = try XCTUnwrap(refused.json["error"] as? [String: Any])
            XCTAssertEqual(error["code"] as? String, "too_many_failures")
            XCTAssertNotNil(error["message"] as? String)
        }
        // The same address is refused on DELETE too; the throttle holds it, not the connection.
        let delete = try TestHTTPClient(port: service.server.port).send(
            "DELETE", "/api/v1/push/register",
            headers: [("Authorization", TestHTTPClient.basic("1001@example.com", "s3cret-1001"))], body: Data("{\"token\":\"x\"}".utf8))
        XCTAssertEqual(delete.status, 429)
        XCTAssertNotNil(throttle.isBlocked("127.0.0.1"))
    }

    func testBehindATrustedProxyTheForwardedClientIsCountedNotTheProxy() throws {
        service.stop()
        service = try StandaloneHTTPAPI(
            listen: "127.0.0.1:0", settings: database.settings(connectTimeout: 3),
            authFailureThrottle: throttle, metrics: MetricsRegistry(), trustedProxies: try TrustedPeers(parsing: ["127.0.0.1"]))
        func post(password: String, forwardedFor: String) throws -> Int {
            let body = try JSONSerialization.data(withJSONObject: ["token": "fcm-token-1", "sipUser": "1001@example.com"])
            return try TestHTTPClient(port: service.server.port).send(
                "POST", "/api/v1/push/register",
                headers: [
                    ("Authorization", TestHTTPClient.basic("1001@example.com", password)), ("Content-Type", "application/json"),
                    ("X-Forwarded-For", forwardedFor),
                ],
                body: body
            ).status
        }
        // A client that writes its own X-Forwarded-For is counted by the address nginx appended.
        for index in 0..<3 {
            XCTAssertEqual(try post(password: "wrong-\(index)", forwardedFor: "203.0.113.\(index), 198.51.100.1"), 401)
        }
        XCTAssertEqual(try post(password: "s3cret-1001", forwardedFor: "198.51.100.1"), 429)
        XCTAssertNotNil(throttle.isBlocked("198.51.100.1"))
        XCTAssertNil(throttle.isBlocked("127.0.0.1"), "the proxy itself is not blocked")
        XCTAssertEqual(try post(password: "s3cret-1001", forwardedFor: "198.51.100.2"), 200, "another client behind the proxy still gets in")

        let proxies = try TrustedPeers(parsing: ["127.0.0.1"])
        XCTAssertEqual(HTTPServer.client(peer: "192.0.2.9", forwardedFor: "198.51.100.1", trusted: { proxies.contains($0) }), "192.0.2.9",
                       "an untrusted peer's header is ignored")
        XCTAssertEqual(HTTPServer.client(peer: "127.0.0.1", forwardedFor: "not-an-address", trusted: { proxies.contains($0) }), "127.0.0.1")
    }

    func testMetricsAreParseablePrometheusTextAndCountRequests() throws {
        let http = try TestHTTPClient(port: service.server.port)
        XCTAssertEqual(try http.send("GET", "/no/such/path/secret-looking", headers: [], body: Data()).status, 404)
        XCTAssertEqual(try post(http, password: "wrong").status, 401)
        _ = try http.send("GET", "/metrics", headers: [], body: Data())
        let scrape = try http.send("GET", "/metrics", headers: [], body: Data())
        XCTAssertEqual(scrape.status, 200)
        XCTAssertEqual(scrape.header("Content-Type"), "text/plain; version=0.0.4; charset=utf-8")
        let text = String(decoding: scrape.body, as: UTF8.self)

        // Every line is a comment or `name{labels} value` with a number for a value.
        var samples: [String: Double] = [:]
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).dropLast() {
            if line.hasPrefix("# HELP ") || line.hasPrefix("# TYPE ") { continue }
            let space = try XCTUnwrap(line.lastIndex(of: " "), String(line))
            let value = try XCTUnwrap(Double(line[line.index(after: space)...]), String(line))
            let series = String(line[..<space])
            XCTAssertNotNil(series.range(of: #"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})?$"#, options: .regularExpression), series)
            samples[series] = value
        }
        XCTAssertTrue(text.hasSuffix("\n"))
        XCTAssertTrue(text.contains("# TYPE rouse_http_requests_total counter\n"), text)
        XCTAssertEqual(samples[#"rouse_http_requests_total{route="/metrics",status="200"}"#], 1, text)
        XCTAssertEqual(samples[#"rouse_http_requests_total{route="unmatched",status="404"}"#], 1, text)
        XCTAssertEqual(samples[#"rouse_http_requests_total{route="/api/v1/push/register",status="401"}"#], 1, text)
        XCTAssertFalse(text.contains("secret-looking"), "raw paths never become labels")
    }
}
