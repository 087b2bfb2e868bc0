import CallRouting
import Crypto
import Dispatch
import Foundation
import HTTPAPI
import HTTPServer
import Push
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// The admin HTML pages served in-process on port 0 against a fresh PostgreSQL database, read as
/// a browser would over real TCP (cookies kept, forms posted urlencoded): sign-in and its cookie,
/// CSRF refusals, expiry and sign-out, escaping of what comes from the network, and that no
/// password, key, session token or whole push token is ever written into a page.
final class AdminPagesTests: XCTestCase {
    var database: TestDatabase!
    var service: StandaloneHTTPAPI!
    var browser: PageBrowser!
    let admin = ("root", "admin-password-1")
    let alice = AddressOfRecord(number: "1001", domain: "example.com")

    override func setUpWithError() throws {
        database = try TestDatabase()
        let connection = try database.connect()
        try Migrator.migrate(connection)
        try PostgresAdmins.add(name: admin.0, password: admin.1, on: connection)
        // Test pushes go to a closed loopback port: the provider "cannot be asked", in words.
        let pushSettings = PushSettings(
            apns: APNsEndpoints(production: "https://127.0.0.1:9", sandbox: "https://127.0.0.1:9"), fcmURL: "https://127.0.0.1:9",
            timeout: .seconds(2))
        service = try StandaloneHTTPAPI(
            listen: "127.0.0.1:0", settings: database.settings(connectTimeout: 3), pushSettings: pushSettings,
            adminSessionLifetime: 3600)
        browser = try PageBrowser(port: service.server.port)
    }

    override func tearDown() {
        browser = nil
        service?.stop()
        service = nil
        database?.drop()
    }

    var directory: PostgresDirectory { PostgresDirectory(settings: database.settings()) }

    // MARK: - Sign-in, cookies, expiry, sign-out

    func testRootAndAdminAndEveryPageRedirectToSignInWithoutASession() throws {
        for path in ["/", "/admin", "/admin/"] {
            let answer = try browser.get(path)
            XCTAssertEqual(answer.status, 303, path)
            XCTAssertEqual(answer.header("Location"), "/admin/sign-in", path)
        }
        for path in ["/admin/extensions", "/admin/extensions/1001@example.com", "/admin/push", "/admin/push/new", "/admin/calls", "/admin/nowhere"] {
            let answer = try browser.get(path)
            XCTAssertEqual(answer.status, 303, path)
            XCTAssertEqual(answer.header("Location"), "/admin/sign-in", path)
        }
        let form = try browser.get("/admin/sign-in")
        XCTAssertEqual(form.status, 200)
        XCTAssertEqual(form.header("Content-Type"), "text/html; charset=utf-8")
        XCTAssertTrue(form.header("Content-Security-Policy")?.contains("default-src 'none'") == true)
        XCTAssertTrue(form.text.contains("<form method=\"post\" action=\"/admin/sign-in\""), form.text)
        XCTAssertEqual(try browser.get("/admin/style.css").header("Content-Type"), "text/css; charset=utf-8")
    }

    func testSignInSetsAnHttpOnlyStrictCookieAndSignOutEndsTheSessionEverywhere() throws {
        let wrong = try browser.signIn(admin.0, "not-the-password")
        XCTAssertEqual(wrong.status, 401)
        XCTAssertTrue(wrong.text.contains("Wrong admin name or password."), wrong.text)
        XCTAssertNil(browser.cookies["rouse_admin_session"])

        let signedIn = try browser.signIn(admin.0, admin.1)
        XCTAssertEqual(signedIn.status, 303)
        XCTAssertEqual(signedIn.header("Location"), "/admin/extensions")
        let cookie = try XCTUnwrap(signedIn.setCookies.first { $0.hasPrefix("rouse_admin_session=") })
        XCTAssertTrue(cookie.contains("; HttpOnly"), cookie)
        XCTAssertTrue(cookie.contains("; SameSite=Strict"), cookie)
        XCTAssertTrue(cookie.contains("; Path=/admin"), cookie)
        XCTAssertTrue(cookie.contains("; Max-Age=3600"), cookie)
        XCTAssertFalse(cookie.contains("Secure"), "plain HTTP on loopback: no Secure flag, or the browser would drop it")
        let token = try XCTUnwrap(browser.cookies["rouse_admin_session"])

        let page = try browser.get("/admin/extensions")
        XCTAssertEqual(page.status, 200)
        XCTAssertTrue(page.text.contains("<span class=\"who\">root</span>"), page.text)
        XCTAssertEqual(try browser.get("/admin/sign-in").header("Location"), "/admin/extensions", "signed in: the form sends you on")

        // A second browser signs in too; signing one out leaves the other signed in.
        let other = try PageBrowser(port: service.server.port)
        XCTAssertEqual(try other.signIn(admin.0, admin.1).status, 303)

        let out = try browser.post("/admin/sign-out", [:], csrf: try browser.csrf(from: page))
        XCTAssertEqual(out.status, 303)
        XCTAssertEqual(out.header("Location"), "/admin/sign-in?signed-out=1")
        XCTAssertTrue(out.setCookies.contains { $0.hasPrefix("rouse_admin_session=;") && $0.contains("Max-Age=0") }, "\(out.setCookies)")
        XCTAssertTrue(try database.connect().query(
            "SELECT 1 FROM admin_sessions WHERE token_hash = encode(sha256(convert_to($1, 'UTF8')), 'hex')", [token]).isEmpty)
        // The old cookie no longer opens anything, even when sent again by hand.
        browser.cookies["rouse_admin_session"] = token
        let after = try browser.get("/admin/extensions")
        XCTAssertEqual(after.status, 303)
        XCTAssertEqual(after.header("Location"), "/admin/sign-in?ended=1")
        XCTAssertEqual(try other.get("/admin/extensions").status, 200)
    }

    func testSecureCookiesBehindAProxyThatSaysHTTPS() throws {
        browser.extraHeaders = [("X-Forwarded-Proto", "https")]
        let form = try browser.get("/admin/sign-in")
        XCTAssertTrue(form.setCookies.first?.hasSuffix("; Secure") == true, "\(form.setCookies)")
        let signedIn = try browser.signIn(admin.0, admin.1)
        let cookie = try XCTUnwrap(signedIn.setCookies.first { $0.hasPrefix("rouse_admin_session=") })
        XCTAssertTrue(cookie.contains("; Secure"), cookie)
        XCTAssertTrue(cookie.contains("; HttpOnly"), cookie)
        browser.extraHeaders = [("X-Forwarded-Proto", "http")]
        browser.cookies = [:]
        let plain = try browser.signIn(admin.0, admin.1)
        XCTAssertFalse(try XCTUnwrap(plain.setCookies.first { $0.hasPrefix("rouse_admin_session=") }).contains("Secure"))
    }

    func testSessionsExpire() throws {
        XCTAssertEqual(try browser.signIn(admin.0, admin.1).status, 303)
        let connection = try database.connect()
        let left = try connection.query("SELECT extract(epoch FROM expires_at - now())::integer AS left FROM admin_sessions")
        XCTAssertEqual(Double(left.value(0, "left") ?? "") ?? 0, 3600, accuracy: 30, "admin_session_lifetime from sign-in")
        XCTAssertEqual(try browser.get("/admin/calls").status, 200)
        try connection.query("UPDATE admin_sessions SET expires_at = now() - interval '1 second'")
        let expired = try browser.get("/admin/calls")
        XCTAssertEqual(expired.status, 303)
        XCTAssertEqual(expired.header("Location"), "/admin/sign-in?ended=1")
        XCTAssertTrue(expired.setCookies.contains { $0.hasPrefix("rouse_admin_session=;") }, "\(expired.setCookies)")
        let form = try browser.get("/admin/sign-in?ended=1")
        XCTAssertTrue(form.text.contains("Your session has ended. Sign in again."))
        // A new sign-in removes the sessions that have run out.
        XCTAssertEqual(try browser.signIn(admin.0, admin.1).status, 303)
        XCTAssertEqual(try connection.query("SELECT 1 FROM admin_sessions").rows.count, 1)
    }

    func testWrongSignInsCountTowardsTheSharedThrottle() throws {
        let throttle = AuthFailureThrottle(limit: 3, window: 60, blockFor: 300)
        let throttled = try StandaloneHTTPAPI(
            listen: "127.0.0.1:0", settings: database.settings(connectTimeout: 3), authFailureThrottle: throttle)
        defer { throttled.stop() }
        let browser = try PageBrowser(port: throttled.server.port)
        for _ in 1...3 { XCTAssertEqual(try browser.signIn(admin.0, "guess").status, 401) }
        let blocked = try browser.signIn(admin.0, admin.1)
        XCTAssertEqual(blocked.status, 429, "blocked even with the right password")
        XCTAssertNotNil(Int(blocked.header("Retry-After") ?? ""))
        XCTAssertTrue(blocked.text.contains("Too many failed attempts from this address."), blocked.text)
        XCTAssertNil(browser.cookies["rouse_admin_session"])
    }

    func testSignInRefusesAFormWithoutItsCSRFToken() throws {
        _ = try browser.get("/admin/sign-in")
        for csrf in [nil, "", "0123456789abcdef"] {
            var fields = ["name": admin.0, "password": admin.1]
            if let csrf { fields["csrf"] = csrf }
            let answer = try browser.post("/admin/sign-in", fields, csrf: nil)
            XCTAssertEqual(answer.status, 403, "csrf \(csrf ?? "none")")
            XCTAssertFalse(answer.setCookies.contains { $0.hasPrefix("rouse_admin_session=") })
        }
        XCTAssertTrue(try database.connect().query("SELECT 1 FROM admin_sessions").isEmpty)
    }

    func testEveryFormRefusesAMissingOrWrongCSRFTokenAndChangesNothing() throws {
        _ = try directory.addDomain("example.com")
        try directory.addExtension(alice, password: "sip-pw-1")
        let other = try PageBrowser(port: service.server.port)
        XCTAssertEqual(try other.signIn(admin.0, admin.1).status, 303)
        let othersToken = try other.csrf(from: try other.get("/admin/extensions"))
        XCTAssertEqual(try browser.signIn(admin.0, admin.1).status, 303)
        let mine = try browser.csrf(from: try browser.get("/admin/extensions"))
        XCTAssertNotEqual(mine, othersToken, "each session has its own token")

        let forms: [(String, [String: String])] = [
            ("/admin/organisations", ["domain": "example.org"]),
            ("/admin/organisations/remove", ["domain": "example.com"]),
            ("/admin/extensions", ["address": "1009@example.com", "password": "pw-1009"]),
            ("/admin/extensions/1001@example.com/password", ["password": "changed-pw"]),
            ("/admin/extensions/1001@example.com/display-name", ["displayName": "Changed"]),
            ("/admin/extensions/1001@example.com/remove", ["confirm": "yes"]),
            ("/admin/push/new", ["kind": "fcm", "serviceAccount": "{}"]),
            ("/admin/push/1/remove", ["confirm": "yes"]),
            ("/admin/push/1/test", ["token": "abcd"]),
            ("/admin/extensions/1001@example.com/devices/0123456789abcdef/test", [:]),
            ("/admin/extensions/1001@example.com/devices/0123456789abcdef/token", [:]),
            ("/admin/sign-out", [:]),
        ]
        for (path, fields) in forms {
            for csrf in [nil, "", "wrong", othersToken, String(mine.dropLast()) + (mine.hasSuffix("0") ? "1" : "0")] {
                let answer = try browser.post(path, fields, csrf: csrf)
                XCTAssertEqual(answer.status, 403, "\(path) with csrf \(csrf ?? "none")")
                XCTAssertTrue(answer.text.contains("Nothing was changed"), answer.text)
            }
        }
        XCTAssertEqual(try directory.listDomains().map(\.domain), ["example.com"])
        XCTAssertEqual(try directory.listExtensions().map(\.aor), [alice])
        let credentials = try directory.loadDirectory().extensions[alice]
        XCTAssertEqual(credentials?.ha1MD5, ExtensionCredentials.ha1(.md5, number: "1001", realm: "example.com", password: "sip-pw-1"))
        XCTAssertEqual(try browser.get("/admin/extensions").status, 200, "still signed in")
        // With the right token the same form goes through.
        let added = try browser.post("/admin/organisations", ["domain": "example.org"], csrf: mine)
        XCTAssertEqual(added.status, 303)
        XCTAssertEqual(try directory.listDomains().map(\.domain), ["example.com", "example.org"])
    }

    // MARK: - Organisations and extensions

    func testOrganisationsAndExtensionsAddSearchChangePasswordRemove() throws {
        XCTAssertEqual(try browser.signIn(admin.0, admin.1).status, 303)
        var csrf = try browser.csrf(from: try browser.get("/admin/extensions"))
        let badDomain = try browser.post("/admin/organisations", ["domain": "not a domain"], csrf: csrf)
        XCTAssertEqual(badDomain.status, 400)
        XCTAssertTrue(badDomain.text.contains("<span class=\"field-error\" id=\"error-new-domain\">&#39;not a domain&#39; is not a valid domain</span>"), badDomain.text)
        let added = try browser.post("/admin/organisations", ["domain": "Example.com"], csrf: csrf)
        XCTAssertEqual(added.header("Location"), "/admin/extensions?done=organisation-added&subject=example.com")
        XCTAssertTrue(try browser.get(added.header("Location")!).text.contains("Organisation example.com added."))

        let noDomain = try browser.post("/admin/extensions", ["address": "1001@example.org", "password": "pw-secret-1"], csrf: csrf)
        XCTAssertEqual(noDomain.status, 400)
        XCTAssertTrue(noDomain.text.contains("id=\"error-new-address\">there is no organisation example.org; add it above first"), noDomain.text)
        XCTAssertTrue(noDomain.text.contains("value=\"1001@example.org\""), "the address is shown again")
        XCTAssertFalse(noDomain.text.contains("pw-secret-1"), "the password is not")
        let empty = try browser.post("/admin/extensions", ["address": "1001@example.com", "password": ""], csrf: csrf)
        XCTAssertTrue(empty.text.contains("id=\"error-new-password\">unusable password: it is empty"), empty.text)
        for number in 1001...1012 {
            let created = try browser.post("/admin/extensions", ["address": "\(number)@example.com", "password": "pw-secret-\(number)"], csrf: csrf)
            XCTAssertEqual(created.status, 303, created.text)
        }
        let search = try browser.get("/admin/extensions?search=101")
        XCTAssertEqual(search.links(under: "/admin/extensions/"), ["1010@example.com", "1011@example.com", "1012@example.com"].map { "/admin/extensions/" + $0 })
        XCTAssertTrue(search.text.contains("1–3 of 3"))

        let page = try browser.get("/admin/extensions/1001@example.com")
        XCTAssertEqual(page.status, 200)
        csrf = try browser.csrf(from: page)
        let changed = try browser.post("/admin/extensions/1001@example.com/password", ["password": "n3w-secret"], csrf: csrf)
        XCTAssertEqual(changed.header("Location"), "/admin/extensions/1001@example.com?done=password-changed")
        XCTAssertEqual(
            try directory.loadDirectory().extensions[alice]?.ha1MD5,
            ExtensionCredentials.ha1(.md5, number: "1001", realm: "example.com", password: "n3w-secret"))
        let unconfirmed = try browser.post("/admin/extensions/1001@example.com/remove", [:], csrf: csrf)
        XCTAssertEqual(unconfirmed.status, 400)
        XCTAssertEqual(try directory.listExtensions().count, 12)
        let removed = try browser.post("/admin/extensions/1001@example.com/remove", ["confirm": "yes"], csrf: csrf)
        XCTAssertEqual(removed.status, 303)
        XCTAssertEqual(try directory.listExtensions().count, 11)
        XCTAssertEqual(try browser.get("/admin/extensions/1001@example.com").status, 404)

        let refused = try browser.post("/admin/organisations/remove", ["domain": "example.com"], csrf: csrf)
        XCTAssertEqual(refused.status, 409)
        XCTAssertTrue(refused.text.contains("Not removed: domain example.com still has 11 extensions; remove them first."), refused.text)
        XCTAssertFalse(browser.allText.contains("pw-secret-10"), "no page shows an extension's password")
    }

    // MARK: - Escaping and secrets

    func testWhatComesFromTheNetworkIsEscapedEverywhere() throws {
        _ = try directory.addDomain("example.com")
        try directory.addExtension(alice, password: "sip-pw-1")
        let hostile = "<script>alert(1)</script>\"'&<img src=x onerror=alert(2)>"
        let token = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        try save(
            Binding(
                aor: alice, contact: "sip:1001@192.0.2.7:5060;transport=tcp;pn-provider=apns;pn-prid=\(token)", callID: "c1", cseq: 1,
                registeredAt: Date(), expiresAt: Date().addingTimeInterval(600), userAgent: hostile,
                flow: BindingFlow(transport: .tcp, source: SocketAddress(parsing: "192.0.2.7:5060"), connectionID: FlowConnectionID("7"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "a"),
                pushChannels: [PushChannel(provider: .apns, token: token, param: "TEAM.com.example\(hostile)", kind: .voip)]))
        let connection = try database.connect()
        _ = try PostedPushTokens.store(
            PushChannel(provider: .fcm, token: "fcm<b>" + hostile + "-token-tail", param: hostile, kind: .standard), deviceID: nil,
            for: alice, on: connection)
        try PostgresPushStores.insert(
            PushRecord(
                createdAt: Date(), aor: alice.description, callID: "x", provider: .fcm, tokenShort: "fcm<b>…", appID: nil, outcome: "refused",
                status: 400, reason: hostile, explanation: "the provider said " + hostile, latencyMilliseconds: 12, device: hostile),
            on: connection)
        var journey = CallJourney(
            callID: "hostile\(hostile)@pc", callee: alice, caller: "sip:\(hostile)@example.com", callerName: hostile, transport: "udp",
            source: "192.0.2.4:5060", instanceID: hostile, startedAt: MillisecondTime.rounded(Date()))
        journey.pushes = [
            JourneyPush(
                device: hostile, provider: .apns, appID: nil, tokenShort: "01234567…", outcome: "accepted", status: 200, reason: nil,
                explanation: "accepted", latencyMilliseconds: 10, sentAt: journey.startedAt.addingTimeInterval(0.01), wake: .notInTime)
        ]
        journey.branches = [
            JourneyBranch(
                bindingID: UUID(), target: "sip:1001@192.0.2.7", device: hostile, transport: "udp",
                startedAt: journey.startedAt.addingTimeInterval(3), isLateFork: false,
                responses: [JourneyResponse(status: 486, reason: hostile, at: journey.startedAt.addingTimeInterval(4))],
                canceledBecause: nil, endedAt: journey.startedAt.addingTimeInterval(4))
        ]
        journey.events = [JourneyEvent(at: journey.startedAt, text: "INVITE from \(hostile)")]
        journey.outcome = .failed
        journey.finalStatus = 486
        journey.reason = hostile
        journey.endedAt = journey.startedAt.addingTimeInterval(4)
        let store = PostgresJourneyStore(settings: database.settings(connectTimeout: 3))
        defer { store.shutdown() }
        store.recordCall(journey)
        XCTAssertTrue(store.flush(timeout: 30), store.lastFailure ?? "")

        XCTAssertEqual(try browser.signIn(admin.0, admin.1).status, 303)
        let pages = [
            try browser.get("/admin/extensions/1001@example.com"), try browser.get("/admin/calls"),
            try browser.get("/admin/calls/\(journey.id.uuidString.lowercased())"),
            try browser.get("/admin/extensions?search=" + HTML.urlComponent(hostile)),
            try browser.get("/admin/calls?extension=" + HTML.urlComponent(hostile)),
        ]
        for page in pages {
            XCTAssertFalse(page.text.contains("<script"), page.text)
            XCTAssertFalse(page.text.contains("<img"), page.text)
            XCTAssertFalse(page.text.contains("<b>"), page.text)
            XCTAssertFalse(page.text.contains("'&<"), page.text)
        }
        let extensionPage = pages[0].text
        XCTAssertTrue(extensionPage.contains("<dd>&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&amp;&lt;img src=x onerror=alert(2)&gt;</dd>"), extensionPage)
        XCTAssertFalse(extensionPage.contains(token), "a whole token is never shown")
        XCTAssertTrue(extensionPage.contains(Binding.shortenedToken(token)))
        XCTAssertTrue(pages[2].text.contains("no re-register in time"), pages[2].text)
        XCTAssertTrue(pages[2].text.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), pages[2].text)
        XCTAssertTrue(pages[3].text.contains("value=\"&lt;script&gt;"), "the search is shown back, escaped")
        XCTAssertEqual(pages[4].status, 400)
    }

    func testNoSecretIsEverWrittenIntoAPage() throws {
        _ = try directory.addDomain("example.com")
        try directory.addExtension(alice, password: "alice-sip-password")
        let token = "feedfacecafebeef0123456789abcdef0123456789abcdef0123456789abcdef"
        try save(
            Binding(
                aor: alice, contact: "sip:1001@192.0.2.7:5060;pn-provider=apns;pn-prid=\(token);pn-param=TEAM.com.example.app.voip", callID: "c1",
                cseq: 1, registeredAt: Date(), expiresAt: Date().addingTimeInterval(600), userAgent: "Linphone/5.2",
                flow: BindingFlow(transport: .udp, source: SocketAddress(parsing: "192.0.2.7:5060"), connectionID: FlowConnectionID(""), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "a"),
                pushChannels: [PushChannel(provider: .apns, token: token, param: "TEAM.com.example.app.voip", kind: .voip)]))
        let postedToken = "posted-fcm-token-0123456789-abcdefghijklmnopqrstuvwxyz"
        _ = try PostedPushTokens.store(
            PushChannel(provider: .fcm, token: postedToken, param: nil, kind: .standard), deviceID: nil, for: alice,
            on: try database.connect())

        XCTAssertEqual(try browser.signIn(admin.0, admin.1).status, 303)
        let sessionToken = try XCTUnwrap(browser.cookies["rouse_admin_session"])
        let keyPEM = try PushStandIn.makeAPNsKey().privateKeyPEM
        let accountFile = try PushStandIn.makeFCMServiceAccount()
        let accountJSON = try String(contentsOfFile: accountFile.path, encoding: .utf8)
        accountFile.remove()
        var csrf = try browser.csrf(from: try browser.get("/admin/push/new?kind=apns"))

        // Validation errors beside the field; the pasted key is never written back.
        let badTeam = try browser.post(
            "/admin/push/new", ["kind": "apns", "teamId": "x", "keyId": "KEY1234567", "topic": "com.example.app", "key": keyPEM], csrf: csrf)
        XCTAssertEqual(badTeam.status, 400)
        XCTAssertTrue(badTeam.text.contains("id=\"error-teamId\">must be 10 characters"), badTeam.text)
        XCTAssertTrue(badTeam.text.contains("value=\"KEY1234567\""))
        let badKey = try browser.post(
            "/admin/push/new", ["kind": "apns", "teamId": "ABCDE12345", "keyId": "KEY1234567", "topic": "com.example.app", "key": "nope"],
            csrf: csrf)
        XCTAssertTrue(badKey.text.contains("id=\"error-key\">"), badKey.text)
        let apns = try browser.post(
            "/admin/push/new",
            ["kind": "apns", "teamId": "ABCDE12345", "keyId": "KEY1234567", "topic": "com.example.app", "key": keyPEM.replacingOccurrences(of: "\n", with: "\r\n"),
             "environment": "sandbox", "param": ""],
            csrf: csrf)
        XCTAssertEqual(apns.status, 303, apns.text)
        let badAccount = try browser.post("/admin/push/new", ["kind": "fcm", "serviceAccount": "{\"type\": \"service_account\"}"], csrf: csrf)
        XCTAssertTrue(badAccount.text.contains("id=\"error-serviceAccount\">project_id is missing from the service account JSON"), badAccount.text)
        let fcm = try browser.post("/admin/push/new", ["kind": "fcm", "serviceAccount": accountJSON, "param": "rouse-test"], csrf: csrf)
        XCTAssertEqual(fcm.status, 303, fcm.text)
        let apps = try database.connect().query("SELECT id, kind, key_text FROM push_apps ORDER BY id")
        XCTAssertEqual(apps.rows.count, 2)
        let apnsID = try XCTUnwrap(apps.value(0, "id"))
        let fcmID = try XCTUnwrap(apps.value(1, "id"))
        let storedKey = try TestDatabase.secrets.open(try XCTUnwrap(apps.value(0, "key_text")), context: "push_apps.key_text:\(apnsID)")

        // Editing without pasting a key keeps the stored one.
        let edit = try browser.get("/admin/push/\(apnsID)/edit")
        XCTAssertEqual(edit.status, 200)
        XCTAssertTrue(edit.text.contains("value=\"ABCDE12345\""), edit.text)
        XCTAssertTrue(edit.text.contains("<option value=\"sandbox\" selected>"), edit.text)
        csrf = try browser.csrf(from: edit)
        let saved = try browser.post(
            "/admin/push/\(apnsID)/edit",
            ["kind": "apns", "teamId": "ABCDE12345", "keyId": "KEY7654321", "topic": "com.example.app.voip", "key": "", "environment": "", "param": "TEAM.com.example.app.voip"],
            csrf: csrf)
        XCTAssertEqual(saved.status, 303, saved.text)
        let edited = try XCTUnwrap(try PostgresPushApps(connection: try database.connect()).app(id: Int64(apnsID)!))
        guard case .apns(let credentials) = edited.credentials else { return XCTFail("\(edited)") }
        XCTAssertEqual(credentials.keyID, "KEY7654321")
        XCTAssertNil(credentials.environment)
        XCTAssertEqual(edited.param, "TEAM.com.example.app.voip")
        XCTAssertEqual(credentials.privateKeyPEM, storedKey)
        let fcmEdit = try browser.post("/admin/push/\(fcmID)/edit", ["kind": "fcm", "serviceAccount": "", "param": ""], csrf: csrf)
        XCTAssertEqual(fcmEdit.status, 303, fcmEdit.text)

        // A test push to a provider that cannot be reached: the answer in words, beside the app.
        let tested = try browser.post("/admin/push/\(apnsID)/test", ["token": " " + token + "\n", "provider": "apns.dev"], csrf: csrf)
        XCTAssertEqual(tested.status, 200, tested.text)
        XCTAssertTrue(tested.text.contains("id=\"test-result-\(apnsID)\""), tested.text)
        XCTAssertTrue(tested.text.contains("<span class=\"badge failed\">failed</span>"), tested.text)
        XCTAssertEqual(try browser.post("/admin/push/\(apnsID)/test", ["token": "  "], csrf: csrf).status, 400)
        XCTAssertEqual(try browser.post("/admin/push/999/test", ["token": "abcd"], csrf: csrf).status, 404)

        for path in [
            "/admin/extensions", "/admin/extensions/1001@example.com", "/admin/push", "/admin/push/\(apnsID)/edit",
            "/admin/push/\(fcmID)/edit", "/admin/push/new?kind=fcm", "/admin/calls",
        ] {
            XCTAssertEqual(try browser.get(path).status, 200, path)
        }
        let account = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(accountJSON.utf8)) as? [String: Any])
        let accountKey = try XCTUnwrap(account["private_key"] as? String)
        let keyLines = (keyPEM + accountKey).split(separator: "\n").filter { !$0.hasPrefix("-----") && $0.count > 8 }
        XCTAssertFalse(keyLines.isEmpty)
        let everything = browser.allText
        XCTAssertFalse(everything.contains("PRIVATE KEY-----\n"), "no key in any page")
        for line in keyLines { XCTAssertFalse(everything.contains(line), "a key line leaked") }
        for secret in ["alice-sip-password", admin.1, sessionToken, token, postedToken] {
            XCTAssertFalse(everything.contains(secret), "a secret was written into a page")
        }
        XCTAssertTrue(everything.contains(Binding.shortenedToken(postedToken)))
    }

    // MARK: - Calls

    func testCallListFiltersAndTheJourneyReadsInTimeOrder() throws {
        _ = try directory.addDomain("example.com")
        try directory.addExtension(alice, password: "sip-pw-1")
        let bob = AddressOfRecord(number: "1002", domain: "example.com")
        try directory.addExtension(bob, password: "sip-pw-2")
        let start = MillisecondTime.rounded(Date(timeIntervalSince1970: 1_790_000_000))
        func at(_ offset: TimeInterval) -> Date { start.addingTimeInterval(offset) }
        var journey = CallJourney(
            callID: "a84b4c76e66710@pc33", callee: alice, caller: "sip:1002@example.com", callerName: "Reception", transport: "udp",
            source: "192.0.2.4:5060", instanceID: "rouse-a", startedAt: at(0))
        journey.events = [
            JourneyEvent(at: at(0), text: "INVITE from sip:1002@example.com for 1001@example.com over udp"),
            JourneyEvent(at: at(0.01), text: "pushing 1 device(s); waiting up to 8 s for an app to register"),
            JourneyEvent(at: at(2), text: "wait ended: iPhone registered again"),
            JourneyEvent(at: at(4), text: "answered by iPhone after 4 s"),
            JourneyEvent(at: at(30), text: "call answered: 200 answered"),
        ]
        journey.pushes = [
            JourneyPush(
                device: "iPhone", provider: .apns, appID: 1, tokenShort: "01234567…", outcome: "accepted", status: 200, reason: nil,
                explanation: "accepted", latencyMilliseconds: 182, sentAt: at(0.02), wake: .woke(afterMilliseconds: 1900))
        ]
        journey.branches = [
            JourneyBranch(
                bindingID: UUID(), target: "sip:1001@192.0.2.7:5060;transport=tcp", device: "iPhone", transport: "tcp", startedAt: at(2.1),
                isLateFork: false,
                responses: [JourneyResponse(status: 180, reason: "Ringing", at: at(2.3)), JourneyResponse(status: 200, reason: "OK", at: at(4))],
                canceledBecause: nil, endedAt: at(4))
        ]
        journey.outcome = .answered
        journey.finalStatus = 200
        journey.reason = "answered"
        journey.answeredBy = "iPhone"
        journey.answeredAt = at(4)
        journey.endedAt = at(30)
        var other = CallJourney(
            callID: "other@pc", callee: bob, caller: "sip:1001@example.com", callerName: nil, transport: "tcp", source: "192.0.2.5:5060",
            instanceID: "rouse-a", startedAt: at(60))
        other.outcome = .unanswered
        other.finalStatus = 480
        other.reason = "no device woke in time"
        let store = PostgresJourneyStore(settings: database.settings(connectTimeout: 3))
        defer { store.shutdown() }
        store.recordCall(journey)
        store.recordCall(other)
        XCTAssertTrue(store.flush(timeout: 30), store.lastFailure ?? "")

        XCTAssertEqual(try browser.signIn(admin.0, admin.1).status, 303)
        let all = try browser.get("/admin/calls")
        XCTAssertEqual(all.links(under: "/admin/calls/").count, 2)
        XCTAssertTrue(all.text.contains("480 no device woke in time"), all.text)
        let filtered = try browser.get("/admin/calls?extension=1001@example.com")
        let links = filtered.links(under: "/admin/calls/")
        XCTAssertEqual(links, ["/admin/calls/\(journey.id.uuidString.lowercased())"])
        XCTAssertTrue(filtered.text.contains("200, answered by iPhone"), filtered.text)
        let bad = try browser.get("/admin/calls?extension=nobody")
        XCTAssertEqual(bad.status, 400)
        XCTAssertTrue(bad.text.contains("id=\"error-call-extension\">"), bad.text)

        let page = try browser.get(links[0])
        XCTAssertEqual(page.status, 200)
        let lines = page.text.components(separatedBy: "<li class=\"").dropFirst().map { $0.components(separatedBy: "</li>")[0] }
        XCTAssertEqual(
            lines.map { String($0.prefix { $0 != "\"" }) }, ["arrival", "wait", "push", "wait", "branch", "branch", "answer", "answer", "end"],
            "\(lines)")
        guard lines.count == 9 else { return }
        XCTAssertTrue(lines[2].contains("pushed iPhone (apns): accepted in 182 ms, woke in 1.9 s"), lines[2])
        XCTAssertTrue(lines[4].contains("rang iPhone at <code>sip:1001@192.0.2.7:5060;transport=tcp</code> over tcp"), lines[4])
        XCTAssertTrue(lines[5].contains("iPhone answered 180 Ringing"), lines[5])
        XCTAssertTrue(lines[6].contains("iPhone answered 200 OK") || lines[7].contains("iPhone answered 200 OK"), "\(lines)")
        XCTAssertTrue(lines[8].contains("call answered: 200 answered"), lines[8])
        XCTAssertEqual(try browser.get("/admin/calls/not-a-call").status, 404)
    }

    /// Stores `binding` as the registrar would.
    func save(_ binding: Binding) throws {
        let store = PostgresLocationStore(settings: database.settings())
        defer { store.shutdown() }
        let done = DispatchSemaphore(value: 0)
        store.apply([.save(binding)]) { _ in done.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
    }
}

/// A browser as far as the admin pages need one: one keep-alive connection, the cookies the
/// server set, GETs and urlencoded POSTs, and every page it was shown (to scan for secrets).
final class PageBrowser {
    let http: TestHTTPClient
    var cookies: [String: String] = [:]
    /// Headers added to every request (a proxy's `X-Forwarded-Proto`).
    var extraHeaders: [(String, String)] = []
    private(set) var pages: [String] = []

    /// An answer with its body as text and its `Set-Cookie` lines.
    struct Page {
        let response: TestHTTPClient.Response
        var status: Int { response.status }
        var text: String { String(decoding: response.body, as: UTF8.self) }
        var setCookies: [String] { response.headers.filter { $0.0.lowercased() == "set-cookie" }.map(\.1) }
        func header(_ name: String) -> String? { response.header(name) }

        /// The targets of the page's links that start with `prefix` (no query), in order.
        func links(under prefix: String) -> [String] {
            text.components(separatedBy: "href=\"").dropFirst().compactMap { piece in
                let target = String(piece.prefix { $0 != "\"" })
                return target.hasPrefix(prefix) && !target.contains("?") && target.count > prefix.count ? target : nil
            }
        }
    }

    /// A page without a form.
    struct MissingCSRFField: Error {}

    init(port: UInt16) throws {
        http = try TestHTTPClient(port: port)
    }

    var allText: String { pages.joined(separator: "\n") }

    func get(_ path: String) throws -> Page {
        try send("GET", path, body: nil)
    }

    /// Posts `fields` urlencoded, with `csrf` added when given.
    func post(_ path: String, _ fields: [String: String], csrf: String?) throws -> Page {
        var all = fields
        if let csrf { all["csrf"] = csrf }
        let body = all.sorted { $0.key < $1.key }.map { "\(Self.encode($0.key))=\(Self.encode($0.value))" }.joined(separator: "&")
        return try send("POST", path, body: Data(body.utf8))
    }

    /// Opens the sign-in form and posts it.
    func signIn(_ name: String, _ password: String) throws -> Page {
        let form = try get("/admin/sign-in")
        return try post("/admin/sign-in", ["name": name, "password": password], csrf: try csrf(from: form))
    }

    /// The CSRF token of the first form on `page`.
    func csrf(from page: Page) throws -> String {
        guard let range = page.text.range(of: "name=\"csrf\" value=\"") else {
            throw MissingCSRFField()
        }
        return String(page.text[range.upperBound...].prefix { $0 != "\"" })
    }

    private func send(_ method: String, _ path: String, body: Data?) throws -> Page {
        var headers = extraHeaders
        if !cookies.isEmpty { headers.append(("Cookie", cookies.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: "; "))) }
        if body != nil { headers.append(("Content-Type", "application/x-www-form-urlencoded")) }
        let page = Page(response: try http.send(method, path, headers: headers, body: body))
        for line in page.setCookies {
            let pair = line.split(separator: ";")[0].split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard pair.count == 2 else { continue }
            let name = String(pair[0])
            if line.contains("Max-Age=0") { cookies[name] = nil } else { cookies[name] = String(pair[1]) }
        }
        pages.append(page.text)
        return page
    }

    static func encode(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")) ?? ""
    }
}

/// The `HTML` type on its own: strings interpolated are escaped, markup is kept, URLs are encoded.
final class HTMLEscapingTests: XCTestCase {
    func testInterpolatedStringsAreEscapedAndMarkupIsKept() {
        let hostile = "<script>alert('x')</script> & \"quoted\"\u{0}"
        let cell: HTML = "<td title=\"\(hostile)\">\(hostile)</td>"
        let escaped = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;quoted&quot;\u{FFFD}"
        XCTAssertEqual(cell.markup, "<td title=\"\(escaped)\">\(escaped)</td>")
        let inner: HTML = "<b>\(42)</b>"
        let outer: HTML = "<p>\(inner)\([inner, HTML(text: "<i>")])</p>"
        XCTAssertEqual(outer.markup, "<p><b>42</b><b>42</b>&lt;i&gt;</p>")
        XCTAssertEqual(HTML.urlComponent("1001@example.com"), "1001@example.com")
        XCTAssertEqual(HTML.urlComponent("a b/c?d#e&f\"g"), "a%20b%2Fc%3Fd%23e%26f%22g")
    }
}
