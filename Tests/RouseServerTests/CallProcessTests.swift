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

/// Calls through `rouse serve` end to end (issue 6 item 6): a scripted phone registers with pn-*
/// parameters and goes quiet, a caller INVITEs, the push stand-in receives the push, the phone
/// registers again from a new port, gets the INVITE and answers; ACK and BYE pass through. Each
/// test checks the journey and the push records, not only the SIP answers.
final class CallProcessTests: XCTestCase {
    static let apnsToken = String(repeating: "ab", count: 32)
    static let deadToken = "dead" + String(repeating: "cd", count: 30)
    static let voipParam = "DEF123GHIJ.com.example.app.voip"

    var database: TestDatabase!
    var apns: PushStandIn!
    var fcm: PushStandIn!
    var caFile = ""
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
        let key = try PushStandIn.makeAPNsKey()
        apns = try PushStandIn.apns(keys: ["ABC123DEFG": key.keyPath], teamID: "DEF123GHIJ", topics: ["com.example.app"])
        let account = try PushStandIn.makeFCMServiceAccount()
        defer { key.remove(); account.remove() }  // the stand-ins read them at start
        fcm = try PushStandIn.fcm(serviceAccountPath: account.path)
        caFile = apns.stateDirectory + "/cas.pem"
        try [apns.caFile, fcm.caFile].map { try String(contentsOfFile: $0, encoding: .utf8) }.joined()
            .write(toFile: caFile, atomically: true, encoding: .utf8)
        let apps = PostgresPushApps(connection: connection)
        _ = try apps.add(PushApp(credentials: .apns(APNsCredentials(
            teamID: "DEF123GHIJ", keyID: "ABC123DEFG", topic: "com.example.app", privateKeyPEM: key.privateKeyPEM, environment: .production))))
        _ = try apps.add(PushApp(credentials: .fcm(try FCMServiceAccount(json: Array(try Data(contentsOf: URL(fileURLWithPath: fcm.serviceAccountFile!)))))))
    }

    override func tearDown() {
        agents.forEach { $0.close() }
        if ProcessInfo.processInfo.environment["ROUSE_TEST_SHOW_OUTPUT"] != nil {
            for (index, instance) in otherInstances.enumerated() { print("== rouse instance \(index) output:\n\(instance.outputText)") }
        }
        otherInstances.forEach { _ = $0.stop() }
        otherInstances = []
        rouse = nil
        apns?.stop()
        fcm?.stop()
        database?.drop()
    }

    /// Starts `rouse serve` with short waits, so a test never sits through the 8 s default.
    func startRouse(wakeWait: Int = 3, withDeskPhone: Int = 1, ringTimeout: Int = 20, extra: [String: String] = [:]) throws {
        let (process, bound) = try startInstance(wakeWait: wakeWait, withDeskPhone: withDeskPhone, ringTimeout: ringTimeout, extra: extra)
        rouse = process
        points = bound
    }

    var otherInstances: [RouseProcess] = []

    /// One more `rouse serve` on the same PostgreSQL; returns its listen points.
    func startInstance(
        wakeWait: Int = 3, withDeskPhone: Int = 1, ringTimeout: Int = 20, extra: [String: String] = [:]
    ) throws -> (RouseProcess, [ListenPoint]) {
        var environment = [
            "ROUSE_DATABASE_URL": database.conninfo, "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0,tcp:127.0.0.1:0",
            "ROUSE_APNS_PRODUCTION_URL": apns.baseURL, "ROUSE_APNS_SANDBOX_URL": apns.baseURL, "ROUSE_FCM_URL": fcm.baseURL,
            "ROUSE_PUSH_CA_FILE": caFile, "ROUSE_PUSH_TIMEOUT": "3", "ROUSE_WAKE_WAIT": String(wakeWait),
            "ROUSE_WAKE_WAIT_WITH_DESK_PHONE": String(withDeskPhone), "ROUSE_RING_TIMEOUT": String(ringTimeout),
            "ROUSE_CANCEL_GRACE": "10",
        ]
        environment.merge(extra) { $1 }
        let process = try RouseProcess(arguments: ["serve"], environment: environment)
        otherInstances.append(process)
        XCTAssertTrue(process.waitForOutput(containing: "serving SIP on"), process.outputText)
        let line = try XCTUnwrap(process.outputText.split(separator: "\n").first { $0.contains("serving SIP on") })
        let bound = try (line.components(separatedBy: "serving SIP on ").last ?? "").components(separatedBy: ", ").map { try ListenPoint(parsing: $0) }
        return (process, bound)
    }

    func port(_ transport: SIPTransportKind) throws -> UInt16 {
        try XCTUnwrap(points.first { $0.transport == transport }).port
    }

    /// An app that can be woken through APNs (VoIP token in its Contact, RFC 8599).
    func iPhoneApp(token: String = CallProcessTests.apnsToken, transport: TestSIPClient.Transport = .tcp) throws -> TestUserAgent {
        let agent = try TestUserAgent(
            transport: transport, serverPort: try port(transport == .udp ? .udp : .tcp), user: "1002", domain: "example.com", password: "pw-1002",
            instanceID: "urn:uuid:\(UUID().uuidString.lowercased())",
            contactURIParameters: "pn-provider=apns;pn-prid=\(token);pn-param=\(Self.voipParam)", userAgent: "RouseTestApp/1 (iPhone)")
        agents.append(agent)
        return agent
    }

    func deskPhone() throws -> TestUserAgent {
        let agent = try TestUserAgent(
            transport: .udp, serverPort: try port(.udp), user: "1002", domain: "example.com", password: "pw-1002", userAgent: "RouseDeskPhone/1")
        agents.append(agent)
        return agent
    }

    func caller() throws -> TestUserAgent {
        let agent = try TestUserAgent(transport: .udp, serverPort: try port(.udp), user: "1001", domain: "example.com", password: "pw-1001")
        agents.append(agent)
        return agent
    }

    /// The stand-in's requests for `token`, waiting until there are `count`.
    func pushes(_ standIn: PushStandIn, token: String, count: Int = 1, timeout: TimeInterval = 15) throws -> [StandInRequest] {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let found = try standIn.requests().filter { $0.path.hasSuffix(token) || $0.body.contains(token) }
            if found.count >= count { return found }
            Thread.sleep(forTimeInterval: 0.02)
        }
        XCTFail("no push for \(token.prefix(8)) within \(timeout) s")
        return []
    }

    /// The call's journey once it has been recorded with `outcome` (polls PostgreSQL, with a deadline).
    func journey(callID: String, outcome: CallOutcome? = nil, where extra: (CallJourney) -> Bool = { _ in true }) throws -> CallJourney {
        let connection = try database.connect()
        let deadline = Date().addingTimeInterval(20)
        var last: CallJourney?
        while Date() < deadline {
            last = try PostgresCalls.recent(on: connection, limit: 20).first { $0.callID == callID }
            if let last, outcome == nil || last.outcome == outcome, extra(last) { return last }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw JourneyNotFound(callID: callID, last: last.map { "\($0.outcome) \($0.events.map(\.text))" })
    }

    struct JourneyNotFound: Error { let callID: String; let last: String? }

    func pushRecords() throws -> [PushRecord] {
        try PostgresPushStores.recent(on: try database.connect(), aor: "1002@example.com")
    }

    /// INVITEs `target` from `caller` and answers the 407 (the agent answers a challenge only while
    /// it reads): returns once Rouse has the authenticated INVITE (its 100 Trying came). Every
    /// agent of the test is linked, so each keeps answering while the test waits on another.
    func place(_ caller: TestUserAgent, _ target: String = "sip:1002@example.com") throws -> TestOutgoingCall {
        if agents.count > 1 {
            for agent in agents { TestUserAgent.link(agent, caller) }
        }
        let call = try caller.invite(target)
        // The first INVITE (CSeq 1) is challenged; the 100 Trying of the answered one (CSeq 2) says
        // Rouse took the call.
        _ = try call.waitForResponse { $0.statusCode == 100 && ($0.cseq?.number ?? 0) >= 2 }
        return call
    }

    /// Registers the phone, then closes its socket: the app was suspended.
    func registerAndSleep(_ phone: TestUserAgent) throws {
        XCTAssertEqual(try phone.register().statusCode, 200)
        phone.goQuiet()
    }

    /// The woken app: a new socket (new source port), a fresh REGISTER.
    func wake(_ phone: TestUserAgent) throws {
        try phone.reopen()
        XCTAssertEqual(try phone.register().statusCode, 200)
    }

    /// Answer on `phone`, ACK from the caller, BYE from the caller: the whole dialog through Rouse.
    /// The caller repeats its INVITE's credentials on the ACK and BYE, as Linphone does; Rouse
    /// consumes them (RFC 3261 §22.3), so the phone never sees the caller's digest answer.
    func answerAndHangUp(_ phone: TestUserAgent, _ invite: SIPRequest, _ call: TestOutgoingCall, _ caller: TestUserAgent) throws {
        let phoneDialog = try phone.answer(invite)
        let ok = try call.waitForResponse(status: 200)
        XCTAssertNotNil(ok.headers[.recordRoute], "Rouse record-routes so the dialog passes through it")
        let callerDialog = try call.ack(ok)
        let ack = try phoneDialog.waitForAck()
        let credentials = call.invite.headers.lines(.proxyAuthorization).map { ("Proxy-Authorization", $0) }
        let bye = try callerDialog.sendRequest(.bye, headers: credentials)
        let received = try phoneDialog.receiveBye()
        XCTAssertEqual(try caller.waitForFinalResponse(to: bye).statusCode, 200)
        for request in [invite, ack, received] {
            XCTAssertEqual(request.headers.lines(.proxyAuthorization), [], "\(request.method) reached the phone with the caller's credentials")
        }
    }

    // MARK: - The cases of issue 6 item 6

    func testAppOnlyRingsWithinTheWakeWait() throws {
        try startRouse(wakeWait: 8)
        let phone = try iPhoneApp()
        try registerAndSleep(phone)
        let caller = try caller()
        let call = try place(caller)
        XCTAssertEqual(try call.waitForResponse(status: 180).statusCode, 180, "ringback while the app wakes")

        let push = try XCTUnwrap(try pushes(apns, token: Self.apnsToken).first)
        XCTAssertEqual(push.headers["apns-push-type"], "voip")
        XCTAssertEqual(push.headers["apns-topic"], "com.example.app.voip")
        XCTAssertEqual(push.jsonBody?["call_id"]?.stringValue, call.callID)
        XCTAssertEqual(push.jsonBody?["caller_number"]?.stringValue, "1001")
        XCTAssertEqual(push.jsonBody?["ring_timeout_secs"]?.stringValue, "8", "an app-only call's push lives as long as the wait")

        try wake(phone)
        let invite = try phone.waitForRequest(.invite)
        XCTAssertEqual(invite.callID, call.callID)
        try answerAndHangUp(phone, invite, call, caller)

        let journey = try journey(callID: call.callID, outcome: .answered)
        XCTAssertEqual(journey.pushes.count, 1)
        XCTAssertEqual(journey.pushes[0].outcome, "accepted")
        guard case .woke = journey.pushes[0].wake else { return XCTFail("wake: \(journey.pushes[0].wake)") }
        XCTAssertTrue(journey.pushes[0].line.contains("accepted in"), journey.pushes[0].line)
        XCTAssertTrue(journey.pushes[0].line.contains("woke in"), journey.pushes[0].line)
        XCTAssertEqual(journey.branches.count, 1)
        XCTAssertEqual(journey.branches[0].finalStatus, 200)
        XCTAssertEqual(journey.answeredBy, "RouseTestApp/1 (iPhone)")
        let record = try XCTUnwrap(try pushRecords().first { $0.callID == call.callID })
        XCTAssertEqual(record.wake?.word, "woke")
        XCTAssertNotNil(record.wokeAfterMilliseconds)
        // The BYE ended the talk: the journey says who hung up.
        let ended = try self.journey(callID: call.callID, outcome: .answered) { $0.endedAt != nil }
        XCTAssertTrue(ended.events.contains { $0.text.hasPrefix("the caller hung up after") }, "\(ended.events.map(\.text))")

        // What an admin reads on the extension's page: the push with its wake, and the call.
        try PostgresAdmins.add(name: "ops", password: "admin-pw-1", on: try database.connect())
        let http = try TestHTTPClient(port: try httpPort())
        let basic = "Basic " + Data("ops:admin-pw-1".utf8).base64EncodedString()
        let page = try http.send("GET", "/api/v1/admin/extensions/1002@example.com", headers: [("Authorization", basic)])
        XCTAssertEqual(page.status, 200)
        let calls = try XCTUnwrap(page.json["recentCalls"] as? [[String: Any]])
        XCTAssertEqual(calls.first?["callId"] as? String, call.callID)
        let recentPushes = try XCTUnwrap(page.json["recentPushes"] as? [[String: Any]])
        XCTAssertEqual((recentPushes.first?["wake"] as? [String: Any])?["result"] as? String, "woke")
        let callID = try XCTUnwrap(calls.first?["id"] as? String)
        let detail = try http.send("GET", "/api/v1/admin/calls/\(callID)", headers: [("Authorization", basic)])
        XCTAssertEqual(detail.status, 200)
        let lines = (detail.json["pushes"] as? [[String: Any]])?.compactMap { $0["line"] as? String } ?? []
        XCTAssertTrue(lines.first?.contains("woke in") == true, "\(lines)")
    }

    /// The HTTP API's port, from the `http.listening` log line.
    func httpPort() throws -> UInt16 {
        try XCTUnwrap(rouse).httpPort()
    }

    func testDeskPhoneRingsWhenTheShortWaitEndsThenTheLateAppJoinsTheFork() throws {
        try startRouse(wakeWait: 8, withDeskPhone: 1)
        let desk = try deskPhone()
        XCTAssertEqual(try desk.register().statusCode, 200)
        let phone = try iPhoneApp()
        try registerAndSleep(phone)
        let caller = try caller()
        let call = try place(caller)
        _ = try pushes(apns, token: Self.apnsToken)
        // The desk phone rings when the 1 s wait ends, before the app is back…
        let deskInvite = try desk.waitForRequest(.invite)
        try desk.respond(to: deskInvite, status: 180)
        // …and the app, too late for the wait but in time for the ring, is added to the fork.
        try wake(phone)
        let appInvite = try phone.waitForRequest(.invite)
        XCTAssertEqual(appInvite.callID, call.callID)
        try answerAndHangUp(phone, appInvite, call, caller)
        // The desk phone's ring is stopped: CANCEL with the Reason product.md names.
        let cancel = try desk.handleCancel(of: deskInvite)
        XCTAssertEqual(cancel.headers[.reason], "SIP;cause=200;text=\"Call completed elsewhere\"")

        let journey = try journey(callID: call.callID, outcome: .answered)
        XCTAssertEqual(journey.branches.count, 2)
        XCTAssertEqual(journey.branches.filter(\.isLateFork).count, 1, "the app's branch is a late fork")
        XCTAssertEqual(journey.branches.first { !$0.isLateFork }?.canceledBecause, "answered elsewhere")
        XCTAssertEqual(journey.answeredBy, "RouseTestApp/1 (iPhone)")
    }

    func testAppBackBeforeTheShortWaitEndsRingsWithTheDeskPhoneAtOnce() throws {
        try startRouse(wakeWait: 8, withDeskPhone: 6)
        let desk = try deskPhone()
        XCTAssertEqual(try desk.register().statusCode, 200)
        let phone = try iPhoneApp()
        try registerAndSleep(phone)
        let caller = try caller()
        let call = try place(caller)
        let push = try XCTUnwrap(try pushes(apns, token: Self.apnsToken).first)
        XCTAssertEqual(push.jsonBody?["ring_timeout_secs"]?.stringValue, "20", "with a desk phone ringing, the push lives as long as the ring")
        XCTAssertTrue(desk.buffered.requests.isEmpty)
        try wake(phone)
        // The wait ends the moment the app is back: both ring long before the 6 s wait would end.
        let appInvite = try phone.waitForRequest(.invite, timeout: .seconds(4))
        try phone.respond(to: appInvite, status: 180)
        let deskInvite = try desk.waitForRequest(.invite, timeout: .seconds(4))
        try desk.respond(to: deskInvite, status: 180)
        try answerAndHangUp(desk, deskInvite, call, caller)
        // Answered on the desk phone: the app's ring is stopped with a CANCEL.
        let cancel = try phone.handleCancel(of: appInvite)
        XCTAssertEqual(cancel.headers[.reason], "SIP;cause=200;text=\"Call completed elsewhere\"")
        let journey = try journey(callID: call.callID, outcome: .answered)
        XCTAssertEqual(journey.answeredBy, "RouseDeskPhone/1")
        XCTAssertTrue(journey.events.contains { $0.text.contains("registered again") }, "\(journey.events.map(\.text))")
    }

    func testAppNeverBackEndsWith480AndTheJourneySaysWhy() throws {
        try startRouse(wakeWait: 2)
        let phone = try iPhoneApp()
        try registerAndSleep(phone)
        let caller = try caller()
        let call = try place(caller)
        let final = try call.waitForFinal(timeout: .seconds(15))
        XCTAssertEqual(final.statusCode, 480)
        XCTAssertEqual(final.headers[.reason], "SIP;cause=480;text=\"no device woke in time\"")
        let journey = try journey(callID: call.callID, outcome: .unanswered)
        XCTAssertEqual(journey.reason, "no device woke in time")
        XCTAssertEqual(journey.pushes.first?.wake, .notInTime)
        XCTAssertTrue(journey.pushes.first?.line.hasSuffix("no re-register in time") == true, journey.pushes.first?.line ?? "")
        XCTAssertEqual(try pushRecords().first { $0.callID == call.callID }?.wake?.word, "no")
    }

    func testCallerCancelsDuringTheWait() throws {
        try startRouse(wakeWait: 8)
        // An Android app: its ring is stopped by a call.canceled data message.
        let fcmToken = "fcm-token-" + UUID().uuidString
        let phone = try TestUserAgent(
            transport: .tcp, serverPort: try port(.tcp), user: "1002", domain: "example.com", password: "pw-1002",
            instanceID: "urn:uuid:\(UUID().uuidString.lowercased())",
            contactURIParameters: "pn-provider=fcm;pn-prid=\(fcmToken);pn-param=rouse-test", userAgent: "RouseTestApp/1 (Android)")
        agents.append(phone)
        try registerAndSleep(phone)
        let caller = try caller()
        let call = try place(caller)
        let ring = try XCTUnwrap(try pushes(fcm, token: fcmToken).first)
        XCTAssertTrue(ring.body.contains("call.ring"), ring.body)
        XCTAssertEqual(try call.cancel().statusCode, 200)
        XCTAssertEqual(try call.waitForFinal().statusCode, 487)
        // The cancel push, then the missed-call notice (issue 11), in that order.
        let three = try pushes(fcm, token: fcmToken, count: 3)
        XCTAssertEqual(three.map { $0.jsonBody?["message"]?["data"]?["event"]?.stringValue }, ["call.ring", "call.canceled", "call.missed"])
        guard three.count == 3 else { return }
        let cancelPush = three[1]
        XCTAssertTrue(cancelPush.body.contains("call.canceled"), cancelPush.body)
        XCTAssertTrue(cancelPush.body.contains("caller_hangup"), cancelPush.body)
        let journey = try journey(callID: call.callID, outcome: .canceled) { $0.events.contains { $0.text.contains("stopped ringing") } }
        XCTAssertTrue(journey.reason?.hasPrefix("caller hung up") == true, journey.reason ?? "")
        XCTAssertEqual(journey.pushes.first?.wake, .callEnded)
    }

    func testDeadTokenAndUnreachableProviderStillRingTheDeskPhone() throws {
        try startRouse(wakeWait: 8, withDeskPhone: 1)
        let desk = try deskPhone()
        XCTAssertEqual(try desk.register().statusCode, 200)
        let phone = try iPhoneApp(token: Self.deadToken)
        try registerAndSleep(phone)
        let caller = try caller()
        let call = try place(caller)
        let deskInvite = try desk.waitForRequest(.invite)
        try answerAndHangUp(desk, deskInvite, call, caller)
        // The desk phone may answer before the provider does: the journey is written again with its push.
        let journey = try journey(callID: call.callID, outcome: .answered) { !$0.pushes.isEmpty }
        let push = try XCTUnwrap(journey.pushes.first)
        XCTAssertEqual(push.outcome, "refused")
        XCTAssertEqual(push.reason, "Unregistered")
        XCTAssertTrue(push.line.contains("refused: Unregistered"), push.line)
        // The dead token is marked: the next call does not push it.
        let connection = try database.connect()
        XCTAssertTrue(try PostgresPushStores.isDead(on: connection, family: .apns, token: Self.deadToken))
        let second = try place(caller)
        let secondInvite = try desk.waitForRequest(.invite)
        try answerAndHangUp(desk, secondInvite, second, caller)
        let secondJourney = try self.journey(callID: second.callID, outcome: .answered)
        XCTAssertTrue(secondJourney.pushes.isEmpty, "\(secondJourney.pushes.map(\.line))")
        XCTAssertEqual(try apns.requests().filter { $0.path.hasSuffix(Self.deadToken) }.count, 1, "a dead token is not retried")
    }

    func testUnreachableProviderIsSaidInWordsAndTheDeskPhoneStillRings() throws {
        try startRouse(wakeWait: 8, withDeskPhone: 1, extra: ["ROUSE_APNS_PRODUCTION_URL": "https://127.0.0.1:1"])
        let desk = try deskPhone()
        XCTAssertEqual(try desk.register().statusCode, 200)
        let phone = try iPhoneApp()
        try registerAndSleep(phone)
        let caller = try caller()
        let call = try place(caller)
        let deskInvite = try desk.waitForRequest(.invite)
        try answerAndHangUp(desk, deskInvite, call, caller)
        // The desk phone may answer before the provider does: the journey is written again with its push.
        let journey = try journey(callID: call.callID, outcome: .answered) { !$0.pushes.isEmpty }
        let push = try XCTUnwrap(journey.pushes.first)
        XCTAssertEqual(push.outcome, "failed")
        XCTAssertTrue(push.line.hasPrefix("pushed RouseTestApp/1 (iPhone) (apns): failed: "), push.line)
    }

    func testDeviceKnownOnlyByAPostedTokenIsWokenAndRings() throws {
        try startRouse(wakeWait: 8)
        let token = String(repeating: "9f", count: 32)
        let connection = try database.connect()
        _ = try PostedPushTokens.store(
            PushChannel(provider: .apns, token: token, param: nil, kind: .voip), deviceID: nil,
            for: AddressOfRecord(number: "1002", domain: "example.com"), on: connection)
        // Stored behind Rouse's back: it reaches the instance by the replica's NOTIFY (a posted token
        // reaches a call after that round trip, architecture.md), so the call waits for it.
        try waitUntilCaughtUp(port: try httpPort(), "the posted token")
        let caller = try caller()
        let call = try place(caller)
        _ = try pushes(apns, token: token)
        // The app registers (no pn-* in its Contact): any new binding is the posted device back.
        let phone = try TestUserAgent(
            transport: .tcp, serverPort: try port(.tcp), user: "1002", domain: "example.com", password: "pw-1002", userAgent: "RouseTestApp/1 (posted)")
        agents.append(phone)
        XCTAssertEqual(try phone.register().statusCode, 200)
        let invite = try phone.waitForRequest(.invite)
        try answerAndHangUp(phone, invite, call, caller)
        let journey = try journey(callID: call.callID, outcome: .answered)
        XCTAssertEqual(journey.pushes.first?.device, "iPhone (posted token)")
        guard case .woke = journey.pushes.first?.wake else { return XCTFail("\(String(describing: journey.pushes.first?.wake))") }
    }

    func testNothingRegisteredGets480AndStrangersAreRefused() throws {
        try startRouse()
        let caller = try caller()
        let call = try place(caller)
        let final = try call.waitForFinal()
        XCTAssertEqual(final.statusCode, 480)
        XCTAssertEqual(final.headers[.reason], "SIP;cause=480;text=\"no device is registered and none can be woken by push\"")

        let unknown = try caller.invite("sip:1999@example.com")
        XCTAssertEqual(try unknown.waitForFinal().statusCode, 404)
        let relay = try caller.invite("sip:someone@elsewhere.example.net")
        XCTAssertEqual(try relay.waitForFinal().statusCode, 403, "never an open relay")
        let unauthenticated = try caller.invite("sip:1002@example.com", authenticate: false)
        let challenge = try unauthenticated.waitForFinal()
        XCTAssertEqual(challenge.statusCode, 407)
        XCTAssertNotNil(challenge.headers[.proxyAuthenticate])
    }

    func testAppWokenOnTheOtherInstanceEndsTheWaitAndIsReachedThroughIt() throws {
        try startRouse(wakeWait: 8)
        let (_, otherPoints) = try startInstance(wakeWait: 8)
        let otherTCP = try XCTUnwrap(otherPoints.first { $0.transport == .tcp }).port
        let phone = try iPhoneApp()
        try registerAndSleep(phone)
        let caller = try caller()
        // The call is parked on this instance…
        let call = try place(caller)
        _ = try pushes(apns, token: Self.apnsToken)
        // …and the woken app registers on the other one (as DNS SRV may send it).
        let woken = try TestUserAgent(
            transport: .tcp, serverPort: otherTCP, user: "1002", domain: "example.com", password: "pw-1002", instanceID: phone.instanceID,
            contactURIParameters: phone.contactURIParameters, userAgent: phone.userAgent)
        agents.append(woken)
        TestUserAgent.link(woken, caller)
        XCTAssertEqual(try woken.register().statusCode, 200)
        let invite = try woken.waitForRequest(.invite)
        XCTAssertEqual(invite.callID, call.callID)
        // Both instances record-route (this one twice: UDP towards the caller, TCP towards the
        // other instance, RFC 5658): the dialog passes through each, over the phone's own flow.
        let recordRoutes = invite.headers.values(.recordRoute)
        XCTAssertEqual(recordRoutes.count, 3, "\(recordRoutes)")
        XCTAssertTrue(recordRoutes[0].contains(":\(otherTCP);transport=tcp;lr"), recordRoutes[0])
        try answerAndHangUp(woken, invite, call, caller)
        let journey = try journey(callID: call.callID, outcome: .answered)
        guard case .woke = journey.pushes.first?.wake else { return XCTFail("\(String(describing: journey.pushes.first?.wake))") }
        XCTAssertEqual(journey.branches.count, 1)
        XCTAssertEqual(journey.branches.first?.finalStatus, 200)
    }

    func testVoipOnlyIPhoneBackAfterTheCallEndedGetsTheInviteAndACancel() throws {
        try startRouse(wakeWait: 8)
        let phone = try iPhoneApp()
        try registerAndSleep(phone)
        let caller = try caller()
        let call = try place(caller)
        _ = try pushes(apns, token: Self.apnsToken)
        XCTAssertEqual(try call.cancel().statusCode, 200)
        XCTAssertEqual(try call.waitForFinal().statusCode, 487)
        // Never a second VoIP push: the only push to the token is the ring.
        XCTAssertEqual(try apns.requests().filter { $0.path.hasSuffix(Self.apnsToken) }.count, 1)
        // The woken iPhone registers within the grace period: it gets the INVITE and at once a
        // CANCEL, so CallKit ends the call it showed.
        try wake(phone)
        let invite = try phone.waitForRequest(.invite)
        XCTAssertEqual(invite.callID, call.callID)
        try phone.respond(to: invite, status: 180)
        let cancel = try phone.handleCancel(of: invite)
        XCTAssertEqual(cancel.headers[.reason], "SIP;cause=487;text=\"caller hung up\"")
        XCTAssertEqual(try apns.requests().filter { $0.path.hasSuffix(Self.apnsToken) }.count, 1)
        let journey = try journey(callID: call.callID, outcome: .canceled)
        XCTAssertTrue(journey.events.contains { $0.text.contains("has only a VoIP token") }, "\(journey.events.map(\.text))")
        let connection = try database.connect()
        let deadline = Date().addingTimeInterval(10)
        var wake: String?
        while Date() < deadline {
            wake = try PostgresPushStores.recent(on: connection, aor: "1002@example.com").first { $0.callID == call.callID }?.wake?.word
            if wake == "late" { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        XCTAssertEqual(wake, "late", "the push record says the device came back too late to ring")
    }

    func testSIGTERMDuringACallEndsItCleanlyAndRecordsTheWholeJourney() throws {
        try startRouse(wakeWait: 30, extra: ["ROUSE_SHUTDOWN_GRACE": "1"])
        let phone = try iPhoneApp()
        try registerAndSleep(phone)
        let caller = try caller()
        let call = try place(caller)
        _ = try pushes(apns, token: Self.apnsToken)
        let process = try XCTUnwrap(rouse)
        process.process.terminate()
        // The call still ringing is ended with a reason, not dropped.
        let final = try call.waitForFinal(timeout: .seconds(15))
        XCTAssertEqual(final.statusCode, 503)
        XCTAssertEqual(final.headers[.reason], "SIP;cause=503;text=\"Rouse is stopping\"")
        XCTAssertEqual(process.waitForExit(timeout: 30), 0, process.outputText)
        // Nothing half-written: the journey is complete, with its push and its end.
        let journey = try journey(callID: call.callID, outcome: .unanswered)
        XCTAssertEqual(journey.reason, "Rouse is stopping")
        XCTAssertNotNil(journey.endedAt)
        XCTAssertEqual(journey.pushes.count, 1)
        XCTAssertEqual(journey.pushes.first?.wake, .notInTime)
        XCTAssertTrue(process.outputText.contains("event=rouse.stopped"), process.outputText)
    }

    func testSIGHUPReloadsPushAppsWithoutDroppingACall() throws {
        try startRouse(wakeWait: 8)
        let phone = try iPhoneApp()
        try registerAndSleep(phone)
        let caller = try caller()
        let call = try place(caller)
        _ = try pushes(apns, token: Self.apnsToken)
        let process = try XCTUnwrap(rouse)
        kill(process.process.processIdentifier, SIGHUP)
        XCTAssertTrue(process.waitForOutput(containing: "event=rouse.push_apps_reloaded"), process.outputText)
        // The call parked before the reload still rings the woken app.
        try wake(phone)
        let invite = try phone.waitForRequest(.invite)
        try answerAndHangUp(phone, invite, call, caller)
        XCTAssertEqual(try journey(callID: call.callID, outcome: .answered).answeredBy, "RouseTestApp/1 (iPhone)")
    }
}
