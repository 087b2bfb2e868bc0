import Crypto
import Foundation
import Registrar
import RouseTestSupport
import SIPMessage
import SIPTransport
import Storage
import XCTest

/// `rouse serve` with a low `auth_failure_limit`: wrong SIP passwords from one address block it on
/// SIP (503 with Retry-After) and on the posting endpoint (429) alike, and `/metrics` counts it.
final class ThrottleProcessTests: XCTestCase {
    var database: TestDatabase!
    var rouse: RouseProcess?
    var sip: ListenPoint!
    var httpPort: UInt16 = 0

    override func setUpWithError() throws {
        database = try TestDatabase()
        try Migrator.migrate(try database.connect())
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        try directory.addExtension(AddressOfRecord(number: "1001", domain: "example.com"), password: "s3cret-1001")
        let process = try RouseProcess(
            arguments: ["serve"],
            environment: [
                "ROUSE_DATABASE_URL": database.conninfo, "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0", "ROUSE_HTTP_LISTEN": "127.0.0.1:0",
                "ROUSE_AUTH_FAILURE_LIMIT": "2", "ROUSE_AUTH_BLOCK_DURATION": "120",
            ])
        rouse = process
        XCTAssertTrue(process.waitForOutput(containing: "serving HTTP on"), process.outputText)
        let lines = process.outputText.split(separator: "\n")
        let sipLine = try XCTUnwrap(lines.first { $0.contains("serving SIP on") })
        sip = try ListenPoint(parsing: sipLine.components(separatedBy: "serving SIP on ").last ?? "")
        let httpLine = try XCTUnwrap(lines.first { $0.contains("serving HTTP on") })
        httpPort = try XCTUnwrap((httpLine.components(separatedBy: "serving HTTP on ").last ?? "").split(separator: ":").last.flatMap { UInt16($0) })
    }

    override func tearDown() {
        _ = rouse?.stop()
        rouse = nil
        database?.drop()
    }

    func finalResponse(_ client: TestSIPClient) throws -> SIPResponse {
        while let bytes = try client.receive(timeout: .seconds(10)) {
            if case .response(let response) = try SIPParser.parse(bytes), response.statusCode >= 200 { return response }
        }
        throw NoAnswer()
    }

    struct NoAnswer: Error {}

    /// A REGISTER answered with `password` after its challenge; the final response (or the first,
    /// when it is not a challenge).
    func register(password: String) throws -> SIPResponse {
        let client = try TestSIPClient(transport: .udp, host: sip.host, port: sip.port)
        defer { client.close() }
        let callID = UUID().uuidString
        let contact = "<sip:1001@127.0.0.1:5071>"
        try client.send(RegistrationProcessTests.register(transport: "UDP", port: client.localPort, contact: contact, callID: callID, cseq: 1))
        let challenge = try finalResponse(client)
        guard challenge.statusCode == 401 else { return challenge }
        let offer = try XCTUnwrap(challenge.headers.lines(.wwwAuthenticate).first { $0.contains("algorithm=MD5") })
        let parameters = try XCTUnwrap(DigestCredentials(header: offer))
        let ha1 = Digest.hex(.md5, "1001:example.com:\(password)")
        let ha2 = Digest.hex(.md5, "REGISTER:sip:example.com")
        let response = Digest.hex(.md5, "\(ha1):\(parameters.nonce!):00000001:c0ffee:auth:\(ha2)")
        let authorization = "Digest username=\"1001\", realm=\"example.com\", nonce=\"\(parameters.nonce!)\", uri=\"sip:example.com\", response=\"\(response)\", algorithm=MD5, cnonce=\"c0ffee\", qop=auth, nc=00000001, opaque=\"\(parameters.opaque ?? "")\""
        try client.send(
            RegistrationProcessTests.register(
                transport: "UDP", port: client.localPort, contact: contact, callID: callID, cseq: 2, authorization: authorization))
        return try finalResponse(client)
    }

    func testWrongSIPPasswordsBlockTheAddressOnSIPAndHTTPAndMetricsCountIt() throws {
        XCTAssertEqual(try register(password: "s3cret-1001").statusCode, 200)
        XCTAssertEqual(try register(password: "guess-1").statusCode, 401)
        XCTAssertEqual(try register(password: "guess-2").statusCode, 401)
        let blocked = try register(password: "s3cret-1001")
        XCTAssertEqual(blocked.statusCode, 503)
        let retryAfter = try XCTUnwrap(Int(blocked.headers[.retryAfter] ?? ""))
        XCTAssertTrue((1...120).contains(retryAfter), "\(retryAfter)")

        let http = try TestHTTPClient(port: httpPort)
        let posted = try http.send(
            "POST", "/api/v1/push/register", headers: [("Authorization", TestHTTPClient.basic("1001@example.com", "s3cret-1001"))],
            body: Data(#"{"token": "fcm-1", "sipUser": "1001@example.com"}"#.utf8))
        XCTAssertEqual(posted.status, 429)

        let text = String(decoding: try http.send("GET", "/metrics").body, as: UTF8.self)
        for line in [
            "rouse_bindings 1", #"rouse_register_total{result="ok"} 1"#, #"rouse_register_total{result="challenged"} 5"#,
            #"rouse_register_total{result="throttled"} 1"#, #"rouse_http_requests_total{route="/api/v1/push/register",status="429"} 1"#,
        ] {
            XCTAssertTrue(text.contains(line + "\n"), "\(line) in\n\(text)")
        }
    }
}
