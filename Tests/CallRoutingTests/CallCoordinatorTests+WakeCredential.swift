import CallRouting
import Foundation
import Push
import Registrar
import RouseVocabulary
import SIPMessage
import XCTest

/// What the coordinator asked the registrar to retire.
final class RetiredWakeCredentials: @unchecked Sendable {
    // @unchecked: `list` is only touched under `lock`.
    private let lock = NSLock()
    private var list: [(ids: [String], until: Date)] = []
    var all: [(ids: [String], until: Date)] { lock.withLock { list } }
    func add(_ ids: [String], _ until: Date) { lock.withLock { list.append((ids, until)) } }
}

/// The coordinator's side of wake credentials (issue 20 item 6): with minting on, each ring push
/// carries one for its device, good until the wake wait ends; a call that ends within its wait
/// retires them. Manual clock, doubles around the coordinator.
extension CallCoordinatorTests {
    var secret: [UInt8] { Array("call-token-secret".utf8) }

    func wakeHarness(minting: Bool, retired: RetiredWakeCredentials = RetiredWakeCredentials()) -> Harness {
        Harness(
            bindings: [app()], settings: CallSettings(wakeWait: .seconds(8)), callTokens: CallTokenSigner(secret: secret), manualClock: true,
            wakeCredentials: minting ? WakeCredentialMinting(signer: WakeCredentialSigner(secret: secret), retire: { retired.add($0, $1) }) : nil)
    }

    func testTheRingPushCarriesACredentialForItsDeviceUntilTheWaitEnds() throws {
        let harness = wakeHarness(minting: true)
        harness.placeCall()
        try harness.waitUntil { harness.pusher.ringPayloads.count == 1 }
        let content = try XCTUnwrap(harness.pusher.ringPayloads.first)
        let credential = try XCTUnwrap(content.wakeCredential)
        XCTAssertEqual(PushPayload.ring(content).value("wake_credential"), credential)
        let signer = WakeCredentialSigner(secret: secret)
        let claims = try XCTUnwrap(signer.verify(credential, now: content.timestamp))
        XCTAssertEqual(claims.aor, callee)
        XCTAssertEqual(claims.device, voip.tokenID.tag)
        XCTAssertEqual(claims.instance, WakeCredentialClaims.tag("<urn:uuid:1>"))
        XCTAssertEqual(claims.holder, "test-instance")
        XCTAssertEqual(claims.expiresAt.timeIntervalSince(content.timestamp), 8, accuracy: 0.002, "until the wake wait ends")
        XCTAssertNil(signer.verify(credential, now: content.timestamp.addingTimeInterval(8)))
        // The call token of the same push is no wake credential, and the credential no call token.
        XCTAssertNil(signer.verify(try XCTUnwrap(content.callToken), now: content.timestamp))
        guard case .failure = CallTokenSigner(secret: secret).verify(credential, now: content.timestamp) else {
            return XCTFail("a wake credential was taken for a call token")
        }
    }

    func testWithTheSettingOffThePushCarriesNone() throws {
        let harness = wakeHarness(minting: false)
        harness.placeCall()
        try harness.waitUntil { harness.pusher.ringPayloads.count == 1 }
        let content = try XCTUnwrap(harness.pusher.ringPayloads.first)
        XCTAssertNil(content.wakeCredential)
        XCTAssertNil(PushPayload.ring(content).value("wake_credential"))
    }

    func testACallEndedWithinItsWaitRetiresItsCredentials() throws {
        let retired = RetiredWakeCredentials()
        let harness = wakeHarness(minting: true, retired: retired)
        harness.placeCall()
        try harness.waitUntil { harness.pusher.ringPayloads.count == 1 }
        let content = try XCTUnwrap(harness.pusher.ringPayloads.first)
        let claims = try XCTUnwrap(WakeCredentialSigner(secret: secret).verify(try XCTUnwrap(content.wakeCredential), now: content.timestamp))
        harness.advance(by: .seconds(2))
        harness.coordinator.handleCancel(of: try XCTUnwrap(harness.serverHandle), callID: harness.callID, reason: nil)
        try harness.waitUntil { !retired.all.isEmpty }
        XCTAssertEqual(retired.all.first?.ids, [claims.id])
        XCTAssertEqual(try XCTUnwrap(retired.all.first?.until).timeIntervalSince(claims.expiresAt), 0, accuracy: 0.002)
    }

    func testACallThatOutlivesItsWaitRetiresNothing() throws {
        let retired = RetiredWakeCredentials()
        let harness = wakeHarness(minting: true, retired: retired)
        harness.placeCall()
        try harness.waitUntil { harness.pusher.ringPayloads.count == 1 }
        harness.advance(by: .seconds(9))
        try harness.waitUntil { harness.responsesToCaller.contains { $0.statusCode >= 400 } }
        XCTAssertTrue(retired.all.isEmpty, "the credentials expired with the wait")
    }
}
