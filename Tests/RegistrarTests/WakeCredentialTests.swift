import Crypto
import Foundation
import Registrar
import RouseVocabulary
import SIPMessage
import XCTest

/// Wake credentials on the REGISTER path, on literal texts with a manual clock (issue 20 item 6):
/// the credential a ring push carried admits, once and only during the call's wait, a binding of
/// the device it names, answered 200 without a challenge; anything else gets the ordinary 401.
final class WakeCredentialTests: XCTestCase {
    typealias F = RegistrarFixture
    static let secret = Array("call-token-secret".utf8)
    static let token = String(repeating: "ab", count: 32)
    static let otherToken = String(repeating: "cd", count: 32)
    static let instance = "<urn:uuid:00000000-0000-4000-8000-000000000001>"
    let signer = WakeCredentialSigner(secret: WakeCredentialTests.secret)

    /// A fixture whose core accepts credentials held by instance `here`.
    func fixture() -> F {
        var fixture = F()
        fixture.core.wakeCredentials = WakeCredentialGate(signer: signer, instanceID: "here")
        return fixture
    }

    func contact(token: String = WakeCredentialTests.token, port: Int = 5070, instance: String? = WakeCredentialTests.instance) -> String {
        let uri = "<sip:1001@192.0.2.7:\(port);transport=tcp;pn-provider=apns;pn-prid=\(token);pn-param=DEF123GHIJ.com.example.app.voip>"
        return uri + (instance.map { ";+sip.instance=\"\($0)\"" } ?? "")
    }

    /// A credential for alice's device with `token` (and `instance`), held by `holder`, valid for 8 s.
    func credential(
        token: String = WakeCredentialTests.token, instance: String? = WakeCredentialTests.instance, aor: AddressOfRecord = F.alice,
        holder: String = "here", at now: Date = F.start, lasting: TimeInterval = 8
    ) -> String {
        signer.issue(WakeCredentialClaims(
            callID: UUID(), aor: aor, device: PushTokenID(family: .apns, token: token).tag, instance: instance.map(WakeCredentialClaims.tag),
            holder: holder, expiresAt: now.addingTimeInterval(lasting)), now: now)
    }

    func wakeRegister(_ credential: String, contacts: [String]? = nil, aor: AddressOfRecord = F.alice, expires: Int? = 3600, cseq: UInt32 = 1, callID: String = "woken") -> String {
        F.register(aor, contacts: contacts ?? [contact()], expires: expires, callID: callID, cseq: cseq, extra: ["X-Rouse-Wake: \(credential)"])
    }

    /// The parts of a 401 an attacker sees, the nonce left out: the same for every refusal.
    func challengeShape(_ response: SIPResponse) -> String {
        let challenges = response.headers.lines(.wwwAuthenticate).map { $0.replacingOccurrences(of: #"nonce="[0-9a-f]+""#, with: "nonce", options: .regularExpression) }
        return "\(response.statusCode) \(response.reasonPhrase) \(response.headers.lines(.server)) \(challenges)"
    }

    func ordinaryChallenge() throws -> String {
        var plain = F()
        return challengeShape(F.response(try plain.send(F.register(contacts: [contact()]))))
    }

    func testTheWokenDevicesRegisterIsAnswered200AtOnceAndItsBindingSaved() throws {
        var fixture = fixture()
        let decision = try fixture.send(wakeRegister(credential(), expires: 10_000_000))
        guard case .commit(let changes, let events, let response, _) = decision else { return XCTFail("no commit: \(decision)") }
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(changes.count, 1)
        XCTAssertEqual(events.map(\.kind), [.added])
        let binding = try XCTUnwrap(fixture.core.bindings(for: F.alice).first)
        XCTAssertEqual(binding.instance, Self.instance)
        XCTAssertEqual(binding.pushChannels.map(\.token), [Self.token])
        // No more trust than digest gives: the usual cap on a push binding's expiry.
        XCTAssertEqual(binding.expiresAt, F.start.addingTimeInterval(TimeInterval(fixture.core.policy.pushMaxExpires)))
    }

    func testAReplayedCredentialGetsTheOrdinaryChallenge() throws {
        var fixture = fixture()
        let once = credential()
        XCTAssertEqual(F.response(try fixture.send(wakeRegister(once))).statusCode, 200)
        fixture.now += 1
        let replay = F.response(try fixture.send(wakeRegister(once, contacts: [contact(port: 5080)], cseq: 2)))
        XCTAssertEqual(challengeShape(replay), try ordinaryChallenge())
        XCTAssertEqual(fixture.core.bindings(for: F.alice).map(\.contact).first?.contains(":5070"), true, "the replay changed nothing")
    }

    func testAnExpiredCredentialGetsTheOrdinaryChallenge() throws {
        var fixture = fixture()
        let short = credential(lasting: 8)
        fixture.now += 8
        XCTAssertEqual(challengeShape(F.response(try fixture.send(wakeRegister(short)))), try ordinaryChallenge())
        XCTAssertEqual(fixture.core.bindingCount, 0)
        // A millisecond before the wait ends it still admits.
        var inTime = self.fixture()
        inTime.now += 7.999
        XCTAssertEqual(F.response(try inTime.send(wakeRegister(short))).statusCode, 200)
    }

    func testACredentialForAnotherDevicesTokenOrInstanceGetsTheOrdinaryChallenge() throws {
        var fixture = fixture()
        let expected = try ordinaryChallenge()
        let otherToken = F.response(try fixture.send(wakeRegister(credential(token: Self.otherToken))))
        XCTAssertEqual(challengeShape(otherToken), expected)
        let otherInstance = F.response(try fixture.send(wakeRegister(
            credential(), contacts: [contact(instance: "<urn:uuid:00000000-0000-4000-8000-000000000002>")], callID: "other-instance")))
        XCTAssertEqual(challengeShape(otherInstance), expected)
        let noToken = F.response(try fixture.send(wakeRegister(credential(), contacts: ["<sip:1001@192.0.2.7:5070>;+sip.instance=\"\(Self.instance)\""], callID: "no-token")))
        XCTAssertEqual(challengeShape(noToken), expected)
        XCTAssertEqual(fixture.core.bindingCount, 0)
    }

    func testAForgedCredentialOrOneForAnotherExtensionOrInstanceGetsTheOrdinaryChallenge() throws {
        var fixture = fixture()
        let expected = try ordinaryChallenge()
        let forger = WakeCredentialSigner(secret: Array("guessed".utf8))
        let forged = forger.issue(WakeCredentialClaims(
            callID: UUID(), aor: F.alice, device: PushTokenID(family: .apns, token: Self.token).tag, instance: WakeCredentialClaims.tag(Self.instance),
            holder: "here", expiresAt: F.start.addingTimeInterval(8)), now: F.start)
        let bobs = credential(aor: F.bob)
        let elsewhere = credential(holder: "another-instance")
        var tampered = credential()
        tampered.removeLast()
        for (index, text) in [forged, bobs, elsewhere, tampered, "not a credential", ""].enumerated() {
            let response = F.response(try fixture.send(wakeRegister(text, callID: "case-\(index)")))
            XCTAssertEqual(challengeShape(response), expected, "case \(index)")
        }
        XCTAssertEqual(fixture.core.bindingCount, 0)
    }

    func testACredentialNeverListsRemovesOrUnregisters() throws {
        var fixture = fixture()
        _ = try fixture.registerAuthenticated(contacts: [contact(port: 5060)], callID: "digest")
        let expected = try ordinaryChallenge()
        let query = F.response(try fixture.send(F.register(contacts: [], callID: "q", extra: ["X-Rouse-Wake: \(credential())"])))
        XCTAssertEqual(challengeShape(query), expected)
        let wildcard = F.response(try fixture.send(wakeRegister(credential(), contacts: ["*"], expires: 0, callID: "w")))
        XCTAssertEqual(challengeShape(wildcard), expected)
        let unregister = F.response(try fixture.send(wakeRegister(credential(), contacts: [contact(port: 5060)], expires: 0, callID: "u")))
        XCTAssertEqual(challengeShape(unregister), expected)
        XCTAssertEqual(fixture.core.bindingCount, 1, "the binding registered with digest is still there")
    }

    func testAWakeThatWouldTouchAnotherDevicesBindingIsUndoneAndChallenged() throws {
        var fixture = F(policy: RegistrationPolicy(maxBindingsPerExtension: 1))
        fixture.core.wakeCredentials = WakeCredentialGate(signer: signer, instanceID: "here")
        _ = try fixture.registerAuthenticated(contacts: ["<sip:1001@192.0.2.99:5060>"], callID: "desk")
        let before = fixture.core.bindings(for: F.alice)
        // The cap would make room by removing the desk phone: beyond what the credential admits.
        let response = F.response(try fixture.send(wakeRegister(credential())))
        XCTAssertEqual(challengeShape(response), try ordinaryChallenge())
        XCTAssertEqual(fixture.core.bindings(for: F.alice), before)
    }

    func testACredentialNeverAddsAFlowBesideTheDevicesOwn() throws {
        var fixture = fixture()
        let flow1 = contact(port: 5060) + ";reg-id=1"
        _ = try fixture.registerAuthenticated(contacts: [flow1], callID: "before", extra: ["Supported: outbound"])
        XCTAssertEqual(fixture.core.bindings(for: F.alice).map(\.regID), [1])
        // A copy of the credential registering a second flow of that instance would outlive the
        // device's own next REGISTER (which replaces flow 1 only): refused.
        let second = F.response(try fixture.send(F.register(
            contacts: [contact(port: 6000) + ";reg-id=2"], callID: "copy", extra: ["Supported: outbound", "X-Rouse-Wake: \(credential())"])))
        XCTAssertEqual(challengeShape(second), try ordinaryChallenge())
        XCTAssertEqual(fixture.core.bindings(for: F.alice).map(\.regID), [1])
        // The same flow, from the woken app's new connection, replaces it.
        let same = try fixture.send(F.register(
            contacts: [contact(port: 5070) + ";reg-id=1"], callID: "woken", extra: ["Supported: outbound", "X-Rouse-Wake: \(credential())"]))
        XCTAssertEqual(F.response(same).statusCode, 200)
        XCTAssertEqual(fixture.core.bindings(for: F.alice).map(\.contact).first?.contains(":5070"), true)
    }

    func testTheWokenDeviceReplacesItsOwnOlderBinding() throws {
        var fixture = fixture()
        // Registered with digest before it slept, without an instance id, from another port.
        _ = try fixture.registerAuthenticated(contacts: [contact(port: 5060, instance: nil)], callID: "before")
        let decision = try fixture.send(wakeRegister(credential(instance: nil), contacts: [contact(port: 5070, instance: nil)]))
        guard case .commit(let changes, _, let response, _) = decision else { return XCTFail("no commit: \(decision)") }
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(changes.count, 2, "the old binding of the same token goes, the fresh one is saved")
        XCTAssertEqual(fixture.core.bindings(for: F.alice).map(\.contact), [contact(port: 5070, instance: nil).dropFirst().prefix { $0 != ">" }].map(String.init))
    }

    func testDigestCredentialsComeFirstAndLeaveTheWakeCredentialUnspent() throws {
        var fixture = fixture()
        let wake = credential()
        let challenge = F.response(try fixture.send(F.register(contacts: [contact()])))
        let offer = try XCTUnwrap(challenge.headers.lines(.wwwAuthenticate).first)
        let both = F.register(
            contacts: [contact()], cseq: 2, authorization: F.answer(offer, password: "alice-secret"), extra: ["X-Rouse-Wake: \(wake)"])
        XCTAssertEqual(F.response(try fixture.send(both)).statusCode, 200)
        XCTAssertEqual(fixture.core.wakeCredentials?.spent.count, 0)
    }

    func testARetiredCredentialOrOneWithTheFeatureOffGetsTheOrdinaryChallenge() throws {
        var fixture = fixture()
        let wake = credential()
        let id = try XCTUnwrap(signer.verify(wake, now: F.start)?.id)
        fixture.core.wakeCredentials?.retire([id], until: F.start.addingTimeInterval(8))
        XCTAssertEqual(challengeShape(F.response(try fixture.send(wakeRegister(wake)))), try ordinaryChallenge())
        var off = F()
        XCTAssertEqual(challengeShape(F.response(try off.send(wakeRegister(credential())))), try ordinaryChallenge())
    }

    func testUsedIdsAreForgottenOnceTheirCredentialsExpire() throws {
        var fixture = fixture()
        XCTAssertEqual(F.response(try fixture.send(wakeRegister(credential()))).statusCode, 200)
        XCTAssertEqual(fixture.core.wakeCredentials?.spent.count, 1)
        fixture.now += 20
        _ = try fixture.send(wakeRegister(credential(at: fixture.now), contacts: [contact(port: 5090)], callID: "later"))
        XCTAssertEqual(fixture.core.wakeCredentials?.spent.count, 1, "the first id was pruned, the second kept")
    }
}
