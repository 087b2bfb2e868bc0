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
        let directory = PostgresDirectory(settings: database.settings())
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

    func register(port: UInt16, contact: String?, challengeFrom: UInt16? = nil) throws -> SIPResponse {
        try DigestRegistration.register(port: port, user: "1001", password: "pw-1001", contact: contact, challengeFrom: challengeFrom)
    }

    func waitForBindings(port: UInt16, _ condition: ([String]) -> Bool) throws -> [String] {
        try DigestRegistration.waitForBindings(port: port, user: "1001", password: "pw-1001", condition)
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
