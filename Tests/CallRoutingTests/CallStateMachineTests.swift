import CallRouting
import Foundation
import Push
import Registrar
import RouseVocabulary
import SIPMessage
import SIPProxy
import SIPTransaction
import XCTest

/// `CallStateMachine` on its own: events in at chosen moments (a manual clock, no sleeps), the
/// actions asserted in order. One test per case of docs/calls.md. Each action is written as a
/// short line (`respond 180`, `push apns:iphone-voip`, `fork 0 Desk`, `start ring +45`, …); the
/// journey facts are asserted apart (`facts`), since most cases are about what goes on the wire.
final class CallStateMachineTests: XCTestCase {
    typealias Machine = CallStateMachine<Int>

    let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    let callee = AddressOfRecord(number: "1002", domain: "example.com")
    /// The callee's bindings as the registrar holds them now.
    var bindings: [Binding] = []

    // MARK: - The cases of docs/calls.md

    func testAppOnlyWokenByItsPushAnswers() {
        bindings = [iPhone()]
        var call = machine()
        XCTAssertEqual(signals(&call, .admitted(targets(), tokensPending: false), at: 0),
                       ["start ring +45", "respond 180", "push apns:iphone-voip", "start wait +8"])
        XCTAssertEqual(signals(&call, .pushAnswered(device: 0, accepted, appID: 1), at: 0.2), [])

        let back = iPhone(backAt: 1.5)
        bindings = [iPhone(), back]
        var actions = step(&call, .bindingsChanged, at: 1.5)
        XCTAssertEqual(lines(actions), ["fork 0 RouseApp", "start timerC(0) +182.5", "stop wait"])
        XCTAssertEqual(facts(actions), ["woke iPhone-push: woke in 1.5 s", "branch to RouseApp", "wait ended: back RouseApp"])
        XCTAssertEqual(signals(&call, .branchSent(0, sent(0)), at: 1.5), [])
        XCTAssertEqual(signals(&call, .branchResponse(0, response(180, on: 0)), at: 2), ["start timerC(0) +183", "respond 180"])
        actions = step(&call, .branchResponse(0, response(200, on: 0)), at: 3)
        XCTAssertEqual(lines(actions), ["stop timerC(0)", "relay 200", "stop ring", "ended answered 200"])
        XCTAssertTrue(facts(actions).contains("answered by RouseApp after 3 s"), "\(facts(actions))")
        XCTAssertEqual(call.phase, .ended)
    }

    func testAppOnlyThatNeverComesBackEndsWith480WhenTheWaitRunsOut() {
        bindings = [iPhone()]
        var call = machine()
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&call, .pushAnswered(device: 0, accepted, appID: 1), at: 0.2)
        let actions = step(&call, .timerFired(.wait), at: 8)
        XCTAssertEqual(lines(actions), ["stop wait", "respond 480 no device woke in time", "grace iPhone-push until +38", "stop ring",
                                        "ended unanswered 480"])
        XCTAssertTrue(facts(actions).contains("wake settled: no re-register in time"), "\(facts(actions))")
    }

    func testDeskPhoneAndLateAppRingTogetherAndTheDeskPhoneIsCancelled() {
        bindings = [desk(), iPhone()]
        var call = machine()
        XCTAssertEqual(signals(&call, .admitted(targets(), tokensPending: false), at: 0),
                       ["start ring +45", "respond 180", "push apns:iphone-voip", "start wait +3"], "the short wait: a desk phone is registered")
        _ = step(&call, .pushAnswered(device: 0, accepted, appID: 1), at: 0.3)
        XCTAssertEqual(signals(&call, .timerFired(.wait), at: 3), ["stop wait", "fork 0 Desk", "start timerC(0) +184"])
        _ = step(&call, .branchSent(0, sent(0)), at: 3)
        XCTAssertEqual(signals(&call, .branchResponse(0, response(180, on: 0)), at: 3.1), ["start timerC(0) +184.1", "respond 180"])

        // The app is back after the wait: it joins the fork at once (late fork).
        bindings = [desk(), iPhone(), iPhone(backAt: 5)]
        let late = step(&call, .bindingsChanged, at: 5)
        XCTAssertEqual(lines(late), ["fork 1 RouseApp", "start timerC(1) +186"])
        XCTAssertEqual(call.branches[1].isLate, true)
        _ = step(&call, .branchSent(1, sent(1)), at: 5)
        XCTAssertEqual(signals(&call, .branchResponse(1, response(200, on: 1)), at: 6),
                       ["stop timerC(1)", "relay 200", "cancel Desk Reason: SIP;cause=200;text=\"Call completed elsewhere\"", "stop ring",
                        "ended answered 200"])
    }

    func testAnEarlyCancelWithTheCalleeOfflineEndsAtOnceAndTheLateTokenReadPushesNobody() {
        bindings = []
        var call = machine()
        XCTAssertEqual(signals(&call, .admitted(targets(), tokensPending: true), at: 0), ["start ring +45", "start tokenRead +2"],
                       "nothing registered: the call waits for the posted tokens, at most 2 s")
        XCTAssertEqual(signals(&call, .callerCanceled(reason: nil), at: 0.5),
                       ["respond 487", "stop tokenRead", "stop ring", "ended canceled 487"])
        let posted = CallTargets(bindings: [], posted: [PostedToken(channel: fcm("posted-fcm"))], deadTokens: [], reach: reach)
        XCTAssertEqual(signals(&call, .tokensRead(posted, readFailed: false), at: 1), [], "no push for a call that is over")
    }

    func testTheTokenReadThatNeverComesLetsTheCallGoOnAfterItsDeadline() {
        bindings = []
        var call = machine()
        _ = step(&call, .admitted(targets(), tokensPending: true), at: 0)
        let actions = step(&call, .tokensOverdue(targets()), at: 2)
        XCTAssertEqual(lines(actions), ["respond 480 no device is registered and none can be woken by push", "stop ring",
                                        "ended unanswered 480"])
        XCTAssertEqual(facts(actions).first, "posted tokens overdue after 2 s")
    }

    func testACancelRacingA2xxStillRelaysThe2xx() {
        bindings = [desk()]
        var call = machine()
        XCTAssertEqual(signals(&call, .admitted(targets(), tokensPending: false), at: 0), ["start ring +45", "fork 0 Desk", "start timerC(0) +181"])
        _ = step(&call, .branchSent(0, sent(0)), at: 0)
        _ = step(&call, .branchResponse(0, response(180, on: 0)), at: 1)
        XCTAssertEqual(signals(&call, .callerCanceled(reason: nil), at: 2),
                       ["respond 487", "cancel Desk Reason: SIP;cause=487;text=\"caller hung up after 2.0 s\"", "stop ring",
                        "ended canceled 487"])
        // RFC 3261 §16.7 step 5: the 2xx that crossed the CANCEL goes up, so the caller can ACK and BYE it.
        XCTAssertEqual(signals(&call, .branchResponse(0, response(200, on: 0)), at: 2.01), ["stop timerC(0)", "relay 200"])
        XCTAssertEqual(signals(&call, .branchResponse(0, response(200, on: 0)), at: 2.5), ["relay 200"], "a retransmission too")
    }

    func testADeclineOnOneDeviceLeavesTheOtherRinging() throws {
        bindings = [iPhone(), android()]
        var call = machine()
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        XCTAssertEqual(call.devices.count, 2)
        _ = step(&call, .pushAnswered(device: 0, accepted, appID: 1), at: 0.2)
        _ = step(&call, .pushAnswered(device: 1, accepted, appID: 2), at: 0.2)
        let decline = step(&call, .declined(deviceTag: call.devices[0].tag, .declined), at: 1)
        XCTAssertEqual(lines(decline), [], "the other device still rings")
        XCTAssertEqual(facts(decline), ["declined iPhone-push (declined)"])
        XCTAssertEqual(call.status(forDevice: call.devices[0].tag).declinedHere, true)

        bindings = [iPhone(), android(), android(backAt: 2)]
        XCTAssertEqual(signals(&call, .bindingsChanged, at: 2), ["fork 0 Pixel", "start timerC(0) +183", "stop wait"])
        _ = step(&call, .branchSent(0, sent(0)), at: 2)
        XCTAssertEqual(signals(&call, .branchResponse(0, response(200, on: 0)), at: 3), ["stop timerC(0)", "relay 200", "stop ring",
                                                                                         "ended answered 200"],
                       "no cancel push to the iPhone that declined")
    }

    func testEveryDeviceDecliningEndsWith603() {
        bindings = [iPhone(), android()]
        var call = machine()
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&call, .declined(deviceTag: call.devices[0].tag, .declined), at: 1)
        let actions = step(&call, .declined(deviceTag: call.devices[1].tag, .declined), at: 1.5)
        XCTAssertEqual(lines(actions), ["respond 603 Reason: SIP;cause=603;text=\"every device declined\"", "stop wait", "stop ring", "ended failed 603"])
        guard case .ended(let ending) = actions.last else { return XCTFail("\(lines(actions))") }
        XCTAssertEqual(ending.declinedTags.count, 2)
        XCTAssertFalse(ending.missed, "declined is not missed")
    }

    func testEveryDeviceBusyEndsWith486AndIsAMissedCall() {
        bindings = [iPhone(), android()]
        var call = machine()
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&call, .declined(deviceTag: call.devices[0].tag, .busy), at: 1)
        let actions = step(&call, .declined(deviceTag: call.devices[1].tag, .busy), at: 1.5)
        XCTAssertEqual(lines(actions).first, "respond 486 Reason: SIP;cause=486;text=\"every device is busy\"")
        XCTAssertEqual(call.missed, true)
    }

    func testARefusedPushEndsTheWaitAtOnceWithTheProvidersWordsAndMarksTheTokenDead() {
        bindings = [iPhone()]
        var call = machine()
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        let refused = PushOutcome(result: .refused(status: 410, reason: "Unregistered", explanation: "the token is no longer valid"),
                                  latency: .milliseconds(40), isDeadToken: true)
        let actions = step(&call, .pushAnswered(device: 0, refused, appID: 1), at: 0.04)
        XCTAssertEqual(lines(actions), ["dead apns:iphone-voip", "stop wait", "respond 480 push refused: the token is no longer valid", "stop ring", "ended unanswered 480"],
                       "no 8 s wait for a device whose push was refused")
        XCTAssertEqual(facts(actions).prefix(2), ["push iPhone-push refused", "wait ended: every push failed"])
    }

    func testAStalledProviderNeverHoldsTheCallAndItsLateAnswerIsStillRecorded() {
        bindings = [desk(), android()]
        var call = machine()
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        // The push is never answered; the short wait still ends, the desk phone rings.
        XCTAssertEqual(signals(&call, .timerFired(.wait), at: 3), ["stop wait", "fork 0 Desk", "start timerC(0) +184"])
        _ = step(&call, .branchSent(0, sent(0)), at: 3)
        _ = step(&call, .branchResponse(0, response(180, on: 0)), at: 3.1)
        XCTAssertEqual(signals(&call, .timerFired(.ring), at: 45),
                       ["respond 480 no answer within 45 s", "cancel Desk Reason: SIP;cause=480;text=\"no answer within 45 s\"",
                        "end-push Pixel cancel=timeout missed=no_answer", "stop ring", "ended unanswered 480"],
                       "the pushed phone is told to stop, and of the missed call: its push may still get through")
        let late = step(&call, .pushAnswered(device: 0, accepted, appID: 2), at: 50)
        XCTAssertEqual(lines(late), [])
        XCTAssertEqual(facts(late), ["push Pixel accepted no re-register in time"])
    }

    func testAVoIPOnlyiPhoneIsKeptForItsCancelGraceWhenTheCallEndsBeforeItIsBack() {
        bindings = [iPhone()]
        var call = machine()
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&call, .pushAnswered(device: 0, accepted, appID: 1), at: 0.2)
        let actions = step(&call, .callerCanceled(reason: nil), at: 2)
        XCTAssertEqual(lines(actions), ["respond 487", "grace iPhone-push until +32", "stop wait", "stop ring", "ended canceled 487"],
                       "never a second VoIP push")
        guard let grace = actions.lazy.compactMap({ action -> GraceDevice? in
            if case .graceDevice(let grace) = action { return grace } else { return nil }
        }).first else { return XCTFail("\(lines(actions))") }
        XCTAssertEqual(grace.reason, "SIP;cause=487;text=\"caller hung up\"")
        // Back after the end: the machine is done with it (the coordinator sends the INVITE and CANCEL).
        bindings = [iPhone(), iPhone(backAt: 10)]
        XCTAssertEqual(signals(&call, .bindingsChanged, at: 10), [])
    }

    func testAPushAnsweredAfterTheCallersCancelSettlesAsCallEndedNotAsNotInTime() {
        bindings = [iPhone()]
        var call = machine()
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&call, .callerCanceled(reason: nil), at: 0.1)
        let late = step(&call, .pushAnswered(device: 0, accepted, appID: 1), at: 0.3)
        XCTAssertEqual(facts(late), ["push iPhone-push accepted call ended before the device came back"],
                       "the provider answered after the CANCEL: the call ended, the device was not late")
    }

    func testAMissedCallAfterACancelMoreThan30sInTellsTheRingingAppItsReason() {
        bindings = [android()]
        var call = machine(CallSettings(ringTimeout: .seconds(120)))
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&call, .pushAnswered(device: 0, accepted, appID: 2), at: 0.2)
        bindings = [android(), android(backAt: 1)]
        _ = step(&call, .bindingsChanged, at: 1)
        _ = step(&call, .branchSent(0, sent(0)), at: 1)
        _ = step(&call, .branchResponse(0, response(180, on: 0)), at: 1.2)
        // The caller gives up 35 s in, past the cancel grace: the app rings over SIP, so its SIP
        // CANCEL stops it, and the missed-call notice says the caller hung up.
        XCTAssertEqual(signals(&call, .callerCanceled(reason: nil), at: 35),
                       ["respond 487", "cancel Pixel Reason: SIP;cause=487;text=\"caller hung up after 35.0 s\"", "end-push Pixel cancel=- missed=caller_hangup",
                        "stop ring", "ended canceled 487"])
    }

    func testTimerCCancelsABranchThatRangTooLongAndItsAnswerCountsAs408() {
        bindings = [desk()]
        var call = machine(CallSettings(ringTimeout: .seconds(600)))
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&call, .branchSent(0, sent(0)), at: 0)
        XCTAssertEqual(signals(&call, .branchResponse(0, response(180, on: 0)), at: 1), ["start timerC(0) +182", "respond 180"])
        XCTAssertEqual(signals(&call, .timerFired(.timerC(branch: 0)), at: 182),
                       ["cancel Desk Reason: SIP;cause=408;text=\"no final answer within 181 s (Timer C)\""])
        XCTAssertEqual(signals(&call, .branchResponse(0, response(487, on: 0)), at: 182.1),
                       ["stop timerC(0)", "respond 480 no device answered", "stop ring", "ended unanswered 480"],
                       "the caller never sees the 487 Rouse caused")
    }

    func testTimerCAfterTheCallersCancelSendsNoSecondCancelAndFreesASilentBranch() {
        bindings = [desk(), deskTCP()]
        var call = machine()
        _ = step(&call, .admitted(targets(), tokensPending: false), at: 0)
        _ = step(&call, .branchSent(0, sent(0)), at: 0)
        _ = step(&call, .branchSent(1, sent(1)), at: 0)
        _ = step(&call, .branchResponse(1, response(180, on: 1)), at: 1)
        // Branch 0 never answered at all: its CANCEL waits for a provisional (RFC 3261 §9.1).
        XCTAssertEqual(signals(&call, .callerCanceled(reason: nil), at: 2),
                       ["respond 487", "cancel DeskTCP Reason: SIP;cause=487;text=\"caller hung up after 2.0 s\"", "stop ring",
                        "ended canceled 487"])
        XCTAssertEqual(signals(&call, .timerFired(.timerC(branch: 0)), at: 181), [], "taken as 408: nothing to send")
        XCTAssertEqual(call.branches[0].final, 408)
        XCTAssertEqual(signals(&call, .timerFired(.timerC(branch: 1)), at: 182), [], "its CANCEL went already")
        XCTAssertEqual(call.branches[1].cancelSent, true)
    }

    func testAFlowThatFailsMovesTheBranchToTheDevicesNextFlow() {
        var udp = android(backAt: -10)
        udp.flow = BindingFlow(transport: .udp, source: SocketAddress(parsing: "192.0.2.7:5060"), connectionID: FlowConnectionID("udp#0"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "i")
        udp.contact = "sip:pixel@192.0.2.7:5060"
        udp.pushChannels = []
        var tcp = android(backAt: -5)
        tcp.pushChannels = []
        bindings = [tcp, udp]
        var call = machine()
        XCTAssertEqual(signals(&call, .admitted(targets(), tokensPending: false), at: 0), ["start ring +45", "fork 0 Pixel", "start timerC(0) +181"],
                       "one INVITE, over the open connection")
        _ = step(&call, .branchSent(0, sent(0)), at: 0)
        XCTAssertEqual(signals(&call, .branchResponse(0, response(430, on: 0)), at: 0.1), ["stop timerC(0)", "fork 1 Pixel", "start timerC(1) +181.1"])
        XCTAssertEqual(call.branches[1].binding.flow.transport.rawValue, "udp")
    }

    // MARK: - Fixtures

    var accepted: PushOutcome { PushOutcome(result: .accepted(providerID: nil), latency: .milliseconds(30)) }

    func machine(_ settings: CallSettings = CallSettings(), diversion: DiversionRules? = nil, invite: SIPRequest? = nil) -> Machine {
        Machine(.init(
            invite: invite ?? self.invite(), callee: callee, arrivedAt: t0, toTag: "rouse", serverName: "Rouse/test", settings: settings,
            diversion: diversion))
    }

    func at(_ seconds: TimeInterval) -> Date { t0.addingTimeInterval(seconds) }

    func reach(_ binding: Binding) -> BindingReach {
        if binding.flow.transport == .udp { return .datagram }
        return binding.flow.connectionID.name == "gone" ? .gone : .connected
    }

    func view() -> Machine.CalleeView {
        let now = bindings
        return Machine.CalleeView(bindings: { now }, reach: reach)
    }

    func targets() -> CallTargets {
        CallTargets(bindings: bindings, posted: [], deadTokens: [], reach: reach)
    }

    /// Hands `event` to the machine at `seconds` after the INVITE; notes where its forks went.
    func step(_ call: inout Machine, _ event: CallEvent<Int>, at seconds: TimeInterval) -> [CallAction<Int>] {
        let actions = call.handle(event, at: at(seconds), callee: view())
        for case .fork(let index, _, let binding) in actions { forked[index] = binding.contact }
        return actions
    }

    func signals(_ call: inout Machine, _ event: CallEvent<Int>, at seconds: TimeInterval) -> [String] {
        lines(step(&call, event, at: seconds))
    }

    func invite() -> SIPRequest {
        let text = "INVITE sip:1002@example.com SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKcall1\r\n"
            + "Max-Forwards: 70\r\nFrom: \"Alice\" <sip:1001@example.com>;tag=a\r\nTo: <sip:1002@example.com>\r\n"
            + "Call-ID: call-1@192.0.2.1\r\nCSeq: 1 INVITE\r\nContact: <sip:1001@192.0.2.1>\r\nContent-Length: 0\r\n\r\n"
        guard case .request(let request) = try? SIPParser.parse(Array(text.utf8)) else { fatalError("bad INVITE") }
        return request
    }

    /// The branch INVITE as sent: the machine's request with a Via of Rouse's.
    func sent(_ branch: Int) -> SentRequest<Int> {
        var request = ProxyRules.branchRequest(from: invite(), to: try! SIPURI(parsing: forked[branch] ?? "sip:unforked@192.0.2.9"))
        request.headers.prepend(.via, "SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKbranch\(branch)")
        return SentRequest(request, over: branch)
    }

    /// The contact each branch went to, by index (from the fork actions).
    private var forked: [Int: String] = [:]

    func response(_ status: Int, on branch: Int) -> ClientTransactionEvent {
        let request = sent(branch).request
        var response = SIPResponse(replyingTo: request, statusCode: status, toTag: "phone\(branch)")
        response.headers.set(.via, request.headers.lines(.via).joined(separator: ", "))
        return .response(response)
    }

    func desk() -> Binding {
        Binding(
            aor: callee, contact: "sip:desk@192.0.2.5:5060", callID: "d", cseq: 1, registeredAt: t0.addingTimeInterval(-300),
            expiresAt: t0.addingTimeInterval(600), userAgent: "Desk",
            flow: BindingFlow(transport: .udp, source: SocketAddress(parsing: "192.0.2.5:5060"), connectionID: FlowConnectionID("udp#0"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "i"))
    }

    func deskTCP() -> Binding {
        Binding(
            aor: callee, contact: "sip:desk2@192.0.2.8:5060;transport=tcp", callID: "d2", cseq: 1, registeredAt: t0.addingTimeInterval(-300),
            expiresAt: t0.addingTimeInterval(600), userAgent: "DeskTCP",
            flow: BindingFlow(transport: .tcp, source: SocketAddress(parsing: "192.0.2.8:40000"), connectionID: FlowConnectionID("tcp#8"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "i"))
    }

    /// An iPhone known only by its VoIP token, asleep (its connection gone); `backAt`: its fresh
    /// REGISTER that many seconds after the INVITE, over a new connection.
    func iPhone(backAt: TimeInterval? = nil) -> Binding {
        app(user: "iphone", instance: "<urn:uuid:iphone>", agent: "RouseApp", channel: PushChannel(provider: .apns, token: "iphone-voip", param: nil, kind: .voip),
            backAt: backAt, stableID: UUID(uuidString: "00000000-0000-0000-0000-0000000000a1")!)
    }

    func android(backAt: TimeInterval? = nil) -> Binding {
        app(user: "pixel", instance: "<urn:uuid:pixel>", agent: "Pixel", channel: fcm("pixel-fcm"), backAt: backAt,
            stableID: UUID(uuidString: "00000000-0000-0000-0000-0000000000b1")!)
    }

    func fcm(_ token: String) -> PushChannel { PushChannel(provider: .fcm, token: token, param: "p", kind: .standard) }

    private func app(user: String, instance: String, agent: String, channel: PushChannel, backAt: TimeInterval?, stableID: UUID) -> Binding {
        var binding = Binding(
            aor: callee, contact: "sip:\(user)@192.0.2.6:5060;transport=tcp", instance: instance, callID: user, cseq: 1,
            registeredAt: t0.addingTimeInterval(backAt ?? -60), expiresAt: t0.addingTimeInterval(600), userAgent: agent,
            flow: BindingFlow(transport: .tcp, source: SocketAddress(parsing: "192.0.2.6:40000"), connectionID: FlowConnectionID(backAt == nil ? "gone" : "tcp#\(user)\(backAt!)"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "i"),
            pushChannels: [channel])
        binding.id = backAt == nil ? stableID : UUID()
        return binding
    }

    // MARK: - Actions as lines

    func lines(_ actions: [CallAction<Int>]) -> [String] {
        actions.compactMap { action -> String? in
            switch action {
            case .respond(let response):
                if response.statusCode == 487 || response.statusCode == 180 { return "respond \(response.statusCode)" }
                if let reason = response.headers[.reason], response.statusCode != 480 { return "respond \(response.statusCode) Reason: \(reason)" }
                return "respond \(response.statusCode)" + (response.statusCode == 480 ? " " + lowercasedFirst(response.reasonPhrase) : "")
            case .relay2xx(let response): return "relay \(response.statusCode)"
            case .push(let order): return "push \(order.channel.tokenID.key)"
            case .endOfCallPush(let order):
                return "end-push \(order.device) cancel=\(order.cancelReason?.rawValue ?? "-") missed=\(order.missedReason ?? "-")"
            case .fork(let index, _, let binding): return "fork \(index) \(binding.userAgent ?? "?")"
            case .cancel(let cancel, _):
                let name = bindings.first { $0.contact.hasPrefix("sip:\(cancel.uri.user ?? "")@") }?.userAgent ?? cancel.uri.description
                return "cancel \(name) Reason: \(cancel.headers[.reason] ?? "-")"
            case .startTimer(let timer, let deadline): return "start \(name(of: timer)) +\(seconds(deadline.timeIntervalSince(t0)))"
            case .stopTimer(let timer): return "stop \(name(of: timer))"
            case .record: return nil
            case .markDead(let token): return "dead \(token.key)"
            case .graceDevice(let grace): return "grace \(label(grace.device.name)) until +\(seconds(grace.until.timeIntervalSince(t0)))"
            case .ended(let ending): return "ended \(ending.outcome.rawValue) \(ending.finalStatus)"
            case .divert(let order): return "divert \(order.target) cause=\(order.cause.rawValue)"
            }
        }
    }

    /// The journey facts among `actions`, in short words.
    func facts(_ actions: [CallAction<Int>]) -> [String] {
        actions.compactMap { action -> String? in
            guard case .record(let fact) = action else { return nil }
            switch fact {
            case .woke(_, let device, let wake): return "woke \(label(device)): \(wake.words)"
            case .waitEnded(.back(let names)): return "wait ended: back \(names.joined(separator: ", "))"
            case .waitEnded(.because(let why)): return "wait ended: \(why)"
            case .waitEnded(.nobodyBack): return "wait ended: nobody back"
            case .answered(let device, let after): return "answered by \(device) after \(seconds(after)) s"
            case .declined(let device, let reason): return "declined \(label(device)) (\(reason.rawValue))"
            case .pushAnswered(let push): return "push \(label(push.device)) \(push.outcome)" + (push.outcome == "accepted" ? " \(push.wake.words)" : "")
            case .wakeSettled(_, let wake): return "wake settled: \(wake.words)"
            case .tokensOverdue(let after): return "posted tokens overdue after \(seconds(after.timeInterval)) s"
            case .branchStarted(let branch): return "branch to \(branch.device)" + (branch.isLateFork ? " (late)" : "")
            default: return "\(fact)"
            }
        }
    }

    /// The iPhone's device name is its user agent; written `iPhone-push` so lines say which device.
    private func label(_ device: String) -> String { device == "RouseApp" ? "iPhone-push" : device }

    private func name(of timer: CallTimer) -> String {
        switch timer {
        case .ring: return "ring"
        case .noAnswer: return "noAnswer"
        case .wait: return "wait"
        case .tokenRead: return "tokenRead"
        case .timerC(let branch): return "timerC(\(branch))"
        }
    }

    private func seconds(_ value: TimeInterval) -> String {
        value == value.rounded() ? "\(Int(value))" : String(format: "%g", (value * 1000).rounded() / 1000)
    }

    private func lowercasedFirst(_ text: String) -> String { text.prefix(1).lowercased() + text.dropFirst() }
}
