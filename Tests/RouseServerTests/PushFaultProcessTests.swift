import CallRouting
import Foundation
import Push
import RouseTestSupport
import SIPMessage
import Storage
import XCTest

/// A push provider that fails during calls (issue 9 item 3), through `rouse serve` and the APNs
/// stand-in's fault modes: a stalled provider does not hold back the desk phone, and the journey
/// says the push timed out; a provider answering 503 is tried a bounded number of times (the
/// stand-in's request log counts them), then backed off by its circuit breaker, which `/health`
/// and `/metrics` show, until a probe push gets through.
final class PushFaultProcessTests: XCTestCase {
    static let token = String(repeating: "ab", count: 32)

    var database: TestDatabase?
    var bed: CallTestBed?

    override func setUpWithError() throws {
        let database = try TestDatabase()
        self.database = database
        bed = try CallTestBed(conninfo: database.conninfo)
    }

    override func tearDown() {
        bed?.tearDown()
        database?.drop()
    }

    /// The push records PostgreSQL holds for the call `callID`.
    func records(callID: String) throws -> [PushRecord] {
        let connection = try PostgresConnection(conninfo: try XCTUnwrap(database).conninfo)
        return try PostgresPushStores.recent(on: connection, aor: "1002@example.com").filter { $0.callID == callID }
    }

    func testTheDeskPhoneRingsOnTimeWhileTheProviderStalls() throws {
        let bed = try XCTUnwrap(bed)
        try bed.apns.setFault(.stall)
        try bed.startRouse(extra: ["ROUSE_PUSH_TIMEOUT": "6"])
        let desk = try bed.deskPhone()
        XCTAssertEqual(try desk.register().statusCode, 200)
        let app = try bed.iPhoneApp(token: Self.token)
        XCTAssertEqual(try app.register().statusCode, 200)
        app.goQuiet()
        let caller = try bed.caller()
        let call = try bed.place(caller)
        // The desk phone rings when the 1 s wait ends, while the push is still unanswered.
        let deskInvite = try desk.waitForRequest(.invite)
        XCTAssertEqual(try bed.pushes(token: Self.token).map(\.verdictStatus), [nil], "the stand-in holds the push")
        XCTAssertTrue(try records(callID: call.callID).isEmpty, "no outcome yet when the desk phone rang")
        try desk.respond(to: deskInvite, status: 180)
        // The push gives up at its deadline; only then is the call answered.
        let deadline = Date().addingTimeInterval(30)
        while try records(callID: call.callID).isEmpty, Date() < deadline { Thread.sleep(forTimeInterval: 0.1) }
        try bed.answerAndHangUp(desk, deskInvite, call, caller)
        let journey = try bed.journey(callID: call.callID) { $0.outcome == .answered }
        let push = try XCTUnwrap(journey.pushes.first)
        XCTAssertEqual(push.outcome, "failed")
        XCTAssertEqual(push.reason, "timeout")
        XCTAssertTrue(push.line.contains("failed: no answer within the deadline"), push.line)
        XCTAssertEqual(journey.answeredBy, "RouseDeskPhone/1")
        XCTAssertEqual(try bed.pushes(token: Self.token).count, 1, "a timed-out push is not sent again")
    }

    func testAProviderAnswering503IsRetriedThenBackedOffThenRecovers() throws {
        let bed = try XCTUnwrap(bed)
        try bed.apns.setFault(.unavailable(retryAfterSeconds: nil))
        try bed.startRouse(extra: ["ROUSE_PUSH_ATTEMPTS": "3", "ROUSE_PUSH_BREAKER_FAILURES": "2", "ROUSE_PUSH_BREAKER_BACKOFF": "1"])
        let app = try bed.iPhoneApp(token: Self.token)
        XCTAssertEqual(try app.register().statusCode, 200)
        app.goQuiet()
        let caller = try bed.caller()

        // Each push is tried three times; with nothing else to ring, the call ends saying why.
        for attempt in 1...2 {
            let call = try bed.place(caller)
            let final = try call.waitForFinal()
            XCTAssertEqual(final.statusCode, 480)
            let reason = final.headers[.reason] ?? ""
            XCTAssertTrue(reason.contains("push refused: Apple's service is unavailable for now (3 attempts in "), reason)
            XCTAssertEqual(try bed.pushes(token: Self.token, count: 3 * attempt).count, 3 * attempt, "three requests per push")
        }
        let (status, health) = try bed.waitForHealth { _, json in json["status"] as? String == "degraded" }
        XCTAssertEqual(status, 200, "the instance still serves: a provider backed off is no reason to take it out")
        let problems = health["problems"] as? [String] ?? []
        XCTAssertEqual(problems.count, 1, "\(problems)")
        XCTAssertTrue(
            problems.first?.hasPrefix("push provider apns (com.example.app) backed off: 2 failures, last: 503 ServiceUnavailable; ") == true,
            "\(problems)")
        XCTAssertTrue(try bed.metrics().contains("\nrouse_push_providers_backed_off 1\n"))

        // While backed off, a push fails at once, without a request, and says so.
        let backedOff = try bed.place(caller)
        let refusal = try backedOff.waitForFinal()
        XCTAssertEqual(refusal.statusCode, 480)
        XCTAssertEqual(
            refusal.headers[.reason],
            "SIP;cause=480;text=\"push failed: provider apns (com.example.app) backed off after 2 failures: 503 ServiceUnavailable\"")
        XCTAssertEqual(try bed.apns.requests().count, 6)

        // Apple is back: after the back-off, a probe push goes through and the breaker closes.
        try bed.apns.setFault(.none)
        let deadline = Date().addingTimeInterval(30)
        var accepted = false
        while !accepted, Date() < deadline {
            let call = try bed.place(caller)
            var found: [PushRecord] = []
            let answered = Date().addingTimeInterval(15)
            while found.isEmpty, Date() < answered {
                found = try records(callID: call.callID)
                if found.isEmpty { Thread.sleep(forTimeInterval: 0.05) }
            }
            accepted = found.first?.outcome == "accepted"
            if accepted {
                XCTAssertEqual(try call.cancel().statusCode, 200)
                XCTAssertEqual(try call.waitForFinal().statusCode, 487)
            } else {
                XCTAssertEqual(try call.waitForFinal().statusCode, 480, "\(found.map(\.explanation))")
                Thread.sleep(forTimeInterval: 0.2)  // pacing: a call every few tenths while the back-off runs
            }
        }
        XCTAssertTrue(accepted, "a probe push got through once Apple answered again")
        let (_, recovered) = try bed.waitForHealth { _, json in json["status"] as? String == "ok" }
        XCTAssertEqual(recovered["status"] as? String, "ok", "\(recovered)")
        XCTAssertTrue(try bed.metrics().contains("\nrouse_push_providers_backed_off 0\n"))
    }
}
