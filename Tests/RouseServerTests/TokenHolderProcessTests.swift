import CallRouting
import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPTransport
import Storage
import XCTest

/// Issue 20 item 1, through `rouse serve`, real PostgreSQL and the push stand-ins: a push token
/// rings the phone of the extension that holds it now, never the one it was posted for before,
/// and a token rotated out (posted again with the same `deviceId`) is never pushed again.
extension CallProcessTests {
    /// Posts `body` to `/api/v1/push/register` on `port` with `user`'s credentials (`pw-<number>`).
    func post(_ body: String, as user: String, port: UInt16) throws -> TestHTTPClient.Response {
        try TestHTTPClient(port: port).send(
            "POST", "/api/v1/push/register", headers: [("Authorization", TestHTTPClient.basic("\(user)@example.com", "pw-\(user)"))],
            body: Data(body.utf8))
    }

    /// A desk phone of `user` (UDP, no push) registered on this test's first instance.
    func registeredDeskPhone(_ user: String) throws -> TestUserAgent {
        let agent = try TestUserAgent(
            transport: .udp, serverPort: try port(.udp), user: user, domain: "example.com", password: "pw-\(user)", userAgent: "Desk \(user)")
        agents.append(agent)
        XCTAssertEqual(try agent.register().statusCode, 200)
        return agent
    }

    func testATokenRegisteredByAnotherExtensionOnAnotherInstanceNoLongerPushesTheExtensionThatPostedIt() throws {
        try startRouse(wakeWait: 8, withDeskPhone: 1)
        let httpA = try httpPort()
        let (_, pointsB) = try startInstance(wakeWait: 8)
        let token = String(repeating: "5e", count: 32)
        // 1001's iPhone posts its VoIP token on instance A…
        let posted = try post(#"{"token": "\#(token)", "sipUser": "1001@example.com", "platform": "ios"}"#, as: "1001", port: httpA)
        XCTAssertEqual(posted.status, 200)
        let desk = try registeredDeskPhone("1001")
        // …then the phone is handed to 1002, whose app registers the same token on instance B.
        let phone = try TestUserAgent(
            transport: .tcp, serverPort: try XCTUnwrap(pointsB.first { $0.transport == .tcp }).port, user: "1002", domain: "example.com",
            password: "pw-1002", instanceID: "urn:uuid:\(UUID().uuidString.lowercased())",
            contactURIParameters: "pn-provider=apns;pn-prid=\(token);pn-param=\(Self.voipParam)", userAgent: "RouseTestApp/1 (iPhone)")
        agents.append(phone)
        XCTAssertEqual(try phone.register().statusCode, 200)

        // Instance A, where the call arrives, learnt it through the replica's change log.
        try waitUntilCaughtUp(port: httpA, "the token's removal")

        let caller = try TestUserAgent(transport: .udp, serverPort: try port(.udp), user: "1002", domain: "example.com", password: "pw-1002")
        agents.append(caller)
        let call = try place(caller, "sip:1001@example.com")
        let invite = try desk.waitForRequest(.invite)
        try answerAndHangUp(desk, invite, call, caller)
        let journey = try journey(callID: call.callID, outcome: .answered)
        XCTAssertEqual(journey.pushes.map(\.line), [], "1001's call pushes no phone: the token is 1002's now")
        XCTAssertEqual(try apns.requests().filter { $0.path.hasSuffix(token) }.count, 0, "no push reached the stand-in for the token")
        XCTAssertEqual(try PostedPushTokens.list(for: AddressOfRecord(number: "1001", domain: "example.com"), on: try database.connect()), [])
    }

    func testARotatedVoIPTokenIsTheOnlyOneRungAndItsRegularPairStillCarriesTheCancel() throws {
        try startRouse(wakeWait: 8)
        let http = try httpPort()
        let old = String(repeating: "7a", count: 32), new = String(repeating: "7b", count: 32), remote = String(repeating: "7c", count: 32)
        let device = UUID().uuidString.lowercased()
        for (token, param) in [(old, Self.voipParam), (remote, "DEF123GHIJ.com.example.app"), (new, Self.voipParam)] {
            let body = #"{"token": "\#(token)", "sipUser": "1002@example.com", "platform": "ios", "param": "\#(param)", "deviceId": "\#(device)"}"#
            XCTAssertEqual(try post(body, as: "1002", port: http).status, 200)
        }
        try waitUntilCaughtUp(port: http, "the rotated token")

        let caller = try caller()
        let call = try place(caller)
        let ring = try XCTUnwrap(try pushes(apns, token: new).first)
        XCTAssertEqual(ring.headers["apns-push-type"], "voip")
        XCTAssertEqual(try call.cancel().statusCode, 200)
        XCTAssertEqual(try call.waitForFinal().statusCode, 487)
        // The iPhone's regular token, paired by the deviceId with the new VoIP token, stops the ring.
        let cancel = try XCTUnwrap(try pushes(apns, token: remote).first)
        XCTAssertEqual(cancel.headers["apns-push-type"], "background")
        XCTAssertEqual(cancel.jsonBody?["event"]?.stringValue, "call.canceled")
        // The cancel may overtake the provider's answer to the ring: the journey is written again
        // with the push once it comes.
        let journey = try journey(callID: call.callID, outcome: .canceled) { !$0.pushes.isEmpty }
        XCTAssertEqual(journey.pushes.count, 1, "one device rung: \(journey.pushes.map(\.line))")
        XCTAssertEqual(try apns.requests().filter { $0.path.hasSuffix(old) }.count, 0, "the rotated-out token is never pushed")
    }
}
