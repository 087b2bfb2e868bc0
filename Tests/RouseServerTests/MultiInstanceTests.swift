import Crypto
import Foundation
import Registrar
import RouseTestSupport
import SIPMessage
import SIPTransport
import Storage
import XCTest

/// Two Rouse instances on one PostgreSQL: a phone that registers on one is known to the other at
/// once (NOTIFY), so DNS SRV can spread phones freely.
final class MultiInstanceTests: XCTestCase {
    var database: TestDatabase!
    var instances: [RouseProcess] = []

    override func setUpWithError() throws {
        database = try TestDatabase()
        try Migrator.migrate(try database.connect())
        let directory = PostgresDirectory(settings: PostgresSettings(conninfo: database.conninfo))
        _ = try directory.addDomain("example.com")
        try directory.addExtension(AddressOfRecord(number: "1001", domain: "example.com"), password: "pw-1001")
    }

    override func tearDown() {
        for instance in instances { _ = instance.stop() }
        instances = []
        database?.drop()
    }

    /// Starts an instance and returns its UDP port.
    func startInstance() throws -> UInt16 {
        let process = try RouseProcess(
            arguments: ["serve"], environment: ["ROUSE_DATABASE_URL": database.conninfo, "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0"])
        instances.append(process)
        XCTAssertTrue(process.waitForOutput(containing: "serving SIP on"), process.outputText)
        let line = try XCTUnwrap(process.outputText.split(separator: "\n").first { $0.contains("serving SIP on") })
        return try ListenPoint(parsing: line.components(separatedBy: "serving SIP on ").last ?? "").port
    }

    /// An authenticated REGISTER to the instance on `port`; nil contact makes it a query.
    /// `challengeFrom` asks another instance for the nonce first.
    func register(port: UInt16, contact: String?, expires: Int = 600, challengeFrom: UInt16? = nil) throws -> SIPResponse {
        let client = try TestSIPClient(transport: .udp, host: "127.0.0.1", port: port)
        let challenger = try TestSIPClient(transport: .udp, host: "127.0.0.1", port: challengeFrom ?? port)
        defer {
            client.close()
            challenger.close()
        }
        let callID = UUID().uuidString
        func request(_ cseq: Int, _ authorization: String?) -> String {
            var text = "REGISTER sip:example.com SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:\(client.localPort);branch=z9hG4bK\(UUID().uuidString);rport\r\n"
            text += "Max-Forwards: 70\r\nFrom: <sip:1001@example.com>;tag=t\(cseq)\r\nTo: <sip:1001@example.com>\r\nCall-ID: \(callID)\r\nCSeq: \(cseq) REGISTER\r\n"
            if let contact { text += "Contact: \(contact)\r\nExpires: \(expires)\r\n" }
            if let authorization { text += "Authorization: \(authorization)\r\n" }
            return text + "Content-Length: 0\r\n\r\n"
        }
        func answer(_ client: TestSIPClient) throws -> SIPResponse {
            guard let bytes = try client.receive(timeout: .seconds(10)), case .response(let response) = try SIPParser.parse(bytes) else {
                throw NoAnswer()
            }
            return response
        }
        try challenger.send(request(1, nil))
        let challenge = try answer(challenger)
        let offer = try XCTUnwrap(DigestCredentials(header: challenge.headers.lines(.wwwAuthenticate)[0]))
        let ha1 = Digest.hex(.md5, "1001:example.com:pw-1001")
        let ha2 = Digest.hex(.md5, "REGISTER:sip:example.com")
        let digest = Digest.hex(.md5, "\(ha1):\(offer.nonce!):00000001:cafe:auth:\(ha2)")
        try client.send(request(2, "Digest username=\"1001\", realm=\"example.com\", nonce=\"\(offer.nonce!)\", uri=\"sip:example.com\", response=\"\(digest)\", algorithm=MD5, cnonce=\"cafe\", qop=auth, nc=00000001"))
        return try answer(client)
    }

    struct NoAnswer: Error {}

    /// Polls the instance on `port` with query REGISTERs until its binding list satisfies `condition`.
    func waitForBindings(port: UInt16, _ condition: ([String]) -> Bool) throws -> [String] {
        let deadline = Date().addingTimeInterval(30)
        var contacts: [String] = []
        repeat {
            contacts = try register(port: port, contact: nil).headers.values(.contact)
            if condition(contacts) { return contacts }
        } while Date() < deadline
        return contacts
    }

    func testARegistrationOnOneInstanceIsKnownToTheOther() throws {
        let first = try startInstance()
        let second = try startInstance()
        XCTAssertEqual(try register(port: first, contact: "<sip:1001@127.0.0.1:5080>").statusCode, 200)
        let seen = try waitForBindings(port: second) { $0.count == 1 }
        XCTAssertEqual(seen.map { $0.components(separatedBy: ";expires=")[0] }, ["<sip:1001@127.0.0.1:5080>"])

        // A nonce made by one instance is good on the other (the secret is shared through
        // PostgreSQL), and an unregister on the second reaches the first.
        XCTAssertEqual(try register(port: second, contact: "<sip:1001@127.0.0.1:5080>;expires=0", challengeFrom: first).statusCode, 200)
        XCTAssertEqual(try waitForBindings(port: first) { $0.isEmpty }, [])
    }
}
