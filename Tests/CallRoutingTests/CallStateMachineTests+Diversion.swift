import CallRouting
import Foundation
import Registrar
import SIPMessage
import SIPProxy
import XCTest

/// Call forwarding in `CallStateMachine` (docs/calls.md "Diversion"), with the manual clock of
/// `CallStateMachineTests`: where the call would have ended with 486, 480 or a 603, it diverts
/// instead, with the rewritten INVITE.
extension CallStateMachineTests {
    var voicemail: SIPURI { try! SIPURI(parsing: "sip:vm1002@pbx.example") }
    var colleague: SIPURI { try! SIPURI(parsing: "sip:1003@example.com") }

    func testBusyDivertsWhenEveryDeviceAnswersBusy() throws {
        bindings = [desk(), deskTCP()]
        var call = machine(diversion: DiversionRules(busy: voicemail))
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&call, .branchSent(0, sent(0)), at: 0)
        _ = step(&call, .branchSent(1, sent(1)), at: 0)
        XCTAssertEqual(signals(&call, .branchResponse(0, response(486, on: 0)), at: 1), ["stop timerC(0)"], "the other still rings")
        let actions = step(&call, .branchResponse(1, response(486, on: 1)), at: 1.5)
        XCTAssertEqual(lines(actions), ["stop timerC(1)", "stop ring", "ended diverted 486", "divert sip:vm1002@pbx.example cause=486"],
                       "no 486 to the caller")
        let order = try XCTUnwrap(call.diverted)
        XCTAssertEqual(order.request.uri.description, "sip:vm1002@pbx.example")
        XCTAssertEqual(order.request.headers["History-Info"],
                       "<sip:1002@example.com?Reason=SIP%3Bcause%3D486>;index=1, <sip:vm1002@pbx.example;cause=486>;index=1.1;mp=1")
        XCTAssertEqual(order.request.maxForwards, 69)
        XCTAssertEqual(order.fallback.statusCode, 486, "what the caller gets if the target cannot be used")
        XCTAssertEqual(order.divertedBy, callee)
        XCTAssertTrue(actions.contains { action in
            if case .record(.diverted(let target, .busy, let why)) = action { return target == "sip:vm1002@pbx.example" && why.hasPrefix("every device refused") }
            return false
        }, "\(facts(actions))")
    }

    func testABusyDeviceAndADeclinedOneAreBusyUnlessDeclineIsBusyIsOff() {
        bindings = [desk(), deskTCP()]
        var call = machine(diversion: DiversionRules(busy: voicemail))
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&call, .branchSent(0, sent(0)), at: 0)
        _ = step(&call, .branchSent(1, sent(1)), at: 0)
        XCTAssertEqual(signals(&call, .branchResponse(0, response(603, on: 0)), at: 1),
                       ["stop timerC(0)", "stop ring", "ended diverted 486", "divert sip:vm1002@pbx.example cause=486"],
                       "a 603 ends the search (§16.7) and counts as busy; the other branch is cancelled once it rings")
        XCTAssertEqual(call.branches[1].cancelWanted, ProxyRules.reason(cause: 603, text: "call forwarded (busy)"))

        var strict = machine(CallSettings(declineIsBusy: false), diversion: DiversionRules(busy: voicemail))
        _ = step(&strict, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&strict, .branchSent(0, sent(0)), at: 0)
        _ = step(&strict, .branchSent(1, sent(1)), at: 0)
        XCTAssertEqual(signals(&strict, .branchResponse(0, response(603, on: 0)), at: 1), ["stop timerC(0)", "respond 603", "stop ring", "ended failed 603"])
        XCTAssertNil(strict.diverted)
    }

    func testAnErrorThatIsNotBusyIsNotABusyDiversion() {
        bindings = [desk(), deskTCP()]
        var call = machine(diversion: DiversionRules(busy: voicemail))
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&call, .branchSent(0, sent(0)), at: 0)
        _ = step(&call, .branchSent(1, sent(1)), at: 0)
        _ = step(&call, .branchResponse(0, response(486, on: 0)), at: 1)
        XCTAssertEqual(signals(&call, .branchResponse(1, response(488, on: 1)), at: 1), ["stop timerC(1)", "respond 486", "stop ring", "ended failed 486"],
                       "one device busy, the other refusing the media: not every branch was busy")
    }

    func testNoAnswerDivertsAfterTheExtensionsOwnRingTime() {
        bindings = [desk()]
        var call = machine(diversion: DiversionRules(noAnswer: colleague, noAnswerAfter: .seconds(20)))
        XCTAssertEqual(signals(&call, .admitted(targets(), tokensPending: false), at: 0),
                       ["start ring +45", "start noAnswer +20", "fork 0 Desk", "start timerC(0) +181"])
        _ = step(&call, .branchSent(0, sent(0)), at: 0)
        _ = step(&call, .branchResponse(0, response(180, on: 0)), at: 0.5)
        XCTAssertEqual(signals(&call, .timerFired(.noAnswer), at: 20), [
            "cancel Desk Reason: SIP;cause=480;text=\"call forwarded (no answer)\"", "stop ring", "ended diverted 408",
            "divert sip:1003@example.com cause=408",
        ])
        XCTAssertEqual(call.diverted?.request.headers["History-Info"],
                       "<sip:1002@example.com?Reason=SIP%3Bcause%3D408>;index=1, <sip:1003@example.com;cause=408>;index=1.1;mp=1")
        XCTAssertEqual(call.diverted?.reason, "no answer within 20 s")
        XCTAssertEqual(signals(&call, .timerFired(.ring), at: 45), [], "over: the ring timer does nothing")
    }

    func testAnAnsweredCallIsNeverDivertedAndStopsItsNoAnswerTimer() {
        bindings = [desk()]
        var call = machine(diversion: DiversionRules(noAnswer: colleague, noAnswerAfter: .seconds(20)))
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&call, .branchSent(0, sent(0)), at: 0)
        XCTAssertEqual(signals(&call, .branchResponse(0, response(200, on: 0)), at: 5),
                       ["stop timerC(0)", "relay 200", "stop noAnswer", "stop ring", "ended answered 200"])
        XCTAssertEqual(signals(&call, .timerFired(.noAnswer), at: 20), [])
        XCTAssertNil(call.diverted)
    }

    func testARingTimeNotShorterThanTheRingTimeoutDivertsAtTheRingTimeout() {
        bindings = [desk()]
        var call = machine(diversion: DiversionRules(noAnswer: colleague, noAnswerAfter: .seconds(60)))
        XCTAssertEqual(signals(&call, .admitted(targets(), tokensPending: false), at: 0), ["start ring +45", "fork 0 Desk", "start timerC(0) +181"])
        _ = step(&call, .branchSent(0, sent(0)), at: 0)
        _ = step(&call, .branchResponse(0, response(180, on: 0)), at: 0.5)
        XCTAssertEqual(signals(&call, .timerFired(.ring), at: 45).suffix(2), ["ended diverted 408", "divert sip:1003@example.com cause=408"])
    }

    func testNothingToWakeOrReachDivertsToTheUnreachableTarget() {
        bindings = [iPhone()]
        var call = machine(diversion: DiversionRules(noAnswer: colleague, unreachable: voicemail))
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&call, .pushAnswered(device: 0, accepted, appID: 1), at: 0.2)
        let actions = step(&call, .timerFired(.wait), at: 8)
        XCTAssertEqual(lines(actions), ["stop wait", "grace iPhone-push until +38", "stop ring", "ended diverted 503", "divert sip:vm1002@pbx.example cause=503"],
                       "never the 480; RFC 4458 cause 503: not reachable")
        XCTAssertEqual(call.diverted?.fallback.statusCode, 480)
        XCTAssertEqual(call.diverted?.fallback.reasonPhrase, "No device woke in time")
    }

    func testWithOnlyANoAnswerTargetAnUnreachableCalleeGoesThereToo() {
        bindings = []
        var call = machine(diversion: DiversionRules(noAnswer: colleague, noAnswerAfter: .seconds(20)))
        let actions = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        XCTAssertEqual(lines(actions), ["start ring +45", "start noAnswer +20", "stop noAnswer", "stop ring", "ended diverted 503",
                                        "divert sip:1003@example.com cause=503"])
    }

    func testUnconditionalForwardingDivertsBeforeAnythingRingsOrIsPushed() {
        bindings = [iPhone(), desk()]
        var call = machine(diversion: DiversionRules(always: voicemail, busy: colleague))
        let actions = step(&call, .admitted(targets(), tokensPending: true), at: 0)
        XCTAssertEqual(lines(actions), ["stop ring", "ended diverted 302", "divert sip:vm1002@pbx.example cause=302"])
        XCTAssertEqual(call.devices.count, 0, "nobody pushed")
        XCTAssertEqual(call.diverted?.request.headers["History-Info"],
                       "<sip:1002@example.com>;index=1, <sip:vm1002@pbx.example;cause=302>;index=1.1;mp=1")
        guard case .ended(let ending) = actions.first(where: { if case .ended = $0 { true } else { false } }) else { return XCTFail() }
        XCTAssertFalse(ending.missed, "a call forwarded before it rang is not a missed call")
    }

    func testTheLoopGuardLetsTheCallEndAsItWouldHave() throws {
        bindings = []
        let entries = (0..<5).map { n in "<sip:\(1000 + n)@example.com;cause=408>;index=1" + String(repeating: ".1", count: n + 1) }
        let text = String(decoding: SIPSerializer.serialize(invite()), as: UTF8.self)
            .replacingOccurrences(of: "Content-Length: 0", with: "History-Info: <sip:999@example.com>;index=1, \(entries.joined(separator: ", "))\r\nContent-Length: 0")
        guard case .request(let looped) = try SIPParser.parse(Array(text.utf8)) else { return XCTFail() }
        var call = machine(diversion: DiversionRules(always: colleague, unreachable: voicemail), invite: looped)
        XCTAssertEqual(call.setup.diversionsSoFar, 5)
        let actions = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        XCTAssertEqual(lines(actions), ["start ring +45", "respond 480 no device is registered and none can be woken by push", "stop ring",
                                        "ended unanswered 480"], "neither the unconditional nor the unreachable forwarding: max_diversions is 5")
        XCTAssertEqual(facts(actions).filter { $0.contains("diversionRefused") }.count, 1, "said once: \(facts(actions))")

        var allowed = machine(CallSettings(maxDiversions: 6), diversion: DiversionRules(always: colleague), invite: looped)
        XCTAssertEqual(lines(step(&allowed, .admitted(targets(), tokensPending: false), at: 0)).last, "divert sip:1003@example.com cause=302")
        XCTAssertEqual(allowed.diverted.map { HistoryInfo.diversionCount(of: $0.request) }, 6)
    }

    func testDevicesDecliningAsBusyOverHTTPDivertLikeA486() {
        bindings = [iPhone(), android()]
        var call = machine(diversion: DiversionRules(busy: voicemail))
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&call, .declined(deviceTag: call.devices[0].tag, .busy), at: 1)
        let actions = step(&call, .declined(deviceTag: call.devices[1].tag, .busy), at: 1.5)
        XCTAssertEqual(lines(actions).last, "divert sip:vm1002@pbx.example cause=486")
        XCTAssertFalse(lines(actions).contains { $0.hasPrefix("respond") }, "\(lines(actions))")
    }
}
