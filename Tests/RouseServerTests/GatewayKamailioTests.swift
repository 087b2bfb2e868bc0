import Foundation
import Registrar
import RouseTestSupport
import SIPMessage
import XCTest

/// Debian's Kamailio configured as the PBX Rouse sits in front of (`Tests/Interop/kamailio/pbx.cfg`),
/// rendered for one test: loopback, a port of its own, the addresses it trusts without digest, the
/// digest user Rouse may answer as. It runs in the foreground in a temporary folder (its
/// configuration, address list, runtime files and log), all removed by `stop()` or deinit.
///
/// Threading: used from one test's thread.
final class KamailioPBX {
    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let trunkUser = "rouse-gateway"

    let host: String
    let port: UInt16
    let trunkPassword = "pbx-" + UUID().uuidString.prefix(8)
    private let folder: TemporaryFolder
    private var process: ChildProcess?

    /// Starts Kamailio on `port` (a free one when nil), trusting REGISTERs from each of `trusted`
    /// (`127.0.0.1:port` entries) without digest, on loopback address `host`; waits (up to 30 s)
    /// until it answers OPTIONS.
    init(host: String = "127.0.0.1", port: UInt16? = nil, trusted: [(String, UInt16)] = []) throws {
        self.host = host
        let executable = "/usr/sbin/kamailio"
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw ChildProcess.Failure(description: "no kamailio at \(executable) (scripts/deps.sh installs it)")
        }
        self.port = try port ?? FreePort.pick()
        folder = try TemporaryFolder(prefix: "rouse-kamailio-pbx")
        let addresses = trusted.map { "1 \($0.0) 32 \($0.1)" }.joined(separator: "\n") + "\n"
        try addresses.write(toFile: folder.file("address.list"), atomically: true, encoding: .utf8)
        let template = try String(
            contentsOf: Self.repositoryRoot.appendingPathComponent("Tests/Interop/kamailio/pbx.cfg"), encoding: .utf8)
        let rendered = template
            .replacingOccurrences(of: "@HOST@", with: host)
            .replacingOccurrences(of: "@PORT@", with: String(self.port))
            .replacingOccurrences(of: "@SECRET@", with: UUID().uuidString)
            .replacingOccurrences(of: "@ADDRESS_FILE@", with: folder.file("address.list"))
            .replacingOccurrences(of: "@TRUNK_USER@", with: Self.trunkUser)
            .replacingOccurrences(of: "@TRUNK_PASSWORD@", with: trunkPassword)
        try rendered.write(toFile: folder.file("kamailio.cfg"), atomically: true, encoding: .utf8)
        process = try ChildProcess(
            [executable, "-DD", "-E", "-f", folder.file("kamailio.cfg"), "-m", "64", "-M", "8", "-Y", folder.path, "-w", folder.path],
            environment: ["PATH": "/usr/sbin:/usr/bin:/bin"], outputPath: folder.file("kamailio.log"))
        do {
            try waitUntilServing(deadline: Date().addingTimeInterval(30))
        } catch {
            stop()
            throw error
        }
    }

    deinit { stop() }

    /// The folder of its configuration, runtime files and log.
    var folderPath: String { folder.path }

    /// What Kamailio has logged so far.
    var outputText: String { (try? String(contentsOfFile: folder.file("kamailio.log"), encoding: .utf8)) ?? "" }

    /// Stops Kamailio and removes its folder.
    func stop() {
        process?.stop()
        process = nil
        folder.remove()
    }

    /// The contacts Kamailio holds for `user`: a REGISTER without Contact (RFC 3261 §10.2.3),
    /// authenticated as the trunk user, from a port of its own.
    func contacts(of user: String) throws -> [String] {
        let client = try TestSIPClient(transport: .udp, host: host, port: port)
        defer { client.close() }
        var digest = DigestClient(username: Self.trunkUser, password: trunkPassword)
        var authorization: String?
        for cseq in 1...2 {
            var request = "REGISTER sip:\(host):\(port) SIP/2.0\r\nVia: SIP/2.0/UDP \(host):\(client.localPort);rport;branch=z9hG4bK-fetch\(cseq)\r\n"
                + "Max-Forwards: 70\r\nFrom: <sip:\(user)@\(host)>;tag=fetch\r\nTo: <sip:\(user)@\(host)>\r\nCall-ID: fetch-\(user)@test\r\n"
                + "CSeq: \(cseq) REGISTER\r\n"
            if let authorization { request += "Authorization: \(authorization)\r\n" }
            request += "Content-Length: 0\r\n\r\n"
            try client.send(request)
            guard let bytes = try client.receive(timeout: .seconds(5)), case .response(let response) = try SIPParser.parse(bytes) else {
                throw ChildProcess.Failure(description: "Kamailio did not answer the fetch REGISTER")
            }
            if response.statusCode == 401 {
                authorization = digest.authorization(answering: response, method: "REGISTER", uri: "sip:\(host):\(port)")?.value
                continue
            }
            guard response.statusCode == 200 else { throw ChildProcess.Failure(description: "fetch REGISTER got \(response.statusCode)") }
            return response.headers.lines(.contact)
        }
        throw ChildProcess.Failure(description: "fetch REGISTER challenged twice")
    }

    /// Waits until Kamailio holds a contact of `user` that passes `predicate`.
    func waitForContact(of user: String, timeout: TimeInterval = 20, where predicate: (String) -> Bool = { _ in true }) throws -> String? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let found = try contacts(of: user).first(where: predicate) { return found }
            Thread.sleep(forTimeInterval: 0.1)
        }
        return nil
    }

    private func waitUntilServing(deadline: Date) throws {
        let probe = try TestSIPClient(transport: .udp, host: host, port: port)
        defer { probe.close() }
        while Date() < deadline {
            guard process?.isRunning == true else {
                throw ChildProcess.Failure(description: "kamailio exited with \(process?.exitStatus ?? -1):\n\(outputText.suffix(3_000))")
            }
            try? probe.send(
                "OPTIONS sip:\(host):\(port) SIP/2.0\r\nVia: SIP/2.0/UDP \(host):\(probe.localPort);rport;branch=z9hG4bK-probe\r\n"
                    + "Max-Forwards: 70\r\nFrom: <sip:probe@\(host)>;tag=p\r\nTo: <sip:\(host)>\r\nCall-ID: probe@test\r\n"
                    + "CSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n")
            if let text = try? probe.receiveText(timeout: .milliseconds(200)), text.hasPrefix("SIP/2.0 200 ") { return }
        }
        throw ChildProcess.Failure(description: "kamailio did not answer OPTIONS on \(host):\(port):\n\(outputText.suffix(3_000))")
    }
}

/// The PBX fixture itself: it challenges a stranger, trusts the address it was told to, keeps
/// the binding, and leaves nothing behind.
final class GatewayKamailioTests: XCTestCase {
    func register(_ client: TestSIPClient, to pbx: KamailioPBX, user: String, cseq: Int, authorization: String? = nil) throws -> SIPResponse {
        var request = "REGISTER sip:\(pbx.host):\(pbx.port) SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:\(client.localPort);rport;branch=z9hG4bK-r\(cseq)\r\n"
            + "Max-Forwards: 70\r\nFrom: <sip:\(user)@127.0.0.1>;tag=r\r\nTo: <sip:\(user)@127.0.0.1>\r\nCall-ID: reg-\(user)@test\r\n"
            + "CSeq: \(cseq) REGISTER\r\nContact: <sip:\(user)@127.0.0.1:\(client.localPort)>\r\nExpires: 60\r\n"
        if let authorization { request += "Authorization: \(authorization)\r\n" }
        try client.send(request + "Content-Length: 0\r\n\r\n")
        let bytes = try XCTUnwrap(try client.receive(timeout: .seconds(5)))
        guard case .response(let response) = try SIPParser.parse(bytes) else { throw ChildProcess.Failure(description: "not a response") }
        return response
    }

    func testStrangerIsChallengedTrustedAddressIsNotAndNothingIsLeftBehind() throws {
        let port = try FreePort.pick()
        let friend = try TestSIPClient(transport: .udp, host: "127.0.0.1", port: port)
        defer { friend.close() }
        let pbx = try KamailioPBX(port: port, trusted: [("127.0.0.1", friend.localPort)])

        let stranger = try TestSIPClient(transport: .udp, host: pbx.host, port: pbx.port)
        defer { stranger.close() }
        let challenge = try register(stranger, to: pbx, user: "2001", cseq: 1)
        XCTAssertEqual(challenge.statusCode, 401)
        var digest = DigestClient(username: KamailioPBX.trunkUser, password: "wrong")
        let wrong = try XCTUnwrap(digest.authorization(answering: challenge, method: "REGISTER", uri: "sip:\(pbx.host):\(pbx.port)"))
        XCTAssertEqual(try register(stranger, to: pbx, user: "2001", cseq: 2, authorization: wrong.value).statusCode, 401)
        digest.password = pbx.trunkPassword
        let right = try XCTUnwrap(digest.authorization(answering: challenge, method: "REGISTER", uri: "sip:\(pbx.host):\(pbx.port)"))
        XCTAssertEqual(try register(stranger, to: pbx, user: "2001", cseq: 3, authorization: right.value).statusCode, 200)
        XCTAssertNotNil(try pbx.waitForContact(of: "2001") { $0.contains(":\(stranger.localPort)") })

        XCTAssertEqual(try register(friend, to: pbx, user: "2002", cseq: 1).statusCode, 200, "the trusted address needs no digest")

        XCTAssertTrue(FileManager.default.fileExists(atPath: pbx.folderPath + "/kamailio.log"))
        pbx.stop()
        XCTAssertFalse(FileManager.default.fileExists(atPath: pbx.folderPath), "the PBX's folder is removed when it stops")
    }
}
