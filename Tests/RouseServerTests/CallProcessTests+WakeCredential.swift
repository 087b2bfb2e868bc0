import CallRouting
import Foundation
import RouseVocabulary
import RouseTestSupport
import SIPMessage
import SIPTransport
import XCTest

/// Wake in one round trip through `rouse serve` (issue 20 item 6): with `wake_credentials` on, a
/// call to a sleeping app pushes a credential; the woken app's REGISTER carrying it in
/// `X-Rouse-Wake` is answered 200 with no 401 before it, and the INVITE follows. A replayed,
/// expired or another device's credential gets the ordinary challenge.
extension CallProcessTests {
    static let wakeHeader = SIPHeaderName("X-Rouse-Wake")

    /// The wake credential of the ring push of `call` to `token`.
    func wakeCredential(token: String = CallProcessTests.apnsToken, callID: String) throws -> String {
        let push = try XCTUnwrap(try pushes(apns, token: token).first { $0.jsonBody?["call_id"]?.stringValue == callID })
        return try XCTUnwrap(push.jsonBody?["wake_credential"]?.stringValue, "the ring push carries wake_credential")
    }

    /// A sleeping iPhone app of 1002 (registered, then its flow closed), a caller's call to it,
    /// and the wake credential its ring push carries.
    func callTheSleepingApp() throws -> (phone: TestUserAgent, caller: TestUserAgent, call: TestOutgoingCall, credential: String) {
        let phone = try iPhoneApp()
        try registerAndSleep(phone)
        let caller = try caller()
        let call = try place(caller)
        return (phone, caller, call, try wakeCredential(callID: call.callID))
    }

    /// The answer is the ordinary digest challenge, as for a REGISTER with no credential at all.
    func assertChallenged(_ response: SIPResponse, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(response.statusCode, 401, file: file, line: line)
        XCTAssertFalse(response.headers.lines(.wwwAuthenticate).isEmpty, "the ordinary challenge", file: file, line: line)
    }

    func testTheWokenAppsRegisterWithItsCredentialIsAnsweredAtOnceAndTheInviteFollowsButAReplayIsChallenged() throws {
        try startRouse(wakeWait: 8, extra: ["ROUSE_WAKE_CREDENTIALS": "true"])
        let (phone, caller, call, credential) = try callTheSleepingApp()

        try phone.reopen()
        let woken = try phone.registerOnce(headers: [(Self.wakeHeader, credential)])
        XCTAssertEqual(woken.statusCode, 200, "answered without the 401 round trip")
        let invite = try phone.waitForRequest(.invite)
        XCTAssertEqual(invite.callID, call.callID)
        try answerAndHangUp(phone, invite, call, caller)
        let journey = try journey(callID: call.callID, outcome: .answered)
        guard case .woke = journey.pushes.first?.wake else { return XCTFail("wake: \(String(describing: journey.pushes.first?.wake))") }

        // Used once: the same credential again is no answer at all.
        let replay = try phone.registerOnce(headers: [(Self.wakeHeader, credential)])
        assertChallenged(replay)
        // The next refresh registers with digest as usual.
        XCTAssertEqual(try phone.register().statusCode, 200)
    }

    func testAnExpiredCredentialIsChallenged() throws {
        try startRouse(wakeWait: 2, extra: ["ROUSE_WAKE_CREDENTIALS": "true"])
        let (phone, _, call, credential) = try callTheSleepingApp()
        XCTAssertEqual(try call.waitForFinal(timeout: .seconds(15)).statusCode, 480, "the wait ended with nobody back")

        try phone.reopen()
        let late = try phone.registerOnce(headers: [(Self.wakeHeader, credential)])
        assertChallenged(late)
    }

    func testACredentialOfACallThatEndedWithinItsWaitIsChallenged() throws {
        try startRouse(wakeWait: 8, extra: ["ROUSE_WAKE_CREDENTIALS": "true"])
        let (phone, _, call, credential) = try callTheSleepingApp()
        // The caller gives up long before the 8 s wait ends: the credential goes with the call.
        XCTAssertEqual(try call.cancel().statusCode, 200)
        XCTAssertEqual(try call.waitForFinal(timeout: .seconds(15)).statusCode, 487)
        _ = try journey(callID: call.callID, outcome: .canceled)

        try phone.reopen()
        let after = try phone.registerOnce(headers: [(Self.wakeHeader, credential)])
        assertChallenged(after)
    }

    func testACredentialPresentedWithAnotherDevicesTokenIsChallenged() throws {
        try startRouse(wakeWait: 8, extra: ["ROUSE_WAKE_CREDENTIALS": "true"])
        let (phone, caller, call, credential) = try callTheSleepingApp()

        // Another phone of the extension (its own token and instance id) with this device's credential.
        let other = try iPhoneApp(token: String(repeating: "ef", count: 32))
        let refused = try other.registerOnce(headers: [(Self.wakeHeader, credential)])
        assertChallenged(refused)
        // The refusal spent it: not even the device it names may use it now (once means once).
        try phone.reopen()
        XCTAssertEqual(try phone.registerOnce(headers: [(Self.wakeHeader, credential)]).statusCode, 401)
        XCTAssertEqual(try phone.register().statusCode, 200, "digest as usual")
        let invite = try phone.waitForRequest(.invite)
        XCTAssertEqual(invite.callID, call.callID)
        try answerAndHangUp(phone, invite, call, caller)
    }

    func testACredentialPresentedToAnotherInstanceIsChallengedAndDigestStillWakesTheCall() throws {
        let other = try startTwoInstances(wakeWait: 8, extra: ["ROUSE_WAKE_CREDENTIALS": "true"])
        let phone = try sleepingApp(on: other, transport: .tcp, kind: .tcp, token: Self.apnsToken, userAgent: "RouseTestApp/1 (iPhone)")
        let caller = try caller()
        let call = try place(caller)  // on the first instance, which pushes and holds the call
        let credential = try wakeCredential(callID: call.callID)

        // The woken app comes back on the other instance: only the one that pushed accepts it.
        try phone.reopen()
        let elsewhere = try phone.registerOnce(headers: [(Self.wakeHeader, credential)])
        assertChallenged(elsewhere)
        XCTAssertEqual(try phone.register().statusCode, 200, "digest as usual")
        let invite = try phone.waitForRequest(.invite)
        XCTAssertEqual(invite.callID, call.callID)
        try answerAndHangUp(phone, invite, call, caller)
    }

    func testWithTheSettingOffThePushCarriesNoCredential() throws {
        try startRouse(wakeWait: 1)
        let phone = try iPhoneApp()
        try registerAndSleep(phone)
        let call = try place(try caller())
        let push = try XCTUnwrap(try pushes(apns, token: Self.apnsToken).first)
        XCTAssertEqual(push.jsonBody?["call_id"]?.stringValue, call.callID)
        XCTAssertNotNil(push.jsonBody?["call_token"])
        XCTAssertNil(push.jsonBody?["wake_credential"], "off by default")
        XCTAssertEqual(try call.waitForFinal(timeout: .seconds(15)).statusCode, 480)
    }
}
