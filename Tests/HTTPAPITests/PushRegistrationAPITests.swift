import Foundation
import HTTPAPI
import HTTPServer
import Registrar
import RouseTestSupport
import Storage
import XCTest

/// The HTTP API served in-process on port 0 against a fresh PostgreSQL database, spoken to over
/// real TCP with exact bytes.
final class PushRegistrationAPITests: XCTestCase {
    var database: TestDatabase!
    var service: StandaloneHTTPAPI!
    let alice = AddressOfRecord(number: "1001", domain: "example.com")
    let bob = AddressOfRecord(number: "1002", domain: "example.com")
    let iosToken = "A1B2C3D4E5F60718293A4B5C6D7E8F90A1B2C3D4E5F60718293A4B5C6D7E8F90"

    override func setUpWithError() throws {
        database = try TestDatabase()
        try Migrator.migrate(try database.connect())
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        try directory.addExtension(alice, password: "s3cret-1001")
        try directory.addExtension(bob, password: "s3cret-1002")
        service = try StandaloneHTTPAPI(listen: "127.0.0.1:0", settings: database.settings(connectTimeout: 3))
    }

    override func tearDown() {
        service?.stop()
        service = nil
        database?.drop()
    }

    func client() throws -> TestHTTPClient {
        try TestHTTPClient(port: service.server.port)
    }

    func post(
        _ client: TestHTTPClient, _ fields: [String: Any], user: String = "1001@example.com", password: String = "s3cret-1001",
        method: String = "POST"
    ) throws -> TestHTTPClient.Response {
        let body = try JSONSerialization.data(withJSONObject: fields)
        return try client.send(
            method, "/api/v1/push/register",
            headers: [("Authorization", TestHTTPClient.basic(user, password)), ("Content-Type", "application/json")], body: body)
    }

    func postedRows() throws -> [[String?]] {
        try database.connect().query(
            """
            SELECT p.family, p.token, e.number, p.provider, p.param, p.kind, p.device_id, extract(epoch FROM p.posted_at)::text
            FROM posted_push_tokens p JOIN extensions e ON e.id = p.extension_id ORDER BY p.token
            """
        ).rows
    }

    func testAndroidTokenIsStoredAndPostingItAgainIsANoOp() throws {
        let http = try client()
        let first = try post(http, ["token": "fcm-token-1", "sipUser": "1001@example.com"])
        XCTAssertEqual(first.status, 200, String(decoding: first.body, as: UTF8.self))
        XCTAssertEqual(first.json["status"] as? String, "stored")
        XCTAssertEqual(first.header("Content-Type"), "application/json")
        let rows = try postedRows()
        XCTAssertEqual(rows.count, 1)
        XCTAssertEqual(Array(rows[0].prefix(7)), ["fcm", "fcm-token-1", "1001", "fcm", nil, "standard", nil])

        // Same connection (keep-alive), same token: still one row, only posted_at moves.
        let again = try post(http, ["token": "fcm-token-1", "sipUser": "1001@example.com", "platform": "android"])
        XCTAssertEqual(again.status, 200)
        let after = try postedRows()
        XCTAssertEqual(after.count, 1)
        XCTAssertEqual(Array(after[0].prefix(7)), Array(rows[0].prefix(7)))
        XCTAssertGreaterThanOrEqual(Double(after[0][7] ?? "0") ?? 0, Double(rows[0][7] ?? "0") ?? 0)
    }

    func testIOSTokensAreLowerCasedAndTheParamChoosesTheChannel() throws {
        let http = try client()
        XCTAssertEqual(try post(http, ["token": iosToken, "sipUser": "1001@example.com", "platform": "ios"]).status, 200)
        let remoteToken = String(iosToken.reversed())
        XCTAssertEqual(
            try post(
                http,
                ["token": remoteToken, "sipUser": "1001@example.com", "platform": "ios.dev", "param": "ABCDE12345.com.example.app",
                 "deviceId": "phone-1"]
            ).status, 200)
        XCTAssertEqual(
            try post(http, ["token": "00ff", "sipUser": "1001@example.com", "platform": "ios", "param": "ABCDE12345.com.example.app.voip"]).status,
            200)
        let rows = try postedRows().map { Array($0.prefix(7)) }
        XCTAssertTrue(rows.contains(["apns", "00ff", "1001", "apns", "ABCDE12345.com.example.app.voip", "voip", nil]), "\(rows)")
        XCTAssertTrue(rows.contains(["apns", iosToken.lowercased(), "1001", "apns", nil, "voip", nil]), "\(rows)")
        XCTAssertTrue(
            rows.contains(["apns", remoteToken.lowercased(), "1001", "apns.dev", "ABCDE12345.com.example.app", "remote", "phone-1"]), "\(rows)")
    }

    func testWrongPasswordAndUnknownExtensionGetTheSameBytes() throws {
        let fields: [String: Any] = ["token": "t", "sipUser": "1001@example.com"]
        let attempts: [(String, String)] = [
            ("1001@example.com", "wrong"), ("9999@example.com", "s3cret-1001"), ("1001@nowhere.example", "s3cret-1001"),
            ("not an address", "x"), ("", ""),
        ]
        var answers: [TestHTTPClient.Response] = []
        for (user, password) in attempts {
            answers.append(try post(try client(), fields, user: user, password: password))
        }
        answers.append(try client().send("POST", "/api/v1/push/register", body: Data("{}".utf8)))
        answers.append(
            try client().send("POST", "/api/v1/push/register", headers: [("Authorization", "Basic !!!")], body: Data("{}".utf8)))
        func withoutDate(_ response: TestHTTPClient.Response) -> String {
            response.headerText.components(separatedBy: "\r\n").filter { !$0.lowercased().hasPrefix("date:") }.joined(separator: "\r\n")
        }
        let first = answers[0]
        XCTAssertEqual(first.status, 401)
        XCTAssertEqual(first.header("WWW-Authenticate"), "Basic realm=\"rouse\"")
        XCTAssertEqual(first.json["error"] as? [String: String], ["code": "unauthorized", "message": "the credentials are not those of an extension"])
        for answer in answers.dropFirst() {
            XCTAssertEqual(answer.status, first.status)
            XCTAssertEqual(withoutDate(answer), withoutDate(first))
            XCTAssertEqual(answer.body, first.body)
        }
        XCTAssertEqual(try postedRows().count, 0)
    }

    func testCredentialsOfOneExtensionCannotPostForAnother() throws {
        let answer = try post(try client(), ["token": "t", "sipUser": "1002@example.com"])
        XCTAssertEqual(answer.status, 403)
        let error = try XCTUnwrap(answer.json["error"] as? [String: String])
        XCTAssertEqual(error["code"], "forbidden")
        XCTAssertEqual(error["field"], "sipUser")
        XCTAssertEqual(try postedRows().count, 0)
    }

    func testEachBadFieldIsNamed() throws {
        let http = try client()
        let cases: [([String: Any], String)] = [
            (["sipUser": "1001@example.com"], "token"),
            (["token": "", "sipUser": "1001@example.com"], "token"),
            (["token": 42, "sipUser": "1001@example.com"], "token"),
            (["token": "has space", "sipUser": "1001@example.com"], "token"),
            (["token": "not-hex", "sipUser": "1001@example.com", "platform": "ios"], "token"),
            (["token": "t"], "sipUser"),
            (["token": "t", "sipUser": "1001"], "sipUser"),
            (["token": "t", "sipUser": "1001@example.com", "platform": "windows"], "platform"),
            (["token": "t", "sipUser": "1001@example.com", "param": 5], "param"),
            (["token": "t", "sipUser": "1001@example.com", "deviceId": ""], "deviceId"),
        ]
        for (fields, field) in cases {
            let answer = try post(http, fields)
            XCTAssertEqual(answer.status, 400, "\(fields)")
            let error = try XCTUnwrap(answer.json["error"] as? [String: String], "\(fields)")
            XCTAssertEqual(error["code"], "invalid_field")
            XCTAssertEqual(error["field"], field, "\(fields)")
            XCTAssertNotNil(error["message"])
        }
        XCTAssertEqual(try postedRows().count, 0)
    }

    func testNotJSONIs400AndTooLargeIs413() throws {
        let http = try client()
        let auth = ("Authorization", TestHTTPClient.basic("1001@example.com", "s3cret-1001"))
        for body in ["token=x", "[1, 2]", "", "\"text\""] {
            let answer = try http.send("POST", "/api/v1/push/register", headers: [auth], body: Data(body.utf8))
            XCTAssertEqual(answer.status, 400, body)
            XCTAssertEqual(answer.json["error"] as? [String: String], ["code": "invalid_json", "message": "the body must be a JSON object"])
        }
        let large = try TestHTTPClient(port: service.server.port)
            .send("POST", "/api/v1/push/register", headers: [auth], body: Data(repeating: UInt8(ascii: " "), count: 70 * 1024))
        XCTAssertEqual(large.status, 413)
        XCTAssertEqual((large.json["error"] as? [String: String])?["code"], "body_too_large")

        // A chunked body that grows past the limit is refused as well.
        let chunked = try TestHTTPClient(port: service.server.port)
        let chunk = String(repeating: "a", count: 16 * 1024)
        var text = "POST /api/v1/push/register HTTP/1.1\r\nHost: x\r\nAuthorization: \(auth.1)\r\nTransfer-Encoding: chunked\r\n\r\n"
        for _ in 0..<5 { text += String(16 * 1024, radix: 16) + "\r\n" + chunk + "\r\n" }
        text += "0\r\n\r\n"
        try chunked.write(Data(text.utf8))
        XCTAssertEqual(try chunked.readResponse().status, 413)
    }

    func testUnknownPathAndMethodUseTheErrorShape() throws {
        let http = try client()
        let missing = try http.send("GET", "/nothing")
        XCTAssertEqual(missing.status, 404)
        XCTAssertEqual((missing.json["error"] as? [String: String])?["code"], "not_found")
        let method = try http.send("GET", "/api/v1/push/register")
        XCTAssertEqual(method.status, 405)
        XCTAssertEqual(method.header("Allow"), "DELETE, POST")
    }

    /// A token posted for another extension moves there; the old extension's binding keeps
    /// registered but loses that push channel; a dead mark on the token goes.
    func testTokenMovesToAnotherExtensionAndLeavesTheOldBindingWithoutIt() throws {
        let connection = try database.connect()
        let bindingID = UUID().uuidString.lowercased()
        try connection.query(
            """
            INSERT INTO bindings (id, extension_id, aor, contact, call_id, cseq, registered_at, expires_at,
                flow_transport, flow_source, flow_connection, flow_local, flow_instance)
            SELECT $1::uuid, e.id, '1001@example.com', '<sip:1001@192.0.2.1:5060>', 'call-1', 1, now(), now() + interval '1 hour',
                'udp', '192.0.2.1:5060', '-', '127.0.0.1:5060', 'test'
            FROM extensions e WHERE e.number = '1001'
            """, [bindingID])
        for token in [iosToken.lowercased(), "other-token"] {
            try connection.query(
                """
                INSERT INTO binding_push_channels (binding_id, provider, family, token, kind)
                VALUES ($1::uuid, 'apns', 'apns', $2, 'voip')
                """, [bindingID, token])
        }
        try connection.query(
            "INSERT INTO push_dead_tokens (family, token, reason) VALUES ('apns', $1, 'unregistered')", [iosToken.lowercased()])

        let http = try client()
        XCTAssertEqual(try post(http, ["token": iosToken, "sipUser": "1001@example.com", "platform": "ios"]).status, 200)
        XCTAssertEqual(try postedRows().first?[2], "1001")
        let moved = try post(http, ["token": iosToken, "sipUser": "1002@example.com", "platform": "ios"], user: "1002@example.com", password: "s3cret-1002")
        XCTAssertEqual(moved.status, 200)
        let rows = try postedRows()
        XCTAssertEqual(rows.count, 1)
        XCTAssertEqual(rows.first?[2], "1002")

        XCTAssertEqual(try connection.query("SELECT count(*) FROM bindings WHERE id = $1::uuid", [bindingID]).rows.first?[0], "1")
        let channels = try connection.query(
            "SELECT token FROM binding_push_channels WHERE binding_id = $1::uuid ORDER BY token", [bindingID]).rows.map { $0[0] }
        XCTAssertEqual(channels, ["other-token"])
        XCTAssertEqual(try connection.query("SELECT count(*) FROM push_dead_tokens").rows.first?[0], "0")
    }

    func testDeleteRemovesTheTokenOnlyForItsHolder() throws {
        let http = try client()
        XCTAssertEqual(try post(http, ["token": "fcm-token-2", "sipUser": "1001@example.com"]).status, 200)
        let byOther = try post(http, ["token": "fcm-token-2"], user: "1002@example.com", password: "s3cret-1002", method: "DELETE")
        XCTAssertEqual(byOther.status, 404)
        XCTAssertEqual(byOther.json["error"] as? [String: String], ["code": "not_found", "message": "this extension holds no such token", "field": "token"])
        XCTAssertEqual(try post(http, ["token": "fcm-token-2"], password: "wrong", method: "DELETE").status, 401)
        XCTAssertEqual(try post(http, [:], method: "DELETE").status, 400)
        let removed = try post(http, ["token": "fcm-token-2"], method: "DELETE")
        XCTAssertEqual(removed.status, 200)
        XCTAssertEqual(removed.json["status"] as? String, "removed")
        XCTAssertEqual(try postedRows().count, 0)
        XCTAssertEqual(try post(http, ["token": "fcm-token-2"], method: "DELETE").status, 404)
    }

    func testAnExtensionAddedLaterCanPostOnceTheDirectoryReloads() throws {
        let carol = AddressOfRecord(number: "1003", domain: "example.com")
        try PostgresDirectory(settings: database.settings()).addExtension(carol, password: "s3cret-1003")
        let deadline = Date().addingTimeInterval(15)
        var status = 0
        while Date() < deadline {
            status = try post(try client(), ["token": "carol", "sipUser": "1003@example.com"], user: "1003@example.com", password: "s3cret-1003").status
            if status == 200 { break }
            Thread.sleep(forTimeInterval: 0.1)
        }
        XCTAssertEqual(status, 200)
    }

    func testHealthIsOKWithTheDatabase() throws {
        let answer = try client().send("GET", "/health")
        XCTAssertEqual(answer.status, 200)
        XCTAssertEqual(answer.json["status"] as? String, "ok")
        XCTAssertEqual(answer.json["database"] as? String, "reachable")
        XCTAssertEqual(answer.json["pushApps"] as? Int, 0)
    }

    func testHealthIsDegradedInWordsWithoutTheDatabase() throws {
        let unreachable = try StandaloneHTTPAPI(
            listen: "127.0.0.1:0",
            settings: PostgresSettings(conninfo: "host=127.0.0.1 port=1 dbname=rouse user=rouse password=hunter2", connectTimeout: 2))
        defer { unreachable.stop() }
        let http = try TestHTTPClient(port: unreachable.server.port)
        let answer = try http.send("GET", "/health")
        XCTAssertEqual(answer.status, 503)
        XCTAssertEqual(answer.json["status"] as? String, "degraded")
        let problems = try XCTUnwrap(answer.json["problems"] as? [String])
        XCTAssertEqual(problems.count, 1)
        XCTAssertTrue(problems[0].hasPrefix("PostgreSQL unreachable: "), problems[0])
        XCTAssertTrue(problems[0].contains("127.0.0.1:1"), problems[0])
        XCTAssertFalse(String(decoding: answer.body, as: UTF8.self).contains("hunter2"))
        // Posting cannot authenticate anyone without a directory: the same 401.
        let post = try self.post(http, ["token": "t", "sipUser": "1001@example.com"])
        XCTAssertEqual(post.status, 401)
    }

    // MARK: - Token rotation (issue 20 item 1)

    /// Posts that arrive while the lanes' transactions run share the next one (group commit), and
    /// each is answered only once it committed.
    func testPostsArrivingTogetherCommitInOneTransaction() throws {
        let group = service.pool.groupCommit
        let locker = try database.connect()
        try locker.query("BEGIN")
        try locker.query("LOCK TABLE posted_push_tokens IN ACCESS EXCLUSIVE MODE")
        let statuses = StatusList()
        let port = service.server.port
        let total = group.laneCount + 6
        let threads = (0..<total).map { index in
            Thread {
                let body = Data(#"{"token": "fcm-grouped-\#(index)", "sipUser": "1001@example.com"}"#.utf8)
                let status = (try? TestHTTPClient(port: port)).flatMap { http in
                    try? http.send(
                        "POST", "/api/v1/push/register",
                        headers: [("Authorization", TestHTTPClient.basic("1001@example.com", "s3cret-1001")), ("Content-Type", "application/json")],
                        body: body
                    ).status
                }
                statuses.add(status ?? -1)
            }
        }
        let probe = try database.connect()
        func waiting() throws -> Int {
            Int(try probe.query("SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'posted_push_tokens'::regclass").rows[0][0] ?? "") ?? 0
        }
        let deadline = Date().addingTimeInterval(30)
        // One post per lane waits for the lock; the six after them queue.
        for (index, thread) in threads.prefix(group.laneCount).enumerated() {
            thread.start()
            while try waiting() < index + 1, Date() < deadline { usleep(10_000) }
        }
        XCTAssertEqual(try waiting(), group.laneCount, "each lane holds one post, waiting for the lock")
        for thread in threads.dropFirst(group.laneCount) { thread.start() }
        let queued = total - group.laneCount
        while group.waitingJobCount < queued, Date() < deadline { usleep(10_000) }
        XCTAssertEqual(group.waitingJobCount, queued, "the other posts queued behind the lanes' ones")
        XCTAssertEqual(statuses.all, [], "nobody is answered before their commit")
        try locker.query("COMMIT")
        while statuses.all.count < total, Date() < deadline { usleep(10_000) }
        XCTAssertEqual(statuses.all, Array(repeating: 200, count: total))
        XCTAssertEqual(try postedRows().map { $0[1] }, (0..<total).map { "fcm-grouped-\($0)" }.sorted())
        XCTAssertEqual(group.transactionCount, group.laneCount + 1, "one post per lane alone, the ones queued behind them together")
    }

    func testARotatedTokenWithTheSameDeviceIdReplacesTheOldOneAndKeepsItsPair() throws {
        let http = try client()
        let voip = String(repeating: "a1", count: 32), remote = String(repeating: "b2", count: 32)
        let rotated = String(repeating: "c3", count: 32)
        func ios(_ token: String, _ param: String, device: String = "phone-1", user: String = "1001") -> [String: Any] {
            ["token": token, "sipUser": "\(user)@example.com", "platform": "ios", "param": param, "deviceId": device]
        }
        for fields in [ios(voip, "ABCDE12345.com.example.app.voip"), ios(remote, "ABCDE12345.com.example.app")] {
            XCTAssertEqual(try post(http, fields).status, 200)
        }
        // An Android phone of the same extension without a device id, and bob's phone that happens
        // to use the same device id: neither is the rotating iPhone.
        XCTAssertEqual(try post(http, ["token": "fcm-other", "sipUser": "1001@example.com", "platform": "android"]).status, 200)
        XCTAssertEqual(
            try post(http, ios(String(repeating: "d4", count: 32), "ABCDE12345.com.example.app.voip", user: "1002"), user: "1002@example.com",
                password: "s3cret-1002").status, 200)

        // PushKit hands the iPhone a new VoIP token: the app posts it with the same deviceId.
        let answer = try post(http, ios(rotated, "ABCDE12345.com.example.app.voip"))
        XCTAssertEqual(answer.status, 200)
        XCTAssertEqual(answer.json["status"] as? String, "stored")
        let rows = try postedRows().map { [$0[1], $0[2], $0[5], $0[6]] }
        XCTAssertEqual(
            rows,
            [
                [remote, "1001", "remote", "phone-1"], [rotated, "1001", "voip", "phone-1"],
                [String(repeating: "d4", count: 32), "1002", "voip", "phone-1"], ["fcm-other", "1001", "standard", nil],
            ], "the old VoIP token is gone; its regular pair, the other phone and bob's stay")

        // The regular token rotates too: the VoIP one stays.
        let newRemote = String(repeating: "e5", count: 32)
        XCTAssertEqual(try post(http, ios(newRemote, "ABCDE12345.com.example.app")).status, 200)
        let tokens = Set(try postedRows().filter { $0[2] == "1001" }.compactMap { $0[1] })
        XCTAssertEqual(tokens, [rotated, newRemote, "fcm-other"])
    }
}

/// Statuses collected from several threads. @unchecked Sendable: `statuses` only under `lock`.
final class StatusList: @unchecked Sendable {
    private let lock = NSLock()
    private var statuses: [Int] = []

    func add(_ status: Int) { lock.withLock { statuses.append(status) } }
    var all: [Int] { lock.withLock { statuses } }
}
