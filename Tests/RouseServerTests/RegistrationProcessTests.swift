import Crypto
import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPTransport
import Storage
import XCTest

/// A phone registering with `rouse serve` over real sockets, against PostgreSQL, including a
/// `kill -9` of the server.
final class RegistrationProcessTests: XCTestCase {
    var database: TestDatabase!
    var rouse: RouseProcess?
    var points: [ListenPoint] = []
    var certificate: TestCertificate!

    override func setUpWithError() throws {
        database = try TestDatabase()
        certificate = try TestCertificate.make(commonName: "rouse.test")
        // The schema, a domain and an extension, made the way `rouse migrate` and the CLI make them.
        let connection = try database.connect()
        try Migrator.migrate(connection)
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        try directory.addExtension(AddressOfRecord(number: "1001", domain: "example.com"), password: "s3cret-1001")
        try startRouse()
    }

    override func tearDown() {
        _ = rouse?.stop()
        rouse = nil
        database?.drop()
        certificate?.remove()
    }

    func startRouse(_ settings: [String: String] = [:]) throws {
        let process = try RouseProcess(
            arguments: ["serve"],
            environment: [
                "ROUSE_DATABASE_URL": database.conninfo,
                "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0,tcp:127.0.0.1:0,tls:127.0.0.1:0",
                "ROUSE_TLS_CERT": certificate.certificatePath,
                "ROUSE_TLS_KEY": certificate.keyPath,
            ].merging(settings) { $1 })
        XCTAssertTrue(process.waitForOutput(containing: "serving SIP on"), process.outputText)
        let line = try XCTUnwrap(process.outputText.split(separator: "\n").first { $0.contains("serving SIP on") })
        points = try (line.components(separatedBy: "serving SIP on ").last ?? "").components(separatedBy: ", ").map { try ListenPoint(parsing: $0) }
        rouse = process
    }

    func client(_ transport: SIPTransportKind) throws -> TestSIPClient {
        let point = try XCTUnwrap(points.first { $0.transport == transport })
        let kind: TestSIPClient.Transport = transport == .udp ? .udp : transport == .tcp ? .tcp : .tls
        return try TestSIPClient(transport: kind, host: point.host, port: point.port)
    }

    static func register(
        transport: String, port: UInt16, contact: String?, callID: String, cseq: Int, authorization: String? = nil, expires: Int = 3600
    ) -> String {
        var text = "REGISTER sip:example.com SIP/2.0\r\n"
        text += "Via: SIP/2.0/\(transport) 127.0.0.1:\(port);branch=z9hG4bK\(UUID().uuidString);rport\r\n"
        text += "Max-Forwards: 70\r\nFrom: <sip:1001@example.com>;tag=reg\(cseq)\r\nTo: <sip:1001@example.com>\r\n"
        text += "Call-ID: \(callID)\r\nCSeq: \(cseq) REGISTER\r\nUser-Agent: RouseTestPhone/1\r\n"
        if let contact { text += "Contact: \(contact)\r\nExpires: \(expires)\r\n" }
        if let authorization { text += "Authorization: \(authorization)\r\n" }
        return text + "Content-Length: 0\r\n\r\n"
    }

    func finalResponse(_ client: TestSIPClient) throws -> SIPResponse {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            guard let bytes = try client.receive(timeout: .seconds(10)) else { break }
            if case .response(let response) = try SIPParser.parse(bytes), response.statusCode >= 200 { return response }
        }
        throw NoAnswer()
    }

    struct NoAnswer: Error {}

    /// Challenge, answer with `algorithm`, return the final response.
    func registerWithDigest(
        _ transport: SIPTransportKind, contact: String?, algorithm: Digest.Algorithm, password: String = "s3cret-1001"
    ) throws -> SIPResponse {
        let client = try client(transport)
        defer { client.close() }
        let callID = UUID().uuidString
        let name = transport.rawValue.uppercased()
        try client.send(Self.register(transport: name, port: client.localPort, contact: contact, callID: callID, cseq: 1))
        let challenge = try finalResponse(client)
        XCTAssertEqual(challenge.statusCode, 401)
        let offer = try XCTUnwrap(challenge.headers.lines(.wwwAuthenticate).first { $0.contains("algorithm=\(algorithm.rawValue)") })
        let parameters = try XCTUnwrap(DigestCredentials(header: offer))
        let ha1 = Digest.hex(algorithm, "1001:example.com:\(password)")
        let ha2 = Digest.hex(algorithm, "REGISTER:sip:example.com")
        let response = Digest.hex(algorithm, "\(ha1):\(parameters.nonce!):00000001:c0ffee:auth:\(ha2)")
        let authorization = "Digest username=\"1001\", realm=\"example.com\", nonce=\"\(parameters.nonce!)\", uri=\"sip:example.com\", response=\"\(response)\", algorithm=\(algorithm.rawValue), cnonce=\"c0ffee\", qop=auth, nc=00000001, opaque=\"\(parameters.opaque ?? "")\""
        try client.send(Self.register(transport: name, port: client.localPort, contact: contact, callID: callID, cseq: 2, authorization: authorization))
        return try finalResponse(client)
    }

    func storedBindings() throws -> [Binding] {
        try PostgresLocationStore(settings: database.settings()).loadBindings(now: Date())
    }

    /// The challenges of a first REGISTER, as (algorithm, nonce) pairs in their order.
    func offeredChallenges() throws -> [(Digest.Algorithm?, String?)] {
        let client = try client(.udp)
        defer { client.close() }
        try client.send(Self.register(transport: "UDP", port: client.localPort, contact: "<sip:1001@127.0.0.1:5071>", callID: UUID().uuidString, cseq: 1))
        let challenge = try finalResponse(client)
        XCTAssertEqual(challenge.statusCode, 401)
        return challenge.headers.lines(.wwwAuthenticate).map { line in
            let credentials = DigestCredentials(header: line)
            return (credentials?.algorithm, credentials?.nonce)
        }
    }

    func testPhoneRegistersOverUDPTCPAndTLSWithTheDefaultMD5Challenge() throws {
        let offered = try offeredChallenges()
        XCTAssertEqual(offered.map(\.0), [.md5], "digest_algorithms defaults to MD5 alone")
        let udp = try registerWithDigest(.udp, contact: "<sip:1001@127.0.0.1:5071>", algorithm: .md5)
        XCTAssertEqual(udp.statusCode, 200)
        let tcp = try registerWithDigest(.tcp, contact: "<sip:1001@127.0.0.1:5072;transport=tcp>", algorithm: .md5)
        XCTAssertEqual(tcp.statusCode, 200)
        let tls = try registerWithDigest(.tls, contact: "<sips:1001@127.0.0.1:5073;transport=tls>", algorithm: .md5)
        XCTAssertEqual(tls.statusCode, 200)
        XCTAssertEqual(tls.headers.values(.contact).count, 3, "the 200 lists every current binding")
        // A 200 means the binding is in PostgreSQL already.
        let stored = try storedBindings()
        XCTAssertEqual(Set(stored.map(\.flow.transport.rawValue)), ["udp", "tcp", "tls"])
        XCTAssertTrue(stored.allSatisfy { $0.userAgent == "RouseTestPhone/1" })
    }

    /// `sip_threads` 2: two loops share each port (SO_REUSEPORT) and two registrar shards decide;
    /// phones from many source ports, over every transport, are all answered on the port they used.
    func testPhonesOnEveryTransportRegisterWithTwoSIPThreads() throws {
        _ = rouse?.stop()
        try startRouse(["ROUSE_SIP_THREADS": "2"])
        XCTAssertEqual(points.count, 3, "each listen point is reported once")
        var contacts: [String] = []
        for (transport, count) in [(SIPTransportKind.udp, 4), (.tcp, 3), (.tls, 3)] {
            for index in 0..<count {
                let port = 5100 + contacts.count
                let contact = transport == .udp ? "<sip:1001@127.0.0.1:\(port)>"
                    : transport == .tcp ? "<sip:1001@127.0.0.1:\(port);transport=tcp>" : "<sips:1001@127.0.0.1:\(port);transport=tls>"
                let answer = try registerWithDigest(transport, contact: contact, algorithm: .md5)
                XCTAssertEqual(answer.statusCode, 200, "\(transport) phone \(index)")
                contacts.append(contact)
            }
        }
        let stored = try storedBindings()
        XCTAssertEqual(stored.count, 10)
        XCTAssertEqual(Set(stored.map(\.flow.transport.rawValue)), ["udp", "tcp", "tls"])
    }

    func testSHA256IsOfferedFirstWhenDigestAlgorithmsAsksForIt() throws {
        _ = rouse?.stop()
        try startRouse(["ROUSE_DIGEST_ALGORITHMS": "SHA-256, md5"])
        let offered = try offeredChallenges()
        XCTAssertEqual(offered.map(\.0), [.sha256, .md5])
        XCTAssertEqual(Set(offered.map(\.1)).count, 1, "both challenges carry one nonce")
        XCTAssertEqual(try registerWithDigest(.tcp, contact: "<sip:1001@127.0.0.1:5072;transport=tcp>", algorithm: .md5).statusCode, 200)
        XCTAssertEqual(try registerWithDigest(.udp, contact: "<sip:1001@127.0.0.1:5071>", algorithm: .md5).statusCode, 200)
        XCTAssertEqual(Set(try storedBindings().map(\.flow.transport.rawValue)), ["udp", "tcp"])
    }

    func testWrongPasswordIsChallengedAgainAndStoresNothing() throws {
        let response = try registerWithDigest(.udp, contact: "<sip:1001@127.0.0.1:5071>", algorithm: .md5, password: "wrong")
        XCTAssertEqual(response.statusCode, 401)
        XCTAssertTrue(try storedBindings().isEmpty)
    }

    func testBindingsSurviveKillNine() throws {
        XCTAssertEqual(try registerWithDigest(.tcp, contact: "<sip:1001@127.0.0.1:5072;transport=tcp>", algorithm: .md5).statusCode, 200)
        XCTAssertEqual(try registerWithDigest(.udp, contact: "<sip:1001@127.0.0.1:5071>", algorithm: .md5).statusCode, 200)
        let process = try XCTUnwrap(rouse)
        kill(process.process.processIdentifier, SIGKILL)
        XCTAssertNotNil(process.waitForExit(timeout: 30))
        rouse = nil
        try startRouse()
        XCTAssertTrue(rouse!.waitForOutput(containing: "bindings=2"), rouse!.outputText)
        // A query REGISTER (no Contact) lists both bindings from the restarted server.
        let query = try registerWithDigest(.udp, contact: nil, algorithm: .md5)
        XCTAssertEqual(query.statusCode, 200)
        XCTAssertEqual(Set(query.headers.values(.contact).map { $0.components(separatedBy: ";expires=")[0] }), [
            "<sip:1001@127.0.0.1:5072;transport=tcp>", "<sip:1001@127.0.0.1:5071>",
        ])
    }

    func runRouse(_ arguments: [String]) throws -> (Int32?, String) {
        let process = try RouseProcess(arguments: arguments, environment: ["ROUSE_DATABASE_URL": database.conninfo])
        let status = process.waitForExit(timeout: 60)
        return (status, process.outputText)
    }

    func testPushParametersShowInRegistrationsAndSurviveKillNine() throws {
        let token = "fcmToken-0123456789:APA91bHPRgkF3JUikC4ENAHEeMrd41Zxv3hVZjC9KtT8OvPVGJ"
        let contact = "<sip:1001@127.0.0.1:5074;transport=tcp;pn-provider=fcm;pn-prid=\(token);pn-param=rouse-test>;+sip.pnsreg"
        // No push app for FCM yet: RFC 8599 says 555.
        XCTAssertEqual(try registerWithDigest(.tcp, contact: contact, algorithm: .md5).statusCode, 555)

        // The operator adds one while Rouse runs; Rouse hears of it and accepts the binding.
        let account = try PushStandIn.makeFCMServiceAccount(projectID: "rouse-test")
        defer { account.remove() }
        let (added, addOutput) = try runRouse(["push-app", "add", "fcm", "--service-account", account.path])
        XCTAssertEqual(added, 0, addOutput)
        var response = try registerWithDigest(.tcp, contact: contact, algorithm: .md5)
        let deadline = Date().addingTimeInterval(30)
        while response.statusCode == 555, Date() < deadline {
            response = try registerWithDigest(.tcp, contact: contact, algorithm: .md5)
        }
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(response.headers.lines(.featureCaps), ["*;+sip.pns=\"fcm\";+sip.pnsreg=\"121\""])

        let (listed, before) = try runRouse(["registrations", "1001@example.com"])
        XCTAssertEqual(listed, 0, before)
        XCTAssertTrue(before.contains("fcm / "), before)
        XCTAssertTrue(before.contains("rouse-test"), before)
        XCTAssertFalse(before.contains(token), "tokens are shortened in listings")

        let process = try XCTUnwrap(rouse)
        kill(process.process.processIdentifier, SIGKILL)
        XCTAssertNotNil(process.waitForExit(timeout: 30))
        rouse = nil
        try startRouse()
        let (_, after) = try runRouse(["registrations", "1001@example.com"])
        func normalised(_ text: String) -> String {
            text.replacingOccurrences(of: #"expires in \d+ s"#, with: "expires in N s", options: .regularExpression)
        }
        XCTAssertEqual(normalised(after), normalised(before), "the same binding and push channel after kill -9")
        let stored = try storedBindings()
        XCTAssertEqual(stored.first?.pushChannels, [PushChannel(provider: .fcm, token: token, param: "rouse-test", kind: .standard)])
    }
}
