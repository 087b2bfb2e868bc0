import CallRouting
import Foundation
import Registrar
import RouseVocabulary
import XCTest

final class CallTargetsTests: XCTestCase {
    let aor = AddressOfRecord(number: "1002", domain: "example.com")

    func binding(
        contact: String, instance: String? = nil, transport: String = "tcp", channels: [PushChannel] = [], agent: String? = nil
    ) -> Binding {
        Binding(
            aor: aor, contact: contact, instance: instance, callID: UUID().uuidString, cseq: 1, registeredAt: Date(),
            expiresAt: Date().addingTimeInterval(600), userAgent: agent,
            flow: BindingFlow(transport: SIPTransportKind(rawValue: transport)!, source: SocketAddress(parsing: "127.0.0.1:40000"), connectionID: FlowConnectionID("\(transport)#1"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "i"),
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
        let targets = CallTargets(bindings: [iphone, android], posted: [], deadTokens: [PushTokenID(family: .fcm, token: "fcm-token-1")], reach: { _ in .gone })
        XCTAssertEqual(targets.devices.map(\.id.key), ["apns:aa11"])
        XCTAssertNil(targets.devices[0].cancelChannel, "never a second VoIP push")
        XCTAssertFalse(targets.hasDeskPhone, "a push binding with dead tokens is not a desk phone")
    }

    func testARegularTokenPairsWithTheVoipTokenOfTheSameApp() {
        let iphone = binding(contact: "sip:ios@127.0.0.1", channels: [voip])
        let targets = CallTargets(bindings: [iphone], posted: [PostedToken(channel: remote)], deadTokens: [], reach: { _ in .gone })
        XCTAssertEqual(targets.devices.count, 1)
        XCTAssertEqual(targets.devices[0].cancelChannel, remote)
    }

    func flow(_ regID: Int, instance: String = "<urn:uuid:7>", age: TimeInterval, channels: [PushChannel] = []) -> Binding {
        var flow = binding(contact: "sip:phone@127.0.0.1:\(40000 + regID);ob", instance: instance, channels: channels)
        flow.regID = regID
        flow.registeredAt = Date().addingTimeInterval(-age)
        flow.flow.connectionID = FlowConnectionID("tcp#\(regID)")
        return flow
    }

    func testTheFlowsOfOneInstanceAreOneDeviceRungOverItsBestFlow() {
        let older = flow(1, age: 60, channels: [fcm])
        let newer = flow(2, age: 10, channels: [fcm])
        let both = CallTargets(bindings: [older, newer], posted: [], deadTokens: [], reach: { _ in .connected })
        XCTAssertEqual(both.awake.map(\.id), [newer.id], "one flow per instance: the most recently registered")
        XCTAssertEqual(both.devices.count, 1)
        XCTAssertEqual(both.devices[0].bindingIDs, [older.id, newer.id])

        let newerGone = CallTargets(bindings: [older, newer], posted: [], deadTokens: []) { $0.id == newer.id ? .gone : .connected }
        XCTAssertEqual(newerGone.awake.map(\.id), [older.id], "an open connection beats a newer flow that is gone")

        let allGone = CallTargets(bindings: [older, newer], posted: [], deadTokens: [], reach: { _ in .gone })
        XCTAssertTrue(allGone.awake.isEmpty)
        XCTAssertEqual(allGone.devices.map(\.id.key), ["fcm:fcm-token-1"], "no flow left: the device is pushed, once")
    }

    func testADeskPhoneWithTwoFlowsIsOneDeskPhone() {
        let older = flow(1, age: 60)
        let newer = flow(2, age: 10)
        let targets = CallTargets(bindings: [older, newer], posted: [], deadTokens: []) { $0.id == older.id ? .connected : .datagram }
        XCTAssertEqual(targets.deskPhones.map(\.id), [older.id], "a connection before UDP, whatever the age")
        XCTAssertTrue(targets.hasDeskPhone)
        XCTAssertTrue(targets.devices.isEmpty)
    }

    func testTheNewestFlowSaysTheDevicesToken() {
        let rotated = PushChannel(provider: .fcm, token: "fcm-token-2", param: "project-1", kind: .standard)
        let targets = CallTargets(
            bindings: [flow(1, age: 60, channels: [fcm]), flow(2, age: 10, channels: [rotated])], posted: [], deadTokens: [], reach: { _ in .gone })
        XCTAssertEqual(targets.devices.map(\.ringChannel), [rotated])
        XCTAssertEqual(targets.devices.first?.tokens.map(\.key).sorted(), ["fcm:fcm-token-1", "fcm:fcm-token-2"])
    }

    func testFlowsByDeviceKeepsDevicesInOrderAndFlowsBestFirst() {
        let desk = binding(contact: "sip:desk@127.0.0.1", transport: "udp")
        let gone = flow(1, age: 5)
        let udp = flow(2, age: 30)
        let open = flow(3, age: 90)
        let devices = CallTargets.flowsByDevice([desk, gone, udp, open]) { binding in
            binding.id == gone.id ? .gone : binding.id == open.id ? .connected : .datagram
        }
        XCTAssertEqual(devices.map { $0.map(\.binding.id) }, [[desk.id], [open.id, udp.id, gone.id]])
        XCTAssertEqual(devices[1].map(\.reach), [.connected, .datagram, .gone])
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

    func testAStaleTokenIsLeftOutLikeADeadOneAndNamed() {
        let phone = binding(contact: "sip:a@127.0.0.1", transport: "udp", channels: [fcm], agent: "Android app")
        let targets = CallTargets(
            bindings: [phone], posted: [PostedToken(channel: voip)], deadTokens: [], staleTokens: [fcm.tokenID, voip.tokenID],
            reach: { _ in .datagram })
        XCTAssertEqual(targets.devices, [])
        XCTAssertEqual(targets.staleDevices.map(\.name), ["Android app", "iPhone (posted token)"])
        XCTAssertEqual(targets.deskPhones.map(\.id), [phone.id], "still reachable over SIP, rung at the end of the wait")

        let dead = CallTargets(bindings: [phone], posted: [], deadTokens: [fcm.tokenID], staleTokens: [fcm.tokenID], reach: { _ in .datagram })
        XCTAssertEqual(dead.staleDevices, [], "a dead token is dead, not stale")
    }
}
