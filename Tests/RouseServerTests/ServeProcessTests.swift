import Foundation
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPTransport
import Storage
import XCTest

/// `rouse serve` started as a process, on a fresh database, and queried over real sockets the way a
/// phone or a monitoring probe would.
final class ServeProcessTests: XCTestCase {
    var database: TestDatabase!
    var rouse: RouseProcess!
    var points: [ListenPoint] = []
    var certificate: TestCertificate!

    override func setUpWithError() throws {
        database = try TestDatabase()
        certificate = try TestCertificate.make(commonName: "rouse.test")
        rouse = try RouseProcess(
            arguments: ["serve"],
            environment: [
                "ROUSE_DATABASE_URL": database.conninfo,
                "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0,tcp:127.0.0.1:0,tls:127.0.0.1:0,udp:[::1]:0,tcp:[::1]:0",
                "ROUSE_TLS_CERT": certificate.certificatePath,
                "ROUSE_TLS_KEY": certificate.keyPath,
            ])
        XCTAssertTrue(rouse.waitForOutput(containing: "serving SIP on"), rouse.outputText)
        let line = try XCTUnwrap(rouse.outputText.split(separator: "\n").first { $0.contains("serving SIP on") })
        let list = line.components(separatedBy: "serving SIP on ").last ?? ""
        points = try list.components(separatedBy: ", ").map { try ListenPoint(parsing: $0) }
        XCTAssertEqual(points.count, 5, rouse.outputText)
    }

    override func tearDown() {
        _ = rouse?.stop()
        rouse = nil
        database?.drop()
        certificate?.remove()
    }

    func point(_ transport: SIPTransportKind, ipv6: Bool = false) throws -> ListenPoint {
        try XCTUnwrap(points.first { $0.transport == transport && $0.isIPv6 == ipv6 })
    }

    func client(_ transport: SIPTransportKind, ipv6: Bool = false) throws -> TestSIPClient {
        let point = try point(transport, ipv6: ipv6)
        let kind: TestSIPClient.Transport = transport == .udp ? .udp : transport == .tcp ? .tcp : .tls
        return try TestSIPClient(transport: kind, host: point.host, port: point.port)
    }

    static func request(
        _ method: String, uri: String, transport: String, branch: String = "z9hG4bK" + UUID().uuidString,
        callID: String = UUID().uuidString, extra: String = "", cseqMethod: String? = nil
    ) -> String {
        "\(method) \(uri) SIP/2.0\r\n"
            + "Via: SIP/2.0/\(transport) 127.0.0.1:5099;branch=\(branch);rport\r\n"
            + "Max-Forwards: 70\r\n"
            + "From: <sip:probe@example.com>;tag=probe1\r\n"
            + "To: <\(uri)>\r\n"
            + "Call-ID: \(callID)\r\n"
            + "CSeq: 7 \(cseqMethod ?? method)\r\n"
            + extra
            + "Content-Length: 0\r\n\r\n"
    }

    /// Reads responses until a final one (status ≥ 200) arrives.
    func finalResponse(from client: TestSIPClient) throws -> SIPResponse {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            guard let bytes = try client.receive(timeout: .seconds(10)) else { break }
            guard case .response(let response) = try SIPParser.parse(bytes) else { continue }
            if response.statusCode >= 200 { return response }
        }
        throw NoFinalResponse()
    }

    struct NoFinalResponse: Error, CustomStringConvertible {
        var description: String { "no final response arrived before the deadline" }
    }

    func assertOptionsAnswered(over transport: SIPTransportKind, ipv6: Bool = false) throws {
        let client = try client(transport, ipv6: ipv6)
        defer { client.close() }
        let host = ipv6 ? "[::1]" : "127.0.0.1"
        try client.send(Self.request("OPTIONS", uri: "sip:\(host)", transport: transport.rawValue.uppercased()))
        let response = try finalResponse(from: client)
        XCTAssertEqual(response.statusCode, 200, "\(transport)")
        XCTAssertEqual(response.headers[.allow].map { $0.contains("OPTIONS") }, true)
        XCTAssertEqual(response.headers[.accept], "application/sdp")
        XCTAssertEqual(Set(response.headers.values(.supported)), ["path", "outbound"])
        XCTAssertEqual(response.callID.map { !$0.isEmpty }, true)
        XCTAssertNotNil(response.to?.tag, "a final response carries a To tag")
    }

    func testOptionsAnsweredOverUDP() throws {
        try assertOptionsAnswered(over: .udp)
    }

    func testOptionsAnsweredOverTCP() throws {
        try assertOptionsAnswered(over: .tcp)
    }

    func testOptionsAnsweredOverTLS() throws {
        try assertOptionsAnswered(over: .tls)
    }

    func testOptionsAnsweredOverIPv6() throws {
        try assertOptionsAnswered(over: .udp, ipv6: true)
        try assertOptionsAnswered(over: .tcp, ipv6: true)
    }

    func testUDPResponseRecordsWhereTheRequestCameFrom() throws {
        let client = try client(.udp)
        try client.send(Self.request("OPTIONS", uri: "sip:127.0.0.1", transport: "UDP"))
        let response = try finalResponse(from: client)
        let via = try XCTUnwrap(response.topVia)
        XCTAssertEqual(via.received, "127.0.0.1")
        XCTAssertEqual(via.rport, .some(Int(client.localPort)), "RFC 3581: rport filled with the source port")
    }

    func testMethodsWithoutHandlerGet405AndUnknownOnes501() throws {
        let client = try client(.tcp)
        try client.send(Self.request("MESSAGE", uri: "sip:1001@127.0.0.1", transport: "TCP"))
        let message = try finalResponse(from: client)
        XCTAssertEqual(message.statusCode, 405)
        XCTAssertEqual(message.headers.values(.allow), ["OPTIONS", "REGISTER", "INVITE", "ACK", "CANCEL", "BYE"])

        try client.send(Self.request("FROB", uri: "sip:127.0.0.1", transport: "TCP"))
        let unknown = try finalResponse(from: client)
        XCTAssertEqual(unknown.statusCode, 501)
    }

    func testRequireOfUnknownExtensionGets420() throws {
        let client = try client(.udp)
        try client.send(Self.request("OPTIONS", uri: "sip:127.0.0.1", transport: "UDP", extra: "Require: 100rel, path\r\n"))
        let response = try finalResponse(from: client)
        XCTAssertEqual(response.statusCode, 420)
        XCTAssertEqual(response.headers[.unsupported], "100rel")
    }

    func testCancelMatchingNothingGets481() throws {
        let client = try client(.udp)
        try client.send(Self.request("CANCEL", uri: "sip:1001@127.0.0.1", transport: "UDP"))
        XCTAssertEqual(try finalResponse(from: client).statusCode, 481)
    }

    func testMalformedRequestGets400NamingTheProblemAndServingGoesOn() throws {
        let client = try client(.tcp)
        try client.send(Self.request("OPTIONS", uri: "sip:127.0.0.1", transport: "TCP", cseqMethod: "INVITE"))
        let response = try finalResponse(from: client)
        XCTAssertEqual(response.statusCode, 400)
        XCTAssertTrue(response.reasonPhrase.lowercased().contains("cseq"), response.reasonPhrase)

        // Bytes that are no SIP at all get no answer over UDP, and the server keeps serving.
        let udp = try self.client(.udp)
        try udp.send([0x16, 0x03, 0x01, 0x00, 0xFF, 0x00, 0x0D, 0x0A])
        XCTAssertNil(try udp.receive(timeout: .milliseconds(300)))
        try assertOptionsAnswered(over: .udp)
        try assertOptionsAnswered(over: .tcp)
    }

    func testDoubleCRLFKeepAliveOnTCPGetsSingleCRLF() throws {
        let client = try client(.tcp)
        try client.send("\r\n\r\n")
        XCTAssertEqual(try client.receiveRaw(timeout: .seconds(10)), [0x0D, 0x0A])
    }

    func testMigrationsWereAppliedAtStart() throws {
        let connection = try database.connect()
        let rows = try connection.query("SELECT max(version) AS v FROM schema_migrations")
        XCTAssertEqual(rows.value(0, "v").flatMap { Int($0) }.map { $0 >= 1 }, true)
    }

    func testSIGTERMStopsCleanlyWithStatusZero() throws {
        XCTAssertEqual(rouse.stop(), 0, rouse.outputText)
        XCTAssertTrue(rouse.outputText.contains("rouse.stopped"), rouse.outputText)
    }
}
