import CallRouting
import Foundation
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import Storage
import XCTest

/// Issue 20 item 1, through `rouse serve`, real PostgreSQL and the APNs stand-in: a device pushed
/// `stale_after_pushes` times with no sign of life, silent for `stale_after`, is no longer pushed,
/// is shown stale on its extension's page and counted in `/metrics`, and is pushed again once it
/// shows life (its app posts its token again).
extension CallProcessTests {
    func testADevicePushedAgainAndAgainWithoutASignOfLifeIsNoLongerPushedUntilItPostsItsTokenAgain() throws {
        try startRouse(wakeWait: 1, extra: ["ROUSE_STALE_AFTER_PUSHES": "2", "ROUSE_STALE_AFTER": "1s"])
        let http = try httpPort()
        let token = String(repeating: "5a", count: 32)
        XCTAssertEqual(try postToken(token, port: http), 200)
        try waitUntilCaughtUp(port: http, "the posted token")
        let caller = try caller()

        // Two calls push the iPhone; its app never registers, and each call outlasts the 1 s wait.
        for count in 1...2 {
            let call = try place(caller)
            XCTAssertEqual(try pushes(apns, token: token, count: count).count, count)
            XCTAssertEqual(try call.waitForFinal().statusCode, 480)
            _ = try journey(callID: call.callID, outcome: .unanswered)
        }
        try waitForMetric("rouse_push_devices_stale", 1, port: http)
        let process = try XCTUnwrap(rouse)
        XCTAssertTrue(process.waitForOutput(containing: "push.device_stale"), process.outputText)

        // The third call leaves it out, and its journey says why.
        let skipped = try place(caller)
        XCTAssertEqual(try skipped.waitForFinal().statusCode, 480)
        let journey = try journey(callID: skipped.callID, outcome: .unanswered)
        XCTAssertTrue(journey.events.contains { $0.text.contains("not pushed: stale") }, "\(journey.events.map(\.text))")
        XCTAssertEqual(journey.pushes.count, 0)
        XCTAssertEqual(try apns.requests().filter { $0.path.hasSuffix(token) }.count, 2, "no third push reached the stand-in")

        // Its extension's page shows it stale, with its last sign of life.
        let page = try adminPage("/admin/extensions/1002@example.com", port: http)
        let row = try XCTUnwrap(page.components(separatedBy: "<tr id=\"device-").dropFirst().first { $0.contains(String(token.prefix(8))) })
        XCTAssertTrue(row.contains("badge stale"), row)
        XCTAssertTrue(row.contains("last sign of life"), row)
        XCTAssertTrue(page.contains("kept for 90 days"), "the page says how far back its pushes go")

        // The app posts its token again: alive, and the next call pushes it.
        XCTAssertEqual(try postToken(token, port: http), 200)
        try waitForMetric("rouse_push_devices_stale", 0, port: http)
        let again = try place(caller)
        XCTAssertEqual(try pushes(apns, token: token, count: 3).count, 3)
        XCTAssertEqual(try again.waitForFinal().statusCode, 480)
    }

    /// Waits until `/metrics` on `port` shows `value` for `name`.
    func waitForMetric(_ name: String, _ value: Double, port: UInt16) throws {
        let deadline = Date().addingTimeInterval(20)
        var seen: Double?
        repeat {
            seen = try metric(name, port: port)
            if seen == value { return }
            Thread.sleep(forTimeInterval: 0.05)
        } while Date() < deadline
        XCTFail("\(name) is \(String(describing: seen)), not \(value)")
    }

    /// An admin page's HTML, read after signing in as a new admin (the CSRF form, then the cookie).
    func adminPage(_ path: String, port: UInt16) throws -> String {
        try PostgresAdmins.add(name: "stale-ops", password: "admin-pw-stale", on: try database.connect())
        let http = try TestHTTPClient(port: port)
        let form = try http.send("GET", "/admin/sign-in")
        let csrf = try XCTUnwrap(String(decoding: form.body, as: UTF8.self).components(separatedBy: "name=\"csrf\" value=\"").dropFirst().first)
            .prefix { $0 != "\"" }
        func cookies(_ response: TestHTTPClient.Response) -> [String] {
            response.headers.filter { $0.0.lowercased() == "set-cookie" }.map { String($0.1.split(separator: ";")[0]) }
        }
        let signIn = try http.send(
            "POST", "/admin/sign-in", headers: [("Content-Type", "application/x-www-form-urlencoded"), ("Cookie", cookies(form).joined(separator: "; "))],
            body: Data("csrf=\(csrf)&name=stale-ops&password=admin-pw-stale".utf8))
        XCTAssertEqual(signIn.status, 303)
        let page = try http.send("GET", path, headers: [("Cookie", (cookies(form) + cookies(signIn)).joined(separator: "; "))])
        XCTAssertEqual(page.status, 200)
        return String(decoding: page.body, as: UTF8.self)
    }
}
