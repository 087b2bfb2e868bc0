import CallRouting
import Foundation
import Glibc
import Push
import Registrar
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPTransport
import Storage
import XCTest

/// A PostgreSQL cluster of a test's own, made and started with `scripts/pg.sh` (as `make test`
/// makes its own), which the test may stop and start again to play an outage. It listens only on a
/// Unix socket inside its folder, so its port number collides with no other cluster. The folder is
/// a `TemporaryFolder` (the temporary directory must be reachable by the postgres user, as
/// `make test`'s is), removed by `remove()`, and by `init` when the cluster could not be made.
final class PrivateCluster {
    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    private let temporaryFolder: TemporaryFolder
    var folder: String { temporaryFolder.path }
    let port = 5432
    var clusterDirectory: String { folder + "/c" }
    /// The database Rouse uses on it.
    var conninfo: String { "host=\(clusterDirectory) port=\(port) user=postgres dbname=rouse" }

    /// Makes the cluster, starts it and creates the `rouse` database (a few seconds: `initdb`).
    init() throws {
        // The postgres user must reach the cluster folder inside it.
        temporaryFolder = try TemporaryFolder(prefix: "rouse-cluster", mode: 0o755)
        do {
            try start()
            let admin = try PostgresConnection(conninfo: "host=\(clusterDirectory) port=\(port) user=postgres dbname=postgres")
            try admin.query("CREATE DATABASE rouse")
        } catch {
            remove()
            throw error
        }
    }

    func start() throws { try pg("start", clusterDirectory, String(port)) }

    /// Stops the server (`pg_ctl stop -m fast`: sessions are ended, the socket goes away).
    func stop() throws { try pg("stop", clusterDirectory) }

    /// Stops the server and removes the folder.
    func remove() {
        try? stop()
        temporaryFolder.remove()
    }

    /// Runs `scripts/pg.sh` and waits for it, as a `ChildProcess`. Not through Foundation's `Process`, which learns of
    /// a child's end when every holder of a descriptor it gave the child closes it: the server
    /// pg_ctl starts would hold it (and the pipes of every other process the test runs) for as long
    /// as it runs. The script starts with every descriptor but 0–2 closed, and its output goes to
    /// `pg-sh.log` in the folder.
    private func pg(_ arguments: String...) throws {
        let logPath = folder + "/pg-sh.log"
        let closeOthersThenRun = #"for fd in /proc/$$/fd/*; do n=${fd##*/}; [ "$n" -gt 2 ] && eval "exec $n>&-"; done 2>/dev/null; exec bash "$0" "$@""#
        let argv = ["/bin/bash", "-c", closeOthersThenRun, Self.repositoryRoot + "/scripts/pg.sh"] + arguments
        var environment = ProcessInfo.processInfo.environment
        environment["ROUSE_PG_FSYNC"] = "off"
        let status = try ChildProcess(argv, environment: environment, outputPath: logPath).waitForExit()
        guard status == 0 else {
            let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
            throw PrivateClusterFailure(description: "scripts/pg.sh \(arguments.joined(separator: " ")) failed (\(status)): \(text)")
        }
    }
}

struct PrivateClusterFailure: Error, CustomStringConvertible {
    let description: String
}

/// What the fault tests share: a database with extensions 1001 (the caller) and 1002 (the callee)
/// of example.com, an APNs stand-in with its push app, `rouse serve` started with short waits,
/// scripted phones, and reads of journeys, push records and `/health`.
final class CallTestBed {
    static let voipParam = "DEF123GHIJ.com.example.app.voip"

    let conninfo: String
    let apns: PushStandIn
    var rouse: RouseProcess?
    var points: [ListenPoint] = []
    var agents: [TestUserAgent] = []

    /// Migrates the database at `conninfo` and adds the extensions and the APNs app.
    init(conninfo: String) throws {
        self.conninfo = conninfo
        let connection = try TestDatabase.connect(conninfo)
        try Migrator.migrate(connection)
        let directory = PostgresDirectory(settings: PostgresSettings(conninfo: conninfo, secrets: TestDatabase.secrets))
        _ = try directory.addDomain("example.com")
        for number in ["1001", "1002"] {
            try directory.addExtension(AddressOfRecord(number: number, domain: "example.com"), password: "pw-\(number)")
        }
        let key = try PushStandIn.makeAPNsKey()
        defer { key.remove() }  // the stand-in reads it at start
        apns = try PushStandIn.apns(keys: ["ABC123DEFG": key.keyPath], teamID: "DEF123GHIJ", topics: ["com.example.app"])
        _ = try PostgresPushApps(connection: connection).add(PushApp(credentials: .apns(APNsCredentials(
            teamID: "DEF123GHIJ", keyID: "ABC123DEFG", topic: "com.example.app", privateKeyPEM: key.privateKeyPEM, environment: .production))))
    }

    /// Ends the phones, `rouse` and the stand-in.
    func tearDown() {
        agents.forEach { $0.close() }
        agents = []
        _ = rouse?.stop()
        if ProcessInfo.processInfo.environment["ROUSE_TEST_SHOW_OUTPUT"] != nil, let rouse { print("== rouse output:\n\(rouse.outputText)") }
        rouse = nil
        apns.stop()
    }

    /// Starts `rouse serve` on the database (UDP and TCP), with a 1 s wait when a desk phone is
    /// registered, 3 s push requests, and `extra` settings.
    func startRouse(extra: [String: String] = [:]) throws {
        var environment = [
            "ROUSE_DATABASE_URL": conninfo, "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0,tcp:127.0.0.1:0",
            "ROUSE_APNS_PRODUCTION_URL": apns.baseURL, "ROUSE_APNS_SANDBOX_URL": apns.baseURL, "ROUSE_PUSH_CA_FILE": apns.caFile,
            "ROUSE_PUSH_TIMEOUT": "3", "ROUSE_WAKE_WAIT": "3", "ROUSE_WAKE_WAIT_WITH_DESK_PHONE": "1", "ROUSE_RING_TIMEOUT": "20",
            "ROUSE_DATABASE_CONNECT_TIMEOUT": "2",
        ]
        environment.merge(extra) { $1 }
        let process = try RouseProcess(arguments: ["serve"], environment: environment)
        rouse = process
        XCTAssertTrue(process.waitForOutput(containing: "serving HTTP on"), process.outputText)
        let line = try XCTUnwrap(process.outputText.split(separator: "\n").first { $0.contains("serving SIP on") })
        points = try (line.components(separatedBy: "serving SIP on ").last ?? "").components(separatedBy: ", ").map { try ListenPoint(parsing: $0) }
    }

    func port(_ transport: SIPTransportKind) throws -> UInt16 {
        try XCTUnwrap(points.first { $0.transport == transport }).port
    }

    /// The HTTP API's port, from the `http.listening` log line.
    func httpPort() throws -> UInt16 {
        try XCTUnwrap(rouse).httpPort()
    }

    /// A desk phone of 1002 over UDP (no push parameters).
    func deskPhone(_ name: String = "RouseDeskPhone/1") throws -> TestUserAgent {
        let agent = try TestUserAgent(
            transport: .udp, serverPort: try port(.udp), user: "1002", domain: "example.com", password: "pw-1002", userAgent: name)
        agents.append(agent)
        return agent
    }

    /// An iPhone app of 1002 woken through APNs (its VoIP token in its Contact, RFC 8599), over TCP.
    func iPhoneApp(token: String, name: String = "RouseTestApp/1 (iPhone)") throws -> TestUserAgent {
        let agent = try TestUserAgent(
            transport: .tcp, serverPort: try port(.tcp), user: "1002", domain: "example.com", password: "pw-1002",
            instanceID: "urn:uuid:\(UUID().uuidString.lowercased())",
            contactURIParameters: "pn-provider=apns;pn-prid=\(token);pn-param=\(Self.voipParam)", userAgent: name)
        agents.append(agent)
        return agent
    }

    func caller() throws -> TestUserAgent {
        let agent = try TestUserAgent(transport: .udp, serverPort: try port(.udp), user: "1001", domain: "example.com", password: "pw-1001")
        agents.append(agent)
        return agent
    }

    /// INVITEs 1002 from `caller` (answering the 407); returns once Rouse took the call (its 100
    /// Trying to the authenticated INVITE). Every agent is linked so each keeps answering.
    func place(_ caller: TestUserAgent) throws -> TestOutgoingCall {
        for agent in agents where agent !== caller { TestUserAgent.link(agent, caller) }
        let call = try caller.invite("sip:1002@example.com")
        _ = try call.waitForResponse { $0.statusCode == 100 && ($0.cseq?.number ?? 0) >= 2 }
        return call
    }

    /// Answer on `phone`, ACK and BYE from the caller: the whole dialog through Rouse.
    func answerAndHangUp(_ phone: TestUserAgent, _ invite: SIPRequest, _ call: TestOutgoingCall, _ caller: TestUserAgent) throws {
        let phoneDialog = try phone.answer(invite)
        let ok = try call.waitForResponse(status: 200)
        let callerDialog = try call.ack(ok)
        try phoneDialog.waitForAck()
        let bye = try callerDialog.sendRequest(.bye)
        try phoneDialog.receiveBye()
        XCTAssertEqual(try caller.waitForFinalResponse(to: bye).statusCode, 200)
    }

    /// The stand-in's push requests for `token`, once there are `count`.
    func pushes(token: String, count: Int = 1, timeout: TimeInterval = 15) throws -> [StandInRequest] {
        let deadline = Date().addingTimeInterval(timeout)
        var found: [StandInRequest] = []
        while Date() < deadline {
            found = try apns.requests().filter { $0.path.hasSuffix(token) }
            if found.count >= count { return found }
            Thread.sleep(forTimeInterval: 0.02)
        }
        XCTFail("\(found.count) pushes for \(token.prefix(8)), not \(count), within \(timeout) s")
        return found
    }

    /// The call's journey once PostgreSQL has it and `extra` holds (polls, with a deadline).
    func journey(callID: String, timeout: TimeInterval = 30, where extra: (CallJourney) -> Bool = { _ in true }) throws -> CallJourney {
        let deadline = Date().addingTimeInterval(timeout)
        var last: CallJourney?
        while Date() < deadline {
            if let connection = try? PostgresConnection(conninfo: conninfo) {
                last = try PostgresCalls.recent(on: connection, limit: 20).first { $0.callID == callID }
                if let last, extra(last) { return last }
            }
            Thread.sleep(forTimeInterval: 0.1)
        }
        throw JourneyMissing(callID: callID, last: last.map { "\($0.outcome) \($0.events.map(\.text))" })
    }

    struct JourneyMissing: Error { let callID: String; let last: String? }

    /// `GET /health` as status and JSON.
    func health() throws -> (status: Int, json: [String: Any]) {
        let answer = try TestHTTPClient(port: try httpPort()).send("GET", "/health")
        return (answer.status, answer.json)
    }

    /// Polls `/health` until `predicate` holds (true), or gives up after `timeout` (false).
    func waitForHealth(timeout: TimeInterval = 30, _ predicate: (Int, [String: Any]) -> Bool) throws -> (Int, [String: Any]) {
        let deadline = Date().addingTimeInterval(timeout)
        var last = try health()
        while !predicate(last.status, last.json), Date() < deadline {
            Thread.sleep(forTimeInterval: 0.1)
            last = try health()
        }
        return last
    }

    /// `/metrics` as text.
    func metrics() throws -> String {
        String(decoding: try TestHTTPClient(port: try httpPort()).send("GET", "/metrics").body, as: UTF8.self)
    }
}
