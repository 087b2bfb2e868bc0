import Dispatch
import Foundation
import HTTPAPI
import HTTPServer
import Push
import Registrar
import RouseLog
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// An extension's devices in the admin pages and the admin API (issue 16 item 5), served
/// in-process against a fresh database, with the instance's push service pointed at the APNs
/// (production and sandbox) and FCM stand-ins: each device's Test push goes out as a call's ring
/// push would (its push app, its provider's host, marked test) and reads in words beside it; test
/// pushes to one token are spaced by the interval (429 with Retry-After) unless the push did not
/// reach the phone; Show token and `?tokens=true` give the whole token, answered
/// `Cache-Control: no-store`, while every listing keeps it shortened and no log event holds it.
final class AdminDeviceTests: XCTestCase {
    static let teamID = "DEF123GHIJ"
    static let keyID = "ABC123DEFG"
    static let voipParam = "DEF123GHIJ.com.example.app.voip"
    /// An iPhone development build's VoIP token (registered with pn-provider=apns.dev).
    static let sandboxToken = "5a0d" + String(repeating: "3c", count: 30)
    static let postedToken = "posted-fcm-token:APA91b" + String(repeating: "Z", count: 40)
    static let deadToken = "dead" + String(repeating: "71", count: 30)
    static let regularToken = String(repeating: "4e", count: 32)

    var database: TestDatabase!
    var production: PushStandIn!
    var sandbox: PushStandIn!
    var fcm: PushStandIn!
    var service: StandaloneHTTPAPI!
    var pusher: PushService!
    var browser: PageBrowser!
    var http: TestHTTPClient!
    let events = EventLog()
    let admin = ("root", "admin-password-1")
    let alice = AddressOfRecord(number: "1001", domain: "example.com")

    /// What the service logged, kept for the test.
    final class EventLog: LogHandler, @unchecked Sendable {
        // @unchecked: `events` is only touched under `lock`.
        private let lock = NSLock()
        private var events: [LogEntry] = []
        func write(_ entry: LogEntry) { lock.lock(); events.append(entry); lock.unlock() }
        func flush(timeout: TimeInterval) {}
        var all: [LogEntry] { lock.lock(); defer { lock.unlock() }; return events }
        /// Every line's event and fields, `key=value`, as a log line holds them.
        var text: String { all.map { ([$0.event] + $0.fields.map { "\($0.0)=\($0.1)" }).joined(separator: " ") }.joined(separator: "\n") }
    }

    override func setUpWithError() throws {
        database = try TestDatabase()
        let connection = try database.connect()
        try Migrator.migrate(connection)
        try PostgresAdmins.add(name: admin.0, password: admin.1, on: connection)
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        try directory.addExtension(alice, password: "alice-sip-password")

        let key = try PushStandIn.makeAPNsKey()
        let original = try PushStandIn.makeFCMServiceAccount()
        defer { key.remove(); original.remove() }  // the stand-ins read them at start
        production = try PushStandIn.apns(keys: [Self.keyID: key.keyPath], teamID: Self.teamID, topics: ["com.example.app"])
        sandbox = try PushStandIn.apns(keys: [Self.keyID: key.keyPath], teamID: Self.teamID, topics: ["com.example.app"], environment: .sandbox)
        fcm = try PushStandIn.fcm(serviceAccountPath: original.path)
        let caFile = production.stateDirectory + "/cas.pem"
        try [production.caFile, sandbox.caFile, fcm.caFile].map { try String(contentsOfFile: $0, encoding: .utf8) }.joined()
            .write(toFile: caFile, atomically: true, encoding: .utf8)
        let apps = PostgresPushApps(connection: connection)
        _ = try apps.add(PushApp(credentials: .apns(APNsCredentials(
            teamID: Self.teamID, keyID: Self.keyID, topic: "com.example.app", privateKeyPEM: key.privateKeyPEM, environment: nil))))
        let account = try FCMServiceAccount(json: Array(try Data(contentsOf: URL(fileURLWithPath: try XCTUnwrap(fcm.serviceAccountFile)))))
        _ = try apps.add(PushApp(credentials: .fcm(account)))

        let settings = PushSettings(
            apns: APNsEndpoints(production: production.baseURL, sandbox: sandbox.baseURL), fcmURL: fcm.baseURL, caFile: caFile,
            timeout: .seconds(5))
        pusher = PushService(settings: settings, apps: try apps.all())
        let events = self.events
        service = try StandaloneHTTPAPI(
            listen: "127.0.0.1:0", settings: database.settings(connectTimeout: 3), pushSettings: settings,
            pushService: pusher, testPushInterval: 300, logger: Logger(level: .info, handler: events))
        browser = try PageBrowser(port: service.server.port)
        http = try TestHTTPClient(port: service.server.port)
    }

    override func tearDown() {
        browser = nil
        http = nil
        service?.stop()
        service = nil
        for standIn in [production, sandbox, fcm] { standIn?.stop() }
        database?.drop()
    }

    // MARK: - Devices

    /// Saves a binding of alice's, as the registrar would.
    @discardableResult
    func register(_ channels: [PushChannel], userAgent: String, contact: String) throws -> Binding {
        let binding = Binding(
            aor: alice, contact: contact, instance: "urn:uuid:\(UUID().uuidString.lowercased())", callID: UUID().uuidString, cseq: 1,
            registeredAt: Date(), expiresAt: Date().addingTimeInterval(600), userAgent: userAgent,
            flow: BindingFlow(transport: .tcp, source: SocketAddress(parsing: "192.0.2.7:5060"), connectionID: FlowConnectionID("7"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "a"),
            pushChannels: channels)
        let store = PostgresLocationStore(settings: database.settings())
        defer { store.shutdown() }
        let done = DispatchSemaphore(value: 0)
        store.apply([.save(binding)]) { _ in done.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        return binding
    }

    /// A development build's iPhone (VoIP token, sandbox), an iPhone that registered only its
    /// regular token, a desk phone, and an Android app's posted token.
    func registerDevices() throws -> (iPhone: Binding, regularOnly: Binding, deskPhone: Binding) {
        let iPhone = try register(
            [PushChannel(provider: .apnsSandbox, token: Self.sandboxToken, param: Self.voipParam, kind: .voip)], userAgent: "RouseTestApp/1 (iPhone)",
            contact: "sip:1001@192.0.2.7:5060;transport=tcp;pn-provider=apns.dev;pn-prid=\(Self.sandboxToken);pn-param=\(Self.voipParam)")
        let regularOnly = try register(
            [PushChannel(provider: .apns, token: Self.regularToken, param: "DEF123GHIJ.com.example.app", kind: .remote)], userAgent: "OldApp/2 (iPhone)",
            contact: "sip:1001@192.0.2.8:5060;transport=tcp")
        let deskPhone = try register([], userAgent: "Yealink T54W", contact: "sip:1001@192.0.2.9:5060;transport=tcp")
        _ = try PostedPushTokens.store(
            PushChannel(provider: .fcm, token: Self.postedToken, param: nil, kind: .standard), deviceID: "pixel-7", for: alice,
            on: try database.connect())
        return (iPhone, regularOnly, deskPhone)
    }

    func api(_ method: String, _ path: String) throws -> TestHTTPClient.Response {
        try http.send(method, path, headers: [("Authorization", TestHTTPClient.basic(admin.0, admin.1))], body: method == "POST" ? Data() : nil)
    }

    /// The stand-in's push requests for `token`, once there are `count` (polled with a deadline).
    func pushes(_ standIn: PushStandIn, token: String, count: Int = 1) throws -> [StandInRequest] {
        let deadline = Date().addingTimeInterval(30)
        var found: [StandInRequest] = []
        while Date() < deadline {
            found = try standIn.requests().filter { $0.path.hasSuffix(token) || $0.body.contains(token) }
            if found.count >= count { return found }
            Thread.sleep(forTimeInterval: 0.02)
        }
        XCTFail("no push for \(token.prefix(8))… within 30 s")
        return found
    }

    /// Presses Test push beside device `id` of alice's page; the answer beside it says accepted, and
    /// where the push went.
    func pressTestPush(_ id: String, csrf: String, sentTo: String, file: StaticString = #filePath, line: UInt = #line) throws -> PageBrowser.Page {
        let page = try browser.post("/admin/extensions/1001@example.com/devices/\(id)/test", [:], csrf: csrf)
        XCTAssertEqual(page.status, 200, page.text, file: file, line: line)
        let result = page.text.components(separatedBy: "id=\"device-result-\(id)\"").dropFirst().first?.components(separatedBy: "</div>").first ?? ""
        XCTAssertTrue(result.contains("<span class=\"badge accepted\">accepted</span> by the provider in"), page.text, file: file, line: line)
        XCTAssertTrue(result.contains("to \(sentTo)."), result, file: file, line: line)
        return page
    }

    func testEachDeviceHasATestPushThatGoesOutAsACallsRingPushAndReadsInWords() throws {
        let (iPhone, regularOnly, deskPhone) = try registerDevices()
        let postedID = AdminAPI.deviceID(of: PushChannel(provider: .fcm, token: Self.postedToken, param: nil, kind: .standard))
        XCTAssertEqual(try browser.signIn(admin.0, admin.1).status, 303)
        let page = try browser.get("/admin/extensions/1001@example.com")
        XCTAssertEqual(page.status, 200)
        let iPhoneID = iPhone.id.uuidString.lowercased()
        for id in [iPhoneID, postedID] {
            XCTAssertTrue(page.text.contains("id=\"test-device-\(id)\""), "a Test push button for \(id)")
            XCTAssertTrue(page.text.contains("id=\"show-token-\(id)\""), "a Show token button for \(id)")
        }
        let regularID = regularOnly.id.uuidString.lowercased()
        XCTAssertFalse(page.text.contains("id=\"test-device-\(regularID)\""))
        XCTAssertTrue(page.text.contains("id=\"no-test-\(regularID)\">No test push: only a regular (non-VoIP) iPhone token"), page.text)
        XCTAssertTrue(page.text.contains("id=\"show-token-\(regularID)\""))
        let deskID = deskPhone.id.uuidString.lowercased()
        XCTAssertTrue(page.text.contains("id=\"no-test-\(deskID)\">No test push: no push parameters"), page.text)
        XCTAssertFalse(page.text.contains("id=\"show-token-\(deskID)\""), "a desk phone has no token to show")
        let csrf = try browser.csrf(from: page)

        // The iPhone's test goes to Apple's sandbox (its pn-provider), as a VoIP ring push marked test.
        let tested = try pressTestPush(iPhoneID, csrf: csrf, sentTo: "Apple's sandbox host through push app #1")
        let sent = try XCTUnwrap(try pushes(sandbox, token: Self.sandboxToken).first)
        XCTAssertEqual(sent.headers["apns-push-type"], "voip")
        XCTAssertEqual(sent.headers["apns-topic"], "com.example.app.voip")
        XCTAssertEqual(sent.jsonBody?["test"]?.stringValue, "true")
        XCTAssertEqual(sent.jsonBody?["event"]?.stringValue, "call.ring")
        XCTAssertEqual(sent.jsonBody?["callee_number"]?.stringValue, "1001", sent.body)
        XCTAssertTrue(try production.requests().isEmpty, "nothing went to production")
        // Recorded with the extension's pushes, named as the device.
        XCTAssertTrue(tested.text.contains("RouseTestApp/1 (iPhone) (test push)"), tested.text)

        // The same device again at once: spaced, with Retry-After, and nothing sent.
        let again = try browser.post("/admin/extensions/1001@example.com/devices/\(iPhoneID)/test", [:], csrf: csrf)
        XCTAssertEqual(again.status, 429, again.text)
        let retry = try XCTUnwrap(Int(again.header("Retry-After") ?? ""))
        XCTAssertTrue((1...300).contains(retry), "\(retry)")
        XCTAssertTrue(again.text.contains("<span class=\"badge refused\">not sent</span> A test push went to this device less than 5 min ago."), again.text)
        XCTAssertTrue(again.text.contains("Try again in"), again.text)
        XCTAssertEqual(try sandbox.requests().count, 1, "a spaced test sends nothing")

        // The posted Android token: through FCM, data message marked test.
        let android = try pressTestPush(postedID, csrf: csrf, sentTo: "Firebase Cloud Messaging through push app #2")
        let message = try XCTUnwrap(try pushes(fcm, token: Self.postedToken).first)
        XCTAssertEqual(message.jsonBody?["message"]?["data"]?["test"]?.stringValue, "true", message.body)
        XCTAssertEqual(message.jsonBody?["message"]?["android"]?["priority"]?.stringValue?.lowercased(), "high", message.body)

        // A device without a ring channel: refused in words, nothing sent.
        let none = try browser.post("/admin/extensions/1001@example.com/devices/\(regularID)/test", [:], csrf: csrf)
        XCTAssertEqual(none.status, 409, none.text)
        XCTAssertTrue(none.text.contains("No test push for this device: only a regular"), none.text)
        XCTAssertEqual(try browser.post("/admin/extensions/1001@example.com/devices/0123456789abcdef/test", [:], csrf: csrf).status, 404)
        XCTAssertEqual(try browser.post("/admin/extensions/1999@example.com/devices/\(iPhoneID)/test", [:], csrf: csrf).status, 404)

        // Whole tokens never in the listing, nor in any log event.
        for text in [page.text, tested.text, again.text, android.text] {
            for token in [Self.sandboxToken, Self.postedToken, Self.regularToken] { XCTAssertFalse(text.contains(token), "a whole token in a page") }
        }
        let log = events.text
        XCTAssertTrue(log.contains("admin=root"), log)
        XCTAssertTrue(log.contains("outcome=accepted"), log)
        XCTAssertTrue(log.contains("outcome=limited"), log)
        for token in [Self.sandboxToken, Self.postedToken] { XCTAssertFalse(log.contains(token), "a whole token in the log: \(log)") }
    }

    func testADeadTokenIsMarkedDeadAndATestThatDidNotReachThePhoneIsNotSpaced() throws {
        let binding = try register(
            [PushChannel(provider: .apns, token: Self.deadToken, param: Self.voipParam, kind: .voip)], userAgent: "Gone/1 (iPhone)",
            contact: "sip:1001@192.0.2.7:5060;transport=tcp")
        let id = binding.id.uuidString.lowercased()
        XCTAssertEqual(try browser.signIn(admin.0, admin.1).status, 303)
        let csrf = try browser.csrf(from: try browser.get("/admin/extensions/1001@example.com"))
        let refused = try browser.post("/admin/extensions/1001@example.com/devices/\(id)/test", [:], csrf: csrf)
        XCTAssertEqual(refused.status, 200, refused.text)
        XCTAssertTrue(refused.text.contains("<span class=\"badge refused\">refused</span> 410 <code>Unregistered</code>"), refused.text)
        XCTAssertTrue(refused.text.contains("The token is now marked dead"), refused.text)
        XCTAssertTrue(refused.text.contains("token dead"), "the device shows its token dead at once")
        let dead = try database.connect().query("SELECT family, token, reason FROM push_dead_tokens")
        XCTAssertEqual(dead.rows, [["apns", Self.deadToken, "Unregistered"]])
        // Refused: it never reached a phone, so the next test may go at once (through the API this time).
        let again = try api("POST", "/api/v1/admin/extensions/1001@example.com/devices/\(id)/test")
        XCTAssertEqual(again.status, 200, String(decoding: again.body, as: UTF8.self))
        XCTAssertEqual(again.json["outcome"] as? String, "refused")
        XCTAssertEqual(again.json["token"] as? String, Binding.shortenedToken(Self.deadToken))
        XCTAssertEqual(try production.requests().filter { $0.path.hasSuffix(Self.deadToken) }.count, 2)
    }

    func testTheAdminAPITestsADeviceAndGivesWholeTokensOnlyOnRequest() throws {
        let (iPhone, regularOnly, _) = try registerDevices()
        let listed = try api("GET", "/api/v1/admin/extensions/1001@example.com")
        XCTAssertEqual(listed.status, 200)
        XCTAssertNil(listed.header("Cache-Control"))
        let listedText = String(decoding: listed.body, as: UTF8.self)
        for token in [Self.sandboxToken, Self.postedToken, Self.regularToken] { XCTAssertFalse(listedText.contains(token)) }
        let bindings = listed.json["bindings"] as? [[String: Any]] ?? []
        let iPhoneItem = try XCTUnwrap(bindings.first { $0["id"] as? String == iPhone.id.uuidString.lowercased() })
        XCTAssertEqual(iPhoneItem["testable"] as? Bool, true)
        XCTAssertEqual(bindings.first { $0["id"] as? String == regularOnly.id.uuidString.lowercased() }?["testable"] as? Bool, false)
        let posted = try XCTUnwrap((listed.json["postedTokens"] as? [[String: Any]])?.first)
        XCTAssertEqual(posted["deviceId"] as? String, "pixel-7")
        let postedID = try XCTUnwrap(posted["id"] as? String)
        XCTAssertEqual(postedID.count, 16)

        // Whole tokens on request, not kept by caches, and the reveal logged without them.
        let whole = try api("GET", "/api/v1/admin/extensions/1001@example.com?tokens=true")
        XCTAssertEqual(whole.status, 200)
        XCTAssertEqual(whole.header("Cache-Control"), "no-store")
        let wholeBindings = whole.json["bindings"] as? [[String: Any]] ?? []
        let channels = wholeBindings.flatMap { $0["pushChannels"] as? [[String: Any]] ?? [] }.compactMap { $0["token"] as? String }
        XCTAssertEqual(Set(channels), [Self.sandboxToken, Self.regularToken])
        XCTAssertEqual((whole.json["postedTokens"] as? [[String: Any]])?.first?["token"] as? String, Self.postedToken)
        XCTAssertTrue(events.text.contains("admin.token_shown"), events.text)
        let bad = try api("GET", "/api/v1/admin/extensions/1001@example.com?tokens=yes")
        XCTAssertEqual(bad.status, 400)
        XCTAssertEqual((bad.json["error"] as? [String: Any])?["field"] as? String, "tokens")

        // A device test through the API; then spaced with 429 and Retry-After.
        let tested = try api("POST", "/api/v1/admin/extensions/1001@example.com/devices/\(postedID)/test")
        XCTAssertEqual(tested.status, 200, String(decoding: tested.body, as: UTF8.self))
        XCTAssertEqual(tested.json["outcome"] as? String, "accepted")
        XCTAssertEqual(tested.json["provider"] as? String, "fcm")
        XCTAssertEqual(tested.json["appId"] as? Int, 2)
        XCTAssertEqual(tested.json["device"] as? String, "Android (posted token)")
        XCTAssertEqual(tested.json["token"] as? String, Binding.shortenedToken(Self.postedToken))
        XCTAssertEqual(try pushes(fcm, token: Self.postedToken).count, 1)
        let spaced = try api("POST", "/api/v1/admin/extensions/1001@example.com/devices/\(postedID)/test")
        XCTAssertEqual(spaced.status, 429)
        XCTAssertNotNil(Int(spaced.header("Retry-After") ?? ""))
        XCTAssertEqual((spaced.json["error"] as? [String: Any])?["code"] as? String, "too_many_test_pushes")
        // The limit is the token's, whichever way the test goes: the app's Test with the same token is spaced too.
        let byApp = try http.send(
            "POST", "/api/v1/admin/push-apps/2/test",
            headers: [("Authorization", TestHTTPClient.basic(admin.0, admin.1)), ("Content-Type", "application/json")],
            body: try JSONSerialization.data(withJSONObject: ["token": Self.postedToken]))
        XCTAssertEqual(byApp.status, 429)
        XCTAssertEqual(try fcm.requests().filter { $0.body.contains(Self.postedToken) }.count, 1, "spaced tests send nothing")

        let untestable = try api("POST", "/api/v1/admin/extensions/1001@example.com/devices/\(regularOnly.id.uuidString.lowercased())/test")
        XCTAssertEqual(untestable.status, 409)
        XCTAssertEqual(try api("POST", "/api/v1/admin/extensions/1001@example.com/devices/nope/test").status, 404)
        XCTAssertEqual(try api("POST", "/api/v1/admin/extensions/not-an-address/devices/nope/test").status, 400)
        XCTAssertEqual(try api("POST", "/api/v1/admin/extensions/1999@example.com/devices/nope/test").status, 404)
        XCTAssertFalse(events.text.contains(Self.postedToken), events.text)
        XCTAssertFalse(events.text.contains(Self.sandboxToken), events.text)
    }

    func testShowTokenGivesTheWholeTokensOnAPageNoCacheKeeps() throws {
        let (iPhone, regularOnly, deskPhone) = try registerDevices()
        XCTAssertEqual(try browser.signIn(admin.0, admin.1).status, 303)
        let page = try browser.get("/admin/extensions/1001@example.com")
        let csrf = try browser.csrf(from: page)
        let path = "/admin/extensions/1001@example.com/devices/\(iPhone.id.uuidString.lowercased())/token"
        XCTAssertEqual(try browser.post(path, [:], csrf: nil).status, 403, "Show token is a form with the session's token")
        let shown = try browser.post(path, [:], csrf: csrf)
        XCTAssertEqual(shown.status, 200, shown.text)
        XCTAssertEqual(shown.header("Cache-Control"), "no-store")
        XCTAssertTrue(shown.text.contains("<h1>Token of RouseTestApp/1 (iPhone)</h1>"), shown.text)
        XCTAssertTrue(shown.text.contains("readonly spellcheck=\"false\" autocomplete=\"off\">\(Self.sandboxToken)</textarea>"), shown.text)
        XCTAssertTrue(shown.text.contains("pn-provider <code>apns.dev</code> · voip · pn-param <code>\(Self.voipParam)</code>"), shown.text)
        XCTAssertFalse(shown.text.contains(Self.postedToken), "only this device's token")
        let regular = try browser.post(
            "/admin/extensions/1001@example.com/devices/\(regularOnly.id.uuidString.lowercased())/token", [:], csrf: csrf)
        XCTAssertTrue(regular.text.contains(">\(Self.regularToken)</textarea>"), regular.text)
        let postedID = AdminAPI.deviceID(of: PushChannel(provider: .fcm, token: Self.postedToken, param: nil, kind: .standard))
        let posted = try browser.post("/admin/extensions/1001@example.com/devices/\(postedID)/token", [:], csrf: csrf)
        XCTAssertTrue(posted.text.contains(">\(Self.postedToken)</textarea>"), posted.text)
        XCTAssertEqual(try browser.post("/admin/extensions/1001@example.com/devices/\(deskPhone.id.uuidString.lowercased())/token", [:], csrf: csrf).status, 200)
        XCTAssertEqual(try browser.post("/admin/extensions/1001@example.com/devices/0123456789abcdef/token", [:], csrf: csrf).status, 404)
        XCTAssertEqual(try browser.get(path).status, 404, "no GET: a link or prefetch never shows a token")

        // The extension's page itself still shows every token shortened; the log names who asked.
        let again = try browser.get("/admin/extensions/1001@example.com")
        for token in [Self.sandboxToken, Self.postedToken, Self.regularToken] { XCTAssertFalse(again.text.contains(token)) }
        let shownEvents = events.all.filter { $0.event == "admin.token_shown" }.map { entry in
            entry.fields.map(\.1).joined(separator: " ")
        }
        XCTAssertEqual(shownEvents.count, 4, "\(shownEvents)")
        XCTAssertTrue(shownEvents.first?.hasPrefix("root 1001@example.com device ") == true, "\(shownEvents)")
        XCTAssertFalse(events.text.contains(Self.sandboxToken))
    }
}
