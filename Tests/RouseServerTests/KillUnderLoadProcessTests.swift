import Crypto
import Foundation
import Glibc
import Registrar
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPTransport
import Storage
import XCTest

/// `kill -9` of `rouse serve` in the middle of a REGISTER load (issue 9 item 3): 500 phones of 100
/// extensions register with digest authentication, over one UDP socket and three TCP connections,
/// 40 at a time; Rouse is killed once 250 have been answered 200, with the rest in flight. Started
/// again on the same database, it has every binding whose REGISTER was answered 200.
final class KillUnderLoadProcessTests: XCTestCase {
    static let extensions = 100
    static let registrations = 500
    static let window = 40
    static let killAfter = 250

    var database: TestDatabase!
    var rouse: RouseProcess?
    var points: [ListenPoint] = []

    override func setUpWithError() throws {
        database = try TestDatabase()
        try Migrator.migrate(try database.connect())
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        for index in 0..<Self.extensions {
            let number = String(2000 + index)
            try directory.addExtension(AddressOfRecord(number: number, domain: "example.com"), password: "pw-\(number)")
        }
    }

    override func tearDown() {
        _ = rouse?.stop()
        rouse = nil
        database?.drop()
    }

    func startRouse() throws -> RouseProcess {
        let process = try RouseProcess(
            arguments: ["serve"],
            environment: ["ROUSE_DATABASE_URL": database.conninfo, "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0,tcp:127.0.0.1:0"])
        rouse = process
        XCTAssertTrue(process.waitForOutput(containing: "serving HTTP on"), process.outputText)
        let line = try XCTUnwrap(process.outputText.split(separator: "\n").first { $0.contains("serving SIP on") })
        points = try (line.components(separatedBy: "serving SIP on ").last ?? "").components(separatedBy: ", ").map { try ListenPoint(parsing: $0) }
        return process
    }

    /// One phone's registration: its extension, Contact and Call-ID, and how far it got.
    struct Registration {
        let number: String
        let contact: String
        let callID: String
        let channel: Int
        var answered: Int?
    }

    func register(_ registration: Registration, over client: TestSIPClient, cseq: Int, authorization: String? = nil) throws {
        let transport = client.transport == .udp ? "UDP" : "TCP"
        var text = "REGISTER sip:example.com SIP/2.0\r\n"
        text += "Via: SIP/2.0/\(transport) 127.0.0.1:\(client.localPort);branch=z9hG4bK\(UUID().uuidString.lowercased());rport\r\n"
        text += "Max-Forwards: 70\r\nFrom: <sip:\(registration.number)@example.com>;tag=\(registration.callID.prefix(8))\r\n"
        text += "To: <sip:\(registration.number)@example.com>\r\nCall-ID: \(registration.callID)\r\nCSeq: \(cseq) REGISTER\r\n"
        text += "Contact: <\(registration.contact)>\r\nExpires: 3600\r\nUser-Agent: RouseLoadPhone/1\r\n"
        if let authorization { text += "Authorization: \(authorization)\r\n" }
        try client.send(text + "Content-Length: 0\r\n\r\n")
    }

    /// The MD5 digest answer to a 401 for `number`.
    func authorization(answering challenge: SIPResponse, number: String) throws -> String {
        let offer = try XCTUnwrap(challenge.headers.lines(.wwwAuthenticate).first { $0.contains("algorithm=MD5") })
        let parameters = try XCTUnwrap(DigestCredentials(header: offer))
        let nonce = try XCTUnwrap(parameters.nonce)
        let ha1 = Digest.hex(.md5, "\(number):example.com:pw-\(number)")
        let ha2 = Digest.hex(.md5, "REGISTER:sip:example.com")
        let response = Digest.hex(.md5, "\(ha1):\(nonce):00000001:0a4f113b:auth:\(ha2)")
        return "Digest username=\"\(number)\", realm=\"example.com\", nonce=\"\(nonce)\", uri=\"sip:example.com\", "
            + "response=\"\(response)\", algorithm=MD5, cnonce=\"0a4f113b\", qop=auth, nc=00000001, opaque=\"\(parameters.opaque ?? "")\""
    }

    func testEveryBindingAnswered200SurvivesAKillMidLoad() throws {
        let process = try startRouse()
        let udp = try XCTUnwrap(points.first { $0.transport == .udp })
        let tcp = try XCTUnwrap(points.first { $0.transport == .tcp })
        var channels = [try TestSIPClient(transport: .udp, host: udp.host, port: udp.port)]
        for _ in 0..<3 { channels.append(try TestSIPClient(transport: .tcp, host: tcp.host, port: tcp.port)) }
        var open = Array(repeating: true, count: channels.count)
        var registrations = (0..<Self.registrations).map { index -> Registration in
            let number = String(2000 + index % Self.extensions)
            let channel = index % channels.count
            let transport = channel == 0 ? "" : ";transport=tcp"
            return Registration(
                number: number, contact: "sip:\(number)@127.0.0.1:\(30_000 + index)\(transport)",
                callID: "load-\(index)-\(UUID().uuidString.lowercased())", channel: channel)
        }
        let byCallID = Dictionary(uniqueKeysWithValues: registrations.indices.map { (registrations[$0].callID, $0) })
        var okCount = 0
        var killed = false
        var next = 0

        /// Reads what every open channel has now; sends the authenticated REGISTER for each 401.
        func collect(until deadline: ContinuousClock.Instant) throws {
            for (number, client) in channels.enumerated() where open[number] {
                while ContinuousClock.now < deadline {
                    let bytes: [UInt8]?
                    do {
                        bytes = try client.receive(timeout: .milliseconds(5))
                    } catch {
                        open[number] = false  // Rouse is gone: the connection closed
                        break
                    }
                    guard let bytes else { break }
                    guard case .response(let response) = try SIPParser.parse(bytes), let callID = response.callID,
                        let index = byCallID[callID]
                    else { continue }
                    if response.statusCode == 401, !killed {
                        try register(
                            registrations[index], over: client, cseq: 2,
                            authorization: try authorization(answering: response, number: registrations[index].number))
                    } else if response.statusCode >= 200, response.statusCode != 401 {
                        registrations[index].answered = response.statusCode
                        if response.statusCode == 200 { okCount += 1 }
                    }
                }
            }
        }

        let loadDeadline = ContinuousClock.now + .seconds(120)
        while !killed, next < registrations.count, ContinuousClock.now < loadDeadline {
            let wave = next..<min(registrations.count, next + Self.window)
            next = wave.upperBound
            for index in wave { try register(registrations[index], over: channels[registrations[index].channel], cseq: 1) }
            let waveDeadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < waveDeadline, wave.contains(where: { registrations[$0].answered == nil }) {
                try collect(until: ContinuousClock.now + .milliseconds(50))
                if okCount >= Self.killAfter, !killed {
                    // Mid-wave: the rest of this wave's REGISTERs are in flight.
                    kill(process.process.processIdentifier, SIGKILL)
                    killed = true
                    break
                }
            }
        }
        XCTAssertTrue(killed, "the load reached \(okCount) answers 200 before it ended")
        XCTAssertNotNil(process.waitForExit(timeout: 30))
        // A 200 Rouse sent just before it died may still be on its way: read what is left.
        try collect(until: ContinuousClock.now + .milliseconds(500))
        let unanswered = registrations.filter { $0.answered == nil }.count
        XCTAssertGreaterThan(unanswered, 0, "some REGISTERs were in flight (or never sent) when Rouse was killed")

        let restarted = try startRouse()
        let answered200 = registrations.filter { $0.answered == 200 }
        XCTAssertGreaterThanOrEqual(answered200.count, Self.killAfter)
        let stored = Set(try PostgresLocationStore.loadBindings(on: try database.connect(), for: nil, now: Date()).map(\.contact))
        let lost = answered200.filter { !stored.contains($0.contact) }
        XCTAssertEqual(lost.map(\.contact), [], "every binding answered 200 is there after kill -9 and a restart")
        let line = restarted.line(containing: "event=registrar.ready") ?? ""
        let loaded = Int(line.components(separatedBy: " bindings=").last?.split(separator: " ").first ?? "") ?? -1
        XCTAssertGreaterThanOrEqual(loaded, answered200.count, String(line))
        XCTAssertEqual(loaded, stored.count, "the restarted registrar holds what PostgreSQL holds")
        print("kill -9 under REGISTER load: \(answered200.count) answered 200, \(unanswered) unanswered, \(stored.count) bindings after the restart")
    }
}
