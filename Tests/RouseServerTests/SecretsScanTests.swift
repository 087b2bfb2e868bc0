import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPTransport
import Storage
import XCTest

/// Issue 9 item 6: secrets never leak. A realistic session against a live `rouse serve` with the
/// push stand-ins (push apps added through the admin API with their .p8 key and service account,
/// phones registering with pn-prid tokens, a token posted over HTTP, a call that pushes and wakes
/// the app, test pushes, the admin API and pages, `rouse registrations` and `rouse push-app list`),
/// then every log line of the server and every answer seen is scanned for the SIP and admin
/// passwords, the key lines, JWTs and whole push tokens. Tokens may appear shortened only, except
/// in exactly the answers that reveal them on an administrator's request (issue 16): the Show token
/// page, the admin API's `?tokens=true` and `rouse registrations --tokens`; those must hold the
/// tokens asked for, no other, and no other secret, and the HTTP ones are sent `no-store`.
///
/// The Contact header of SIP answers is left out of the scan: a registrar's 200 lists the
/// extension's own Contacts as the phones sent them (RFC 3261 §10.3 step 8, RFC 8599), and a
/// callee's 200 carries the callee's own Contact; neither is Rouse's to shorten.
final class SecretsScanTests: XCTestCase {
    static let sipPasswords = ["pw-sec-1001-Zq8", "pw-sec-1002-Xk3"]
    static let adminPassword = "admin-sec-Pw9-rt"
    static let apnsToken = String(repeating: "9f", count: 32)
    static let fcmToken = "fcmSecretToken:APA91b" + String(repeating: "Q", count: 40)
    static let postedToken = "postedSecret:APA91b" + String(repeating: "W", count: 40)
    static let testPushToken = String(repeating: "7e", count: 32)

    var database: TestDatabase!
    var apns: PushStandIn!
    var fcm: PushStandIn!
    var rouse: RouseProcess?
    var agents: [TestUserAgent] = []
    /// Every answer the test saw (HTTP bodies and headers, SIP answers, CLI output).
    var seen: [String] = []
    /// The answers that reveal whole tokens on request: what asked, the answer, the tokens it may hold.
    var revealed: [(what: String, text: String, tokens: Set<String>)] = []

    override func setUpWithError() throws {
        database = try TestDatabase()
        let connection = try database.connect()
        try Migrator.migrate(connection)
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        try directory.addExtension(AddressOfRecord(number: "1001", domain: "example.com"), password: Self.sipPasswords[0])
        try directory.addExtension(AddressOfRecord(number: "1002", domain: "example.com"), password: Self.sipPasswords[1])
        try PostgresAdmins.add(name: "ops", password: Self.adminPassword, on: connection)
    }

    override func tearDown() {
        agents.forEach { $0.close() }
        _ = rouse?.stop()
        rouse = nil
        apns?.stop()
        fcm?.stop()
        database?.drop()
    }

    func testNoSecretInLogsOrAnswers() throws {
        let key = try PushStandIn.makeAPNsKey()
        let original = try PushStandIn.makeFCMServiceAccount()
        defer { key.remove(); original.remove() }  // the stand-ins read them at start
        apns = try PushStandIn.apns(keys: ["ABC123DEFG": key.keyPath], teamID: "DEF123GHIJ", topics: ["com.example.app"])
        fcm = try PushStandIn.fcm(serviceAccountPath: original.path)
        let accountData = try Data(contentsOf: URL(fileURLWithPath: try XCTUnwrap(fcm.serviceAccountFile)))
        let account = try XCTUnwrap(try JSONSerialization.jsonObject(with: accountData) as? [String: Any])
        let accountKey = try XCTUnwrap(account["private_key"] as? String)
        let caFile = apns.stateDirectory + "/cas.pem"
        try [apns.caFile, fcm.caFile].map { try String(contentsOfFile: $0, encoding: .utf8) }.joined()
            .write(toFile: caFile, atomically: true, encoding: .utf8)

        let process = try RouseProcess(
            arguments: ["serve"],
            environment: [
                "ROUSE_DATABASE_URL": database.conninfo, "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0,tcp:127.0.0.1:0",
                "ROUSE_APNS_PRODUCTION_URL": apns.baseURL, "ROUSE_APNS_SANDBOX_URL": apns.baseURL, "ROUSE_FCM_URL": fcm.baseURL,
                "ROUSE_PUSH_CA_FILE": caFile, "ROUSE_PUSH_TIMEOUT": "3", "ROUSE_WAKE_WAIT": "8", "ROUSE_WAKE_WAIT_WITH_DESK_PHONE": "1",
                "ROUSE_RING_TIMEOUT": "20", "ROUSE_LOG_LEVEL": "debug",
            ])
        rouse = process
        XCTAssertTrue(process.waitForOutput(containing: "serving SIP on"), process.outputText)
        XCTAssertTrue(process.waitForOutput(containing: "event=http.listening"), process.outputText)
        let points = try sipPoints(process)
        let http = try TestHTTPClient(port: try httpPort(process))
        let admin = ("Authorization", TestHTTPClient.basic("ops", Self.adminPassword))
        let json = ("Content-Type", "application/json")

        // Push apps through the admin API, with their secrets in the bodies.
        let apnsApp = try send(http, "POST", "/api/v1/admin/push-apps", [admin, json], [
            "kind": "apns", "teamId": "DEF123GHIJ", "keyId": "ABC123DEFG", "topic": "com.example.app", "key": key.privateKeyPEM,
            "environment": "production",
        ])
        XCTAssertEqual(apnsApp.status, 201, String(decoding: apnsApp.body, as: UTF8.self))
        let fcmApp = try send(http, "POST", "/api/v1/admin/push-apps", [admin, json], ["kind": "fcm", "serviceAccount": account])
        XCTAssertEqual(fcmApp.status, 201, String(decoding: fcmApp.body, as: UTF8.self))
        XCTAssertEqual(try send(http, "GET", "/api/v1/admin/push-apps", [admin]).status, 200)
        // A wrong admin password and a wrong SIP password are refused without being echoed.
        XCTAssertEqual(try send(http, "GET", "/api/v1/admin/push-apps", [("Authorization", TestHTTPClient.basic("ops", Self.adminPassword + "x"))]).status, 401)
        let apnsID = try XCTUnwrap(apnsApp.json["id"] as? Int)
        let tested = try send(http, "POST", "/api/v1/admin/push-apps/\(apnsID)/test", [admin, json], ["token": Self.testPushToken, "provider": "apns"])
        XCTAssertEqual(tested.status, 200, String(decoding: tested.body, as: UTF8.self))

        // A posted Android token for 1001, and a wrong password's refusal.
        let posting: [String: Any] = ["sipUser": "1001@example.com", "token": Self.postedToken, "platform": "android", "param": "rouse-test"]
        let stored = try send(http, "POST", "/api/v1/push/register", [("Authorization", TestHTTPClient.basic("1001@example.com", Self.sipPasswords[0])), json], posting)
        XCTAssertEqual(stored.status, 200, String(decoding: stored.body, as: UTF8.self))
        XCTAssertEqual(try send(http, "POST", "/api/v1/push/register", [("Authorization", TestHTTPClient.basic("1001@example.com", "wrong")), json], posting).status, 401)

        // 1002: an iPhone app (VoIP token) and an Android app (FCM token), both asleep.
        func port(_ transport: SIPTransportKind) throws -> UInt16 { try XCTUnwrap(points.first { $0.transport == transport }).port }
        let iPhone = try TestUserAgent(
            transport: .tcp, serverPort: try port(.tcp), user: "1002", domain: "example.com", password: Self.sipPasswords[1],
            instanceID: "urn:uuid:\(UUID().uuidString.lowercased())",
            contactURIParameters: "pn-provider=apns;pn-prid=\(Self.apnsToken);pn-param=DEF123GHIJ.com.example.app.voip", userAgent: "RouseTestApp/1 (iPhone)")
        let android = try TestUserAgent(
            transport: .tcp, serverPort: try port(.tcp), user: "1002", domain: "example.com", password: Self.sipPasswords[1],
            instanceID: "urn:uuid:\(UUID().uuidString.lowercased())",
            contactURIParameters: "pn-provider=fcm;pn-prid=\(Self.fcmToken);pn-param=rouse-test", userAgent: "RouseTestApp/1 (Android)")
        let caller = try TestUserAgent(transport: .udp, serverPort: try port(.udp), user: "1001", domain: "example.com", password: Self.sipPasswords[0])
        agents = [iPhone, android, caller]
        for phone in [iPhone, android] {
            let ok = try phone.register()
            XCTAssertEqual(ok.statusCode, 200)
            record(ok)
            phone.goQuiet()
        }
        let registered = try caller.register()
        XCTAssertEqual(registered.statusCode, 200)
        record(registered)

        // A call that pushes both apps; the iPhone wakes and answers; the caller hangs up.
        TestUserAgent.link(iPhone, android, caller)
        let call = try caller.invite("sip:1002@example.com")
        record(try call.waitForResponse { $0.statusCode == 100 && ($0.cseq?.number ?? 0) >= 2 })
        record(try call.waitForResponse(status: 180))
        try waitForPush(apns, token: Self.apnsToken)
        try waitForPush(fcm, token: Self.fcmToken)
        try iPhone.reopen()
        record(try iPhone.register())
        let invite = try iPhone.waitForRequest(.invite)
        let dialog = try iPhone.answer(invite)
        let ok = try call.waitForResponse(status: 200)
        record(ok)
        let callerDialog = try call.ack(ok)
        try dialog.waitForAck()
        let bye = try callerDialog.sendRequest(.bye)
        try dialog.receiveBye()
        record(try caller.waitForFinalResponse(to: bye))

        // What an administrator reads: the extension, its devices and pushes, the calls.
        XCTAssertEqual(try waitForCall(http, admin), true)
        for path in ["/api/v1/admin/extensions/1002@example.com", "/api/v1/admin/extensions/1001@example.com", "/api/v1/admin/extensions", "/api/v1/admin/calls", "/health", "/metrics"] {
            XCTAssertEqual(try send(http, "GET", path, path.hasPrefix("/api") ? [admin] : []).status, 200, path)
        }
        let calls = try send(http, "GET", "/api/v1/admin/calls", [admin]).json["calls"] as? [[String: Any]] ?? []
        for id in calls.compactMap({ $0["id"] as? String }) {
            XCTAssertEqual(try send(http, "GET", "/api/v1/admin/calls/\(id)", [admin]).status, 200)
        }
        try readAdminPages(port: try httpPort(process))

        // The admin API: a device's test push, and its whole tokens on request (revealed, no-store).
        let detail = try send(http, "GET", "/api/v1/admin/extensions/1002@example.com", [admin])
        let androidID = try XCTUnwrap((detail.json["bindings"] as? [[String: Any]])?.first { ($0["userAgent"] as? String)?.contains("Android") == true }?["id"] as? String)
        let deviceTest = try send(http, "POST", "/api/v1/admin/extensions/1002@example.com/devices/\(androidID)/test", [admin])
        XCTAssertEqual(deviceTest.status, 200, String(decoding: deviceTest.body, as: UTF8.self))
        XCTAssertEqual(deviceTest.json["outcome"] as? String, "accepted")
        let whole = try http.send("GET", "/api/v1/admin/extensions/1002@example.com?tokens=true", headers: [admin])
        XCTAssertEqual(whole.status, 200)
        XCTAssertEqual(whole.header("Cache-Control"), "no-store")
        revealed.append(("GET …?tokens=true", String(decoding: whole.body, as: UTF8.self), [Self.apnsToken, Self.fcmToken]))

        // The command line.
        for arguments in [
            ["registrations", "1002@example.com"], ["registrations", "1001@example.com"], ["registrations", "--json"], ["extension", "list", "--json"],
            ["push-app", "list"], ["push-app", "list", "--json"],
        ] {
            let command = try RouseProcess(arguments: arguments, environment: ["ROUSE_DATABASE_URL": database.conninfo])
            XCTAssertEqual(command.waitForExit(), 0, command.outputText)
            seen.append(command.outputText)
        }
        XCTAssertTrue(seen.last?.contains("DEF123GHIJ") == true, "push-app list shows the apps: \(seen.last ?? "")")
        for (arguments, tokens) in [
            (["registrations", "1002@example.com", "--tokens"], [Self.apnsToken, Self.fcmToken]),
            (["registrations", "1001@example.com", "--tokens", "--json"], [Self.postedToken]),
        ] {
            let command = try RouseProcess(arguments: arguments, environment: ["ROUSE_DATABASE_URL": database.conninfo])
            XCTAssertEqual(command.waitForExit(), 0, command.outputText)
            revealed.append((arguments.joined(separator: " "), command.outputText, Set(tokens)))
        }

        XCTAssertEqual(process.stop(), 0)
        let log = process.outputText
        XCTAssertTrue(log.contains("event="), "the server logged: \(log.prefix(500))")

        // The scan reads what the tokens became: the shortened forms are there.
        XCTAssertTrue(seen.joined().contains(Binding.shortenedToken(Self.apnsToken)), "the extension's devices were read")
        XCTAssertTrue(seen.joined().contains(Binding.shortenedToken(Self.postedToken)), "the posted token was read")

        // The scan.
        var secrets: [(String, String)] = Self.sipPasswords.map { ("a SIP password", $0) }
        secrets.append(("the admin password", Self.adminPassword))
        secrets += Self.keyLines(key.privateKeyPEM).map { ("a .p8 key line", $0) }
        secrets += Self.keyLines(accountKey).map { ("a service account key line", $0) }
        secrets += [Self.apnsToken, Self.fcmToken, Self.postedToken, Self.testPushToken].map { ("a whole push token", $0) }
        let sources = [("the server's log", log, Set<String>())] + seen.enumerated().map { ("answer \($0.offset)", $0.element, Set<String>()) }
            + revealed.map { ("the revealing answer of \($0.what)", $0.text, $0.tokens) }
        XCTAssertEqual(revealed.count, 4, "the Show token page, ?tokens=true and rouse registrations --tokens twice")
        for (source, text, allowed) in sources {
            for token in allowed where !text.contains(token) {
                XCTFail("\(source) does not hold the whole token it was asked for (\(token.prefix(6))…)")
            }
            for (what, secret) in secrets where text.contains(secret) && !allowed.contains(secret) {
                XCTFail("\(source) holds \(what) (\(secret.prefix(6))…): \(Self.around(secret, in: text))")
            }
            // The APNs token is also checked in upper case (Rouse compares APNs tokens in lower case).
            for token in [Self.apnsToken, Self.testPushToken] where text.contains(token.uppercased()) {
                XCTFail("\(source) holds a whole push token in upper case")
            }
            if let jwt = text.range(of: #"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+"#, options: .regularExpression) {
                XCTFail("\(source) holds a JWT: \(text[jwt].prefix(24))…")
            }
        }
        // Who asked for them is logged, and the test pushes with their tokens shortened.
        XCTAssertTrue(log.contains("event=admin.token_shown") && log.contains("admin=ops"), log)
        XCTAssertTrue(log.contains("event=admin.test_push"), log)
    }

    // MARK: - Helpers

    /// The lines of a PEM key's body (the base64 lines, not the BEGIN/END armour).
    static func keyLines(_ pem: String) -> [String] {
        pem.split(whereSeparator: \.isNewline).map(String.init).filter { !$0.hasPrefix("-----") && $0.count >= 16 }
    }

    /// A little context around a found secret, for the failure message.
    static func around(_ secret: String, in text: String) -> String {
        guard let range = text.range(of: secret) else { return "" }
        let start = text.index(range.lowerBound, offsetBy: -80, limitedBy: text.startIndex) ?? text.startIndex
        return String(text[start..<range.lowerBound]) + "<SECRET>"
    }

    func record(_ response: SIPResponse) {
        let headers = response.headers.fields.filter { $0.key != .contact }.map { "\($0.name): \($0.value)" }
        seen.append((["SIP/2.0 \(response.statusCode) \(response.reasonPhrase)"] + headers).joined(separator: "\r\n") + "\r\n\r\n" + String(decoding: response.body, as: UTF8.self))
    }

    /// Sends a request (a JSON body when `object` is given, else `body`) and keeps its answer for the scan.
    func send(
        _ http: TestHTTPClient, _ method: String, _ path: String, _ headers: [(String, String)], _ object: [String: Any]? = nil, body text: String? = nil
    ) throws -> TestHTTPClient.Response {
        let body = try object.map { try JSONSerialization.data(withJSONObject: $0) } ?? text.map { Data($0.utf8) } ?? (method == "POST" ? Data() : nil)
        let response = try http.send(method, path, headers: headers, body: body)
        seen.append(response.headers.map { "\($0.0): \($0.1)" }.joined(separator: "\n") + "\n\n" + String(decoding: response.body, as: UTF8.self))
        return response
    }

    /// Signs in to the admin pages (CSRF form, session cookie) and reads the extension and push pages.
    func readAdminPages(port: UInt16) throws {
        let http = try TestHTTPClient(port: port)
        let form = try send(http, "GET", "/admin/sign-in", [])
        let formText = String(decoding: form.body, as: UTF8.self)
        let csrfStart = try XCTUnwrap(formText.range(of: "name=\"csrf\" value=\""))
        let csrf = String(formText[csrfStart.upperBound...].prefix { $0 != "\"" })
        var cookies = form.headers.filter { $0.0.lowercased() == "set-cookie" }.map { String($0.1.split(separator: ";")[0]) }
        let fields = "csrf=\(encode(csrf))&name=ops&password=\(encode(Self.adminPassword))"
        let signedIn = try http.send(
            "POST", "/admin/sign-in",
            headers: [("Content-Type", "application/x-www-form-urlencoded"), ("Cookie", cookies.joined(separator: "; "))], body: Data(fields.utf8))
        seen.append(String(decoding: signedIn.body, as: UTF8.self))
        XCTAssertEqual(signedIn.status, 303, String(decoding: signedIn.body, as: UTF8.self))
        cookies += signedIn.headers.filter { $0.0.lowercased() == "set-cookie" }.map { String($0.1.split(separator: ";")[0]) }
        let cookie = ("Cookie", cookies.joined(separator: "; "))
        for path in ["/admin/extensions", "/admin/extensions/1002@example.com", "/admin/extensions/1001@example.com", "/admin/push", "/admin/calls"] {
            let page = try send(http, "GET", path, [cookie])
            XCTAssertEqual(page.status, 200, path)
        }

        // The iPhone's Test push, then its Show token (the one page that reveals a token, sent no-store).
        let page = String(decoding: try send(http, "GET", "/admin/extensions/1002@example.com", [cookie]).body, as: UTF8.self)
        let session = try XCTUnwrap(page.range(of: "name=\"csrf\" value=\""))
        let sessionCSRF = String(page[session.upperBound...].prefix { $0 != "\"" })
        let iPhoneDevice = try XCTUnwrap(
            page.components(separatedBy: "<div class=\"device\" id=\"device-").dropFirst().first { $0.contains("RouseTestApp/1 (iPhone)") })
        let iPhoneID = String(iPhoneDevice.prefix { $0 != "\"" })
        let posting = [("Content-Type", "application/x-www-form-urlencoded"), cookie]
        let tested = try send(http, "POST", "/admin/extensions/1002@example.com/devices/\(iPhoneID)/test", posting, body: "csrf=\(encode(sessionCSRF))")
        XCTAssertEqual(tested.status, 200, String(decoding: tested.body, as: UTF8.self))
        XCTAssertTrue(String(decoding: tested.body, as: UTF8.self).contains("accepted</span> by the provider"))
        let shown = try http.send(
            "POST", "/admin/extensions/1002@example.com/devices/\(iPhoneID)/token", headers: posting, body: Data("csrf=\(encode(sessionCSRF))".utf8))
        XCTAssertEqual(shown.status, 200)
        XCTAssertEqual(shown.header("Cache-Control"), "no-store")
        revealed.append(("the Show token page", String(decoding: shown.body, as: UTF8.self), [Self.apnsToken]))
    }

    func encode(_ text: String) -> String { text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "" }

    func sipPoints(_ process: RouseProcess) throws -> [ListenPoint] {
        let line = try XCTUnwrap(process.outputText.split(separator: "\n").first { $0.contains("serving SIP on") })
        return try (line.components(separatedBy: "serving SIP on ").last ?? "").components(separatedBy: ", ").map { try ListenPoint(parsing: $0) }
    }

    func httpPort(_ process: RouseProcess) throws -> UInt16 {
        try process.httpPort()
    }

    func waitForPush(_ standIn: PushStandIn, token: String, timeout: TimeInterval = 15) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if try standIn.requests().contains(where: { $0.path.hasSuffix(token) || $0.body.contains(token) }) { return }
            Thread.sleep(forTimeInterval: 0.02)
        }
        XCTFail("no push for \(token.prefix(8))… within \(timeout) s")
    }

    /// Waits (with a deadline) until the admin API lists the call.
    func waitForCall(_ http: TestHTTPClient, _ admin: (String, String)) throws -> Bool {
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            let calls = try http.send("GET", "/api/v1/admin/calls", headers: [admin]).json["calls"] as? [[String: Any]] ?? []
            if !calls.isEmpty { return true }
            Thread.sleep(forTimeInterval: 0.1)
        }
        return false
    }
}
