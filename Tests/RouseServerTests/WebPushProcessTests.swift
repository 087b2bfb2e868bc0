import CallRouting
import Foundation
import Push
import Registrar
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPTransport
import Storage
import XCTest

/// Web push through `rouse serve` end to end (issue 11 item 5): a browser-like device learns Rouse's
/// VAPID key (HTTP and `Feature-Caps: +sip.vapid`), subscribes with it at the web push stand-in,
/// posts the subscription (`platform: web`) and registers with `pn-provider=webpush`; a call
/// arrives; the stand-in checks the VAPID JWT and decrypts the ring push with the subscription's
/// keys; the woken device registers again and answers. A subscription registered over SIP only
/// (no keys posted) gets pushes without payload; one the push service calls gone is marked dead.
final class WebPushProcessTests: XCTestCase {
    var database: TestDatabase!
    var webPush: PushStandIn!
    var rouse: RouseProcess?
    var points: [ListenPoint] = []
    var agents: [TestUserAgent] = []

    override func setUpWithError() throws {
        database = try TestDatabase()
        let connection = try database.connect()
        try Migrator.migrate(connection)
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        for number in ["1001", "1002"] {
            try directory.addExtension(AddressOfRecord(number: number, domain: "example.com"), password: "pw-\(number)")
        }
        webPush = try PushStandIn.webPush()
    }

    override func tearDown() {
        agents.forEach { $0.close() }
        if ProcessInfo.processInfo.environment["ROUSE_TEST_SHOW_OUTPUT"] != nil, let rouse { print(rouse.outputText) }
        _ = rouse?.stop()
        rouse = nil
        webPush?.stop()
        database?.drop()
    }

    func startRouse(wakeWait: Int = 8, environment extra: [String: String] = [:]) throws {
        let process = try RouseProcess(arguments: ["serve"], environment: extra.merging([
            "ROUSE_DATABASE_URL": database.conninfo, "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0,tcp:127.0.0.1:0",
            "ROUSE_HTTP_LISTEN": "127.0.0.1:0", "ROUSE_PUSH_CA_FILE": webPush.caFile, "ROUSE_PUSH_TIMEOUT": "3",
            "ROUSE_WAKE_WAIT": String(wakeWait), "ROUSE_WAKE_WAIT_WITH_DESK_PHONE": "1", "ROUSE_RING_TIMEOUT": "20",
            "ROUSE_WEBPUSH_CONTACT": "mailto:ops@example.com", "ROUSE_WEBPUSH_ALLOWED_HOSTS": "127.0.0.1",
        ]) { given, _ in given })
        rouse = process
        XCTAssertTrue(process.waitForOutput(containing: "serving HTTP on"), process.outputText)
        let line = try XCTUnwrap(process.outputText.split(separator: "\n").first { $0.contains("serving SIP on") })
        points = try (line.components(separatedBy: "serving SIP on ").last ?? "").components(separatedBy: ", ").map { try ListenPoint(parsing: $0) }
    }

    func port(_ transport: SIPTransportKind) throws -> UInt16 {
        try XCTUnwrap(points.first { $0.transport == transport }).port
    }

    func http() throws -> TestHTTPClient {
        let text = try XCTUnwrap(rouse).outputText
        let line = try XCTUnwrap(text.split(separator: "\n").first { $0.contains("serving HTTP on") })
        let port = try XCTUnwrap(line.split(separator: ":").last.flatMap { UInt16($0) })
        return try TestHTTPClient(port: port)
    }

    /// A browser's subscription made with Rouse's VAPID key and posted for 1002 (`platform: web`).
    func postedSubscription() throws -> StandInWebPushSubscription {
        let subscription = try webPush.subscribe(name: "tab", applicationServerKey: try vapidKey())
        let posted = try http().send(
            "POST", "/api/v1/push/register",
            headers: [("Authorization", TestHTTPClient.basic("1002@example.com", "pw-1002")), ("Content-Type", "application/json")],
            body: try JSONSerialization.data(withJSONObject: ["sipUser": "1002@example.com", "platform": "web", "subscription": subscription.json]))
        XCTAssertEqual(posted.status, 200, String(decoding: posted.body, as: UTF8.self))
        return subscription
    }

    /// What a browser does first: fetch Rouse's VAPID key.
    func vapidKey() throws -> String {
        let answer = try http().send("GET", "/api/v1/push/vapid-public-key")
        XCTAssertEqual(answer.status, 200)
        return try XCTUnwrap(answer.json["publicKey"] as? String)
    }

    /// A browser softphone woken by web push: its Contact names the subscription's endpoint.
    func browser(endpoint: String?) throws -> TestUserAgent {
        let agent = try TestUserAgent(
            transport: .tcp, serverPort: try port(.tcp), user: "1002", domain: "example.com", password: "pw-1002",
            instanceID: "urn:uuid:\(UUID().uuidString.lowercased())",
            contactURIParameters: "pn-provider=webpush" + (endpoint.map { ";pn-prid=\($0)" } ?? ""), userAgent: "RouseTestBrowser/1")
        agents.append(agent)
        return agent
    }

    func caller() throws -> TestUserAgent {
        let agent = try TestUserAgent(transport: .udp, serverPort: try port(.udp), user: "1001", domain: "example.com", password: "pw-1001")
        agents.append(agent)
        return agent
    }

    func place(_ caller: TestUserAgent) throws -> TestOutgoingCall {
        for agent in agents where agent !== caller { TestUserAgent.link(agent, caller) }
        let call = try caller.invite("sip:1002@example.com")
        _ = try call.waitForResponse { $0.statusCode == 100 && ($0.cseq?.number ?? 0) >= 2 }
        return call
    }

    /// The stand-in's pushes to `subscription` (those that `accept`), waiting until there are `count`.
    func pushes(
        to subscription: StandInWebPushSubscription, count: Int = 1, where accept: (StandInRequest) -> Bool = { _ in true }
    ) throws -> [StandInRequest] {
        let deadline = Date().addingTimeInterval(15)
        while Date() < deadline {
            let found = try webPush.requests().filter { $0.subscription == subscription.id && accept($0) }
            if found.count >= count { return found }
            Thread.sleep(forTimeInterval: 0.02)
        }
        XCTFail("no push to \(subscription.id) within 15 s")
        return []
    }

    func journey(callID: String, where accept: (CallJourney) -> Bool) throws -> CallJourney {
        let connection = try database.connect()
        let deadline = Date().addingTimeInterval(20)
        var last: CallJourney?
        while Date() < deadline {
            last = try PostgresCalls.recent(on: connection, limit: 20).first { $0.callID == callID }
            if let last, accept(last) { return last }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return try XCTUnwrap(nil, "journey of \(callID) not as expected: \(String(describing: last?.outcome)) \(last?.events.map(\.text) ?? [])")
    }

    // MARK: - Tests

    func testVAPIDKeyIsServedOverHTTPAndOfferedInFeatureCaps() throws {
        try startRouse()
        let key = try vapidKey()
        XCTAssertEqual(try PostgresVAPIDKeys.load(on: try database.connect())?.publicKeyBase64URL, key, "the key Rouse made at start")
        let query = try browser(endpoint: nil)
        let response = try query.register()
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(response.headers.lines(.featureCaps), ["*;+sip.pns=\"webpush\";+sip.vapid=\"\(key)\""])
        XCTAssertFalse(try XCTUnwrap(rouse).outputText.contains("PRIVATE KEY"), "the VAPID private key is never logged")
    }

    func testPostedSubscriptionIsWokenByAnEncryptedRingPushAndAnswers() throws {
        try startRouse()
        let subscription = try postedSubscription()

        let browser = try browser(endpoint: subscription.endpoint)
        XCTAssertEqual(try browser.register().statusCode, 200)
        browser.goQuiet()
        let caller = try caller()
        let call = try place(caller)
        XCTAssertEqual(try call.waitForResponse(status: 180).statusCode, 180, "ringback while the browser wakes")

        let push = try XCTUnwrap(try pushes(to: subscription).first)
        XCTAssertEqual(push.verdictStatus, 201, push.verdictDetail ?? "")
        XCTAssertEqual(push.jsonPlaintext?["event"]?.stringValue, "call.ring")
        XCTAssertEqual(push.jsonPlaintext?["call_id"]?.stringValue, call.callID)
        XCTAssertEqual(push.jsonPlaintext?["caller_number"]?.stringValue, "1001")
        XCTAssertEqual(push.jsonPlaintext?["uuid"]?.stringValue, PushPayload.uuid(forCallID: call.callID))
        XCTAssertEqual(push.headers["urgency"], "high")
        XCTAssertEqual(push.jwtClaims?["sub"]?.stringValue, "mailto:ops@example.com")
        XCTAssertEqual(try webPush.requests().filter { $0.path.hasPrefix("/push/") }.count, 1, "one push for the device, however it is known")

        try browser.reopen()
        XCTAssertEqual(try browser.register().statusCode, 200)
        let invite = try browser.waitForRequest(.invite)
        XCTAssertEqual(invite.callID, call.callID)
        let dialog = try browser.answer(invite)
        let ok = try call.waitForResponse(status: 200)
        _ = try call.ack(ok)
        try dialog.waitForAck()

        let journey = try journey(callID: call.callID) { $0.outcome == .answered && !$0.pushes.isEmpty }
        XCTAssertEqual(journey.pushes.count, 1)
        XCTAssertEqual(journey.pushes[0].provider, .webpush)
        XCTAssertEqual(journey.pushes[0].outcome, "accepted")
        XCTAssertEqual(journey.pushes[0].device, "RouseTestBrowser/1")
        XCTAssertEqual(journey.pushes[0].tokenShort, "https://127.0.0.1/…")
        XCTAssertNil(journey.pushes[0].appID, "web push needs no push app")
        let record = try XCTUnwrap(try PostgresPushStores.recent(on: try database.connect(), aor: "1002@example.com").first { $0.callID == call.callID })
        XCTAssertEqual(record.provider, .webpush)
        XCTAssertEqual(record.outcome, "accepted")
        XCTAssertFalse(try XCTUnwrap(rouse).outputText.contains(subscription.keys.auth), "the auth secret is never logged")
        XCTAssertFalse(try XCTUnwrap(rouse).outputText.contains(subscription.endpoint), "nor the whole endpoint")
    }

    func testARegisteredOnlySubscriptionGetsPushesWithoutPayload() throws {
        try startRouse(wakeWait: 2)
        // Registered over SIP only: Rouse has the endpoint but no keys, so the push carries no payload.
        let subscription = try webPush.subscribe(name: "sip-only", applicationServerKey: try vapidKey())
        let browser = try browser(endpoint: subscription.endpoint)
        XCTAssertEqual(try browser.register().statusCode, 200)
        browser.goQuiet()
        let caller = try caller()
        let call = try place(caller)
        let push = try XCTUnwrap(try pushes(to: subscription).first)
        XCTAssertEqual(push.verdictStatus, 201)
        XCTAssertNil(push.plaintext)
        XCTAssertTrue(push.notes.contains("push without payload"), "\(push.notes)")
        XCTAssertEqual(try call.waitForResponse(timeout: .seconds(15)) { $0.statusCode >= 300 }.statusCode, 480, "nobody woke in time")
        // The call is over: a cancel follows the ring, with the same Topic so it replaces a ring the
        // push service still holds.
        let topic = PushPayload.uuid(forCallID: call.callID).replacingOccurrences(of: "-", with: "")
        let both = try pushes(to: subscription, count: 2)
        XCTAssertEqual(both.prefix(2).map { $0.headers["topic"] }, [topic, topic])
        XCTAssertEqual(both.prefix(2).map(\.verdictStatus), [201, 201])
        let journey = try journey(callID: call.callID) { !$0.pushes.isEmpty && $0.endedAt != nil }
        XCTAssertEqual(journey.pushes.first?.outcome, "accepted")
        XCTAssertTrue(journey.pushes.first?.explanation.contains("without payload") ?? false, "\(journey.pushes)")
    }

    func testGoneSubscriptionIsMarkedDead() throws {
        try startRouse(wakeWait: 2)
        let subscription = try webPush.subscribe(name: "tab", applicationServerKey: try vapidKey())
        let browser = try browser(endpoint: subscription.endpoint)
        XCTAssertEqual(try browser.register().statusCode, 200)
        browser.goQuiet()
        // The browser unsubscribed: the push service answers 410, and Rouse marks it dead.
        try webPush.unsubscribe(subscription)
        let call = try place(try caller())
        let push = try XCTUnwrap(try pushes(to: subscription).first)
        XCTAssertEqual(push.verdictStatus, 410)
        let journey = try journey(callID: call.callID) { !$0.pushes.isEmpty && $0.endedAt != nil }
        XCTAssertEqual(journey.pushes.first?.outcome, "refused")
        XCTAssertEqual(journey.pushes.first?.status, 410)
        let connection = try database.connect()
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline, !(try PostgresPushStores.isDead(on: connection, family: .webpush, token: subscription.endpoint)) {
            Thread.sleep(forTimeInterval: 0.05)
        }
        XCTAssertTrue(try PostgresPushStores.isDead(on: connection, family: .webpush, token: subscription.endpoint))
    }
}
