import CallRouting
import Foundation
import Registrar
import XCTest

final class CallTargetsTests: XCTestCase {
    let aor = AddressOfRecord(number: "1002", domain: "example.com")

    func binding(
        contact: String, instance: String? = nil, transport: String = "tcp", channels: [PushChannel] = [], agent: String? = nil
    ) -> Binding {
        Binding(
            aor: aor, contact: contact, instance: instance, callID: UUID().uuidString, cseq: 1, registeredAt: Date(),
            expiresAt: Date().addingTimeInterval(600), userAgent: agent,
            flow: BindingFlow(transport: transport, source: "127.0.0.1:40000", connectionID: "\(transport)#1", localPoint: "\(transport):127.0.0.1:5060", instanceID: "i"),
            pushChannels: channels)
    }

    let voip = PushChannel(provider: .apns, token: "AA11", param: "TEAM123456.com.example.app.voip", kind: .voip)
    let remote = PushChannel(provider: .apns, token: "bb22", param: "TEAM123456.com.example.app", kind: .remote)
    let fcm = PushChannel(provider: .fcm, token: "fcm-token-1", param: "project-1", kind: .standard)

    func testOneDevicePerTokenWhateverTheNumberOfBindingsAndPostedTokens() {
        let first = binding(contact: "sip:a@127.0.0.1", channels: [fcm])
        let second = binding(contact: "sip:b@127.0.0.1", channels: [fcm])
        let targets = CallTargets(
            bindings: [first, second], posted: [PostedToken(channel: fcm)], deadTokens: [], reach: { _ in .gone })
        XCTAssertEqual(targets.devices.count, 1)
        XCTAssertEqual(targets.devices[0].bindingIDs, [first.id, second.id])
        XCTAssertFalse(targets.devices[0].isPostedOnly)
        XCTAssertEqual(targets.devices[0].cancelChannel, fcm, "an FCM device is stopped with a data message to the same token")
    }

    func testDeskPhoneAwakeAppAndSleepingUDPAppAreToldApart() {
        let desk = binding(contact: "sip:desk@127.0.0.1", transport: "udp")
        let awake = binding(contact: "sip:awake@127.0.0.1", channels: [fcm])
        let sleeping = binding(contact: "sip:udp@127.0.0.1", transport: "udp", channels: [voip])
        let targets = CallTargets(bindings: [desk, awake, sleeping], posted: [], deadTokens: []) { binding in
            binding.id == awake.id ? .connected : .datagram
        }
        XCTAssertTrue(targets.hasDeskPhone)
        XCTAssertEqual(targets.deskPhones.map(\.id), [desk.id])
        XCTAssertEqual(targets.awake.map(\.id), [awake.id])
        XCTAssertEqual(targets.atWaitEnd.map(\.id), [sleeping.id])
        XCTAssertEqual(targets.devices.count, 2)
    }

    func testDeadTokensAreNotPushedAndAVoipOnlyIPhoneHasNoCancelChannel() {
        let iphone = binding(contact: "sip:ios@127.0.0.1", instance: "<urn:uuid:1>", channels: [voip])
        let android = binding(contact: "sip:and@127.0.0.1", channels: [fcm])
        let targets = CallTargets(bindings: [iphone, android], posted: [], deadTokens: ["fcm:fcm-token-1"], reach: { _ in .gone })
        XCTAssertEqual(targets.devices.map(\.key), ["apns:aa11"])
        XCTAssertNil(targets.devices[0].cancelChannel, "never a second VoIP push")
        XCTAssertFalse(targets.hasDeskPhone, "a push binding with dead tokens is not a desk phone")
    }

    func testARegularTokenPairsWithTheVoipTokenOfTheSameApp() {
        let iphone = binding(contact: "sip:ios@127.0.0.1", channels: [voip])
        let targets = CallTargets(bindings: [iphone], posted: [PostedToken(channel: remote)], deadTokens: [], reach: { _ in .gone })
        XCTAssertEqual(targets.devices.count, 1)
        XCTAssertEqual(targets.devices[0].cancelChannel, remote)
    }

    func testMatchingTheWokenDevice() {
        let iphone = binding(contact: "sip:ios@127.0.0.1", instance: "<urn:uuid:1>", channels: [voip])
        let targets = CallTargets(
            bindings: [iphone], posted: [PostedToken(channel: fcm)], deadTokens: [], reach: { _ in .gone })
        let device = targets.devices[0]
        XCTAssertTrue(device.matches(binding(contact: "sip:new@127.0.0.1:1", instance: "<urn:uuid:1>")), "same instance")
        XCTAssertFalse(device.matches(binding(contact: "sip:new@127.0.0.1:1", instance: "<urn:uuid:2>", channels: [voip])), "instance wins")
        XCTAssertTrue(device.matches(binding(contact: "sip:new@127.0.0.1:1", channels: [voip])), "same token")
        XCTAssertFalse(device.matches(binding(contact: "sip:new@127.0.0.1:1")))
        let postedOnly = targets.devices[1]
        XCTAssertTrue(postedOnly.isPostedOnly)
        XCTAssertTrue(postedOnly.matches(binding(contact: "sip:any@127.0.0.1:1")), "a posted-only device matches any new binding")
    }
}
