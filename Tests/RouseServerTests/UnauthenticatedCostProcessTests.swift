import Foundation
import Registrar
import RouseTestSupport
import SIPMessage
import SIPTransport
import Storage
import XCTest

/// Unauthenticated INVITEs and REGISTERs for domains Rouse does not serve cost it no database round
/// trip (issue 9 item 4): 1,200 of them (INVITEs to a foreign domain: 403; REGISTERs for it: 404;
/// INVITEs to an extension without credentials: 407) leave `rouse_database_statements_total` of
/// `/metrics`, which counts every statement the process sends to PostgreSQL, where it was (give or
/// take the listeners' keep-alive `SELECT 1`, one each per 30 s).
final class UnauthenticatedCostProcessTests: XCTestCase {
    var database: TestDatabase!
    var rouse: RouseProcess?

    override func setUpWithError() throws {
        database = try TestDatabase()
        try Migrator.migrate(try database.connect())
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        try directory.addExtension(AddressOfRecord(number: "1002", domain: "example.com"), password: "pw-1002")
    }

    override func tearDown() {
        _ = rouse?.stop()
        database?.drop()
    }

    func statements(httpPort: UInt16) throws -> Int {
        let text = String(decoding: try TestHTTPClient(port: httpPort).send("GET", "/metrics").body, as: UTF8.self)
        let line = try XCTUnwrap(text.split(separator: "\n").first { $0.hasPrefix("rouse_database_statements_total ") })
        return try XCTUnwrap(Int(line.split(separator: " ").last ?? ""))
    }

    /// One request of a stranger: `kind` 0 an INVITE to a foreign domain, 1 a REGISTER for it, 2 an
    /// INVITE to an extension without credentials.
    func request(_ kind: Int, number: Int, port: UInt16) -> (text: String, callID: String, branch: String) {
        let callID = "stranger-\(number)-\(UUID().uuidString.lowercased())"
        let branch = "z9hG4bK\(UUID().uuidString.lowercased())"
        let method = kind == 1 ? "REGISTER" : "INVITE"
        let uri = kind == 0 ? "sip:1002@elsewhere.example.net" : kind == 1 ? "sip:elsewhere.example.net" : "sip:1002@example.com"
        let to = kind == 1 ? "<sip:9999@elsewhere.example.net>" : "<\(uri)>"
        var text = "\(method) \(uri) SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:\(port);branch=\(branch);rport\r\nMax-Forwards: 70\r\n"
        text += "From: <sip:9999@elsewhere.example.net>;tag=s\(number)\r\nTo: \(to)\r\nCall-ID: \(callID)\r\nCSeq: 1 \(method)\r\n"
        text += "Contact: <sip:9999@127.0.0.1:\(port)>\r\n"
        return (text + "Content-Length: 0\r\n\r\n", callID, branch)
    }

    /// The ACK of a non-2xx final answer to an INVITE (RFC 3261 §17.1.1.3), so Rouse stops repeating it.
    func ack(_ response: SIPResponse, uri: String, branch: String, port: UInt16) -> String {
        var text = "ACK \(uri) SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:\(port);branch=\(branch);rport\r\nMax-Forwards: 70\r\n"
        text += "From: \(response.headers[.from] ?? "")\r\nTo: \(response.headers[.to] ?? "")\r\nCall-ID: \(response.callID ?? "")\r\n"
        return text + "CSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n"
    }

    func testStrangersAreAnsweredWithoutADatabaseRoundTrip() throws {
        let process = try RouseProcess(
            arguments: ["serve"], environment: ["ROUSE_DATABASE_URL": database.conninfo, "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0"])
        rouse = process
        XCTAssertTrue(process.waitForOutput(containing: "serving HTTP on"), process.outputText)
        let lines = process.outputText.split(separator: "\n")
        let sip = try ListenPoint(parsing: lines.first { $0.contains("serving SIP on") }?.components(separatedBy: "serving SIP on ").last ?? "")
        let httpPort = try XCTUnwrap(UInt16(lines.first { $0.contains("serving HTTP on") }?.split(separator: ":").last ?? ""))
        let client = try TestSIPClient(transport: .udp, host: sip.host, port: sip.port)
        // The start-up's last statements (the listeners' LISTEN, the HTTP API's directory load) run
        // on their own threads after "serving": wait until the count stands still.
        var before = try statements(httpPort: httpPort)
        let settled = Date().addingTimeInterval(20)
        while Date() < settled {
            Thread.sleep(forTimeInterval: 0.5)
            let now = try statements(httpPort: httpPort)
            if now == before { break }
            before = now
        }
        XCTAssertGreaterThan(before, 0, "the start-up's statements (migrations, loading the directory) are counted")

        var finals: [String: Int] = [:]
        var branches: [String: String] = [:]
        var kinds: [String: Int] = [:]
        let total = 1_200
        let deadline = ContinuousClock.now + .seconds(60)
        var sent = 0
        while sent < total, ContinuousClock.now < deadline {
            // Waves of 100, each read out before the next, so no answer is lost to a full socket buffer.
            let wave = sent..<min(total, sent + 100)
            for number in wave {
                let (text, callID, branch) = request(number % 3, number: number, port: client.localPort)
                branches[callID] = branch
                kinds[callID] = number % 3
                try client.send(text)
            }
            sent = wave.upperBound
            let waveDeadline = ContinuousClock.now + .seconds(10)
            while finals.count < sent, ContinuousClock.now < waveDeadline {
                guard let bytes = try client.receive(timeout: .milliseconds(200)) else { continue }
                guard case .response(let response) = try SIPParser.parse(bytes), response.statusCode >= 200, let callID = response.callID,
                    finals[callID] == nil
                else { continue }
                finals[callID] = response.statusCode
                if let kind = kinds[callID], kind != 1 {
                    let uri = kind == 0 ? "sip:1002@elsewhere.example.net" : "sip:1002@example.com"
                    try client.send(ack(response, uri: uri, branch: branches[callID] ?? "", port: client.localPort))
                }
            }
        }
        let after = try statements(httpPort: httpPort)

        XCTAssertEqual(finals.count, total, "every stranger is answered")
        let byKind = Dictionary(grouping: finals, by: { kinds[$0.key] ?? -1 }).mapValues { Set($0.map(\.value)) }
        XCTAssertEqual(byKind[0], [403], "an INVITE to a foreign domain: never an open relay")
        XCTAssertEqual(byKind[1], [404], "a REGISTER for a domain not served here")
        XCTAssertEqual(byKind[2], [407], "an INVITE without credentials is challenged")
        XCTAssertLessThanOrEqual(after - before, 4, "\(after - before) statements for \(total) requests: none per request")
    }
}
