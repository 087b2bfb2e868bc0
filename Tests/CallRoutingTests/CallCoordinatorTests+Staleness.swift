import CallRouting
import Foundation
import Push
import Registrar
import RouseVocabulary
import SIPMessage
import XCTest

/// The coordinator's side of the stale-device rule: it reports each ring push's end once, with
/// whether the call outlasted the wake wait, and a use of the call token; a stale token is left
/// out and the journey says so.
extension CallCoordinatorTests {
    func testAnUnansweredRingPushIsReportedOnceWithTheCallOutlastingTheWait() throws {
        let liveness = MemoryLiveness()
        let harness = Harness(bindings: [app()], settings: CallSettings(wakeWait: .milliseconds(200)), liveness: liveness)
        harness.placeCall()
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 480)
        try harness.waitUntil { !liveness.ends.isEmpty }
        harness.coordinator.drain()
        XCTAssertEqual(liveness.ends.map(\.token), [voip.tokenID])
        XCTAssertEqual(liveness.ends.first?.accepted, true)
        XCTAssertEqual(liveness.ends.first?.outlasted, true)
    }

    func testACallerWhoHangsUpBeforeTheWaitEndsProvesNothingAgainstTheDevice() throws {
        let liveness = MemoryLiveness()
        let harness = Harness(bindings: [app()], settings: CallSettings(wakeWait: .seconds(30)), liveness: liveness)
        harness.placeCall()
        try harness.waitUntil { harness.pusher.rings.count == 1 }
        let handle = try XCTUnwrap(harness.serverHandle)
        harness.coordinator.handleCancel(of: handle, callID: harness.callID, reason: nil)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 487)
        try harness.waitUntil { !liveness.ends.isEmpty }
        XCTAssertEqual(liveness.ends.first?.outlasted, false)
    }

    func testAStaleTokenIsNotPushedAndTheJourneySaysSo() throws {
        let liveness = MemoryLiveness(stale: [voip.tokenID])
        let harness = Harness(bindings: [app()], settings: CallSettings(wakeWait: .milliseconds(200)), liveness: liveness)
        harness.placeCall()
        _ = try harness.waitForCallerResponse { $0 >= 200 }
        let journey = try harness.waitForJourney()
        XCTAssertEqual(harness.pusher.rings, [])
        XCTAssertTrue(journey.events.contains { $0.text.hasPrefix("App not pushed: stale") }, "\(journey.events.map(\.text))")
        XCTAssertEqual(liveness.ends.count, 0)
    }

    func testAUseOfTheCallTokenIsASignOfLife() throws {
        let liveness = MemoryLiveness()
        let signer = CallTokenSigner(secret: Array("call-token-secret".utf8))
        let harness = Harness(bindings: [app()], settings: CallSettings(wakeWait: .seconds(30)), callTokens: signer, liveness: liveness)
        harness.placeCall()
        try harness.waitUntil { harness.pusher.rings.count == 1 }
        let token = try XCTUnwrap(harness.pusher.ringPayloads.first?.callToken)
        guard case .success(let claims) = signer.verify(token) else { return XCTFail("the call token does not verify") }
        let done = expectation(description: "declined")
        harness.coordinator.decline(claims, reason: .declined) { _ in done.fulfill() }
        wait(for: [done], timeout: 10)
        XCTAssertEqual(liveness.signs, [voip.tokenID])
    }

    func testTheWakeWaitEndIsTheCallsOrForALatePushTheShorterWaitFromIt() {
        let settings = CallSettings(wakeWait: .seconds(8), wakeWaitWithDeskPhone: .seconds(3))
        let start = Date(timeIntervalSince1970: 1_000)
        XCTAssertEqual(
            CallCoordinator<FakeSignaling>.wakeWaitEnd(sentAt: start, callWaitDeadline: start + 8, settings: settings).timeIntervalSince1970,
            1_007.95, accuracy: 0.001)
        XCTAssertEqual(
            CallCoordinator<FakeSignaling>.wakeWaitEnd(sentAt: start + 20, callWaitDeadline: start + 8, settings: settings).timeIntervalSince1970,
            1_022.95, accuracy: 0.001)
        XCTAssertEqual(
            CallCoordinator<FakeSignaling>.wakeWaitEnd(sentAt: start, callWaitDeadline: .distantFuture, settings: settings).timeIntervalSince1970,
            1_002.95, accuracy: 0.001)
    }
}

/// What the coordinator reported, in memory; `stale` tokens are said to be stale.
final class MemoryLiveness: DeviceLiveness, @unchecked Sendable {
    // @unchecked: the arrays are only touched under `lock`.
    private let lock = NSLock()
    private let stale: Set<PushTokenID>
    private var reportedEnds: [(token: PushTokenID, accepted: Bool, outlasted: Bool)] = []
    private var reportedSigns: [PushTokenID] = []

    init(stale: Set<PushTokenID> = []) { self.stale = stale }

    var ends: [(token: PushTokenID, accepted: Bool, outlasted: Bool)] { lock.withLock { reportedEnds } }
    var signs: [PushTokenID] { lock.withLock { reportedSigns } }

    func staleTokens(among tokens: [PushTokenID], now: Date) -> Set<PushTokenID> { stale.intersection(tokens) }

    func ringPushEnded(_ token: PushTokenID, pushedAt: Date, accepted: Bool, callOutlastedWakeWait: Bool) {
        lock.withLock { reportedEnds.append((token, accepted, callOutlastedWakeWait)) }
    }

    func signOfLife(_ token: PushTokenID) { lock.withLock { reportedSigns.append(token) } }
}
