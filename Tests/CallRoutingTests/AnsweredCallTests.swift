import CallRouting
import Foundation
import Push
import Registrar
import RouseVocabulary
import SIPMessage
import XCTest

/// Issue 20 item 3: what the pushes of a call say (display names, the end-of-call timestamp), and
/// `AnsweredCall`, the `call.ended` push to a device whose answered call's BYE cannot reach it,
/// driven with a manual clock (the `CallStateMachineTests` fixtures).
extension CallStateMachineTests {
    func testTheRingPushNamesTheCalleeAndTheCallingExtensionWhenTheFromHasNoName() throws {
        bindings = [android()]
        var named = Machine(.init(
            invite: invite(), callee: callee, arrivedAt: t0, toTag: "rouse", serverName: "Rouse/test", settings: CallSettings(),
            calleeName: "Bob Example", callerExtensionName: "Alice from the directory"))
        let ring = try XCTUnwrap(ringPush(step(&named, .admitted(targets(), tokensPending: false), at: 0)))
        XCTAssertEqual(ring.calleeName, "Bob Example")
        XCTAssertEqual(ring.callerName, "Alice", "the From's own display name wins, as Kamailio and Flexisip pass it on")

        var anonymous = Machine(.init(
            invite: invite(from: "<sip:1001@example.com>;tag=a"), callee: callee, arrivedAt: t0, toTag: "rouse", serverName: "Rouse/test",
            settings: CallSettings(), calleeName: "Bob Example", callerExtensionName: "Alice from the directory"))
        let second = try XCTUnwrap(ringPush(step(&anonymous, .admitted(targets(), tokensPending: false), at: 0)))
        XCTAssertEqual(second.callerName, "Alice from the directory")
        XCTAssertEqual(PushPayload.ring(second).value("callee_name"), "Bob Example")

        var unnamed = machine(invite: invite(from: "<sip:1001@example.com>;tag=a"))
        let third = try XCTUnwrap(ringPush(step(&unnamed, .admitted(targets(), tokensPending: false), at: 0)))
        XCTAssertNil(third.callerName)
        XCTAssertNil(PushPayload.ring(third).value("callee_name"), "no display name, no key")
    }

    func testACancelPushIsStampedWhenTheCallEndedNotWhenItRang() throws {
        bindings = [android()]
        var call = machine()
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&call, .pushAnswered(device: 0, accepted, appID: 2), at: 0.2)
        let actions = step(&call, .callerCanceled(reason: nil), at: 4)
        let order = try XCTUnwrap(actions.lazy.compactMap { action -> EndOfCallPush? in
            if case .endOfCallPush(let order) = action { return order } else { return nil }
        }.first)
        XCTAssertEqual(order.cancelReason, .callerHangup)
        XCTAssertEqual(order.content.timestamp, at(4))
    }

    func testAnAndroidThatAnsweredIsToldTheCallEndedWhenTheCallersBYECannotReachIt() throws {
        let answer = answeredByItsOnlyDevice(android)
        let device = try XCTUnwrap(ending(answer)?.answeredDevice)
        XCTAssertEqual(device.channel, fcm("pixel-fcm"))
        XCTAssertEqual(device.callee, callee)

        var talk = AnsweredCall(device: device)
        XCTAssertEqual(talk.handle(.byeUnreachable(status: 430), at: at(20)), [], "no BYE passed yet: nothing to say")
        XCTAssertEqual(talk.handle(.byeForwarded(fromCallee: false), at: at(60)), [.forget(at: at(60 + AnsweredCall.byeOutcomeWait))])
        let actions = talk.handle(.byeUnreachable(status: 430), at: at(60.5))
        XCTAssertEqual(actions.count, 2)
        guard case .push(let push) = actions.first else { return XCTFail("\(actions)") }
        XCTAssertEqual(actions.last, .forget(at: at(60.5)))
        XCTAssertEqual(push.channel, fcm("pixel-fcm"))
        XCTAssertEqual(push.reason, .callerHangup)
        XCTAssertEqual(push.status, 430)
        XCTAssertEqual(push.content.timestamp, at(60.5))
        XCTAssertEqual(push.expiresAt, at(60.5 + AnsweredCall.endedPushLifetime))
        let payload = PushPayload.cancel(push.content, event: .ended, reason: push.reason.rawValue)
        XCTAssertEqual(payload.data.map(\.key), ["event", "call_id", "uuid", "reason", "timestamp"])
        XCTAssertEqual(payload.value("event"), "call.ended")
        XCTAssertEqual(payload.value("call_id"), "call-1@192.0.2.1")
        XCTAssertEqual(payload.value("reason"), "caller_hangup")
        XCTAssertEqual(talk.handle(.byeUnreachable(status: 408), at: at(61)), [], "one call.ended, even when the BYE fails twice")
    }

    func testNoCallEndedWhenTheDeviceHungUpItselfOrTheFailureComesAfterTheBYEsTransaction() throws {
        let device = AnsweredDevice(
            device: "Pixel", callee: callee, channel: fcm("pixel-fcm"),
            content: CallPushContent(callID: "call-1@192.0.2.1", callerNumber: "1001", calleeNumber: "1002", ringTimeoutSeconds: 8, timestamp: t0))
        var hungUpHere = AnsweredCall(device: device)
        XCTAssertEqual(hungUpHere.handle(.byeForwarded(fromCallee: true), at: at(30)), [.forget(at: at(30))])

        var late = AnsweredCall(device: device)
        _ = late.handle(.byeForwarded(fromCallee: nil), at: at(30))
        XCTAssertEqual(late.handle(.byeUnreachable(status: 408), at: at(30 + AnsweredCall.byeOutcomeWait + 1)), [])
        XCTAssertEqual(late.handle(.byeUnreachable(status: 408), at: at(30 + 32)).count, 2, "Timer F's 408, 32 s after the BYE, still counts")
    }

    func testAVoIPOnlyiPhoneThatAnsweredIsNeverSentCallEnded() {
        let answer = answeredByItsOnlyDevice(iPhone)
        XCTAssertEqual(ending(answer)?.outcome, .answered)
        XCTAssertNil(ending(answer)?.answeredDevice, "its only token is VoIP, and a second VoIP push shows a new call")
    }

    func testTheDeviceStillAsleepWhenAnotherAnswersGetsCanceledAnsweredElsewhere() {
        bindings = [desk(), android()]
        var call = machine()
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&call, .pushAnswered(device: 0, accepted, appID: 2), at: 0.2)
        _ = step(&call, .timerFired(.wait), at: 3)
        _ = step(&call, .branchSent(0, sent(0)), at: 3)
        let actions = step(&call, .branchResponse(0, response(200, on: 0)), at: 5)
        XCTAssertTrue(lines(actions).contains("end-push Pixel cancel=answered_elsewhere missed=-"), "\(lines(actions))")
        XCTAssertNil(ending(actions)?.answeredDevice, "the desk phone answered: no push channel")
    }

    // MARK: - Helpers

    /// A call to the callee whose one app (`app(nil)` asleep, `app(1)` back 1 s in) is pushed,
    /// comes back and answers 3 s in: the actions of its 200.
    func answeredByItsOnlyDevice(_ app: (TimeInterval?) -> Binding) -> [CallAction<Int>] {
        bindings = [app(nil)]
        var call = machine()
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&call, .pushAnswered(device: 0, accepted, appID: 1), at: 0.2)
        bindings = [app(nil), app(1)]
        _ = step(&call, .bindingsChanged, at: 1)
        _ = step(&call, .branchSent(0, sent(0)), at: 1)
        return step(&call, .branchResponse(0, response(200, on: 0)), at: 3)
    }

    func ringPush(_ actions: [CallAction<Int>]) -> CallPushContent? {
        actions.lazy.compactMap { action -> CallPushContent? in
            if case .push(let order) = action { return order.content } else { return nil }
        }.first
    }

    func ending(_ actions: [CallAction<Int>]) -> CallEnding? {
        actions.lazy.compactMap { action -> CallEnding? in
            if case .ended(let ending) = action { return ending } else { return nil }
        }.first
    }

    func invite(from: String) -> SIPRequest {
        var request = invite()
        request.headers.set(.from, from)
        return request
    }
}
