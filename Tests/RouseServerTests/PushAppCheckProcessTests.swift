import Crypto
import Foundation
import Push
import RouseTestSupport
import Storage
import XCTest

/// Push apps checked at start-up (issue 20 item 4): `rouse serve` finds a stored app that cannot
/// push without sending a push, logs one error line per problem (`push.app_broken`, never the
/// key), and `/health` keeps answering 200 while it lists the broken app in words.
final class PushAppCheckProcessTests: XCTestCase {
    var database: TestDatabase?
    var rouse: RouseProcess?

    override func setUpWithError() throws {
        database = try TestDatabase()
    }

    override func tearDown() {
        _ = rouse?.stop()
        rouse = nil
        database?.drop()
    }

    /// Stores an app as a row, past `PushApp.validate` (as an older version, a hand edit or a
    /// restored dump could leave it); returns its id.
    func storeRow(_ connection: PostgresConnection, kind: String, fields: String, key: String, param: String) throws -> String {
        // Stored as an upgrade finds it (marked plain), then sealed as rouse serve would at start.
        let rows = try connection.query(
            "INSERT INTO push_apps (kind, fields, key_text, param) VALUES ($1, $2::jsonb, 'plain:' || $3, $4) RETURNING id", [kind, fields, key, param])
        try SealedSecrets.sealPlainValues(on: connection)
        return try XCTUnwrap(rows.value(0, "id"))
    }

    /// The JSON log lines (`log_format` json) of one event, in order, once there are `count` of
    /// them (log lines come from the logger's own thread) or 30 s have passed.
    static func events(_ event: String, count: Int, in process: RouseProcess) -> [[String: String]] {
        let deadline = Date().addingTimeInterval(30)
        while true {
            let found = process.outputText.split(separator: "\n").compactMap { line -> [String: String]? in
                guard line.hasPrefix("{"), let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String],
                    object["event"] == event
                else { return nil }
                return object
            }
            if found.count >= count || Date() >= deadline { return found }
            Thread.sleep(forTimeInterval: 0.05)
        }
    }

    func testBrokenAppsAreLoggedLoudlyAndListedByHealthWhichStillAnswers200() throws {
        let conninfo = try XCTUnwrap(database).conninfo
        let connection = try TestDatabase.connect(conninfo)
        try Migrator.migrate(connection)
        // A working app: no line for it.
        let goodKey = SigningKey.generateP256().privateKeyPEM()
        let good = try PostgresPushApps(connection: connection).add(PushApp(
            credentials: .apns(APNsCredentials(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", topic: "com.example.good", privateKeyPEM: goodKey)),
            param: "com.example.good"))
        // A team id Apple never issued, and a .p8 whose text is not a key.
        let brokenKey = "-----BEGIN PRIVATE KEY-----\nTm90IGEga2V5IGF0IGFsbA==\n-----END PRIVATE KEY-----\n"
        let apns = try storeRow(
            connection, kind: "apns", fields: #"{"team_id":"team-1","key_id":"ABC123DEFG","topic":"com.example.app"}"#, key: brokenKey, param: "")
        // A service account without a project, whose key is an EC key rather than RSA.
        let ecKey = SigningKey.generateP256().privateKeyPEM()
        let fcm = try storeRow(
            connection, kind: "fcm", fields: #"{"client_email":"rouse@example.iam.gserviceaccount.com","token_uri":"https://oauth2.googleapis.com/token"}"#,
            key: ecKey, param: "")

        let process = try RouseProcess(
            arguments: ["serve"],
            environment: ["ROUSE_DATABASE_URL": conninfo, "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0", "ROUSE_LOG_FORMAT": "json"])
        rouse = process
        XCTAssertTrue(process.waitForOutput(containing: "serving HTTP on"), process.outputText)
        let broken = Self.events("push.app_broken", count: 4, in: process)
        let lines = broken.map { "\($0["app"] ?? "") \($0["kind"] ?? "") \($0["field"] ?? "")" }
        XCTAssertEqual(lines, ["\(apns) apns team_id", "\(apns) apns key", "\(fcm) fcm project_id", "\(fcm) fcm private_key"], process.outputText)
        XCTAssertTrue(broken.allSatisfy { $0["level"] == "error" }, "\(broken)")
        XCTAssertEqual(broken.first?["problem"], "must be 10 characters, capital letters A-Z and digits (as in Apple's developer account)")
        XCTAssertEqual(broken.first?["names"], "topic com.example.app")
        XCTAssertTrue(broken[1]["problem"]?.contains("P-256") == true, "\(broken[1])")
        XCTAssertEqual(broken[2]["problem"], "is missing: the service account names no Firebase project")
        XCTAssertTrue(broken[3]["problem"]?.contains("RSA") == true, "\(broken[3])")
        XCTAssertFalse(broken.contains { $0["app"] == String(good.id) }, "the working app is not reported")
        for secret in ["Tm90IGEga2V5", "PRIVATE KEY", String(ecKey.split(separator: "\n")[1].prefix(24))] {
            XCTAssertFalse(process.outputText.contains(secret), "a key's text in the log: \(secret)")
        }

        // /health: still 200 (a load balancer must not drain the instance), degraded, in words.
        let listen = try XCTUnwrap(Self.events("http.listening", count: 1, in: process).first?["listen"], process.outputText)
        let answer = try TestHTTPClient(port: try XCTUnwrap(UInt16(listen.split(separator: ":").last ?? ""))).send("GET", "/health")
        XCTAssertEqual(answer.status, 200)
        XCTAssertEqual(answer.json["status"] as? String, "degraded")
        XCTAssertEqual(answer.json["database"] as? String, "reachable")
        let problems = try XCTUnwrap(answer.json["problems"] as? [String], "\(answer.json)")
        XCTAssertEqual(problems.count, 4, "\(problems)")
        XCTAssertEqual(
            problems.first,
            "push app #\(apns) (apns, topic com.example.app) cannot push: team_id: must be 10 characters, capital letters A-Z and digits (as in Apple's developer account)")
        XCTAssertTrue(problems.contains("push app #\(fcm) (fcm, no project) cannot push: project_id: is missing: the service account names no Firebase project"), "\(problems)")
        XCTAssertFalse(String(decoding: answer.body, as: UTF8.self).contains("PRIVATE KEY"))
    }
}
