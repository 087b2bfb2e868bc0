import CallRouting
import Foundation
import HTTPAPI
import HTTPServer
import Push
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// The admin API's calls: journeys written through `PostgresJourneyStore` into a fresh database,
/// read over real TCP with `GET /api/v1/admin/calls` (list, paging, filter) and
/// `GET /api/v1/admin/calls/{id}` (the journey), and in an extension's detail (recent calls, the
/// device and wake result of each recent push).
final class AdminCallsAPITests: XCTestCase {
    var database: TestDatabase!
    var service: StandaloneHTTPAPI!
    var http: TestHTTPClient!
    var store: PostgresJourneyStore!
    let admin = ("root", "admin-password-1")
    let alice = AddressOfRecord(number: "1001", domain: "example.com")
    let bob = AddressOfRecord(number: "1002", domain: "example.com")

    override func setUpWithError() throws {
        database = try TestDatabase()
        let connection = try database.connect()
        try Migrator.migrate(connection)
        try PostgresAdmins.add(name: admin.0, password: admin.1, on: connection)
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        try directory.addExtension(alice, password: "sip-pw-1")
        try directory.addExtension(bob, password: "sip-pw-2")
        store = PostgresJourneyStore(settings: database.settings(connectTimeout: 3))
        service = try StandaloneHTTPAPI(listen: "127.0.0.1:0", settings: database.settings(connectTimeout: 3))
        http = try TestHTTPClient(port: service.server.port)
    }

    override func tearDown() {
        http = nil
        store?.shutdown()
        store = nil
        service?.stop()
        service = nil
        database?.drop()
    }

    func call(_ path: String, user: String? = nil, password: String? = nil, authenticated: Bool = true) throws -> TestHTTPClient.Response {
        var headers: [(String, String)] = []
        if authenticated { headers.append(("Authorization", TestHTTPClient.basic(user ?? admin.0, password ?? admin.1))) }
        return try http.send("GET", path, headers: headers, body: nil)
    }

    func text(_ response: TestHTTPClient.Response) -> String { String(decoding: response.body, as: UTF8.self) }

    func errorField(_ response: TestHTTPClient.Response) -> String? {
        (response.json["error"] as? [String: Any])?["field"] as? String
    }

    /// A date on a whole millisecond, `offset` seconds after the first test call.
    func at(_ offset: TimeInterval) -> Date {
        MillisecondTime.rounded(Date(timeIntervalSince1970: 1_790_000_000.5 + offset))
    }

    /// A call to `callee` at `offset`: an accepted push that woke the iPhone, a refused one, the
    /// iPhone's branch answering.
    func journey(to callee: AddressOfRecord, at offset: TimeInterval, answered: Bool = true) -> CallJourney {
        var journey = CallJourney(
            callID: "call-\(Int(offset))@pc33.example.com", callee: callee, caller: "sip:2000@example.com", callerName: "Reception",
            transport: "tls", source: "192.0.2.4:5061", instanceID: "instance-a", startedAt: at(offset))
        journey.pushes = [
            JourneyPush(
                device: "iPhone (apns)", provider: .apns, appID: nil, tokenShort: "01234567…", outcome: "accepted", status: 200,
                reason: nil, explanation: "accepted by APNs", latencyMilliseconds: 182, sentAt: at(offset + 0.1),
                wake: .woke(afterMilliseconds: 1900)),
            JourneyPush(
                device: "Pixel (fcm)", provider: .fcm, appID: nil, tokenShort: "fcm-toke…", outcome: "refused", status: 404,
                reason: "UNREGISTERED", explanation: "the token is no longer valid", latencyMilliseconds: 95, sentAt: at(offset + 0.1),
                wake: .notPushed),
        ]
        journey.branches = [
            JourneyBranch(
                bindingID: UUID(), target: "sip:1001@192.0.2.7:5061;transport=tls", device: "iPhone (apns)", transport: "tls",
                startedAt: at(offset + 2), isLateFork: true,
                responses: [JourneyResponse(status: 180, reason: "Ringing", at: at(offset + 2.2))]
                    + (answered ? [JourneyResponse(status: 200, reason: "OK", at: at(offset + 4))] : []),
                canceledBecause: answered ? nil : "the caller hung up", endedAt: at(offset + 4))
        ]
        journey.events = [
            JourneyEvent(at: at(offset), text: "INVITE from sip:2000@example.com over tls"),
            JourneyEvent(at: at(offset + 4), text: answered ? "answered by iPhone (apns)" : "CANCEL from the caller"),
        ]
        journey.outcome = answered ? .answered : .canceled
        journey.finalStatus = answered ? 200 : 487
        journey.reason = answered ? "answered" : "the caller hung up"
        journey.answeredBy = answered ? "iPhone (apns)" : nil
        if answered { journey.answeredAt = at(offset + 4) }
        journey.endedAt = at(offset + 30)
        return journey
    }

    /// Writes `journeys` as a call does: each push first (wake pending), then the journey.
    func record(_ journeys: [CallJourney]) {
        for journey in journeys {
            for push in journey.pushes {
                var pending = push
                pending.wake = .pending
                store.recordPush(pending, of: journey)
            }
            store.recordCall(journey)
        }
        XCTAssertTrue(store.flush(timeout: 30), store.lastFailure ?? "")
    }

    func ids(_ response: TestHTTPClient.Response) -> [String] {
        (response.json["calls"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
    }

    func testCallRoutesRequireAdminCredentials() throws {
        let journey = journey(to: alice, at: 0)
        record([journey])
        for path in ["/api/v1/admin/calls", "/api/v1/admin/calls/\(journey.id.uuidString.lowercased())"] {
            for (user, password, authenticated) in [(nil, nil, false), (admin.0, "wrong", true), ("1001@example.com", "sip-pw-1", true)] {
                let response = try call(path, user: user, password: password, authenticated: authenticated)
                XCTAssertEqual(response.status, 401, "\(path) as \(user ?? "-")")
                XCTAssertEqual(response.header("WWW-Authenticate"), "Basic realm=\"rouse-admin\"")
                XCTAssertFalse(text(response).contains("Reception"), "no call leaks to \(user ?? "-")")
            }
            XCTAssertEqual(try call(path).status, 200)
        }
    }

    func testCallsAreListedNewestFirstPagedAndFiltered() throws {
        let aliceCalls = (0..<5).map { journey(to: alice, at: Double($0) * 60) }
        let bobCalls = [journey(to: bob, at: 30, answered: false), journey(to: bob, at: 150)]
        record(aliceCalls + bobCalls)
        let newestFirst = (aliceCalls + bobCalls).sorted { $0.startedAt > $1.startedAt }.map { $0.id.uuidString.lowercased() }

        let all = try call("/api/v1/admin/calls")
        XCTAssertEqual(all.status, 200, text(all))
        XCTAssertEqual(ids(all), newestFirst)
        XCTAssertTrue(all.json["next"] is NSNull, text(all))

        // Pages of three, each `next` the `before` of the following page.
        var pages: [[String]] = []
        var path = "/api/v1/admin/calls?limit=3"
        while pages.count < 5 {
            let page = try call(path)
            XCTAssertEqual(page.status, 200, text(page))
            pages.append(ids(page))
            guard let next = page.json["next"] as? String else { break }
            XCTAssertEqual(next, (page.json["calls"] as? [[String: Any]])?.last?["startedAt"] as? String, "next is the last call's start")
            path = "/api/v1/admin/calls?limit=3&before=" + next
        }
        XCTAssertEqual(pages.map(\.count), [3, 3, 1])
        XCTAssertEqual(pages.flatMap { $0 }, newestFirst)

        let bobs = try call("/api/v1/admin/calls?extension=1002@example.com")
        XCTAssertEqual(ids(bobs), bobCalls.reversed().map { $0.id.uuidString.lowercased() })
        let aliceOlder = try call("/api/v1/admin/calls?extension=1001@example.com&before=" + MillisecondTime.string(at(120)))
        XCTAssertEqual(ids(aliceOlder), aliceCalls[0..<2].reversed().map { $0.id.uuidString.lowercased() })
        XCTAssertEqual(ids(try call("/api/v1/admin/calls?extension=1999@example.com")), [])

        let summary = try XCTUnwrap((bobs.json["calls"] as? [[String: Any]])?.last)
        XCTAssertEqual(summary["callId"] as? String, "call-30@pc33.example.com")
        XCTAssertEqual(summary["uuid"] as? String, PushPayload.uuid(forCallID: "call-30@pc33.example.com"))
        XCTAssertEqual(summary["callee"] as? String, "1002@example.com")
        XCTAssertEqual(summary["caller"] as? String, "sip:2000@example.com")
        XCTAssertEqual(summary["callerName"] as? String, "Reception")
        XCTAssertEqual(summary["transport"] as? String, "tls")
        XCTAssertEqual(summary["startedAt"] as? String, "2026-09-21T14:13:50.500Z")
        XCTAssertTrue(summary["answeredAt"] is NSNull)
        XCTAssertEqual(summary["endedAt"] as? String, "2026-09-21T14:14:20.500Z")
        XCTAssertEqual(summary["outcome"] as? String, "canceled")
        XCTAssertEqual(summary["finalStatus"] as? Int, 487)
        XCTAssertEqual(summary["reason"] as? String, "the caller hung up")
        XCTAssertTrue(summary["answeredBy"] is NSNull)
        XCTAssertEqual(Double(summary["ringMs"] as? Int ?? 0), 30000, accuracy: 1)

        for (query, field) in [
            ("extension=not-an-address", "extension"), ("limit=0", "limit"), ("limit=501", "limit"), ("limit=ten", "limit"),
            ("before=yesterday", "before"),
        ] {
            let refused = try call("/api/v1/admin/calls?" + query)
            XCTAssertEqual(refused.status, 400, query)
            XCTAssertEqual(errorField(refused), field, query)
        }
        XCTAssertEqual(ids(try call("/api/v1/admin/calls?before=0001-01-01T00:00:00Z")), [])
        XCTAssertEqual(ids(try call("/api/v1/admin/calls?before=9999-12-31T23:59:59Z")), newestFirst)
    }

    func testACallsJourney() throws {
        let journey = journey(to: alice, at: 0)
        record([journey])
        let response = try call("/api/v1/admin/calls/" + journey.id.uuidString.lowercased())
        XCTAssertEqual(response.status, 200, text(response))
        let detail = response.json
        XCTAssertEqual(detail["id"] as? String, journey.id.uuidString.lowercased())
        XCTAssertEqual(detail["outcome"] as? String, "answered")
        XCTAssertEqual(detail["answeredBy"] as? String, "iPhone (apns)")
        XCTAssertEqual(detail["answeredAt"] as? String, "2026-09-21T14:13:24.500Z")
        XCTAssertEqual(Double(detail["ringMs"] as? Int ?? 0), 4000, accuracy: 1)
        XCTAssertEqual(detail["source"] as? String, "192.0.2.4:5061")

        let pushes = try XCTUnwrap(detail["pushes"] as? [[String: Any]])
        XCTAssertEqual(pushes.count, 2)
        XCTAssertEqual(pushes[0]["device"] as? String, "iPhone (apns)")
        XCTAssertEqual(pushes[0]["provider"] as? String, "apns")
        XCTAssertTrue(pushes[0]["appId"] is NSNull)
        XCTAssertEqual(pushes[0]["token"] as? String, "01234567…")
        XCTAssertEqual(pushes[0]["outcome"] as? String, "accepted")
        XCTAssertEqual(pushes[0]["latencyMs"] as? Int, 182)
        XCTAssertEqual(pushes[0]["sentAt"] as? String, "2026-09-21T14:13:20.600Z")
        let wake = try XCTUnwrap(pushes[0]["wake"] as? [String: Any])
        XCTAssertEqual(wake["result"] as? String, "woke")
        XCTAssertEqual(wake["afterMs"] as? Int, 1900)
        XCTAssertEqual(wake["words"] as? String, "woke in 1.9 s")
        XCTAssertEqual(pushes[0]["line"] as? String, "pushed iPhone (apns) (apns): accepted in 182 ms, woke in 1.9 s")
        XCTAssertEqual(pushes[1]["reason"] as? String, "UNREGISTERED")
        XCTAssertEqual((pushes[1]["wake"] as? [String: Any])?["result"] as? String, "not_pushed")
        XCTAssertTrue((pushes[1]["wake"] as? [String: Any])?["afterMs"] is NSNull)

        let branches = try XCTUnwrap(detail["branches"] as? [[String: Any]])
        XCTAssertEqual(branches.count, 1)
        XCTAssertEqual(branches[0]["bindingId"] as? String, journey.branches[0].bindingID.uuidString.lowercased())
        XCTAssertEqual(branches[0]["target"] as? String, "sip:1001@192.0.2.7:5061;transport=tls")
        XCTAssertEqual(branches[0]["lateFork"] as? Bool, true)
        XCTAssertTrue(branches[0]["canceledBecause"] is NSNull)
        XCTAssertEqual(branches[0]["endedAt"] as? String, "2026-09-21T14:13:24.500Z")
        let responses = try XCTUnwrap(branches[0]["responses"] as? [[String: Any]])
        XCTAssertEqual(responses.compactMap { $0["status"] as? Int }, [180, 200])
        XCTAssertEqual(responses.first?["reason"] as? String, "Ringing")
        XCTAssertEqual(responses.first?["at"] as? String, "2026-09-21T14:13:22.700Z")
        let events = try XCTUnwrap(detail["events"] as? [[String: Any]])
        XCTAssertEqual(events.compactMap { $0["text"] as? String }, journey.events.map(\.text))
        XCTAssertEqual(events.first?["at"] as? String, "2026-09-21T14:13:20.500Z")

        for missing in [UUID().uuidString, "not-a-uuid", journey.id.uuidString + "/x"] {
            let response = try call("/api/v1/admin/calls/" + missing)
            XCTAssertEqual(response.status, 404, missing)
            XCTAssertEqual((response.json["error"] as? [String: Any])?["code"] as? String, "not_found", missing)
        }
    }

    func testExtensionDetailShowsRecentCallsAndWhetherPushesWoke() throws {
        let calls = (0..<22).map { journey(to: alice, at: Double($0) * 60) }
        record(calls + [journey(to: bob, at: 5)])
        let pending = JourneyPush(
            device: "iPad (apns)", provider: .apnsSandbox, appID: nil, tokenShort: "abcdef01…", outcome: "accepted", status: 200,
            reason: nil, explanation: "accepted by APNs", latencyMilliseconds: 140, sentAt: at(3000), wake: .pending)
        var live = journey(to: alice, at: 2999)
        live.pushes = [pending]
        store.recordPush(pending, of: live)
        store.recordWake(pushID: pending.id, .late(afterMilliseconds: 12_300))
        XCTAssertTrue(store.flush(timeout: 30))
        try PostgresPushStores.insert(
            PushRecord(
                createdAt: at(-10), aor: alice.description, callID: nil, provider: .fcm, tokenShort: "fcm-test…", appID: nil,
                outcome: "accepted", status: 200, reason: nil, explanation: "accepted by FCM", latencyMilliseconds: 80),
            on: try database.connect())

        let response = try call("/api/v1/admin/extensions/1001@example.com")
        XCTAssertEqual(response.status, 200, text(response))
        let recentCalls = try XCTUnwrap(response.json["recentCalls"] as? [[String: Any]])
        XCTAssertEqual(recentCalls.count, 20)
        XCTAssertEqual(
            recentCalls.compactMap { $0["id"] as? String }, calls.reversed().prefix(20).map { $0.id.uuidString.lowercased() })
        XCTAssertEqual(recentCalls.first?["callee"] as? String, "1001@example.com")
        XCTAssertEqual(recentCalls.first?["outcome"] as? String, "answered")

        let pushes = try XCTUnwrap(response.json["recentPushes"] as? [[String: Any]])
        XCTAssertEqual(pushes.count, 20)
        XCTAssertEqual(pushes.first?["device"] as? String, "iPad (apns)")
        let late = try XCTUnwrap(pushes.first?["wake"] as? [String: Any])
        XCTAssertEqual(late["result"] as? String, "late")
        XCTAssertEqual(late["afterMs"] as? Int, 12_300)
        XCTAssertEqual(late["words"] as? String, "woke in 12.3 s, too late for the call")
        let woke = pushes.first { $0["device"] as? String == "iPhone (apns)" }?["wake"] as? [String: Any]
        XCTAssertEqual(woke?["result"] as? String, "woke")
        XCTAssertEqual(woke?["words"] as? String, "woke in 1.9 s")

        // A push outside a call (a test push) has no device and no wake result.
        let all = try PostgresPushStores.recent(on: try database.connect(), aor: alice.description, limit: 100)
        XCTAssertEqual(all.last?.tokenShort, "fcm-test…")
        XCTAssertNil(all.last?.wake)
        let bobsDetail = try call("/api/v1/admin/extensions/1002@example.com")
        XCTAssertEqual((bobsDetail.json["recentCalls"] as? [Any])?.count, 1)
        XCTAssertEqual((bobsDetail.json["recentPushes"] as? [Any])?.count, 2)
    }

    func testAPushOutsideACallShowsNoDeviceNorWake() throws {
        try PostgresPushStores.insert(
            PushRecord(
                createdAt: at(0), aor: alice.description, callID: nil, provider: .fcm, tokenShort: "fcm-test…", appID: nil,
                outcome: "accepted", status: 200, reason: nil, explanation: "accepted by FCM", latencyMilliseconds: 80),
            on: try database.connect())
        let response = try call("/api/v1/admin/extensions/1001@example.com")
        let push = try XCTUnwrap((response.json["recentPushes"] as? [[String: Any]])?.first)
        XCTAssertTrue(push["device"] is NSNull)
        XCTAssertTrue(push["wake"] is NSNull)
        XCTAssertEqual((response.json["recentCalls"] as? [Any])?.count, 0)
    }
}
