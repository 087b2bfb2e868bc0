import Foundation
import RouseLog
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPService
import SIPTransport
import XCTest

/// The SIP service on its own, built from `SIPServiceSettings` alone (no configuration file, no
/// database, no registrar or coordinator), over real loopback sockets: what it answers for Rouse
/// itself, where its answers go (RFC 3581), and what it refuses while draining.
final class SIPServiceTests: XCTestCase {
    var service: SIPService!

    override func setUpWithError() throws {
        let settings = SIPServiceSettings(
            listen: [try ListenPoint(parsing: "udp:127.0.0.1:0"), try ListenPoint(parsing: "tcp:127.0.0.1:0")],
            aliases: ["SIP.Example.com"], serverName: "Rouse/service-test")
        service = SIPService(settings: settings, logger: Logger(level: .error))
        try service.start()
    }

    override func tearDown() {
        service?.shutdown()
    }

    func client(_ transport: TestSIPClient.Transport) throws -> TestSIPClient {
        let kind: SIPTransportKind = transport == .udp ? .udp : .tcp
        let point = try XCTUnwrap(service.listeningPoints.first { $0.transport == kind })
        return try TestSIPClient(transport: transport, host: point.host, port: point.port)
    }

    /// A request from a phone that names itself 10.0.0.9 in its Via (behind NAT), asking for rport.
    func request(_ method: String, _ uri: String, transport: String, toTag: String? = nil, callID: String = UUID().uuidString) -> String {
        var text = "\(method) \(uri) SIP/2.0\r\nVia: SIP/2.0/\(transport) 10.0.0.9:5060;branch=z9hG4bK\(UUID().uuidString);rport\r\n"
        text += "Max-Forwards: 70\r\nFrom: <sip:1001@example.com>;tag=f1\r\nTo: <\(uri)>\(toTag.map { ";tag=\($0)" } ?? "")\r\n"
        return text + "Call-ID: \(callID)\r\nCSeq: 1 \(method)\r\nContent-Length: 0\r\n\r\n"
    }

    func response(from client: TestSIPClient) throws -> SIPResponse {
        let bytes = try XCTUnwrap(try client.receive(timeout: .seconds(10)), "an answer within 10 s")
        guard case .response(let response) = try SIPParser.parse(bytes) else {
            XCTFail("not a response")
            throw CancellationError()
        }
        return response
    }

    func testOptionsToAnAliasIsAnsweredWithTheServerNameOfTheSettings() throws {
        for transport in [TestSIPClient.Transport.udp, .tcp] {
            let phone = try client(transport)
            try phone.send(request("OPTIONS", "sip:sip.example.com", transport: transport.rawValue.uppercased()))
            let answer = try response(from: phone)
            XCTAssertEqual(answer.statusCode, 200, "\(transport)")
            XCTAssertEqual(answer.headers[.server], "Rouse/service-test")
            XCTAssertEqual(answer.headers[.allow], "OPTIONS", "no registrar, no coordinator: only OPTIONS")
        }
    }

    func testTheAnswerNamesWhereTheRequestReallyCameFrom() throws {
        let phone = try client(.udp)
        try phone.send(request("OPTIONS", "sip:127.0.0.1", transport: "UDP"))
        let via = try XCTUnwrap(try response(from: phone).topVia)
        XCTAssertEqual(via.parameters["received"], "127.0.0.1")
        XCTAssertEqual(via.parameters["rport"], String(phone.localPort))
    }

    /// The source is noted in the top Via element only, where that element stood: a Via line that
    /// also carries the proxy's element below keeps it, and a request with a retransmission is
    /// matched to the same transaction (the layer matches on the Via as rewritten).
    func testOnlyTheTopViaElementIsRewrittenAndTheRestOfItsLineIsKept() throws {
        let phone = try client(.udp)
        let branch = "z9hG4bK\(UUID().uuidString)"
        var text = "OPTIONS sip:127.0.0.1 SIP/2.0\r\nMax-Forwards: 70\r\n"
        text += "v: SIP/2.0/UDP 10.0.0.9:5060;branch=\(branch);rport , SIP/2.0/TCP proxy.example.com;branch=z9hG4bKp1\r\n"
        text += "Via: SIP/2.0/UDP edge.example.com;branch=z9hG4bKe1\r\n"
        text += "From: <sip:1001@example.com>;tag=f1\r\nTo: <sip:127.0.0.1>\r\nCall-ID: \(UUID().uuidString)\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
        try phone.send(text)
        let answer = try response(from: phone)
        XCTAssertEqual(answer.statusCode, 200)
        let lines = answer.headers.lines(.via)
        XCTAssertEqual(lines.count, 2, "the two Via lines stay two lines: \(lines)")
        XCTAssertEqual(
            lines.first, "SIP/2.0/UDP 10.0.0.9:5060;branch=\(branch);rport=\(phone.localPort);received=127.0.0.1, SIP/2.0/TCP proxy.example.com;branch=z9hG4bKp1")
        XCTAssertEqual(lines.last, "SIP/2.0/UDP edge.example.com;branch=z9hG4bKe1")
        XCTAssertEqual(answer.vias.map(\.host), ["10.0.0.9", "proxy.example.com", "edge.example.com"])

        try phone.send(text)
        let again = try response(from: phone)
        XCTAssertEqual(again.headers.lines(.via), lines, "the retransmission got the transaction's answer again")
        XCTAssertEqual(again.headers[.to], answer.headers[.to], "same To tag: answered by the same transaction")
    }

    func testRegisterWithoutARegistrarIsRefused() throws {
        let phone = try client(.udp)
        try phone.send(request("REGISTER", "sip:127.0.0.1", transport: "UDP"))
        let answer = try response(from: phone)
        XCTAssertEqual(answer.statusCode, 405)
        XCTAssertEqual(answer.headers[.allow], "OPTIONS")
    }

    func testWhileDrainingNewRequestsGet503AndACancelIsStillAnswered() throws {
        service.beginDraining()
        let phone = try client(.udp)
        try phone.send(request("OPTIONS", "sip:127.0.0.1", transport: "UDP"))
        let refused = try response(from: phone)
        XCTAssertEqual(refused.statusCode, 503)
        XCTAssertEqual(refused.headers[.retryAfter], "5")
        XCTAssertEqual(refused.headers[.server], "Rouse/service-test")

        // Inside a dialog (a To tag), a request is not refused for draining: this one names no dialog
        // of Rouse's, so it is answered as a request to Rouse itself.
        try phone.send(request("OPTIONS", "sip:127.0.0.1", transport: "UDP", toTag: "t1"))
        XCTAssertEqual(try response(from: phone).statusCode, 200)

        // A CANCEL passes: it matches no INVITE here, so 481 (RFC 3261 §9.2), not 503.
        try phone.send(request("CANCEL", "sip:1001@127.0.0.1", transport: "UDP"))
        XCTAssertEqual(try response(from: phone).statusCode, 481)
    }

    func testTheNamesOfTheServer() throws {
        let names = SIPService.ownNames(
            listen: [try ListenPoint(parsing: "udp:192.0.2.7:5060"), try ListenPoint(parsing: "tcp:[2001:DB8::7]:5060")],
            aliases: ["SIP.Example.com"])
        for name in ["localhost", "127.0.0.1", "[::1]", "sip.example.com", "192.0.2.7", "[2001:db8::7]"] {
            XCTAssertTrue(names.contains(name), name)
        }
        XCTAssertFalse(names.contains("0.0.0.0"))
    }
}
