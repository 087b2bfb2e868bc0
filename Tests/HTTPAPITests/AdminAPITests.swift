import Crypto
import Dispatch
import Foundation
import HTTPAPI
import HTTPServer
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// The admin API served in-process on port 0 against a fresh PostgreSQL database, spoken to over
/// real TCP: credentials on every route, organisations and extensions, an extension's detail,
/// push apps (keys never answered) and the OpenAPI document.
final class AdminAPITests: XCTestCase {
    var database: TestDatabase!
    var service: StandaloneHTTPAPI!
    var http: TestHTTPClient!
    /// Every body the server answered in this test, to scan for secrets.
    var bodies: [Data] = []
    let admin = ("root", "admin-password-1")

    override func setUpWithError() throws {
        database = try TestDatabase()
        let connection = try database.connect()
        try Migrator.migrate(connection)
        try PostgresAdmins.add(name: admin.0, password: admin.1, on: connection)
        service = try StandaloneHTTPAPI(listen: "127.0.0.1:0", settings: database.settings(connectTimeout: 3))
        http = try TestHTTPClient(port: service.server.port)
    }

    override func tearDown() {
        http = nil
        service?.stop()
        service = nil
        database?.drop()
    }

    @discardableResult
    func call(
        _ method: String, _ path: String, _ json: [String: Any]? = nil, user: String? = nil, password: String? = nil,
        authenticated: Bool = true
    ) throws -> TestHTTPClient.Response {
        var headers: [(String, String)] = []
        if authenticated { headers.append(("Authorization", TestHTTPClient.basic(user ?? admin.0, password ?? admin.1))) }
        var body: Data? = nil
        if let json {
            body = try JSONSerialization.data(withJSONObject: json)
            headers.append(("Content-Type", "application/json"))
        }
        let response = try http.send(method, path, headers: headers, body: body)
        bodies.append(response.body)
        return response
    }

    func text(_ response: TestHTTPClient.Response) -> String { String(decoding: response.body, as: UTF8.self) }

    /// The admin API's routes as `(method, path)`, `{…}` marking a path parameter.
    var adminRoutes: [(String, String)] {
        service.router.routes.filter { $0.path.hasPrefix(AdminAPI.base + "/") }.map { ($0.method, $0.path) }
    }

    func testEveryAdminRouteRequiresAdminCredentials() throws {
        XCTAssertEqual(adminRoutes.count, 24)
        for (method, template) in adminRoutes {
            let path = template.replacingOccurrences(of: "{domain}", with: "example.com")
                .replacingOccurrences(of: "{address}", with: "1001@example.com").replacingOccurrences(of: "{id}", with: "1")
                .replacingOccurrences(of: "{name}", with: "uk")
            let body: [String: Any]? = method == "GET" || method == "DELETE" ? nil : ["x": 1]
            for (user, password, authenticated) in [(nil, nil, false), (admin.0, "wrong", true), ("nobody", admin.1, true)] {
                let response = try call(method, path, body, user: user, password: password, authenticated: authenticated)
                XCTAssertEqual(response.status, 401, "\(method) \(path) as \(user ?? "-")")
                XCTAssertEqual(response.header("WWW-Authenticate"), "Basic realm=\"rouse-admin\"", "\(method) \(path)")
                XCTAssertEqual(
                    (response.json["error"] as? [String: Any])?["code"] as? String, "unauthorized", "\(method) \(path)")
            }
        }
        // Extension credentials are not admin credentials.
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        try directory.addExtension(AddressOfRecord(number: "1001", domain: "example.com"), password: "sip-pw")
        XCTAssertEqual(try call("GET", "/api/v1/admin/organisations", user: "1001@example.com", password: "sip-pw").status, 401)
        XCTAssertEqual(try call("GET", "/api/v1/admin/organisations").status, 200)
    }

    func testOrganisationsAndExtensionsCreateListPageSearchRemove() throws {
        XCTAssertEqual(try call("POST", "/api/v1/admin/organisations", ["domain": "Example.com"]).status, 201)
        XCTAssertEqual(try call("POST", "/api/v1/admin/organisations", ["domain": "example.org"]).status, 201)
        XCTAssertEqual(try call("POST", "/api/v1/admin/organisations", ["domain": "example.com"]).status, 409)
        let bad = try call("POST", "/api/v1/admin/organisations", ["domain": "not a domain"])
        XCTAssertEqual(bad.status, 400)
        XCTAssertEqual((bad.json["error"] as? [String: Any])?["field"] as? String, "domain")
        let organisations = try call("GET", "/api/v1/admin/organisations")
        XCTAssertEqual((organisations.json["items"] as? [[String: Any]])?.compactMap { $0["domain"] as? String }, ["example.com", "example.org"])

        for number in 1001...1012 {
            let created = try call("POST", "/api/v1/admin/extensions", ["address": "\(number)@example.com", "password": "pw-\(number)"])
            XCTAssertEqual(created.status, 201, text(created))
        }
        XCTAssertEqual(try call("POST", "/api/v1/admin/extensions", ["address": "2001@example.org", "password": "pw"]).status, 201)
        XCTAssertEqual(try call("POST", "/api/v1/admin/extensions", ["address": "1001@example.com", "password": "pw"]).status, 409)
        XCTAssertEqual(try call("POST", "/api/v1/admin/extensions", ["address": "1@nowhere.example", "password": "pw"]).status, 404)
        let noPassword = try call("POST", "/api/v1/admin/extensions", ["address": "1099@example.com"])
        XCTAssertEqual((noPassword.json["error"] as? [String: Any])?["field"] as? String, "password")

        func page(_ query: String) throws -> (addresses: [String], total: Int?) {
            let response = try call("GET", "/api/v1/admin/extensions" + query)
            XCTAssertEqual(response.status, 200, text(response))
            return ((response.json["items"] as? [[String: Any]] ?? []).compactMap { $0["address"] as? String }, response.json["total"] as? Int)
        }
        XCTAssertEqual(try page("").total, 13)
        let second = try page("?domain=example.com&limit=5&offset=5")
        XCTAssertEqual(second.total, 12)
        XCTAssertEqual(second.addresses, (1006...1010).map { "\($0)@example.com" })
        XCTAssertEqual(try page("?search=101").addresses, ["1010@example.com", "1011@example.com", "1012@example.com"])
        XCTAssertEqual(try page("?search=EXAMPLE.ORG").addresses, ["2001@example.org"])
        XCTAssertEqual(try call("GET", "/api/v1/admin/extensions?limit=501").status, 400)
        XCTAssertEqual(try call("GET", "/api/v1/admin/extensions?domain=unknown.example").status, 404)

        let changed = try call("PUT", "/api/v1/admin/extensions/1001@example.com/password", ["password": "new-password"])
        XCTAssertEqual(changed.status, 200, text(changed))
        let snapshot = try PostgresDirectory(settings: database.settings()).loadDirectory()
        let credentials = snapshot.extensions[AddressOfRecord(number: "1001", domain: "example.com")]
        XCTAssertEqual(
            credentials?.ha1MD5, ExtensionCredentials.ha1(.md5, number: "1001", realm: "example.com", password: "new-password"))
        XCTAssertEqual(try call("PUT", "/api/v1/admin/extensions/1999@example.com/password", ["password": "x"]).status, 404)

        XCTAssertEqual(try call("DELETE", "/api/v1/admin/organisations/example.org").status, 409)
        XCTAssertEqual(try call("DELETE", "/api/v1/admin/extensions/2001@example.org").status, 200)
        XCTAssertEqual(try call("DELETE", "/api/v1/admin/extensions/2001@example.org").status, 404)
        XCTAssertEqual(try call("DELETE", "/api/v1/admin/organisations/example.org").status, 200)
        XCTAssertEqual(try page("").total, 12)
        XCTAssertFalse(bodies.contains { body in
            let answer = String(decoding: body, as: UTF8.self)
            return answer.contains("pw-10") || answer.contains("new-password") || answer.contains(admin.1)
        }, "no answer holds a password")
    }

    func testExtensionDetailShowsAStoredBinding() throws {
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        let aor = AddressOfRecord(number: "1001", domain: "example.com")
        try directory.addExtension(aor, password: "sip-pw")
        let store = PostgresLocationStore(settings: database.settings())
        defer { store.shutdown() }
        let voipToken = "0123456789abcdef0123456789abcdef"
        let now = Date()
        let binding = Binding(
            aor: aor, contact: "sip:1001@192.0.2.7:5060;transport=tcp;pn-provider=apns;pn-prid=\(voipToken)", callID: "c1", cseq: 1,
            registeredAt: now, expiresAt: now.addingTimeInterval(600), userAgent: "Linphone/5.2",
            flow: BindingFlow(transport: .tcp, source: SocketAddress(parsing: "192.0.2.7:5060"), connectionID: FlowConnectionID("7"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "a"),
            pushChannels: [PushChannel(provider: .apns, token: voipToken, param: "TEAM.com.example.app.voip", kind: .voip)])
        let done = DispatchSemaphore(value: 0)
        store.apply([.save(binding)]) { _ in done.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        try store.markTokenDead(family: .apns, token: voipToken, reason: "Unregistered")

        let response = try call("GET", "/api/v1/admin/extensions/1001@example.com")
        XCTAssertEqual(response.status, 200, text(response))
        let bindings = response.json["bindings"] as? [[String: Any]] ?? []
        XCTAssertEqual(bindings.count, 1)
        XCTAssertEqual(bindings.first?["userAgent"] as? String, "Linphone/5.2")
        XCTAssertEqual((bindings.first?["flow"] as? [String: Any])?["source"] as? String, "192.0.2.7:5060")
        XCTAssertGreaterThan(bindings.first?["expiresIn"] as? Int ?? 0, 590)
        let channel = (bindings.first?["pushChannels"] as? [[String: Any]])?.first
        XCTAssertEqual(channel?["token"] as? String, Binding.shortenedToken(voipToken))
        XCTAssertEqual(channel?["dead"] as? Bool, true)
        XCTAssertEqual(channel?["kind"] as? String, "voip")
        XCTAssertFalse(text(response).contains(voipToken), "whole tokens are never shown")
        XCTAssertEqual((response.json["postedTokens"] as? [Any])?.count, 0)
        XCTAssertNotNil(response.json["recentPushes"] as? [Any])
        XCTAssertEqual(try call("GET", "/api/v1/admin/extensions/1999@example.com").status, 404)
        XCTAssertEqual(try call("GET", "/api/v1/admin/extensions/not-an-address").status, 400)
    }

    func testPushAppsValidateAndNeverAnswerTheirKeys() throws {
        let keyPEM = try PushStandIn.makeAPNsKey().privateKeyPEM
        let badKey = try call(
            "POST", "/api/v1/admin/push-apps",
            ["kind": "apns", "teamId": "ABCDE12345", "keyId": "KEY1234567", "topic": "com.example.app", "key": "not a key"])
        XCTAssertEqual(badKey.status, 400, text(badKey))
        XCTAssertEqual((badKey.json["error"] as? [String: Any])?["field"] as? String, "key")
        let badTeam = try call(
            "POST", "/api/v1/admin/push-apps", ["kind": "apns", "teamId": "x", "keyId": "KEY1234567", "topic": "com.example.app", "key": keyPEM])
        XCTAssertEqual((badTeam.json["error"] as? [String: Any])?["field"] as? String, "teamId")
        let badFCM = try call("POST", "/api/v1/admin/push-apps", ["kind": "fcm", "serviceAccount": ["type": "service_account"]])
        XCTAssertEqual(badFCM.status, 400)
        XCTAssertEqual((badFCM.json["error"] as? [String: Any])?["field"] as? String, "serviceAccount.project_id")
        XCTAssertEqual((try call("POST", "/api/v1/admin/push-apps", ["kind": "webpush"]).json["error"] as? [String: Any])?["field"] as? String, "kind")

        let created = try call(
            "POST", "/api/v1/admin/push-apps",
            ["kind": "apns", "teamId": "ABCDE12345", "keyId": "KEY1234567", "topic": "com.example.app", "key": keyPEM, "environment": "sandbox"])
        XCTAssertEqual(created.status, 201, text(created))
        let id = created.json["id"] as? Int ?? -1
        let listed = try call("GET", "/api/v1/admin/push-apps")
        XCTAssertEqual((listed.json["items"] as? [[String: Any]])?.first?["id"] as? Int, id)
        XCTAssertEqual((listed.json["items"] as? [[String: Any]])?.first?["environment"] as? String, "sandbox")
        XCTAssertEqual(try call("POST", "/api/v1/admin/push-apps/\(id)/test", ["provider": "bogus", "token": "ab"]).status, 400)
        XCTAssertEqual(try call("POST", "/api/v1/admin/push-apps/999/test", ["token": "abcd"]).status, 404)
        // Changed in place without pasting the key again: the stored key is kept.
        let changed = try call("PUT", "/api/v1/admin/push-apps/\(id)", ["topic": "com.example.other", "environment": "", "param": "other"])
        XCTAssertEqual(changed.status, 200, text(changed))
        XCTAssertEqual(changed.json["param"] as? String, "other")
        let relisted = try call("GET", "/api/v1/admin/push-apps")
        let item = (relisted.json["items"] as? [[String: Any]])?.first { $0["id"] as? Int == id }
        let details = item?["details"] as? String ?? ""
        XCTAssertTrue(details.contains("com.example.other") && details.contains("KEY1234567"), details)
        XCTAssertNil(item?["environment"] as? String, "an empty environment serves both Apple hosts")
        let wrongKind = try call("PUT", "/api/v1/admin/push-apps/\(id)", ["kind": "fcm"])
        XCTAssertEqual((wrongKind.json["error"] as? [String: Any])?["field"] as? String, "kind")
        let badTopic = try call("PUT", "/api/v1/admin/push-apps/\(id)", ["teamId": "x"])
        XCTAssertEqual((badTopic.json["error"] as? [String: Any])?["field"] as? String, "teamId")
        XCTAssertEqual(try call("PUT", "/api/v1/admin/push-apps/999", ["param": "x"]).status, 404)
        XCTAssertEqual(try call("DELETE", "/api/v1/admin/push-apps/\(id)").status, 200)
        XCTAssertEqual(try call("DELETE", "/api/v1/admin/push-apps/\(id)").status, 404)

        let keyBody = keyPEM.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        XCTAssertFalse(keyBody.isEmpty)
        for body in bodies {
            let answer = String(decoding: body, as: UTF8.self)
            XCTAssertFalse(answer.contains("PRIVATE KEY"), answer)
            for line in keyPEM.split(separator: "\n") where !line.hasPrefix("-----") {
                XCTAssertFalse(answer.contains(line), "an answer holds a line of the key")
            }
        }
    }

    func testOpenAPIDocumentIsServedAndIsTheResource() throws {
        let response = try call("GET", "/api/v1/openapi.json", authenticated: false)
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(response.header("Content-Type"), "application/json")
        let document = response.json
        XCTAssertEqual((document["openapi"] as? String)?.hasPrefix("3."), true)
        let paths = document["paths"] as? [String: [String: Any]] ?? [:]
        for (method, path) in adminRoutes {
            XCTAssertNotNil(paths[path]?[method.lowercased()], "\(method) \(path) is documented")
        }
        XCTAssertNotNil(paths["/api/v1/push/register"]?["post"])
        XCTAssertNotNil(paths["/api/v1/push/register"]?["delete"])
        XCTAssertNotNil(paths["/health"]?["get"])

        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources/HTTPAPI/openapi.json")
        XCTAssertEqual(response.body, try Data(contentsOf: source), "the document served is the resource Sources/HTTPAPI/openapi.json")
        XCTAssertEqual(response.body, OpenAPIDocument.data)
    }
}
