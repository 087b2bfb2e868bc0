import CallRouting
import Foundation
import Push
import Registrar
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import Storage
import XCTest

/// What the app gets around the ring (issue 11), through `rouse serve`, the stand-ins and real
/// HTTP: the call token in the ring push, declining from the lock screen, the call's state, the
/// missed-call notice per platform, and the binding-refresh push.
extension CallProcessTests {
    /// An Android app that can be woken through FCM.
    func androidApp(token: String) throws -> TestUserAgent {
        let agent = try TestUserAgent(
            transport: .tcp, serverPort: try port(.tcp), user: "1002", domain: "example.com", password: "pw-1002",
            instanceID: "urn:uuid:\(UUID().uuidString.lowercased())",
            contactURIParameters: "pn-provider=fcm;pn-prid=\(token);pn-param=rouse-test", userAgent: "RouseTestApp/1 (Android \(token.suffix(4)))")
        agents.append(agent)
        return agent
    }

    /// An iPhone app in Linphone's dialect: its regular and VoIP tokens in one Contact.
    func dualTokenIPhone(remote: String, voip: String) throws -> TestUserAgent {
        let agent = try TestUserAgent(
            transport: .tcp, serverPort: try port(.tcp), user: "1002", domain: "example.com", password: "pw-1002",
            instanceID: "urn:uuid:\(UUID().uuidString.lowercased())",
            contactURIParameters: "pn-provider=apns;pn-prid=\(remote):remote&\(voip):voip;pn-param=DEF123GHIJ.com.example.app.remote&voip",
            userAgent: "RouseTestApp/1 (iPhone)")
        agents.append(agent)
        return agent
    }

    /// The data of an FCM message (its `message.data`), or the top level of an APNs body.
    func pushData(_ request: StandInRequest) -> [String: Any] {
        let object = (try? JSONSerialization.jsonObject(with: Data(request.body.utf8))) as? [String: Any] ?? [:]
        return ((object["message"] as? [String: Any])?["data"] as? [String: Any]) ?? object
    }

    func bearer(_ token: String) -> [(String, String)] { [("Authorization", "Bearer \(token)")] }

    func testDeclineFromOneDeviceLeavesTheOtherRingingAndAllDeclinedGives603() throws {
        try startRouse(wakeWait: 30, ringTimeout: 40)
        let tokenA = "fcm-a-" + UUID().uuidString
        let tokenB = "fcm-b-" + UUID().uuidString
        let pixel = try androidApp(token: tokenA)
        let tablet = try androidApp(token: tokenB)
        try registerAndSleep(pixel)
        try registerAndSleep(tablet)
        let caller = try caller()
        let call = try place(caller)
        let ringA = pushData(try XCTUnwrap(try pushes(fcm, token: tokenA).first))
        let ringB = pushData(try XCTUnwrap(try pushes(fcm, token: tokenB).first))
        let callTokenA = try XCTUnwrap(ringA["call_token"] as? String, "\(ringA)")
        let callTokenB = try XCTUnwrap(ringB["call_token"] as? String)
        XCTAssertNotEqual(callTokenA, callTokenB)
        let uuid = try XCTUnwrap(ringA["uuid"] as? String)
        let http = try TestHTTPClient(port: try httpPort())
        // One character in the middle of the signature changed (the last ones may carry only padding bits).
        var tampered = Array(callTokenA)
        let middle = tampered.count - 10
        tampered[middle] = tampered[middle] == "A" ? "B" : "A"

        // The token's limits: none, tampered, on another call, or with the wrong scheme: one 401.
        let refusals = [
            try http.send("GET", "/api/v1/calls/\(uuid)"),
            try http.send("GET", "/api/v1/calls/\(uuid)", headers: bearer(String(tampered))),
            try http.send("GET", "/api/v1/calls/\(UUID().uuidString.lowercased())", headers: bearer(callTokenA)),
            try http.send("POST", "/api/v1/calls/\(uuid)/decline", headers: [("Authorization", "Basic \(callTokenA)")]),
        ]
        XCTAssertEqual(refusals.map(\.status), [401, 401, 401, 401])
        XCTAssertEqual(Set(refusals.map(\.body)).count, 1, "the same 401 whatever was wrong")

        let ringing = try http.send("GET", "/api/v1/calls/\(uuid)", headers: bearer(callTokenA))
        XCTAssertEqual(ringing.status, 200)
        XCTAssertEqual(ringing.json["state"] as? String, "ringing")
        // The SIP Call-ID names the call as well as the uuid does.
        let byCallID = try http.send(
            "GET", "/api/v1/calls/\(call.callID.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")", headers: bearer(callTokenB))
        XCTAssertEqual(byCallID.status, 200)

        let badReason = try http.send("POST", "/api/v1/calls/\(uuid)/decline", headers: bearer(callTokenA), body: Data(#"{"reason":"later"}"#.utf8))
        XCTAssertEqual(badReason.status, 400)
        XCTAssertEqual((badReason.json["error"] as? [String: Any])?["field"] as? String, "reason")

        let first = try http.send("POST", "/api/v1/calls/\(uuid)/decline", headers: bearer(callTokenA), body: Data(#"{"reason":"declined"}"#.utf8))
        XCTAssertEqual(first.status, 200)
        XCTAssertEqual(first.json["state"] as? String, "ringing", "the tablet still rings")
        XCTAssertEqual(first.json["declinedHere"] as? Bool, true)
        let second = try http.send("POST", "/api/v1/calls/\(uuid)/decline", headers: bearer(callTokenB))
        XCTAssertEqual(second.status, 200)
        XCTAssertEqual(second.json["state"] as? String, "ended")
        let final = try call.waitForFinal()
        XCTAssertEqual(final.statusCode, 603)
        XCTAssertEqual(final.headers[.reason], "SIP;cause=603;text=\"every device declined\"")

        let journey = try journey(callID: call.callID, outcome: .failed)
        let declines = journey.events.filter { $0.text.contains("declined the call from the device") }
        XCTAssertEqual(declines.count, 2, "\(journey.events.map(\.text))")
        XCTAssertFalse(journey.missed)
        // After the end the token still reads the state (a slow app dismisses its screen).
        let after = try http.send("GET", "/api/v1/calls/\(uuid)", headers: bearer(callTokenA))
        XCTAssertEqual(after.json["state"] as? String, "ended")
        XCTAssertEqual(after.json["reason"] as? String, "every device declined")
    }

    /// The HTTP port `process` logged.
    func httpPort(of process: RouseProcess) throws -> UInt16 {
        try process.httpPort()
    }

    func testADeclinePostedToAnotherInstanceReachesTheOneHoldingTheCall() throws {
        try startRouse(wakeWait: 30, ringTimeout: 40)
        let (other, _) = try startInstance(wakeWait: 30, ringTimeout: 40)
        let token = "fcm-x-" + UUID().uuidString
        let phone = try androidApp(token: token)
        try registerAndSleep(phone)
        let caller = try caller()
        let call = try place(caller)
        let ring = pushData(try XCTUnwrap(try pushes(fcm, token: token).first))
        let callToken = try XCTUnwrap(ring["call_token"] as? String)
        let uuid = try XCTUnwrap(ring["uuid"] as? String)

        // The load balancer sends the app's request to the instance that does not hold the call.
        let elsewhere = try TestHTTPClient(port: try httpPort(of: other))
        let ringing = try elsewhere.send("GET", "/api/v1/calls/\(uuid)", headers: bearer(callToken))
        XCTAssertEqual(ringing.status, 200)
        XCTAssertEqual(ringing.json["state"] as? String, "ringing", "a call not yet written is still ringing where it is held")
        let passedOn = try elsewhere.send("POST", "/api/v1/calls/\(uuid)/decline", headers: bearer(callToken))
        XCTAssertEqual(passedOn.status, 202)
        XCTAssertEqual(try call.waitForFinal().statusCode, 603)
        _ = try journey(callID: call.callID, outcome: .failed) { $0.events.contains { $0.text.contains("declined the call from the device") } }
        // Once recorded, the other instance reads the state from PostgreSQL.
        let state = try elsewhere.send("GET", "/api/v1/calls/\(uuid)", headers: bearer(callToken))
        XCTAssertEqual(state.status, 200)
        XCTAssertEqual(state.json["state"] as? String, "ended")
        XCTAssertEqual(state.json["reason"] as? String, "every device declined")
    }

    func testAnUnansweredCallNotifiesEachPlatformVisiblyAndNeverOverVoIP() throws {
        try startRouse(wakeWait: 1, ringTimeout: 20)
        let fcmToken = "fcm-m-" + UUID().uuidString
        let remote = String(repeating: "5e", count: 32)
        let voip = String(repeating: "7a", count: 32)
        let android = try androidApp(token: fcmToken)
        let iPhone = try dualTokenIPhone(remote: remote, voip: voip)
        try registerAndSleep(android)
        try registerAndSleep(iPhone)
        let caller = try caller()
        let call = try place(caller)
        let ring = pushData(try XCTUnwrap(try pushes(fcm, token: fcmToken).first))
        let callToken = try XCTUnwrap(ring["call_token"] as? String)
        let uuid = try XCTUnwrap(ring["uuid"] as? String)
        let http = try TestHTTPClient(port: try httpPort())
        XCTAssertEqual(try http.send("GET", "/api/v1/calls/\(uuid)", headers: bearer(callToken)).json["state"] as? String, "ringing")

        // Nobody comes back within the 1 s wait: 480, and a missed call.
        XCTAssertEqual(try call.waitForFinal().statusCode, 480)
        let fcmPushes = try pushes(fcm, token: fcmToken, count: 3)
        let missed = try XCTUnwrap(fcmPushes.map(pushData).first { $0["event"] as? String == "call.missed" }, "\(fcmPushes.map(\.body))")
        XCTAssertEqual(missed["caller_number"] as? String, "1001")
        XCTAssertEqual(missed["reason"] as? String, "no_answer")
        XCTAssertEqual(missed["uuid"] as? String, uuid)

        let alert = try XCTUnwrap(try pushes(apns, token: remote, count: 2).first { $0.headers["apns-push-type"] == "alert" })
        XCTAssertEqual(alert.headers["apns-topic"], "com.example.app")
        XCTAssertEqual(alert.headers["apns-priority"], "10")
        XCTAssertEqual(alert.verdictStatus, 200)
        let aps = try XCTUnwrap(pushData(alert)["aps"] as? [String: Any])
        let alertBody = try XCTUnwrap(aps["alert"] as? [String: Any])
        XCTAssertEqual(alertBody["title-loc-key"] as? String, "Missed call")
        XCTAssertTrue((alertBody["body"] as? String)?.contains("1001") == true, "\(alertBody)")
        let voipPushes = try apns.requests().filter { $0.path.hasSuffix(voip) }
        XCTAssertEqual(voipPushes.count, 1, "the ring only: a missed call is never a VoIP push")
        XCTAssertEqual(voipPushes.first?.headers["apns-push-type"], "voip")

        // The journey is missed, and says where each notice went.
        _ = try journey(callID: call.callID, outcome: .unanswered) { journey in
            journey.missed && journey.events.filter { $0.text.hasPrefix("missed-call notice to") && $0.text.hasSuffix("accepted") }.count == 2
        }
        let state = try http.send("GET", "/api/v1/calls/\(uuid)", headers: bearer(callToken))
        XCTAssertEqual(state.json["state"] as? String, "ended")
        XCTAssertEqual(state.json["missed"] as? Bool, true)

        // The admin API filters missed calls, and marks them.
        try PostgresAdmins.add(name: "ops", password: "admin-pw-1", on: try database.connect())
        let basic = [("Authorization", "Basic " + Data("ops:admin-pw-1".utf8).base64EncodedString())]
        let missedCalls = try http.send("GET", "/api/v1/admin/calls?missed=true", headers: basic)
        let listed = try XCTUnwrap(missedCalls.json["calls"] as? [[String: Any]])
        XCTAssertEqual(listed.first?["callId"] as? String, call.callID)
        XCTAssertEqual(listed.first?["missed"] as? Bool, true)
        let notMissed = try http.send("GET", "/api/v1/admin/calls?missed=false", headers: basic)
        XCTAssertFalse((notMissed.json["calls"] as? [[String: Any]] ?? []).contains { $0["callId"] as? String == call.callID })
        XCTAssertEqual(try http.send("GET", "/api/v1/admin/calls?missed=perhaps", headers: basic).status, 400)
    }

    func testABindingAboutToExpireGetsARefreshPushAndNeverAVoIPOne() throws {
        try startRouse(extra: ["ROUSE_PUSH_BINDING_MIN_EXPIRES": "60", "ROUSE_BINDING_REFRESH_LEAD": "120"])
        let fcmToken = "fcm-r-" + UUID().uuidString
        let remote = String(repeating: "6b", count: 32)
        let voip = String(repeating: "8c", count: 32)
        let android = try androidApp(token: fcmToken)
        let iPhone = try dualTokenIPhone(remote: remote, voip: voip)
        // 123 s: the refresh falls due 3 s after the REGISTER (120 s before expiry).
        XCTAssertEqual(try android.register(expires: 123).statusCode, 200)
        XCTAssertEqual(try iPhone.register(expires: 123).statusCode, 200)
        let registeredAt = Date()

        let refresh = try XCTUnwrap(try pushes(fcm, token: fcmToken, timeout: 30).first)
        let data = pushData(refresh)
        XCTAssertEqual(data["event"] as? String, "binding.refresh")
        XCTAssertEqual(data["aor"] as? String, "1002@example.com")
        let left = try XCTUnwrap(Int(data["expires_in"] as? String ?? ""))
        XCTAssertTrue((1...120).contains(left), "sent before expiry, within the lead: \(left) s left")
        XCTAssertGreaterThanOrEqual(refresh.time, registeredAt.timeIntervalSince1970 + 1, "not at once: when it falls due")

        let background = try XCTUnwrap(try pushes(apns, token: remote, timeout: 30).first)
        XCTAssertEqual(background.headers["apns-push-type"], "background")
        XCTAssertEqual(background.headers["apns-topic"], "com.example.app")
        XCTAssertEqual(pushData(background)["event"] as? String, "binding.refresh")
        XCTAssertTrue(try apns.requests().filter { $0.path.hasSuffix(voip) }.isEmpty, "a refresh is never a VoIP push")

        // Recorded like any push, once per registration.
        let deadline = Date().addingTimeInterval(20)
        var records: [PushRecord] = []
        while Date() < deadline {
            records = try pushRecords().filter { $0.callID == nil }
            if records.count >= 2 { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        XCTAssertEqual(Set(records.map(\.provider)), [.fcm, .apns])
        XCTAssertEqual(records.map(\.outcome), ["accepted", "accepted"])
        // The app answers the push with a fresh REGISTER: a new registration may be pushed again later.
        XCTAssertEqual(try android.register(expires: 600).statusCode, 200)
    }
}
