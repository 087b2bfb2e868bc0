public import Foundation
public import Push
public import Registrar
public import RouseVocabulary
public import SIPMessage
import SIPProxy
public import SIPTransaction

/// The wake-then-ring logic of one call (product.md "What happens on a call"), as a value: events
/// go in with the time, actions come out (answer the caller, push a device, fork, cancel a branch,
/// start or stop a timer, record a fact). It never reads the clock, arms a timer or touches a
/// socket; `CallCoordinator` is the shell that does, and keeps what spans calls (the live calls of
/// each callee, dead tokens, VoIP-only iPhones in their cancel grace, answered calls).
///
/// Threading: a value; the coordinator keeps each call's machine on its queue.
public struct CallStateMachine<Flow: Hashable & Sendable>: Sendable {
    /// Where the call stands.
    public enum Phase: Sendable, Equatable {
        /// Admitted; waiting for the posted tokens of a callee with nothing registered.
        case starting
        /// Devices pushed; waiting for a woken app to register again (ringback plays).
        case waiting
        /// Forked to what can ring; late-comers join.
        case ringing
        /// Answered or ended: only late responses and push answers still arrive.
        case ended
    }

    /// What a call is given when it is admitted; fixed for its life.
    public struct Setup: Sendable {
        /// Rouse's id of the call (its journey's and call tokens' id).
        public var id: UUID
        public var invite: SIPRequest
        public var callee: AddressOfRecord
        public var arrivedAt: Date
        /// The To tag of Rouse's own answers (180 ringback, 480, 487, …).
        public var toTag: String
        public var serverName: String
        public var settings: CallSettings
        /// The callee's call forwarding, if any.
        public var diversion: DiversionRules?
        /// How many times the INVITE was diverted before it came here (its History-Info and
        /// Diversion entries): the loop guard's count.
        public var diversionsSoFar: Int
        /// The callee extension's display name: the ring push's `callee_name`.
        public var calleeName: String?
        /// The display name of the extension that authenticated the INVITE: the ring push's
        /// `caller_name` when the From has none (a trusted peer's From is never looked up).
        public var callerExtensionName: String?

        public init(
            id: UUID = UUID(), invite: SIPRequest, callee: AddressOfRecord, arrivedAt: Date, toTag: String, serverName: String, settings: CallSettings,
            diversion: DiversionRules? = nil, calleeName: String? = nil, callerExtensionName: String? = nil
        ) {
            self.calleeName = calleeName
            self.callerExtensionName = callerExtensionName
            self.id = id
            self.invite = invite
            self.callee = callee
            self.arrivedAt = arrivedAt
            self.toTag = toTag
            self.serverName = serverName
            self.settings = settings
            self.diversion = diversion?.isEmpty == false ? diversion : nil
            diversionsSoFar = HistoryInfo.diversionCount(of: invite)
        }
    }

    /// A pushed device of the call.
    public struct Device: Sendable, Equatable {
        public var device: WakeDevice
        /// Its push record's id.
        public let pushID: UUID
        /// The device part of its call token.
        public let tag: String
        public var sentAt: Date?
        /// The provider has answered its ring push.
        public var answered = false
        public var accepted = false
        public var wake = WakeResult.pending
        /// Its bindings registered since the push (the woken app's flows).
        public var returnedBindings: Set<UUID> = []
        /// Declined from the device (over HTTP, with its call token).
        public var declined: DeclineReason?

        init(_ device: WakeDevice, pushID: UUID) {
            self.device = device
            self.pushID = pushID
            tag = CallTokenSigner.deviceTag(device.id)
        }
    }

    /// One branch of the fork: the INVITE sent to one flow of a device.
    public struct Branch: Sendable {
        /// A branch's binding and the flow it went over (a binding that registered again from a
        /// new connection is a new branch).
        struct Key: Hashable, Sendable {
            var bindingID: UUID
            var flow: FlowConnectionID
            var instance: String

            init(_ binding: Binding) {
                bindingID = binding.id
                flow = binding.flow.connectionID
                instance = binding.flow.instanceID
            }
        }

        let key: Key
        public let binding: Binding
        /// Added after the fork began (a woken device that came back late).
        public let isLate: Bool
        /// The device as people know it.
        public let deviceName: String
        /// The request as sent and the flow it went over, once the send is known.
        public var sent: SIPRequest?
        public var flow: Flow?
        var recordedResponse = false
        public var gotProvisional = false
        public var final: Int?
        /// Rouse wants it cancelled, with this RFC 3326 Reason (sent once a provisional came, §9.1).
        public var cancelWanted: String?
        public var cancelSent = false
        /// Cancelled because its device declined over HTTP: the answer it stands for.
        var declinedAs: (status: Int, phrase: String)?
        /// Its flow failed (RFC 5626 §5.3): it does not keep the device's other flows from the call.
        public var flowFailed = false
        /// Timer C fired after a provisional: Rouse cancelled it, and its final answer counts as 408.
        public var timedOut = false
    }

    /// The callee's bindings now and how the SIP side can reach each, asked only when a decision
    /// needs them.
    public struct CalleeView {
        let bindings: () -> [Binding]
        let reach: (Binding) -> BindingReach

        public init(bindings: @escaping () -> [Binding], reach: @escaping (Binding) -> BindingReach) {
            self.bindings = bindings
            self.reach = reach
        }
    }

    /// A call token lives until the call can no longer ring, plus this margin (issue 11).
    public static var callTokenMargin: TimeInterval { 60 }

    public let setup: Setup
    public private(set) var phase = Phase.starting
    public private(set) var devices: [Device] = []
    public private(set) var branches: [Branch] = []
    public private(set) var answered = false
    /// The call ended unanswered (no device in time), not canceled, declined or answered: a push
    /// answered after the end settles its wake as "not in time" only then, as `close` does.
    private var endedUnanswered = false
    /// The ring timer's deadline: `ring_timeout` from the INVITE's arrival.
    public let ringDeadline: Date
    public private(set) var waitDeadline = Date.distantFuture
    /// The extension is told of a missed call when this call ends.
    public private(set) var missed = false
    private var targets: CallTargets?
    private var content: CallPushContent
    private var selector = ForkResponseSelector()
    private var pushFailures: [String] = []
    /// The posted tokens and dead marks have been read (or could not be).
    private var tokensRead = false
    private var tokenTimerArmed = false
    private var waitTimerArmed = false
    private var answeredByTag: String?
    /// The pushed device that answered, when it has a regular channel.
    private var answeredDevice: AnsweredDevice?
    private var noAnswerTimerArmed = false
    /// The loop guard kept a diversion from happening (said once in the journey).
    private var loopGuardNoted = false
    /// Where the call was diverted, once it was.
    public private(set) var diverted: DiversionOrder?
    /// The actions of the event being handled.
    private var out: [CallAction<Flow>] = []

    public init(_ setup: Setup) {
        self.setup = setup
        ringDeadline = setup.arrivedAt.addingTimeInterval(setup.settings.ringTimeout.timeInterval)
        content = CallPushContent(callID: setup.invite.callID ?? "", callerNumber: "", calleeNumber: setup.callee.number, ringTimeoutSeconds: 0)
    }

    /// Handles one event at `now`; returns what to do, in order.
    public mutating func handle(_ event: CallEvent<Flow>, at now: Date, callee: CalleeView) -> [CallAction<Flow>] {
        out = []
        switch event {
        case .admitted(let registered, let tokensPending): admitted(registered, tokensPending: tokensPending, now, callee)
        case .tokensRead(let complete, let readFailed): tokensArrived(complete, readFailed: readFailed, now, callee)
        case .tokensOverdue(let registered): tokensOverdue(registered, now, callee)
        case .pushAnswered(let device, let outcome, let appID): pushAnswered(device, outcome, appID, now, callee)
        case .bindingsChanged: deviceMayBeBack(now, callee)
        case .branchSent(let index, let result): branchSent(index, result, now, callee)
        case .branchResponse(let index, let event): branchResponse(index, event, now, callee)
        case .timerFired(.ring): ringTimedOut(now)
        case .timerFired(.noAnswer): noAnswerTimedOut(now)
        case .timerFired(.wait): waitEnded(because: nil, now, callee)
        case .timerFired(.tokenRead): break  // the shell turns it into `tokensOverdue` with the bindings of now
        case .timerFired(.timerC(let branch)): timerCFired(branch, now, callee)
        case .callerCanceled(let reason): callerCanceled(reason, now)
        case .declined(let tag, let reason): declined(tag, reason, now, callee)
        case .stopping(let reason): stopping(reason, now)
        }
        defer { out = [] }
        return out
    }

    /// How the call looks to the device whose call token carries `tag`, while it rings.
    public func status(forDevice tag: String) -> CallStatus {
        let declinedHere = devices.contains { $0.tag == tag && $0.declined != nil }
        return CallStatus(state: .ringing, reason: declinedHere ? "declined on this device" : nil, declinedHere: declinedHere)
    }

    // MARK: - Starting

    private mutating func admitted(_ registered: CallTargets, tokensPending: Bool, _ now: Date, _ callee: CalleeView) {
        if divert(.unconditional, fallback: .unavailable("call forwarding failed"), reason: "forwarded before ringing", pushReason: .timeout, now) {
            return
        }
        // The ring timer runs from the INVITE's arrival, whatever the start still waits for.
        out.append(.startTimer(.ring, at: ringDeadline))
        if let deadline = setup.diversion?.noAnswerDeadline(arrivedAt: setup.arrivedAt, ringTimeout: setup.settings.ringTimeout) {
            noAnswerTimerArmed = true
            out.append(.startTimer(.noAnswer, at: deadline))
        }
        guard tokensPending else {
            tokensRead = true
            start(registered, now, callee)
            return
        }
        // The registered devices are pushed (or rung) at once; posted tokens and dead marks join
        // the call when they arrive. Only a callee with nothing registered waits for that read,
        // and at most `tokenReadTimeout`.
        if !registered.devices.isEmpty || !registered.deskPhones.isEmpty || !registered.awake.isEmpty {
            start(registered, now, callee)
        } else {
            tokenTimerArmed = true
            out.append(.startTimer(.tokenRead, at: setup.arrivedAt.addingTimeInterval(setup.settings.tokenReadTimeout.timeInterval)))
        }
    }

    private mutating func tokensArrived(_ complete: CallTargets, readFailed: Bool, _ now: Date, _ callee: CalleeView) {
        if readFailed { out.append(.record(.tokensUnreadable)) }
        if tokenTimerArmed {
            tokenTimerArmed = false
            out.append(.stopTimer(.tokenRead))
        }
        tokensRead = true
        if phase == .starting {
            start(complete, now, callee)
        } else {
            addPostedDevices(complete, now, callee)
        }
    }

    /// The posted tokens of a call with nothing registered did not come in time (PostgreSQL slow
    /// or unreachable): the call goes on with what is registered now, and the read still joins
    /// the call if it arrives while something rings.
    private mutating func tokensOverdue(_ registered: CallTargets, _ now: Date, _ callee: CalleeView) {
        guard phase == .starting else { return }
        tokenTimerArmed = false
        out.append(.record(.tokensOverdue(after: setup.settings.tokenReadTimeout)))
        tokensRead = true
        start(registered, now, callee)
    }

    /// The posted tokens arrived after the call started: devices known only by them are pushed
    /// now, and a VoIP-only iPhone gains its regular token for the cancel push.
    private mutating func addPostedDevices(_ complete: CallTargets, _ now: Date, _ callee: CalleeView) {
        guard phase == .waiting || phase == .ringing, !answered else { return }
        for device in complete.devices {
            if let index = devices.firstIndex(where: { $0.device.id == device.id }) {
                if devices[index].device.cancelChannel == nil { devices[index].device.cancelChannel = device.cancelChannel }
                continue
            }
            guard device.isPostedOnly else { continue }
            if devices.isEmpty {
                // A desk-phone call that now has an app to wake: ringback while it wakes.
                ringback()
                content = pushContent(expiresAt: ringDeadline, now: now)
            }
            devices.append(Device(device, pushID: UUID()))
            out.append(.record(.pushingPosted(device: device.name)))
            push(devices.count - 1, expiresAt: pushExpiry, now)
        }
        endWaitIfEveryPushFailed(now, callee)
    }

    private mutating func start(_ targets: CallTargets, _ now: Date, _ callee: CalleeView) {
        guard phase == .starting else { return }
        self.targets = targets
        if targets.devices.isEmpty {
            phase = .ringing
            out.append(.record(.nothingToWake(deskPhones: targets.deskPhones.count)))
            forkToEveryoneRegistered(late: false, now, callee)
            finishIfNothingRings(nothingText: "no device is registered and none can be woken by push", now)
            return
        }
        let wait = targets.hasDeskPhone ? setup.settings.wakeWaitWithDeskPhone : setup.settings.wakeWait
        waitDeadline = now.addingTimeInterval(wait.timeInterval)
        let expiry = pushExpiry
        content = pushContent(expiresAt: expiry, now: now)
        phase = .waiting
        out.append(.record(.pushing(devices: targets.devices.count, wait: wait, deskPhone: targets.hasDeskPhone)))
        ringback()
        for device in targets.devices {
            devices.append(Device(device, pushID: UUID()))
            push(devices.count - 1, expiresAt: expiry, now)
        }
        // An app whose connection is still open is awake: ring it now as well.
        for binding in targets.awake { fork(to: binding, late: false, now) }
        waitTimerArmed = true
        out.append(.startTimer(.wait, at: waitDeadline))
    }

    /// decisions.md "Ring push expiry": the wait for an app-only call, the ring timeout when
    /// something else rings.
    private var pushExpiry: Date {
        let somethingElseRings = targets.map { $0.hasDeskPhone || !$0.awake.isEmpty } ?? true
        return somethingElseRings ? ringDeadline : waitDeadline
    }

    /// What the ring and cancel pushes of a call carry; `ring_timeout_secs` says how long the
    /// push may still ring. `caller_name` is the From's display name, else (a call from an
    /// extension) that extension's; `callee_name` the callee extension's.
    private func pushContent(expiresAt: Date, now: Date) -> CallPushContent {
        let from = setup.invite.from
        let fromName = from?.displayName.flatMap { $0.isEmpty ? nil : $0 }
        return CallPushContent(
            callID: setup.invite.callID ?? "", callerNumber: from?.uri.user ?? from?.uri.description ?? "",
            callerName: fromName ?? setup.callerExtensionName, calleeNumber: setup.callee.number, calleeName: setup.calleeName, ringTimeoutSeconds: max(1, Int(expiresAt.timeIntervalSince(now).rounded(.up))),
            isVideo: Self.isVideo(setup.invite), timestamp: now)
    }

    /// 180 Ringing with Rouse's To tag: ringback while the apps wake (product.md step 3).
    private mutating func ringback() {
        var ringing = SIPResponse(replyingTo: setup.invite, statusCode: 180, reasonPhrase: "Ringing", toTag: setup.toTag)
        ringing.headers.add(.server, setup.serverName)
        out.append(.respond(ringing))
    }

    private mutating func push(_ index: Int, expiresAt: Date, _ now: Date) {
        devices[index].sentAt = now
        let device = devices[index]
        out.append(.push(CallPushOrder(
            device: index, pushID: device.pushID, tag: device.tag, channel: device.device.ringChannel, content: content, expiresAt: expiresAt,
            callTokenExpiresAt: ringDeadline.addingTimeInterval(Self.callTokenMargin))))
    }

    private mutating func pushAnswered(_ index: Int, _ outcome: PushOutcome, _ appID: Int64?, _ now: Date, _ callee: CalleeView) {
        guard devices.indices.contains(index), !devices[index].answered else { return }
        let accepted = outcome.isAccepted
        if outcome.isDeadToken { out.append(.markDead(devices[index].device.ringChannel.tokenID)) }
        var device = devices[index]
        if !accepted {
            device.wake = .notPushed
        } else if device.wake == .notPushed {
            device.wake = .pending
        }
        if phase == .ended, accepted, device.wake == .pending { device.wake = endedUnanswered ? .notInTime : .callEnded }
        device.answered = true
        device.accepted = accepted
        devices[index] = device
        let ring = device.device.ringChannel
        out.append(.record(.pushAnswered(JourneyPush(
            id: device.pushID, device: device.device.name, provider: ring.provider, appID: appID, tokenShort: PushRecord.shorten(ring.token),
            outcome: outcome.word, status: outcome.status, reason: outcome.reason, explanation: outcome.explanation,
            latencyMilliseconds: outcome.latencyMilliseconds, sentAt: device.sentAt ?? now, wake: device.wake))))
        if !accepted { pushFailures.append("push \(outcome.word): \(outcome.explanation)") }
        endWaitIfEveryPushFailed(now, callee)
    }

    /// Every push failed, the posted tokens are in, and nothing else can ring: no point waiting.
    private mutating func endWaitIfEveryPushFailed(_ now: Date, _ callee: CalleeView) {
        guard phase == .waiting, tokensRead, devices.allSatisfy({ ($0.answered && !$0.accepted) || $0.declined != nil }), branches.isEmpty,
            targets?.hasDeskPhone == false, targets?.atWaitEnd.isEmpty == true
        else { return }
        waitEnded(because: "every push failed", now, callee)
    }

    // MARK: - Waiting and forking

    private mutating func waitEnded(because reason: String?, _ now: Date, _ callee: CalleeView) {
        guard phase == .waiting else { return }
        phase = .ringing
        stopWaitTimer()
        let back = devices.filter { if case .woke = $0.wake { return true } else { return false } }
        let end: CallFact.WaitEnd
        if let reason {
            end = .because(reason)
        } else if back.isEmpty {
            end = .nobodyBack(after: now.timeIntervalSince(setup.arrivedAt))
        } else {
            end = .back(back.map(\.device.name))
        }
        out.append(.record(.waitEnded(end)))
        forkToEveryoneRegistered(late: false, now, callee)
        finishIfNothingRings(nothingText: pushFailures.first ?? "no device woke in time", now)
    }

    /// Forks to every device of the callee reachable now (product.md step 4), over one flow each
    /// (RFC 5626 §5.3), except those already ringing.
    private mutating func forkToEveryoneRegistered(late: Bool, _ now: Date, _ callee: CalleeView) {
        for flows in CallTargets.flowsByDevice(callee.bindings(), reach: callee.reach) {
            guard let flow = untriedFlow(among: flows), !declinedDevice(has: flow) else { continue }
            fork(to: flow, late: late, now)
        }
    }

    /// The first of a device's flows (best first) that is reachable and has no branch yet.
    private func untriedFlow(among flows: [(binding: Binding, reach: BindingReach)]) -> Binding? {
        flows.first { flow in flow.reach != .gone && !branches.contains { $0.key == Branch.Key(flow.binding) } }?.binding
    }

    /// Sends the call to `binding` as a new branch, unless a branch already goes over that flow or,
    /// for a device with `+sip.instance`, over another flow of it (RFC 5626 §5.3: one flow per
    /// device at a time; a flow that failed does not count). With `supersedingFlowsBefore`, only
    /// branches to flows registered since then count: a device's fresh REGISTER after its push
    /// gets the call even while an INVITE to one of its older flows is out.
    private mutating func fork(to binding: Binding, late: Bool, _ now: Date, supersedingFlowsBefore: Date? = nil) {
        guard phase != .ended, !answered else { return }
        let key = Branch.Key(binding)
        guard !branches.contains(where: { $0.key == key }) else { return }
        if let instance = binding.instance, branches.contains(where: { branch in
            branch.binding.instance == instance && !branch.flowFailed && supersedingFlowsBefore.map { branch.binding.registeredAt >= $0 } ?? true
        }) {
            return
        }
        guard let target = try? SIPURI(parsing: binding.contact) else { return }
        let request = ProxyRules.branchRequest(from: setup.invite, to: target)
        let name = devices.first { $0.device.bindingIDs.contains(binding.id) || $0.device.matches(binding) }?.device.name
            ?? binding.userAgent ?? binding.contactForDisplay
        branches.append(Branch(key: key, binding: binding, isLate: late, deviceName: name))
        out.append(.record(.branchStarted(JourneyBranch(
            bindingID: binding.id, target: binding.contactForDisplay, device: name, transport: binding.flow.transport.rawValue, startedAt: now,
            isLateFork: late))))
        out.append(.fork(branch: branches.count - 1, request: request, binding: binding))
        out.append(.startTimer(.timerC(branch: branches.count - 1), at: now.addingTimeInterval(setup.settings.timerC.timeInterval)))
    }

    /// The branch INVITE went out (its request and flow), or could not: a failed flow, and the
    /// device's next one is tried.
    private mutating func branchSent(_ index: Int, _ result: SentRequest<Flow>?, _ now: Date, _ callee: CalleeView) {
        guard branches.indices.contains(index), branches[index].sent == nil, branches[index].final == nil else { return }
        guard let result else {
            out.append(.stopTimer(.timerC(branch: index)))
            out.append(.record(.branchUnreachable(branch: index)))
            branches[index].final = 503
            branches[index].flowFailed = true
            considerFlowFailure()
            tryNextFlow(after: index, now, callee)
            if phase == .ringing { finishIfNothingRings(nothingText: pushFailures.first ?? "no device woke in time", now) }
            return
        }
        branches[index].sent = result.request
        branches[index].flow = result.flow
        // A CANCEL wanted once a provisional came, which came before the send was known.
        if branches[index].gotProvisional, let reason = branches[index].cancelWanted { sendCancel(index, reason: reason) }
    }

    /// A branch that reached no device counts as a 408: below every answer a device gave, and
    /// never sent upstream as it is (`finishIfNothingRings` makes it a 480 saying why).
    private mutating func considerFlowFailure() {
        selector.consider(SIPResponse(replyingTo: setup.invite, statusCode: 408, reasonPhrase: "Request Timeout"))
    }

    /// RFC 5626 §5.3: a branch whose flow failed (the connection closed under it, no answer at all,
    /// 408, 430 Flow Failed) is replaced by one over the device's next flow, when it has one; the
    /// failed flow is only left out, its binding and push channels stay.
    private mutating func tryNextFlow(after failed: Int, _ now: Date, _ callee: CalleeView) {
        let branch = branches[failed]
        guard let instance = branch.binding.instance else { return }
        let flows = CallTargets.flowsByDevice(callee.bindings(), reach: callee.reach).first { $0.first?.binding.instance == instance } ?? []
        guard let next = untriedFlow(among: flows) else { return }
        out.append(.record(.nextFlow(after: branch.binding.userAgent ?? "the device", transport: next.flow.transport.rawValue)))
        // A next flow that fails at once tries the one after it (its `branchSent` comes back here).
        fork(to: next, late: branch.isLate, now)
    }

    private mutating func branchResponse(_ index: Int, _ event: ClientTransactionEvent, _ now: Date, _ callee: CalleeView) {
        guard branches.indices.contains(index) else { return }
        let response = event.response
        let status = response.statusCode
        if status != 100 || !branches[index].recordedResponse {
            let isRetransmission = status >= 200 && branches[index].final != nil
            if !isRetransmission {
                branches[index].recordedResponse = true
                out.append(.record(.branchResponse(branch: index, status: status, reason: response.reasonPhrase)))
            }
        }
        if status < 200 {
            // §16.7 step 2: every provisional above 100 restarts Timer C.
            if status > 100, branches[index].final == nil {
                out.append(.startTimer(.timerC(branch: index), at: now.addingTimeInterval(setup.settings.timerC.timeInterval)))
            }
            branches[index].gotProvisional = true
            if let reason = branches[index].cancelWanted, !branches[index].cancelSent {
                sendCancel(index, reason: reason)
            } else if status > 100, phase != .ended, !answered {
                out.append(.respond(ProxyRules.upstream(response)))
            }
            return
        }
        let isFirstFinal = branches[index].final == nil
        branches[index].final = status
        if isFirstFinal {
            out.append(.stopTimer(.timerC(branch: index)))
            out.append(.record(.branchEnded(branch: index)))
        }
        if (200..<300).contains(status) {
            // §16.7 step 5: every 2xx goes upstream at once, retransmissions included.
            out.append(.relay2xx(ProxyRules.upstream(response)))
            if isFirstFinal, !answered, phase != .ended { answered(by: index, now) }
            return
        }
        guard isFirstFinal, phase != .ended, !answered else { return }
        // RFC 5626 §5.3: the flow failed, not the device's answer (430, 408, or the transport).
        let flowFailed = status == 430 || status == 408 || { if case .transportError = event { return true } else { return false } }()
        if let declined = branches[index].declinedAs {
            // Cancelled because its device declined over HTTP: it counts as that answer, not 487.
            selector.consider(SIPResponse(replyingTo: setup.invite, statusCode: declined.status, reasonPhrase: declined.phrase))
        } else if flowFailed || branches[index].timedOut {
            considerFlowFailure()
        } else {
            selector.consider(ProxyRules.upstream(response))
        }
        if status >= 600 {
            // §16.7: a 6xx ends the search; the other branches are cancelled.
            let reason = "\(branches[index].binding.userAgent ?? "a device") answered \(status) \(response.reasonPhrase)"
            if isBusy(status), divert(.busy, fallback: .stripped(selector.chosen), reason: reason, pushReason: .busy, now) { return }
            end(response: stripped(selector.chosen), outcome: .failed, reason: reason, cancelReason: nil, pushReason: .declined, now)
            return
        }
        if flowFailed, branches[index].cancelWanted == nil {
            branches[index].flowFailed = true
            tryNextFlow(after: index, now, callee)
        }
        if phase == .ringing { finishIfNothingRings(nothingText: pushFailures.first ?? "no device woke in time", now) }
    }

    /// RFC 3261 §16.8: Timer C fired. A branch that rang is cancelled (its 487 then counts as
    /// 408); one that never answered at all is taken as answered 408, and the device's next flow
    /// is tried.
    private mutating func timerCFired(_ index: Int, _ now: Date, _ callee: CalleeView) {
        guard branches.indices.contains(index), branches[index].final == nil else { return }
        let text = "no final answer within \(CallText.seconds(setup.settings.timerC.timeInterval)) (Timer C)"
        if branches[index].gotProvisional {
            branches[index].timedOut = true
            cancel(index, reason: ProxyRules.reason(cause: 408, text: text), because: text)
            return
        }
        branches[index].final = 408
        out.append(.record(.branchResponse(branch: index, status: 408, reason: "Request Timeout")))
        out.append(.record(.branchEnded(branch: index)))
        guard phase != .ended, !answered else { return }
        considerFlowFailure()
        if branches[index].cancelWanted == nil {
            branches[index].flowFailed = true
            tryNextFlow(after: index, now, callee)
        }
        if phase == .ringing { finishIfNothingRings(nothingText: pushFailures.first ?? "no device woke in time", now) }
    }

    private mutating func answered(by index: Int, _ now: Date) {
        answered = true
        let binding = branches[index].binding
        let answering = devices.first { belongs(binding, to: $0) }
        answeredByTag = answering?.tag
        // Its regular channel (never a VoIP token), for `call.ended` if the BYE cannot reach it.
        answeredDevice = answering.flatMap { device in
            device.device.cancelChannel.map { AnsweredDevice(device: device.device.name, callee: setup.callee, channel: $0, content: content) }
        }
        let device = branches[index].deviceName
        out.append(.record(.answered(device: device, after: now.timeIntervalSince(setup.arrivedAt))))
        for other in branches.indices where other != index && branches[other].final == nil {
            cancel(other, reason: ProxyRules.completedElsewhere, because: "answered elsewhere")
        }
        close(outcome: .answered, finalStatus: 200, reason: "answered by \(device)", pushReason: .answeredElsewhere, now)
    }

    /// Ends the call when nothing rings and nothing is still to come: with the best branch answer,
    /// or 480 saying why.
    private mutating func finishIfNothingRings(nothingText: String, _ now: Date) {
        guard phase == .ringing, !answered, !branches.contains(where: { $0.final == nil }) else { return }
        if let chosen = selector.chosen, chosen.statusCode != 408, chosen.statusCode != 480 {
            let reason = "every device refused the call (best answer \(chosen.statusCode) \(chosen.reasonPhrase))"
            if everyAnswerBusy, divert(.busy, fallback: .stripped(chosen), reason: reason, pushReason: .busy, now) { return }
            if [486, 600].contains(chosen.statusCode) { missed = true }
            end(response: stripped(chosen), outcome: .failed, reason: reason, cancelReason: nil, pushReason: .declined, now)
            return
        }
        let text = branches.isEmpty ? nothingText : (devices.isEmpty ? "no device answered" : nothingText)
        if divert(.unreachable, fallback: .unavailable(text), reason: text, pushReason: .timeout, now) { return }
        end(response: unavailable(text), outcome: .unanswered, reason: text, cancelReason: nil, pushReason: .timeout, now)
    }

    private mutating func ringTimedOut(_ now: Date) {
        guard phase != .ended, !answered else { return }
        let text = "no answer within \(CallText.seconds(setup.settings.ringTimeout.timeInterval))"
        if divert(.noAnswer, fallback: .unavailable(text), reason: text, pushReason: .timeout, now) { return }
        end(response: unavailable(text), outcome: .unanswered, reason: text, cancelReason: ProxyRules.reason(cause: 480, text: text),
            pushReason: .timeout, now)
    }

    /// The extension's own ring time ran out (shorter than `ring_timeout`): the call goes to its
    /// no-answer target, unless the loop guard keeps it here.
    private mutating func noAnswerTimedOut(_ now: Date) {
        noAnswerTimerArmed = false
        guard phase != .ended, !answered, let after = setup.diversion?.noAnswerAfter else { return }
        let text = "no answer within \(CallText.seconds(after.timeInterval))"
        _ = divert(.noAnswer, fallback: .unavailable(text), reason: text, pushReason: .timeout, now)
    }

    // MARK: - Diversion

    /// A final answer that counts as busy: 486, 600, and 603 unless `decline_is_busy` is off.
    private func isBusy(_ status: Int) -> Bool {
        status == 486 || status == 600 || (status == 603 && setup.settings.declineIsBusy)
    }

    /// Every device that answered (its flow did not fail) answered busy, and at least one did.
    private var everyAnswerBusy: Bool {
        let answers = branches.compactMap { branch -> Int? in
            if let declined = branch.declinedAs { return declined.status }
            return branch.flowFailed || branch.timedOut ? nil : branch.final
        }
        return !answers.isEmpty && answers.allSatisfy(isBusy)
    }

    /// Diverts the call for `cause` when the callee has a target for it and the loop guard
    /// allows: the branches are cancelled and the woken devices stopped as when a call ends, the
    /// journey says where and why, and the rewritten INVITE goes to the shell (`.divert`) instead
    /// of a final answer. False when the call is not diverted (it then ends as it would have).
    /// `fallback` is built only for a call that is diverted (nearly every call has no forwarding).
    private mutating func divert(_ cause: DiversionCause, fallback: Fallback, reason: String, pushReason: CallEndReason, _ now: Date) -> Bool {
        guard phase != .ended, !answered, let target = setup.diversion?.target(for: cause) else { return false }
        let limit = setup.settings.maxDiversions
        guard setup.diversionsSoFar < limit else {
            if !loopGuardNoted {
                loopGuardNoted = true
                out.append(.record(.diversionRefused(target: target.description, because: "the INVITE was diverted \(setup.diversionsSoFar) time(s) already (max_diversions \(limit))")))
            }
            return false
        }
        let fallback = response(fallback)
        var request = HistoryInfo.retarget(setup.invite, to: target, cause: cause)
        request.headers.set(.maxForwards, String(max(0, (setup.invite.maxForwards ?? ProxyRules.defaultMaxForwards) - 1)))
        request.headers.remove(.proxyAuthorization)
        let order = DiversionOrder(target: target, cause: cause, request: request, divertedBy: setup.callee, fallback: fallback, reason: reason)
        diverted = order
        out.append(.record(.diverted(target: target.description, cause: cause, because: reason)))
        for branch in branches.indices where branches[branch].final == nil {
            cancel(branch, reason: ProxyRules.reason(cause: fallback.statusCode, text: "call forwarded (\(cause.words))"), because: "call forwarded (\(cause.words))")
        }
        if cause != .unconditional { missed = true }
        close(outcome: .diverted, finalStatus: cause.rawValue, reason: "forwarded to \(target) (\(cause.words): \(reason))", pushReason: pushReason, now)
        out.append(.divert(order))
        return true
    }

    // MARK: - Woken devices coming back

    private mutating func deviceMayBeBack(_ now: Date, _ callee: CalleeView) {
        guard phase == .waiting || phase == .ringing, !answered else { return }
        var anyBack = false
        // A binding registered after the push is the woken app, awake by definition, even when
        // another instance holds its connection (the SIP side routes through that instance).
        for binding in callee.bindings() {
            for index in devices.indices where devices[index].declined == nil {
                guard let sentAt = devices[index].sentAt, binding.registeredAt >= sentAt.addingTimeInterval(-0.05),
                    devices[index].device.matches(binding), !devices[index].returnedBindings.contains(binding.id)
                else { continue }
                devices[index].returnedBindings.insert(binding.id)
                if case .woke = devices[index].wake {} else {
                    devices[index].wake = .woke(afterMilliseconds: max(0, Int(now.timeIntervalSince(sentAt) * 1000)))
                    out.append(.record(.woke(pushID: devices[index].pushID, device: devices[index].device.name, devices[index].wake)))
                }
                anyBack = true
                // While the call waits, the woken app ends the wait and rings with the others; once
                // the call rings elsewhere, the late-comer joins the fork at once (late fork). Its
                // first fresh flow does; a second reg-id registering just after it does not.
                fork(to: binding, late: phase == .ringing, now, supersedingFlowsBefore: sentAt.addingTimeInterval(-0.05))
            }
        }
        if anyBack, phase == .waiting { waitEnded(because: nil, now, callee) }
    }

    // MARK: - Declines

    /// Whether `binding` belongs to a pushed device of the call (its bindings then, its fresh
    /// REGISTER since, or a match by instance or token).
    private func belongs(_ binding: Binding, to device: Device) -> Bool {
        device.device.bindingIDs.contains(binding.id) || device.returnedBindings.contains(binding.id)
            || (!device.device.isPostedOnly && device.device.matches(binding))
    }

    private func declinedDevice(has binding: Binding) -> Bool {
        devices.contains { $0.declined != nil && belongs(binding, to: $0) }
    }

    private mutating func declined(_ tag: String, _ reason: DeclineReason, _ now: Date, _ callee: CalleeView) {
        guard let index = devices.firstIndex(where: { $0.tag == tag }), devices[index].declined == nil, phase != .ended, !answered else { return }
        devices[index].declined = reason
        let answer: (status: Int, phrase: String) = reason == .busy ? (486, "Busy Here") : (603, "Decline")
        out.append(.record(.declined(device: devices[index].device.name, reason)))
        let device = devices[index]
        for branch in branches.indices where branches[branch].final == nil && belongs(branches[branch].binding, to: device) {
            branches[branch].declinedAs = answer
            cancel(branch, reason: ProxyRules.reason(cause: answer.status, text: reason == .busy ? "busy" : "declined"), because: "declined on the device")
        }
        guard devices.allSatisfy({ $0.declined != nil }) else {
            endWaitIfEveryPushFailed(now, callee)
            return
        }
        // Every woken device said no. A desk phone still rings (or is still to ring after the wait).
        if phase == .waiting, targets?.hasDeskPhone == true {
            waitEnded(because: "every pushed device declined", now, callee)
            return
        }
        guard !branches.contains(where: { $0.final == nil && $0.declinedAs == nil }) else { return }
        let busy = devices.allSatisfy { $0.declined == .busy }
        var response = SIPResponse(
            replyingTo: setup.invite, statusCode: busy ? 486 : 603, reasonPhrase: busy ? "Busy Here" : "Decline", toTag: setup.toTag)
        let text = busy ? "every device is busy" : "every device declined"
        response.headers.add(.reason, ProxyRules.reason(cause: busy ? 486 : 603, text: text))
        response.headers.add(.server, setup.serverName)
        if isBusy(response.statusCode), divert(.busy, fallback: .response(response), reason: text, pushReason: .busy, now) { return }
        if busy { missed = true }
        end(response: response, outcome: .failed, reason: text, cancelReason: nil, pushReason: busy ? .busy : .declined, now)
    }

    // MARK: - Ending

    private mutating func callerCanceled(_ reason: String?, _ now: Date) {
        guard phase != .ended, !answered else { return }
        var response = SIPResponse(replyingTo: setup.invite, statusCode: 487, reasonPhrase: "Request Terminated", toTag: setup.toTag)
        response.headers.add(.server, setup.serverName)
        let seconds = String(format: "%.1f", now.timeIntervalSince(setup.arrivedAt))
        end(response: response, outcome: .canceled, reason: "caller hung up after \(seconds) s", cancelReason: reason, pushReason: .callerHangup, now)
    }

    /// Rouse is stopping: 503 with the reason, and come back in 5 s (another instance may take it).
    private mutating func stopping(_ reason: String, _ now: Date) {
        guard phase != .ended, !answered else { return }
        var response = SIPResponse(replyingTo: setup.invite, statusCode: 503, reasonPhrase: CallText.phrase(reason), toTag: setup.toTag)
        response.headers.add(.reason, ProxyRules.reason(cause: 503, text: reason))
        response.headers.add(.retryAfter, "5")
        response.headers.add(.server, setup.serverName)
        end(response: response, outcome: .unanswered, reason: reason, cancelReason: nil, pushReason: .timeout, now)
    }

    /// Ends an unanswered call: the final response to the caller, CANCEL to the branches, cancel
    /// pushes to woken devices that are not ringing over SIP.
    private mutating func end(
        response: SIPResponse, outcome: CallOutcome, reason: String, cancelReason: String?, pushReason: CallEndReason, _ now: Date
    ) {
        guard phase != .ended else { return }
        out.append(.respond(response))
        for branch in branches.indices where branches[branch].final == nil {
            cancel(branch, reason: cancelReason ?? ProxyRules.reason(cause: response.statusCode, text: reason), because: reason)
        }
        close(outcome: outcome, finalStatus: response.statusCode, reason: reason, pushReason: pushReason, now)
    }

    private mutating func close(outcome: CallOutcome, finalStatus: Int, reason: String, pushReason: CallEndReason, _ now: Date) {
        phase = .ended
        endedUnanswered = outcome == .unanswered
        if outcome == .unanswered || outcome == .canceled { missed = true }
        out.append(.record(.ended(outcome: outcome, status: finalStatus, reason: reason, missed: missed)))
        stopWokenDevices(reason: pushReason, now)
        for index in devices.indices where devices[index].wake == .pending && devices[index].answered {
            devices[index].wake = outcome == .unanswered ? .notInTime : .callEnded
            out.append(.record(.wakeSettled(pushID: devices[index].pushID, devices[index].wake)))
        }
        if tokenTimerArmed {
            tokenTimerArmed = false
            out.append(.stopTimer(.tokenRead))
        }
        stopWaitTimer()
        if noAnswerTimerArmed {
            noAnswerTimerArmed = false
            out.append(.stopTimer(.noAnswer))
        }
        out.append(.stopTimer(.ring))
        out.append(.ended(CallEnding(
            outcome: outcome, finalStatus: finalStatus, reason: reason, answeredByTag: answeredByTag, missed: missed,
            declinedTags: Set(devices.filter { $0.declined != nil }.map(\.tag)), pushedAnyDevice: !devices.isEmpty,
            tokensExpireAt: ringDeadline.addingTimeInterval(Self.callTokenMargin), answeredDevice: answeredDevice)))
    }

    private mutating func stopWaitTimer() {
        guard waitTimerArmed else { return }
        waitTimerArmed = false
        out.append(.stopTimer(.wait))
    }

    /// product.md step 5: a woken device must stop ringing when the call ends before it answered.
    private mutating func stopWokenDevices(reason: CallEndReason, _ now: Date) {
        let until = now.addingTimeInterval(setup.settings.cancelGrace.timeInterval)
        for index in devices.indices where devices[index].sentAt != nil && devices[index].wake != .notPushed && devices[index].declined == nil {
            let device = devices[index]
            // Reached over SIP: it rang (a provisional) or answered, even with a 2xx and no 180.
            let reachedOverSIP = branches.contains { branch in
                (branch.gotProvisional || branch.final.map { (200..<300).contains($0) } == true)
                    && (device.device.bindingIDs.contains(branch.binding.id) || device.returnedBindings.contains(branch.binding.id))
            }
            if reachedOverSIP {
                // Its SIP CANCEL stops the ring (or it answered); a missed call is still told.
                pushEndOfCall(index, cancelReason: nil, endedBecause: reason, until: until, now)
            } else if device.device.cancelChannel != nil {
                pushEndOfCall(index, cancelReason: reason, endedBecause: reason, until: until, now)
            } else if device.device.ringChannel.family == .apns {
                // An iPhone with only its VoIP token: never a second VoIP push. If it registers
                // within the grace period, it gets the INVITE and at once a CANCEL.
                out.append(.graceDevice(GraceDevice(
                    device: device.device, pushID: device.pushID, sentAt: device.sentAt ?? now, until: until, invite: setup.invite,
                    reason: reason.sipReason)))
                out.append(.record(.graceNoticed(device: device.device.name, grace: setup.settings.cancelGrace)))
            }
        }
    }

    /// The push that stops a device ringing (when `cancelReason` is given), then its missed-call
    /// notice (when the call was missed). Issue 11: a call that ended unanswered shows as missed on
    /// each device that took part and can show one (FCM data, or an APNs alert to the regular
    /// token), its ring push accepted or still unanswered (the caller may hang up before the
    /// provider's answer is in); a device that declined, one whose push failed, and a VoIP-only
    /// iPhone get none.
    /// The missed notice gives the call's own reason (`caller_hangup` when the caller gave up),
    /// whether or not the device rang over SIP.
    /// Its `timestamp` is when the call ended (when Rouse made the push, not the ring's).
    private mutating func pushEndOfCall(_ index: Int, cancelReason: CallEndReason?, endedBecause reason: CallEndReason, until: Date, _ now: Date) {
        let device = devices[index]
        guard let channel = device.device.cancelChannel else { return }
        let wantsMissed = missed && (device.accepted || !device.answered) && device.declined == nil
        let missedReason = wantsMissed ? reason.missedReason : nil
        guard cancelReason != nil || missedReason != nil else { return }
        var stamped = content
        stamped.timestamp = now
        out.append(.endOfCallPush(EndOfCallPush(
            device: device.device.name, channel: channel, content: stamped, cancelReason: cancelReason, missedReason: missedReason, until: until)))
    }

    private mutating func cancel(_ branch: Int, reason: String, because why: String) {
        guard branches[branch].final == nil else { return }
        branches[branch].cancelWanted = reason
        out.append(.record(.branchCanceled(branch: branch, because: why)))
        // §9.1: a CANCEL may only follow a provisional response; otherwise it is sent when one comes.
        if branches[branch].gotProvisional { sendCancel(branch, reason: reason) }
    }

    private mutating func sendCancel(_ branch: Int, reason: String) {
        guard let sent = branches[branch].sent, let flow = branches[branch].flow, !branches[branch].cancelSent else { return }
        branches[branch].cancelSent = true
        out.append(.cancel(ProxyRules.cancel(of: sent, reason: reason), over: flow))
    }

    // MARK: - Answers

    /// 480 with the reason in the status line and in a Reason header (decisions.md).
    /// The answer a diverted call's caller gets when its target cannot be used after all
    /// (`DiversionOrder.fallback`), said by what it is made of.
    private enum Fallback {
        case unavailable(String)
        case stripped(SIPResponse?)
        case response(SIPResponse)
    }

    private func response(_ fallback: Fallback) -> SIPResponse {
        switch fallback {
        case .unavailable(let text): unavailable(text)
        case .stripped(let response): stripped(response)
        case .response(let response): response
        }
    }

    private func unavailable(_ text: String) -> SIPResponse {
        var response = SIPResponse(replyingTo: setup.invite, statusCode: 480, reasonPhrase: CallText.phrase(text), toTag: setup.toTag)
        response.headers.add(.reason, ProxyRules.reason(cause: 480, text: text))
        response.headers.add(.server, setup.serverName)
        return response
    }

    /// A branch's response as the caller's final answer; nil falls back to 480.
    private func stripped(_ response: SIPResponse?) -> SIPResponse {
        response ?? SIPResponse(replyingTo: setup.invite, statusCode: 480, reasonPhrase: "Temporarily Unavailable", toTag: setup.toTag)
    }

    static func isVideo(_ invite: SIPRequest) -> Bool {
        // Bytes, not Foundation's String search: the body comes from the network.
        let needle = Array("m=video".utf8)
        let body = invite.body
        guard body.count >= needle.count else { return false }
        return (0...(body.count - needle.count)).contains { start in body[start..<(start + needle.count)].elementsEqual(needle) }
    }
}

/// The timers of a call.
public enum CallTimer: Hashable, Sendable {
    /// `ring_timeout` from the INVITE's arrival: the call ends with 480 (or goes to its no-answer target).
    case ring
    /// The callee's own no-answer ring time (shorter than `ring_timeout`): the call is diverted.
    case noAnswer
    /// The wake wait: fork to whatever is registered.
    case wait
    /// `token_read_timeout`: a callee with nothing registered stops waiting for its posted tokens.
    case tokenRead
    /// RFC 3261 §16.6 step 11, Timer C of a branch: no final answer long after its last provisional.
    case timerC(branch: Int)
}

/// What happens to a call (the input of `CallStateMachine`).
public enum CallEvent<Flow: Hashable & Sendable>: Sendable {
    /// Admitted, with who it goes to by the registered bindings; `tokensPending`: posted tokens
    /// and dead marks are still being read.
    case admitted(CallTargets, tokensPending: Bool)
    /// The posted tokens are in: who the call goes to with them (`readFailed`: they could not be
    /// read, and the targets are the registered ones).
    case tokensRead(CallTargets, readFailed: Bool)
    /// The token-read timer fired: who the call goes to by what is registered now.
    case tokensOverdue(CallTargets)
    /// The provider answered the ring push of device `device` (an index in `devices`).
    case pushAnswered(device: Int, PushOutcome, appID: Int64?)
    /// The callee's bindings changed (a REGISTER here or on another instance).
    case bindingsChanged
    /// Branch `index`'s INVITE went out (its request and flow), or could not (nil).
    case branchSent(Int, SentRequest<Flow>?)
    /// Branch `index`'s client transaction reported a response or a failure.
    case branchResponse(Int, ClientTransactionEvent)
    case timerFired(CallTimer)
    /// The caller's CANCEL, with its RFC 3326 Reason if any.
    case callerCanceled(reason: String?)
    /// The device whose call token carries this tag declined over HTTP.
    case declined(deviceTag: String, DeclineReason)
    /// Rouse is stopping: the call ends with 503.
    case stopping(reason: String)
}

/// What the shell does for a call (the output of `CallStateMachine`), in order.
public enum CallAction<Flow: Hashable & Sendable>: Sendable {
    /// A response to the caller through its INVITE server transaction.
    case respond(SIPResponse)
    /// A branch's 2xx upstream (through the server transaction, or over the caller's flow).
    case relay2xx(SIPResponse)
    /// A ring push.
    case push(CallPushOrder)
    /// A cancel push and/or a missed-call notice, once the call ended.
    case endOfCallPush(EndOfCallPush)
    /// Sends branch `branch`'s INVITE to `binding`; its send result comes back as `branchSent`.
    case fork(branch: Int, request: SIPRequest, binding: Binding)
    /// A CANCEL over the branch's flow.
    case cancel(SIPRequest, over: Flow)
    case startTimer(CallTimer, at: Date)
    /// Stops the timer if it is armed (nothing if it fired or never was).
    case stopTimer(CallTimer)
    /// A fact of the journey (`JourneyRecorder` puts it in words).
    case record(CallFact)
    /// A provider called this token dead.
    case markDead(PushTokenID)
    /// A VoIP-only iPhone to send the INVITE and a CANCEL if it registers within its grace.
    case graceDevice(GraceDevice)
    /// The call ended (answered or not): how, for the call tokens and the metrics.
    case ended(CallEnding)
    /// The call was diverted (after its `ended`): the shell sends the rewritten INVITE on to the
    /// target, on the same server transaction.
    case divert(DiversionOrder)
}

/// A ring push the call wants sent.
public struct CallPushOrder: Sendable, Equatable {
    /// The device's index in the machine's `devices` (for `pushAnswered`).
    public var device: Int
    public var pushID: UUID
    /// The device part of its call token.
    public var tag: String
    public var channel: PushChannel
    public var content: CallPushContent
    /// Until when the push may still ring the call (transient failures are retried until then).
    public var expiresAt: Date
    public var callTokenExpiresAt: Date
}

/// The pushes that end a call on a device that was woken for it.
public struct EndOfCallPush: Sendable, Equatable {
    public var device: String
    public var channel: PushChannel
    public var content: CallPushContent
    /// `call.canceled` with this reason, when the device does not ring over SIP.
    public var cancelReason: CallEndReason?
    /// `call.missed` with this reason (`no_answer`, `caller_hangup`, `busy`), when the call was missed.
    public var missedReason: String?
    public var until: Date
}

/// A VoIP-only iPhone pushed for a call that ended before it came back (product.md: never a
/// second VoIP push): if it registers before `until`, it gets the INVITE and at once a CANCEL.
public struct GraceDevice: Sendable {
    public var device: WakeDevice
    public var pushID: UUID
    public var sentAt: Date
    public var until: Date
    public var invite: SIPRequest
    /// The RFC 3326 Reason of its CANCEL.
    public var reason: String
}

/// How a call ended, kept while its call tokens may ask (`status(for:)`).
public struct CallEnding: Sendable, Equatable {
    public var outcome: CallOutcome
    public var finalStatus: Int
    public var reason: String
    public var answeredByTag: String?
    public var missed: Bool
    public var declinedTags: Set<String>
    /// A call that pushed nobody issued no call token.
    public var pushedAnyDevice: Bool
    public var tokensExpireAt: Date
    /// The answered call's BYE has passed.
    public var hungUp = false
    /// The pushed device that answered, with its regular channel (for `call.ended`).
    public var answeredDevice: AnsweredDevice?

    /// The call's status as the device whose call token carries `tag` sees it.
    public func status(forDevice tag: String) -> CallStatus {
        let declinedHere = declinedTags.contains(tag)
        switch outcome {
        case .answered:
            let here = answeredByTag == tag
            let words = here ? "answered on this device" : "answered on another device"
            return CallStatus(state: hungUp ? .ended : .answered, reason: hungUp ? "hung up after it was \(words)" : words,
                              answeredHere: here, declinedHere: declinedHere)
        case .canceled:
            return CallStatus(state: .canceled, reason: reason, missed: missed, declinedHere: declinedHere)
        case .ringing, .unanswered, .failed, .diverted:
            return CallStatus(state: .ended, reason: reason, missed: missed, declinedHere: declinedHere)
        }
    }
}

/// Why a call stopped ringing a woken device: the `reason` of its `call.canceled` push.
public enum CallEndReason: String, Sendable, Hashable, CaseIterable {
    case callerHangup = "caller_hangup"
    case answeredElsewhere = "answered_elsewhere"
    case timeout
    case declined
    case busy

    /// The `reason` of the missed-call notice.
    public var missedReason: String {
        switch self {
        case .callerHangup, .busy: return rawValue
        default: return "no_answer"
        }
    }

    /// The RFC 3326 Reason of the CANCEL a late iPhone gets.
    public var sipReason: String {
        switch self {
        case .answeredElsewhere: return ProxyRules.completedElsewhere
        case .callerHangup: return ProxyRules.reason(cause: 487, text: "caller hung up")
        case .timeout: return ProxyRules.reason(cause: 480, text: "no answer")
        case .declined, .busy: return ProxyRules.reason(cause: 487, text: "call ended")
        }
    }
}
