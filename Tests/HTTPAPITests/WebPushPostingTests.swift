import Crypto
import Foundation
import HTTPAPI
import HTTPServer
import Push
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// A browser's side of the HTTP API against a fresh PostgreSQL: the VAPID public key (public,
/// made once and the same for every reader), and posting a push subscription (`platform: web`)
/// whose keys are stored beside its endpoint and go with it.
final class WebPushPostingTests: XCTestCase {
    var database: TestDatabase!
    var service: StandaloneHTTPAPI!
    let alice = AddressOfRecord(number: "1001", domain: "example.com")
    let endpoint = "https://push.example.net/wpush/v2/gAAAAABm-3xyZ_abc"
    var p256dh = ""
    var auth = ""

    override func setUpWithError() throws {
        database = try TestDatabase()
        try Migrator.migrate(try database.connect())
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        try directory.addExtension(alice, password: "s3cret-1001")
        try directory.addExtension(AddressOfRecord(number: "1002", domain: "example.com"), password: "s3cret-1002")
        service = try StandaloneHTTPAPI(listen: "127.0.0.1:0", settings: database.settings(connectTimeout: 3))
        p256dh = VAPIDKeys.generate().keys.publicKeyBase64URL
        auth = Self.base64url((0..<16).map { _ in UInt8.random(in: 0...255) })
    }

    static func base64url(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    override func tearDown() {
        service?.stop()
        service = nil
        database?.drop()
    }

    func send(
        _ method: String, _ fields: [String: Any], user: String = "1001@example.com", password: String = "s3cret-1001"
    ) throws -> TestHTTPClient.Response {
        try TestHTTPClient(port: service.server.port).send(
            method, "/api/v1/push/register",
            headers: [("Authorization", TestHTTPClient.basic(user, password)), ("Content-Type", "application/json")],
            body: try JSONSerialization.data(withJSONObject: fields))
    }

    var subscription: [String: Any] {
        ["endpoint": endpoint, "expirationTime": NSNull(), "keys": ["p256dh": p256dh, "auth": auth]]
    }

    func testVAPIDPublicKeyIsPublicStoredOnceAndNeverThePrivateHalf() throws {
        let http = try TestHTTPClient(port: service.server.port)
        let first = try http.send("GET", VAPIDPublicKeyAPI.path)
        XCTAssertEqual(first.status, 200)
        let key = try XCTUnwrap(first.json["publicKey"] as? String)
        XCTAssertNoThrow(try WebPushSubscriptionKeys(p256dh: key, auth: auth), "a P-256 point in base64url")
        XCTAssertEqual(Array(first.json.keys), ["publicKey"])
        XCTAssertEqual(try http.send("GET", VAPIDPublicKeyAPI.path).json["publicKey"] as? String, key, "the same key every time")

        let connection = try database.connect()
        let stored = try XCTUnwrap(try PostgresVAPIDKeys.load(on: connection))
        XCTAssertEqual(stored.publicKeyBase64URL, key)
        XCTAssertEqual(try PostgresVAPIDKeys.loadOrCreate(on: connection).publicKeyBase64URL, key, "made once: another instance reads the same")
        XCTAssertEqual(try connection.query("SELECT count(*) AS n FROM webpush_vapid_keys").value(0, "n"), "1")
        let sealed = try XCTUnwrap(try connection.query("SELECT private_key_pem FROM webpush_vapid_keys").value(0, "private_key_pem"))
        let pem = try TestDatabase.secrets.open(sealed, context: "webpush_vapid_keys.private_key_pem:1")
        XCTAssertFalse(String(decoding: first.body, as: UTF8.self).contains(pem.split(separator: "\n")[1]))
    }

    func testSubscriptionIsStoredWithItsKeysAndRemovedWithThem() throws {
        let stored = try send("POST", ["sipUser": "1001@example.com", "platform": "web", "subscription": subscription])
        XCTAssertEqual(stored.status, 200, String(decoding: stored.body, as: UTF8.self))
        XCTAssertEqual(stored.json["status"] as? String, "stored")
        let connection = try database.connect()
        let posted = try PostedPushTokens.list(for: alice, on: connection)
        XCTAssertEqual(posted.map(\.channel), [PushChannel(provider: .webpush, token: endpoint, param: nil, kind: .standard)])
        let keys = try XCTUnwrap(try PostgresWebPushSubscriptions.keys(forEndpoint: endpoint, on: connection))
        XCTAssertEqual(keys.p256dhBase64URL, p256dh)
        XCTAssertEqual(keys.authBase64URL, auth)

        // The browser's keys change (it resubscribed at the same endpoint): the new ones replace them.
        let newAuth = Self.base64url((0..<16).map { _ in UInt8.random(in: 0...255) })
        var again = subscription
        again["keys"] = ["p256dh": p256dh, "auth": newAuth]
        XCTAssertEqual(try send("POST", ["sipUser": "1001@example.com", "platform": "web", "subscription": again, "token": endpoint]).status, 200)
        XCTAssertEqual(try PostgresWebPushSubscriptions.keys(forEndpoint: endpoint, on: connection)?.authBase64URL, newAuth)

        // Another extension takes the subscription over: the keys stay with the endpoint.
        let moved = try send("POST", ["sipUser": "1002@example.com", "platform": "web", "subscription": again], user: "1002@example.com", password: "s3cret-1002")
        XCTAssertEqual(moved.status, 200)
        XCTAssertEqual(try PostedPushTokens.list(for: alice, on: connection).count, 0)
        XCTAssertNotNil(try PostgresWebPushSubscriptions.keys(forEndpoint: endpoint, on: connection))

        let removed = try send("DELETE", ["token": endpoint, "platform": "web"], user: "1002@example.com", password: "s3cret-1002")
        XCTAssertEqual(removed.status, 200, String(decoding: removed.body, as: UTF8.self))
        XCTAssertNil(try PostgresWebPushSubscriptions.keys(forEndpoint: endpoint, on: connection), "the keys went with the token")
        XCTAssertEqual(try connection.query("SELECT count(*) AS n FROM webpush_subscriptions").value(0, "n"), "0")
    }

    func testEachBadSubscriptionFieldIsNamed() throws {
        func with(_ change: (inout [String: Any]) -> Void) -> [String: Any] {
            var fields: [String: Any] = ["sipUser": "1001@example.com", "platform": "web", "subscription": subscription]
            change(&fields)
            return fields
        }
        func keys(p256dh: Any?, auth: Any?) -> [String: Any] {
            var keys: [String: Any] = [:]
            keys["p256dh"] = p256dh
            keys["auth"] = auth
            return ["endpoint": endpoint, "keys": keys]
        }
        let offCurve = Self.base64url([0x04] + [UInt8](repeating: 7, count: 64))
        let cases: [([String: Any], String)] = [
            (with { $0["subscription"] = nil }, "subscription"),
            (with { $0["subscription"] = "x" }, "subscription"),
            (with { $0["subscription"] = ["keys": ["p256dh": self.p256dh, "auth": self.auth]] }, "subscription.endpoint"),
            (with { $0["subscription"] = ["endpoint": "http://push.example.net/x", "keys": [:]] }, "subscription.endpoint"),
            (with { $0["subscription"] = ["endpoint": "https://" + String(repeating: "a", count: 2100), "keys": [:]] }, "subscription.endpoint"),
            (with { $0["subscription"] = ["endpoint": self.endpoint] }, "subscription.keys"),
            (with { $0["subscription"] = keys(p256dh: nil, auth: self.auth) }, "subscription.keys.p256dh"),
            (with { $0["subscription"] = keys(p256dh: offCurve, auth: self.auth) }, "subscription.keys.p256dh"),
            (with { $0["subscription"] = keys(p256dh: self.p256dh, auth: "c2hvcnQ") }, "subscription.keys.auth"),
            (with { $0["subscription"] = keys(p256dh: self.p256dh, auth: 16) }, "subscription.keys.auth"),
            (with { $0["token"] = "https://push.example.net/other" }, "token"),
            (with { $0["param"] = "com.example.web" }, "param"),
            (with { $0["sipUser"] = "1001" }, "sipUser"),
            (["sipUser": "1001@example.com", "token": endpoint, "subscription": subscription], "platform"),
        ]
        for (fields, field) in cases {
            let answer = try send("POST", fields)
            XCTAssertEqual(answer.status, 400, "\(fields)")
            let error = try XCTUnwrap(answer.json["error"] as? [String: String], "\(fields)")
            XCTAssertEqual(error["code"], "invalid_field")
            XCTAssertEqual(error["field"], field, "\(fields)")
            XCTAssertFalse(error["message"]?.contains(auth) ?? true, "an error never echoes the auth secret")
        }
        XCTAssertEqual(try database.connect().query("SELECT count(*) AS n FROM posted_push_tokens").value(0, "n"), "0")
        // Wrong credentials: the one 401, and nothing stored.
        XCTAssertEqual(try send("POST", with { _ in }, password: "wrong").status, 401)
        XCTAssertEqual(try send("POST", with { _ in }, user: "1002@example.com", password: "s3cret-1002").status, 403)
    }
}
