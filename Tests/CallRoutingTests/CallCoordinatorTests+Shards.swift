import CallRouting
import Foundation
import Push
import Registrar
import RouseVocabulary
import SIPMessage
import XCTest

/// The coordinator split over shards: a call on any shard is reached by what is not routed by its
/// Call-ID (the caller's CANCEL, a REGISTER that wakes it, a call token), and a dead-token mark
/// made on one shard holds on the others.
extension CallCoordinatorTests {
    static let shardCount = 4

    /// A Call-ID the coordinator puts on shard `index`.
    func callID(onShard index: Int, of coordinator: CallCoordinator<FakeSignaling>) -> String {
        var callID: String
        repeat { callID = UUID().uuidString } while coordinator.shardIndex(ofCallID: callID) != index
        return callID
    }

    func testCallIDsSpreadOverTheShards() {
        let harness = Harness(bindings: [desk()], shards: Self.shardCount)
        XCTAssertEqual(harness.coordinator.shardCount, Self.shardCount)
        let used = Set((0..<200).map { _ in harness.coordinator.shardIndex(ofCallID: UUID().uuidString) })
        XCTAssertEqual(used, Set(0..<Self.shardCount))
    }

    func testTheCallersCancelReachesTheCallOnEveryShard() throws {
        for shard in 0..<Self.shardCount {
            let harness = Harness(bindings: [desk()], shards: Self.shardCount)
            harness.placeCall(callID: callID(onShard: shard, of: harness.coordinator))
            let invite = try harness.waitForBranch()
            invite.respond(180)
            harness.coordinator.handleCancel(of: harness.serverHandle!, callID: harness.callID, reason: nil)
            XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 487, "call on shard \(shard)")
            try harness.waitUntil { harness.signaling.cancels.count == 1 }
            XCTAssertEqual(try harness.waitForJourney().outcome, .canceled)
            XCTAssertEqual(harness.coordinator.liveCallCount, 0)
        }
    }

    func testARegisterWakesTheCallWhateverShardItIsOn() throws {
        for shard in 0..<Self.shardCount {
            let sleeping = app()
            let harness = Harness(bindings: [sleeping], settings: CallSettings(wakeWait: .seconds(30)), shards: Self.shardCount)
            harness.placeCall(callID: callID(onShard: shard, of: harness.coordinator))
            try harness.waitUntil { harness.pusher.rings.count == 1 }
            XCTAssertEqual(harness.coordinator.liveCallCount, 1)
            let woken = wakeUp(sleeping, in: harness)
            let invite = try harness.waitForBranch()
            XCTAssertEqual(invite.bindingID, woken.id, "call on shard \(shard)")
            invite.respond(200)
            XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 200)
            guard case .woke = try harness.waitForJourney().pushes.first?.wake else { return XCTFail("call on shard \(shard) not woken") }
        }
    }

    func testACallTokenFindsItsCallOnTheLastShard() throws {
        let signer = CallTokenSigner(secret: Array("call-token-secret".utf8))
        let harness = Harness(bindings: [app()], settings: CallSettings(wakeWait: .seconds(30)), callTokens: signer, shards: Self.shardCount)
        harness.placeCall(callID: callID(onShard: Self.shardCount - 1, of: harness.coordinator))
        try harness.waitUntil { harness.pusher.rings.count == 1 }
        let token = try XCTUnwrap(harness.pusher.ringPayloads.first?.callToken)
        guard case .success(let claims) = signer.verify(token) else { return XCTFail("the call token does not verify") }
        let box = StatusBox()
        harness.coordinator.decline(claims, reason: .declined) { box.set($0) }
        try harness.waitUntil { box.answered }
        XCTAssertNotNil(box.value, "the shard holding the call answered")
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 603)
        var unknown = claims
        unknown.callID = UUID()
        let none = StatusBox()
        harness.coordinator.status(unknown) { none.set($0) }
        try harness.waitUntil { none.answered }
        XCTAssertNil(none.value, "no shard holds a call the instance never had")
    }

    func testADeadTokenMarkedOnOneShardIsNotPushedFromAnother() throws {
        let harness = Harness(bindings: [app()], shards: Self.shardCount)
        harness.pusher.refuseAsDead(voip.token)
        harness.placeCall(callID: callID(onShard: 0, of: harness.coordinator))
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 480)
        harness.placeCall(callID: callID(onShard: Self.shardCount - 1, of: harness.coordinator))
        try harness.waitUntil { Set(harness.journeys.calls.filter { $0.outcome == .unanswered }.map(\.callID)).count == 2 }
        XCTAssertEqual(harness.pusher.rings.count, 1, "the dead token is not pushed again from the other shard")
    }
}
