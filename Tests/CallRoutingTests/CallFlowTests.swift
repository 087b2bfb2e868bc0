import CallRouting
import Foundation
import Registrar
import RouseVocabulary
import SIPMessage
import SIPTransaction
import XCTest

/// RFC 5626 §5.3 on the call side: a device (one `+sip.instance`) with several flows (reg-ids) is
/// sent one INVITE over its best flow; when that flow fails the call moves to the next one; a
/// device whose flows are all gone is pushed. The coordinator against the doubles of
/// CallCoordinatorTests (FakeSignaling: `tcp#1` is a closed connection, other TCP ones are open).
final class CallFlowTests: XCTestCase {
    let callee = AddressOfRecord(number: "1002", domain: "example.com")
    let instance = "<urn:uuid:2d1c2b7e-6d1b-4a8f-9e0a-3c1f0b2e7d45>"
    let fcm = PushChannel(provider: .fcm, token: "fcm-phone", param: "p", kind: .standard)

    /// Flow `regID` of the device over connection `connection`, registered `age` seconds ago.
    func flow(_ regID: Int, connection: String, age: TimeInterval, push: Bool = false) -> Binding {
        Binding(
            aor: callee, contact: "sip:1002@192.0.2.6:\(40000 + regID);transport=tcp;ob", instance: instance, regID: regID,
            callID: "flow-\(regID)", cseq: 1, registeredAt: Date().addingTimeInterval(-age), expiresAt: Date().addingTimeInterval(600),
            userAgent: "Phone", flow: BindingFlow(transport: .tcp, source: SocketAddress(parsing: "192.0.2.6:\(40000 + regID)"), connectionID: FlowConnectionID(connection), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "i"),
            pushChannels: push ? [fcm] : [])
    }

    func testTwoOpenFlowsOfOneDeviceGetOneInviteOverTheNewer() throws {
        let older = flow(1, connection: "tcp#2", age: 60)
        let newer = flow(2, connection: "tcp#3", age: 10)
        let harness = Harness(bindings: [older, newer])
        harness.placeCall()
        let invite = try harness.waitForBranch()
        XCTAssertEqual(invite.bindingID, newer.id, "the most recently registered flow")
        invite.respond(180)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 == 180 }.statusCode, 180)
        invite.respond(200)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 200)
        XCTAssertEqual(harness.signaling.invites.count, 1, "one INVITE per device, not one per reg-id")
    }

    func testA430MovesTheCallToTheDevicesNextFlow() throws {
        let older = flow(1, connection: "tcp#2", age: 60)
        let newer = flow(2, connection: "tcp#3", age: 10)
        let harness = Harness(bindings: [older, newer])
        harness.placeCall()
        try harness.waitForBranch().respond(430)
        try harness.waitUntil { harness.signaling.invites.count == 2 }
        let second = harness.signaling.invites[1]
        XCTAssertEqual(second.bindingID, older.id)
        second.respond(200)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 200)
        let journey = try harness.waitForJourney()
        XCTAssertEqual(journey.branches.map(\.finalStatus), [430, 200])
        XCTAssertTrue(journey.events.contains { $0.text.hasPrefix("the flow to Phone failed; trying its next flow") }, "\(journey.events.map(\.text))")
    }

    func testAConnectionThatClosesUnderTheInviteMovesTheCallToTheNextFlow() throws {
        let harness = Harness(bindings: [flow(1, connection: "tcp#2", age: 60), flow(2, connection: "tcp#3", age: 10)])
        harness.placeCall()
        let first = try harness.waitForBranch()
        first.respond(180)
        first.onResponse(.transportError(SIPResponse(replyingTo: first.request, statusCode: 503)))
        try harness.waitUntil { harness.signaling.invites.count == 2 }
        harness.signaling.invites[1].respond(486)
        let final = try harness.waitForCallerResponse { $0 >= 200 }
        XCTAssertEqual(final.statusCode, 486, "the second flow's answer is the device's answer")
    }

    func testTheDevicesAnswerIsNotRetriedOnItsOtherFlow() throws {
        let harness = Harness(bindings: [flow(1, connection: "tcp#2", age: 60), flow(2, connection: "tcp#3", age: 10)])
        harness.placeCall()
        try harness.waitForBranch().respond(486)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 486)
        XCTAssertEqual(harness.signaling.invites.count, 1, "RFC 5626 §5.3: a final answer other than 408/430 ends the device's part")
    }

    func testWhenEveryFlowFailsTheCallerHears480() throws {
        let harness = Harness(bindings: [flow(1, connection: "tcp#2", age: 60), flow(2, connection: "tcp#3", age: 10)])
        harness.placeCall()
        try harness.waitForBranch().respond(430)
        try harness.waitUntil { harness.signaling.invites.count == 2 }
        harness.signaling.invites[1].respond(430)
        let final = try harness.waitForCallerResponse { $0 >= 200 }
        XCTAssertEqual(final.statusCode, 480, "430 is about a flow; the caller is never told it")
    }

    func testAPushDeviceWithOneFlowGoneRingsOverTheOther() throws {
        // reg-id 2 was registered last but its connection closed; reg-id 1 is still open.
        let harness = Harness(
            bindings: [flow(1, connection: "tcp#2", age: 60, push: true), flow(2, connection: "tcp#1", age: 10, push: true)],
            settings: CallSettings(wakeWait: .seconds(30)))
        harness.placeCall()
        let invite = try harness.waitForBranch()
        XCTAssertTrue(invite.request.uri.description.contains(":40001"), invite.request.uri.description)
        try harness.waitUntil { harness.pusher.rings.count == 1 }
    }

    func testAPushDeviceWhoseFlowsAreAllGoneIsPushedAndRingsOnceWhenBothFlowsReturn() throws {
        let first = flow(1, connection: "tcp#1", age: 60, push: true)
        let second = flow(2, connection: "tcp#1", age: 50, push: true)
        let harness = Harness(bindings: [first, second], settings: CallSettings(wakeWait: .seconds(30)))
        harness.placeCall()
        try harness.waitUntil { harness.pusher.rings.count == 1 }
        XCTAssertEqual(harness.pusher.rings, [fcm], "one push for the device, not one per flow")
        XCTAssertTrue(harness.signaling.invites.isEmpty)

        // The woken app registers both flows again, over new connections, one after the other.
        var back1 = first
        back1.registeredAt = Date()
        back1.flow.connectionID = FlowConnectionID("tcp#5")
        harness.directory.set([back1, second])
        harness.coordinator.bindingsChanged(callee)
        try harness.waitUntil { harness.signaling.invites.count == 1 }
        var back2 = second
        back2.registeredAt = Date()
        back2.flow.connectionID = FlowConnectionID("tcp#6")
        harness.directory.set([back1, back2])
        harness.coordinator.bindingsChanged(callee)
        harness.coordinator.drain()
        XCTAssertEqual(harness.signaling.invites.map(\.bindingID), [back1.id], "one INVITE: the second flow joins no fork")
        harness.signaling.invites[0].respond(200)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 200)
    }
}
