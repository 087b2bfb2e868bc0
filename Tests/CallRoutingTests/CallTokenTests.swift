import CallRouting
import Crypto
import Foundation
import Push
import Registrar
import RouseVocabulary
import SIPMessage
import XCTest

/// Call tokens (issue 11): what they carry and what they refuse; and, with the coordinator's
/// doubles, declines, call status and missed-call notices as a woken app meets them.
final class CallTokenTests: XCTestCase {
    let callee = AddressOfRecord(number: "1002", domain: "example.com")
    let signer = CallTokenSigner(secret: Array(repeating: 7, count: 32))

    func claims(expiresIn seconds: TimeInterval = 60) -> CallTokenClaims {
        CallTokenClaims(
            callID: UUID(), callUUID: PushPayload.uuid(forCallID: "abc@host"), aor: callee, device: "d1", instanceID: "i1",
            expiresAt: Date().addingTimeInterval(seconds))
    }

    func testATokenReadsBackAndNamesItsCallByUUIDOrCallID() throws {
        let issued = claims()
        let token = signer.issue(issued)
        XCTAssertEqual(token.split(separator: ".").count, 3)
        guard case .success(let read) = signer.verify(token) else { return XCTFail("refused its own token") }
        XCTAssertEqual(read.callID, issued.callID)
        XCTAssertEqual(read.aor, callee)
        XCTAssertEqual(read.device, "d1")
        XCTAssertTrue(read.names("abc@host"))
        XCTAssertTrue(read.names(PushPayload.uuid(forCallID: "abc@host").uppercased()))
        XCTAssertFalse(read.names("other@host"))
    }

    func testTamperedExpiredForeignAndMalformedTokensAreRefused() {
        let token = signer.issue(claims())
        var parts = token.split(separator: ".").map(String.init)
        // Another extension in the claims, signature kept.
        parts[1] = Base64URL.encode(Array(#"{"aud":"rouse:call","sub":"1003@example.com"}"#.utf8))
        XCTAssertEqual(signer.verify(parts.joined(separator: ".")).failure, .badSignature)
        XCTAssertEqual(signer.verify(signer.issue(claims(expiresIn: -1))).failure, .expired)
        let otherKey = CallTokenSigner(secret: Array(repeating: 8, count: 32))
        XCTAssertEqual(otherKey.verify(token).failure, .badSignature)
        XCTAssertEqual(signer.verify("a.b").failure, .malformed)
        XCTAssertEqual(signer.verify("").failure, .malformed)
        XCTAssertEqual(signer.verify(String(repeating: "a", count: 5000)).failure, .malformed)
    }

    // MARK: - With the coordinator

    func fcmApp(_ name: String, token: String) -> Binding {
        Binding(
            aor: callee, contact: "sip:\(name)@192.0.2.7:5060;transport=tcp", instance: "<urn:uuid:\(name)>", callID: name, cseq: 1,
            registeredAt: Date().addingTimeInterval(-60), expiresAt: Date().addingTimeInterval(600), userAgent: name,
            flow: BindingFlow(transport: .tcp, source: SocketAddress(parsing: "192.0.2.7:40000"), connectionID: FlowConnectionID("tcp#1"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "i"),
            pushChannels: [PushChannel(provider: .fcm, token: token, param: "p", kind: .standard)])
    }

    func iPhone(_ name: String, voipOnly: Bool) -> Binding {
        var binding = fcmApp(name, token: "unused")
        binding.pushChannels = [PushChannel(provider: .apns, token: String(repeating: "a1", count: 32), param: nil, kind: .voip)]
        if !voipOnly {
            binding.pushChannels.append(PushChannel(provider: .apns, token: String(repeating: "b2", count: 32), param: nil, kind: .remote))
        }
        return binding
    }

    /// The claims of the call token the ring push to `token` carried.
    func tokenClaims(_ harness: Harness, ringTo token: String) throws -> CallTokenClaims {
        var found: CallPushContent?
        try harness.waitUntil {
            found = zip(harness.pusher.rings, harness.pusher.ringPayloads).first { $0.0.token == token }?.1
            return found != nil
        }
        let text = try XCTUnwrap(found?.callToken, "the ring push carries a call token")
        guard case .success(let claims) = signer.verify(text) else { throw Harness.Timeout() }
        return claims
    }

    func status(_ harness: Harness, _ claims: CallTokenClaims) throws -> CallStatus? {
        let box = StatusBox()
        harness.coordinator.status(claims) { box.set($0) }
        try harness.waitUntil { box.answered }
        return box.value
    }

    func decline(_ harness: Harness, _ claims: CallTokenClaims, _ reason: DeclineReason) throws -> CallStatus? {
        let box = StatusBox()
        harness.coordinator.decline(claims, reason: reason) { box.set($0) }
        try harness.waitUntil { box.answered }
        return box.value
    }

    func testOneDeviceDeclinesTheOtherStillRingsThenAllDeclineGives603() throws {
        let harness = Harness(
            bindings: [fcmApp("pixel", token: "fcm-a"), fcmApp("tablet", token: "fcm-b")], settings: CallSettings(wakeWait: .seconds(30)),
            callTokens: signer)
        harness.placeCall()
        let pixel = try tokenClaims(harness, ringTo: "fcm-a")
        let tablet = try tokenClaims(harness, ringTo: "fcm-b")
        XCTAssertNotEqual(pixel.device, tablet.device, "each device has its own token")
        XCTAssertEqual(try status(harness, pixel)?.state, .ringing)

        let afterFirst = try decline(harness, pixel, .declined)
        XCTAssertEqual(afterFirst?.state, .ringing, "the tablet still rings")
        XCTAssertEqual(afterFirst?.declinedHere, true)
        XCTAssertEqual(try status(harness, tablet)?.declinedHere, false)

        let afterSecond = try decline(harness, tablet, .declined)
        XCTAssertEqual(afterSecond?.state, .ended)
        let final = try harness.waitForCallerResponse { $0 >= 200 }
        XCTAssertEqual(final.statusCode, 603)
        XCTAssertEqual(final.headers[.reason], "SIP;cause=603;text=\"every device declined\"")
        let journey = try harness.waitForJourney()
        XCTAssertTrue(journey.events.contains { $0.text.contains("pixel declined the call") }, "\(journey.events.map(\.text))")
        XCTAssertFalse(journey.missed, "a declined call is not a missed one")
        XCTAssertTrue(harness.pusher.missedNotices.isEmpty)
    }

    func testEveryDeviceBusyGives486AndIsMissed() throws {
        let harness = Harness(bindings: [fcmApp("pixel", token: "fcm-a")], settings: CallSettings(wakeWait: .seconds(30)), callTokens: signer)
        harness.placeCall()
        let pixel = try tokenClaims(harness, ringTo: "fcm-a")
        _ = try decline(harness, pixel, .busy)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 486)
        // A busy device declined: it draws nothing more, so no notice goes to it.
        let journey = try harness.waitForJourney()
        XCTAssertTrue(journey.missed)
        XCTAssertEqual(try status(harness, pixel)?.missed, true)
    }

    func testADeclinedAppThatWakesIsNotForkedTo() throws {
        let sleeping = fcmApp("pixel", token: "fcm-a")
        let harness = Harness(
            bindings: [sleeping, Binding(
                aor: callee, contact: "sip:desk@192.0.2.5:5060", callID: "d", cseq: 1, registeredAt: Date(),
                expiresAt: Date().addingTimeInterval(600), userAgent: "Desk",
                flow: BindingFlow(transport: .udp, source: SocketAddress(parsing: "192.0.2.5:5060"), connectionID: FlowConnectionID("udp#0"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "i"))],
            settings: CallSettings(wakeWait: .seconds(30), wakeWaitWithDeskPhone: .seconds(30)), callTokens: signer)
        harness.placeCall()
        let pixel = try tokenClaims(harness, ringTo: "fcm-a")
        _ = try decline(harness, pixel, .declined)
        // Every pushed device declined: the wait ends and the desk phone rings at once.
        let deskInvite = try harness.waitForBranch()
        XCTAssertEqual(deskInvite.request.uri.user, "desk")
        var woken = sleeping
        woken.id = UUID()
        woken.registeredAt = Date()
        woken.flow.connectionID = FlowConnectionID("tcp#2")
        harness.directory.set(harness.directory.bindings(for: callee) + [woken])
        harness.coordinator.bindingsChanged(callee)
        harness.coordinator.drain()
        XCTAssertEqual(harness.signaling.invites.count, 1, "the declined app is not rung")
        deskInvite.respond(200)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 200)
        let answered = try status(harness, pixel)
        XCTAssertEqual(answered?.state, .answered)
        XCTAssertEqual(answered?.answeredHere, false)
    }

    func testADeclinedVoIPOnlyIPhoneIsNotSentTheLateInviteAndCancel() throws {
        let sleeping = iPhone("iphone", voipOnly: true)
        let desk = Binding(
            aor: callee, contact: "sip:desk@192.0.2.5:5060", callID: "d", cseq: 1, registeredAt: Date(),
            expiresAt: Date().addingTimeInterval(600), userAgent: "Desk",
            flow: BindingFlow(transport: .udp, source: SocketAddress(parsing: "192.0.2.5:5060"), connectionID: FlowConnectionID("udp#0"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "i"))
        let harness = Harness(
            bindings: [sleeping, desk], settings: CallSettings(wakeWait: .seconds(30), wakeWaitWithDeskPhone: .seconds(30), cancelGrace: .seconds(30)),
            callTokens: signer)
        harness.placeCall()
        let claims = try tokenClaims(harness, ringTo: sleeping.pushChannels[0].token)
        _ = try decline(harness, claims, .declined)
        let deskInvite = try harness.waitForBranch()
        deskInvite.respond(200)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 200)
        // The iPhone registers again within the grace period: nothing is sent to it.
        var woken = sleeping
        woken.id = UUID()
        woken.registeredAt = Date()
        woken.flow.connectionID = FlowConnectionID("tcp#2")
        harness.directory.set([desk, woken])
        harness.coordinator.bindingsChanged(callee)
        harness.coordinator.drain()
        XCTAssertEqual(harness.signaling.invites.count, 1, "only the desk phone's INVITE")
        let journey = try harness.waitForJourney()
        XCTAssertFalse(journey.events.contains { $0.text.contains("has only a VoIP token") }, "\(journey.events.map(\.text))")
    }

    func testAnUnansweredCallSendsMissedNoticesOnlyWhereVisibleAndNeverVoIP() throws {
        let harness = Harness(
            bindings: [fcmApp("pixel", token: "fcm-a"), iPhone("iphone", voipOnly: false), iPhone("old-iphone", voipOnly: true)],
            settings: CallSettings(wakeWait: .milliseconds(300)), callTokens: signer)
        harness.placeCall()
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 480)
        try harness.waitUntil { harness.pusher.missedNotices.count == 2 }
        harness.coordinator.drain()
        let notices = harness.pusher.missedNotices
        XCTAssertEqual(Set(notices.map(\.channel.kind)), [.standard, .remote], "FCM data and the iPhone's regular token")
        XCTAssertFalse(notices.contains { $0.channel.kind == .voip })
        XCTAssertEqual(Set(notices.map(\.reason)), ["no_answer"])
        let journey = try harness.waitForJourney()
        XCTAssertTrue(journey.missed)
    }

    func testTheCallersCancelIsAMissedCallWithItsReason() throws {
        let harness = Harness(bindings: [fcmApp("pixel", token: "fcm-a")], settings: CallSettings(wakeWait: .seconds(30)), callTokens: signer)
        harness.placeCall()
        let pixel = try tokenClaims(harness, ringTo: "fcm-a")
        harness.coordinator.handleCancel(of: harness.serverHandle!, callID: harness.callID, reason: nil)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 487)
        try harness.waitUntil { harness.pusher.missedNotices.count == 1 }
        XCTAssertEqual(harness.pusher.missedNotices.first?.reason, "caller_hangup")
        let status = try status(harness, pixel)
        XCTAssertEqual(status?.state, .canceled)
        XCTAssertEqual(status?.missed, true)
    }

    func testATokenForAnotherExtensionOrAnUnknownCallFindsNothing() throws {
        let harness = Harness(bindings: [fcmApp("pixel", token: "fcm-a")], settings: CallSettings(wakeWait: .seconds(30)), callTokens: signer)
        harness.placeCall()
        var pixel = try tokenClaims(harness, ringTo: "fcm-a")
        pixel.aor = AddressOfRecord(number: "1003", domain: "example.com")
        XCTAssertNil(try status(harness, pixel))
        XCTAssertNil(try decline(harness, pixel, .declined))
        XCTAssertNil(try status(harness, claims()))
    }
}

/// One answer of the coordinator, handed across threads.
final class StatusBox: @unchecked Sendable {
    // @unchecked: both fields are only touched under `lock`.
    private let lock = NSLock()
    private var done = false
    private var status: CallStatus?

    func set(_ value: CallStatus?) {
        lock.withLock {
            status = value
            done = true
        }
    }

    var answered: Bool { lock.withLock { done } }
    var value: CallStatus? { lock.withLock { status } }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
