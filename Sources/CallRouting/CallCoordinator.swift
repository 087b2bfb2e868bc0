import Dispatch
import Foundation
import Metrics
import Push
import Registrar
import SIPMessage
import SIPTransaction

/// The wake-then-ring coordinator (product.md "What happens on a call"): admits an INVITE for an
/// extension, pushes every device that can be woken (once each, in parallel), plays ringback,
/// waits for a woken app to REGISTER again, forks to every registered device, adds late-comers to
/// the fork, relays the first 2xx and cancels the rest, stops woken devices ringing when the call
/// ends before they answered, and records the journey.
///
/// Threading: all call state lives on one serial queue (`rouse.calls`); every entry point hops onto
/// it and returns at once. Pushes run as tasks whose results hop back onto the queue; SIP sends go
/// through `CallSignaling`, which never blocks.
public final class CallCoordinator<Signaling: CallSignaling>: @unchecked Sendable {
    // @unchecked: every mutable property below is only touched on `queue`; `signaling` is set once
    // by `attach` before the SIP side delivers any INVITE.
    public typealias Flow = Signaling.Flow

    private let queue = DispatchQueue(label: "rouse.calls")
    private weak var signaling: Signaling?
    private let directory: any CalleeDirectory
    private let tokens: (any WakeTokenSource)?
    private let pusher: any CallPushing
    private let journeys: (any JourneyStore)?
    private let authenticator: DigestAuthenticator
    private let throttle: AuthFailureThrottle?
    private let settings: CallSettings
    private let ownNames: Set<String>
    private let serverName: String
    private let instanceID: String
    private let metrics: CallMetrics?
    private let callTokens: CallTokenSigner?
    private let log: @Sendable (String, KeyValuePairs<String, String>) -> Void

    private var calls: [UUID: Call] = [:]
    private var callByHandle: [ServerTransactionHandle: UUID] = [:]
    private var liveCallsByCallee: [AddressOfRecord: Set<UUID>] = [:]
    /// Woken iPhones known only by a VoIP token, whose call ended before they came back.
    private var graceDevices: [AddressOfRecord: [GraceDevice]] = [:]
    /// Tokens a provider called dead (seen here, or read from PostgreSQL), by `family:token`, with
    /// when: not pushed again until a binding carrying the token registers after that moment.
    /// Forgotten after `deadTokenMemory` (PostgreSQL keeps the mark; the next call reads it again).
    private var deadTokens: ExpiringTable<String, Date>
    /// Answered calls whose dialog is still up, by SIP Call-ID: their journey gets the hang-up. At
    /// most 100,000, each for at most `maxCallDuration` (a BYE Rouse never saw lets go of it).
    private var talking: ExpiringTable<String, CallJourney>
    /// A prune of `talking` is scheduled.
    private var talkingPruneArmed = false
    /// How each call ended, kept while its call tokens can still ask (`status`).
    private var endedCalls: [UUID: EndedCall] = [:]
    /// A call token lives until the call can no longer ring, plus this margin (issue 11).
    public static var callTokenMargin: TimeInterval { 60 }

    /// - Parameters:
    ///   - log: one line per call event (`call.started`, `call.ended`, …); must not block.
    public init(
        directory: any CalleeDirectory, tokens: (any WakeTokenSource)?, pusher: any CallPushing, journeys: (any JourneyStore)?,
        authenticator: DigestAuthenticator, throttle: AuthFailureThrottle? = nil, settings: CallSettings, ownNames: Set<String>,
        serverName: String, instanceID: String, metrics: MetricsRegistry? = nil, callTokens: CallTokenSigner? = nil,
        log: @escaping @Sendable (String, KeyValuePairs<String, String>) -> Void = { _, _ in }
    ) {
        self.callTokens = callTokens
        self.directory = directory
        self.tokens = tokens
        self.pusher = pusher
        self.journeys = journeys
        self.authenticator = authenticator
        self.throttle = throttle
        self.settings = settings
        self.ownNames = ownNames
        self.serverName = serverName
        self.instanceID = instanceID
        self.metrics = metrics.map(CallMetrics.init)
        self.log = log
        deadTokens = ExpiringTable(limit: 100_000, maxAge: settings.deadTokenMemory.timeInterval)
        talking = ExpiringTable(limit: 100_000, maxAge: settings.maxCallDuration.timeInterval)
    }

    /// Connects the SIP side (which owns the coordinator, hence the weak reference).
    public func attach(_ signaling: Signaling) {
        queue.sync { self.signaling = signaling }
    }

    /// Calls not yet ended.
    public var liveCallCount: Int { queue.sync { calls.values.filter { $0.phase != .ended }.count } }

    /// What the coordinator holds now, for tests and diagnostics.
    public struct Occupancy: Sendable, Equatable {
        /// Calls kept, live or ended (an ended one for `endedCallKeep`).
        public var calls: Int
        /// How ended calls ended, kept while their call tokens may ask.
        public var endedCalls: Int
        /// Answered calls followed to their BYE.
        public var talking: Int
        /// Tokens a provider called dead.
        public var deadTokens: Int
        /// VoIP-only iPhones still sent the INVITE and its CANCEL if they register (`cancel_grace`).
        public var graceDevices: Int
    }

    /// Counted on the call queue (waits for the events before it).
    public var occupancy: Occupancy {
        queue.sync { Occupancy(calls: calls.count, endedCalls: endedCalls.count, talking: talking.count, deadTokens: deadTokens.count,
            graceDevices: graceDevices.values.reduce(0) { $0 + $1.count }) }
    }

    // MARK: - Entry points

    /// An INVITE outside any dialog arrived (its server transaction already sent 100 Trying).
    public func handleInvite(_ invite: SIPRequest, handle: ServerTransactionHandle, callerFlow: Flow, sourceIP: String, transport: String) {
        queue.async { [self] in
            let arrivedAt = Date()
            if let tooMany = ProxyRules.tooManyHops(invite) {
                signaling?.respond(tooMany, to: handle)
                return
            }
            if ProxyRules.isLooping(invite, instanceMarker: instanceID) {
                respondAtOnce(invite, handle, 482, "Loop Detected")
                return
            }
            let snapshot = directory.directorySnapshot()
            let admission = InviteAdmission.decide(
                invite, sourceIP: sourceIP, directory: snapshot, ownNames: ownNames, trustedPeers: settings.trustedPeers,
                authenticator: authenticator, throttle: throttle, serverName: serverName, now: arrivedAt)
            switch admission {
            case .respond(let response):
                signaling?.respond(response, to: handle)
            case .accept(let callee, let caller):
                begin(invite, handle: handle, callerFlow: callerFlow, callee: callee, caller: caller, source: sourceIP, transport: transport, at: arrivedAt)
            }
        }
    }

    /// The caller's CANCEL matched the INVITE transaction `handle` (already answered 200).
    public func handleCancel(of handle: ServerTransactionHandle, reason: String?) {
        queue.async { [self] in
            guard let id = callByHandle[handle], let call = calls[id], call.phase != .ended, !call.answered else { return }
            var response = SIPResponse(replyingTo: call.invite, statusCode: 487, reasonPhrase: "Request Terminated", toTag: call.toTag)
            response.headers.add(.server, serverName)
            let seconds = String(format: "%.1f", Date().timeIntervalSince(call.arrivedAt))
            end(call, response: response, outcome: .canceled, reason: "caller hung up after \(seconds) s",
                cancelReason: reason, pushReason: "caller_hangup")
        }
    }

    /// The bindings of `aor` changed (a REGISTER here, or another instance's, announced by NOTIFY).
    public func bindingsChanged(_ aor: AddressOfRecord) {
        queue.async { [self] in
            let hasCalls = !(liveCallsByCallee[aor] ?? []).isEmpty
            let hasGrace = !(graceDevices[aor] ?? []).isEmpty
            guard hasCalls || hasGrace || !deadTokens.isEmpty else { return }
            let bindings = directory.bindings(for: aor)
            // A device that registers its token again revives it (product.md "The pushes").
            for binding in bindings {
                for channel in binding.pushChannels {
                    let key = CallTargets.tokenKey(channel)
                    if let markedAt = deadTokens[key], binding.registeredAt > markedAt { deadTokens.removeValue(forKey: key) }
                }
            }
            guard hasCalls || hasGrace else { return }
            for id in liveCallsByCallee[aor] ?? [] {
                if let call = calls[id] { deviceMayBeBack(call, bindings: bindings) }
            }
            if hasGrace { graceDevicesMayBeBack(aor, bindings: bindings) }
        }
    }

    /// A BYE of an answered call passed through Rouse: its journey gets the end of the talk.
    /// `fromCallee` says which side hung up, when known.
    public func dialogEnded(callID: String, fromCallee: Bool?) {
        queue.async { [self] in
            guard var journey = talking.removeValue(forKey: callID), let answeredAt = journey.answeredAt else { return }
            let now = Date()
            endedCalls[journey.id]?.hungUp = true
            journey.endedAt = now
            let who = fromCallee.map { $0 ? "the callee" : "the caller" } ?? "one side"
            journey.events.append(JourneyEvent(at: now, text: "\(who) hung up after \(Self.seconds(now.timeIntervalSince(answeredAt).rounded())) of talk"))
            calls[journey.id]?.journey = journey
            journeys?.recordCall(journey)
        }
    }

    /// Ends every call still ringing (Rouse is stopping): 503 to the caller with the reason,
    /// CANCEL to the branches, cancel pushes, and the journey recorded. Returns how many it ended.
    @discardableResult
    public func endAll(reason: String) -> Int {
        queue.sync { [self] in
            let live = calls.values.filter { $0.phase != .ended && !$0.answered }
            for call in live {
                var response = SIPResponse(replyingTo: call.invite, statusCode: 503, reasonPhrase: Self.phrase(reason), toTag: call.toTag)
                response.headers.add(.reason, ProxyRules.reason(cause: 503, text: reason))
                response.headers.add(.retryAfter, "5")
                response.headers.add(.server, serverName)
                end(call, response: response, outcome: .unanswered, reason: reason, cancelReason: nil, pushReason: "timeout")
            }
            return live.count
        }
    }

    /// Waits until every queued event has been handled (tests and shutdown).
    public func drain() {
        queue.sync {}
    }

    // MARK: - Starting a call

    private func begin(
        _ invite: SIPRequest, handle: ServerTransactionHandle, callerFlow: Flow, callee: AddressOfRecord, caller: AddressOfRecord?,
        source: String, transport: String, at arrivedAt: Date
    ) {
        guard callByHandle[handle] == nil else { return }
        let from = invite.from
        var journey = CallJourney(
            callID: invite.callID ?? "", callee: callee, caller: from?.uri.description ?? "", callerName: from?.displayName,
            transport: transport, source: source, instanceID: instanceID, startedAt: arrivedAt)
        let callerText = caller.map { " (authenticated as \($0))" } ?? " (trusted peer)"
        journey.events.append(JourneyEvent(at: arrivedAt, text: "INVITE from \(journey.caller)\(callerText) for \(callee) over \(transport) from \(source)"))
        let call = Call(
            invite: invite, handle: handle, callerFlow: callerFlow, callee: callee, arrivedAt: arrivedAt, journey: journey,
            toTag: Self.makeTag())
        calls[call.id] = call
        callByHandle[handle] = call.id
        liveCallsByCallee[callee, default: []].insert(call.id)
        metrics?.live.set(Double(liveCallsByCallee.values.reduce(0) { $0 + $1.count }))
        log("call.started", ["call": call.journey.callID, "callee": callee.description, "caller": journey.caller])
        // The ring timer runs from the INVITE's arrival, whatever the start still waits for.
        call.ringDeadline = arrivedAt.addingTimeInterval(settings.ringTimeout.timeInterval)
        schedule(call, at: call.ringDeadline) { [weak self] call in self?.ringTimedOut(call) }

        let bindings = directory.bindings(for: callee)
        let channels = bindings.flatMap(\.pushChannels)
        deadTokens.prune(now: arrivedAt)
        guard let tokens else {
            call.tokensRead = true
            start(call, targets: targets(bindings, posted: []))
            return
        }
        // The registered devices are pushed (or rung) at once; posted tokens and dead marks made
        // by other instances are read meanwhile and join the call when they arrive. Only a callee
        // with nothing registered waits for that read, and at most `tokenReadTimeout`.
        let registered = targets(bindings, posted: [])
        let startsAtOnce = !registered.devices.isEmpty || !registered.deskPhones.isEmpty || !registered.awake.isEmpty
        if startsAtOnce {
            start(call, targets: registered)
        } else {
            schedule(call, at: arrivedAt.addingTimeInterval(settings.tokenReadTimeout.timeInterval)) { [weak self] call in
                self?.tokenReadTimedOut(call)
            }
        }
        Task { [self] in
            let found: (posted: [PostedToken], dead: Set<String>)?
            do {
                found = try await tokens.wakeTokens(for: callee, checking: channels)
            } catch {
                found = nil
                log("call.tokens_unavailable", ["call": call.journey.callID, "error": "\(error)"])
            }
            queue.async { [self] in
                if found == nil {
                    call.journey.events.append(JourneyEvent(at: Date(), text: "posted tokens could not be read (database unavailable)"))
                }
                let now = Date()
                for key in found?.dead ?? [] where deadTokens[key] == nil { deadTokens.insert(now, for: key, at: now) }
                if call.phase == .starting {
                    call.tokensRead = true
                    start(call, targets: targets(bindings, posted: found?.posted ?? []))
                } else {
                    addPostedDevices(call, bindings: bindings, posted: found?.posted ?? [])
                }
            }
        }
    }

    /// The posted tokens of a call with nothing registered did not come in time (PostgreSQL slow
    /// or unreachable): the call goes on with what is registered now, and the read still joins
    /// the call if it arrives while something rings.
    private func tokenReadTimedOut(_ call: Call) {
        guard call.phase == .starting else { return }
        call.journey.events.append(JourneyEvent(
            at: Date(), text: "posted tokens not read within \(Self.seconds(settings.tokenReadTimeout)) (database slow or unreachable)"))
        log("call.tokens_unavailable", ["call": call.journey.callID, "error": "no answer within \(Self.seconds(settings.tokenReadTimeout))"])
        call.tokensRead = true
        start(call, targets: targets(directory.bindings(for: call.callee), posted: []))
    }

    /// The posted tokens arrived after the call started: devices known only by them are pushed
    /// now, and a VoIP-only iPhone gains its regular token for the cancel push.
    private func addPostedDevices(_ call: Call, bindings: [Binding], posted: [PostedToken]) {
        call.tokensRead = true
        guard call.phase == .waiting || call.phase == .ringing, !call.answered else { return }
        let complete = targets(bindings, posted: posted)
        for device in complete.devices {
            if let state = call.devices.first(where: { $0.device.key == device.key }) {
                if state.device.cancelChannel == nil { state.device.cancelChannel = device.cancelChannel }
                continue
            }
            guard device.isPostedOnly else { continue }
            if call.devices.isEmpty {
                // A desk-phone call that now has an app to wake: ringback while it wakes.
                sendRingback(call)
                call.content = pushContent(call, expiresAt: call.ringDeadline, now: Date())
            }
            let state = DeviceState(device: device)
            call.devices.append(state)
            call.journey.events.append(JourneyEvent(at: Date(), text: "pushing \(device.name), known by a posted token"))
            push(call, state, expiresAt: pushExpiry(call))
        }
        endWaitIfEveryPushFailed(call)
    }

    /// Who the call goes to, with reachability as the SIP side sees it now and the dead marks of
    /// its tokens (looked up one by one, never the whole table).
    private func targets(_ bindings: [Binding], posted: [PostedToken]) -> CallTargets {
        let keys = (bindings.flatMap(\.pushChannels) + posted.map(\.channel)).map(CallTargets.tokenKey)
        let dead = Set(keys.filter { deadTokens[$0] != nil })
        return CallTargets(bindings: bindings, posted: posted, deadTokens: dead, reach: { [signaling] in signaling?.reach($0) ?? .gone })
    }

    /// decisions.md "Ring push expiry": the wait for an app-only call, the ring timeout when
    /// something else rings.
    private func pushExpiry(_ call: Call) -> Date {
        let somethingElseRings = call.targets.map { $0.hasDeskPhone || !$0.awake.isEmpty } ?? true
        return somethingElseRings ? call.ringDeadline : call.waitDeadline
    }

    /// 180 Ringing with Rouse's To tag: ringback while the apps wake (product.md step 3).
    private func sendRingback(_ call: Call) {
        var ringing = SIPResponse(replyingTo: call.invite, statusCode: 180, reasonPhrase: "Ringing", toTag: call.toTag)
        ringing.headers.add(.server, serverName)
        signaling?.respond(ringing, to: call.handle)
    }

    private func start(_ call: Call, targets: CallTargets) {
        guard call.phase == .starting, signaling != nil else { return }
        call.targets = targets
        let now = Date()

        if targets.devices.isEmpty {
            call.phase = .ringing
            call.journey.events.append(JourneyEvent(at: now, text: "no device to wake; \(targets.deskPhones.count) registered device(s) to ring"))
            forkToEveryoneRegistered(call, late: false)
            finishIfNothingRings(call, nothingText: "no device is registered and none can be woken by push")
            return
        }

        let wait = targets.hasDeskPhone ? settings.wakeWaitWithDeskPhone : settings.wakeWait
        call.waitDeadline = now.addingTimeInterval(wait.timeInterval)
        let pushExpiry = pushExpiry(call)
        call.content = pushContent(call, expiresAt: pushExpiry, now: now)
        call.phase = .waiting
        call.journey.events.append(JourneyEvent(
            at: now,
            text: "pushing \(targets.devices.count) device(s); waiting up to \(Self.seconds(wait)) for an app to register"
                + (targets.hasDeskPhone ? " (a desk phone is registered)" : "")))
        sendRingback(call)

        for device in targets.devices {
            let state = DeviceState(device: device)
            call.devices.append(state)
            push(call, state, expiresAt: pushExpiry)
        }
        // An app whose connection is still open is awake: ring it now as well.
        for binding in targets.awake { fork(call, to: binding, late: false) }
        schedule(call, at: call.waitDeadline) { [weak self] call in self?.waitEnded(call, because: nil) }
    }

    /// What the ring and cancel pushes of a call carry; `ring_timeout_secs` says how long the
    /// push may still ring (decisions.md "Ring push expiry").
    private func pushContent(_ call: Call, expiresAt: Date, now: Date) -> CallPushContent {
        CallPushContent(
            callID: call.journey.callID, callerNumber: call.invite.from?.uri.user ?? call.journey.caller,
            callerName: call.journey.callerName, calleeNumber: call.callee.number,
            ringTimeoutSeconds: max(1, Int(expiresAt.timeIntervalSince(now).rounded(.up))), isVideo: Self.isVideo(call.invite),
            timestamp: now)
    }

    private func push(_ call: Call, _ state: DeviceState, expiresAt: Date) {
        var content = call.content
        if let callTokens {
            content.callToken = callTokens.issue(CallTokenClaims(
                callID: call.id, callUUID: content.uuid, aor: call.callee, device: state.tag, instanceID: instanceID,
                expiresAt: call.ringDeadline.addingTimeInterval(Self.callTokenMargin)))
        }
        let channel = state.device.ringChannel
        let aor = call.callee.description
        state.sentAt = Date()
        Task { [self] in
            let (outcome, appID) = await pusher.ring(content, to: channel, expiresAt: expiresAt, aor: aor)
            queue.async { [self] in pushAnswered(call, state, outcome: outcome, appID: appID) }
        }
    }

    private func pushAnswered(_ call: Call, _ state: DeviceState, outcome: PushOutcome, appID: Int64?) {
        let accepted = outcome.word == "accepted"
        if outcome.isDeadToken { deadTokens.insert(Date(), for: CallTargets.tokenKey(state.device.ringChannel), at: Date()) }
        metrics?.pushes.increment(["provider": state.device.ringChannel.provider.rawValue, "outcome": outcome.word])
        metrics?.pushLatency.observe(Double(outcome.latencyMilliseconds) / 1000)
        if !accepted {
            state.wake = .notPushed
        } else if state.wake == .notPushed {
            state.wake = .pending
        }
        if call.phase == .ended, accepted, state.wake == .pending {
            state.wake = call.answered ? .callEnded : .notInTime
        }
        let line = JourneyPush(
            id: state.pushID, device: state.device.name, provider: state.device.ringChannel.provider, appID: appID,
            tokenShort: PushRecord.shorten(state.device.ringChannel.token), outcome: outcome.word, status: outcome.status,
            reason: outcome.reason, explanation: outcome.explanation, latencyMilliseconds: outcome.latencyMilliseconds,
            sentAt: state.sentAt ?? Date(), wake: state.wake)
        state.accepted = accepted
        state.journeyIndex = call.journey.pushes.count
        call.journey.pushes.append(line)
        journeys?.recordPush(line, of: call.journey)
        // A push answered after its call ended (a slow provider) still belongs in the journey.
        if call.phase == .ended { recordAfterEnd(call) }
        log("call.push", ["call": call.journey.callID, "device": state.device.name, "outcome": outcome.word, "ms": String(outcome.latencyMilliseconds)])
        if !accepted {
            call.pushFailures.append("push \(outcome.word == "refused" ? "refused" : "failed"): \(outcome.explanation)")
        }
        endWaitIfEveryPushFailed(call)
    }

    /// Every push failed, the posted tokens are in, and nothing else can ring: no point waiting.
    private func endWaitIfEveryPushFailed(_ call: Call) {
        if call.phase == .waiting, call.tokensRead, call.devices.allSatisfy({ ($0.journeyIndex != nil && !$0.accepted) || $0.declined != nil }),
            call.branches.isEmpty, call.targets?.hasDeskPhone == false, call.targets?.atWaitEnd.isEmpty == true
        {
            waitEnded(call, because: "every push failed")
        }
    }

    // MARK: - Waiting and forking

    private func waitEnded(_ call: Call, because reason: String?) {
        guard call.phase == .waiting else { return }
        call.phase = .ringing
        let back = call.devices.filter { if case .woke = $0.wake { return true } else { return false } }
        let text: String
        if let reason {
            text = "wait ended: \(reason)"
        } else if back.isEmpty {
            text = "wait ended after \(Self.seconds(Date().timeIntervalSince(call.arrivedAt))): no app back yet"
        } else {
            text = "wait ended: \(back.map(\.device.name).joined(separator: ", ")) registered again"
        }
        call.journey.events.append(JourneyEvent(at: Date(), text: text))
        forkToEveryoneRegistered(call, late: false)
        finishIfNothingRings(call, nothingText: call.pushFailures.first ?? "no device woke in time")
    }

    /// Forks to every device of the callee reachable now (product.md step 4), over one flow each
    /// (RFC 5626 §5.3), except those already ringing.
    private func forkToEveryoneRegistered(_ call: Call, late: Bool) {
        guard let signaling else { return }
        for flows in CallTargets.flowsByDevice(directory.bindings(for: call.callee), reach: signaling.reach) {
            guard let flow = untriedFlow(call, among: flows), !declinedDevice(call, has: flow) else { continue }
            fork(call, to: flow, late: late)
        }
    }

    /// The first of a device's flows (best first) that is reachable and has no branch yet.
    private func untriedFlow(_ call: Call, among flows: [(binding: Binding, reach: BindingReach)]) -> Binding? {
        flows.first { flow in flow.reach != .gone && !call.branches.contains { $0.key == BranchKey(flow.binding) } }?.binding
    }

    /// Sends the call to `binding` as a new branch, unless a branch already goes over that flow or,
    /// for a device with `+sip.instance`, over another flow of it (RFC 5626 §5.3: one flow per
    /// device at a time; a flow that failed does not count). With `supersedingFlowsBefore`, only
    /// branches to flows registered since then count: a device's fresh REGISTER after its push
    /// gets the call even while an INVITE to one of its older flows is out.
    private func fork(_ call: Call, to binding: Binding, late: Bool, supersedingFlowsBefore: Date? = nil) {
        guard let signaling, call.phase != .ended, !call.answered else { return }
        let key = BranchKey(binding)
        guard !call.branches.contains(where: { $0.key == key }) else { return }
        if let instance = binding.instance, call.branches.contains(where: { branch in
            branch.binding.instance == instance && !branch.flowFailed
                && supersedingFlowsBefore.map { branch.binding.registeredAt >= $0 } ?? true
        }) {
            return
        }
        guard let target = try? SIPURI(parsing: binding.contact) else { return }
        let request = ProxyRules.branchRequest(from: call.invite, to: target)
        let branch = Branch(key: key, binding: binding, isLate: late)
        call.branches.append(branch)
        let id = call.id
        let index = call.branches.count - 1
        let device = call.devices.first { $0.device.bindingIDs.contains(binding.id) || $0.device.matches(binding) }?.device.name
            ?? binding.userAgent ?? binding.contactForDisplay
        branch.journeyIndex = call.journey.branches.count
        call.journey.branches.append(JourneyBranch(
            bindingID: binding.id, target: binding.contactForDisplay, device: device, transport: binding.flow.transport,
            startedAt: Date(), isLateFork: late))
        // A flow this instance holds is sent on at once; one through another instance may first
        // need a connection to it, and the call queue does not wait for that.
        let handoff = SendHandoff()
        signaling.sendInvite(request, to: binding, callerFlow: call.callerFlow, sent: { [weak self] result in
            guard handoff.passLater(result), let self else { return }
            self.queue.async { self.branchSentLater(id, index, result) }
        }, onResponse: { [weak self] event in
            guard let self else { return }
            self.queue.async { self.branchEvent(id, index, event) }
        })
        if let result = handoff.takeInline() { branchSent(call, branch, result) }
    }

    /// The branch INVITE went out (its request and flow), or could not: a failed flow, and the
    /// device's next one is tried.
    private func branchSent(_ call: Call, _ branch: Branch, _ result: SentRequest<Flow>?) {
        guard let result else {
            if let journeyIndex = branch.journeyIndex {
                call.journey.branches[journeyIndex].responses.append(JourneyResponse(status: 503, reason: "unreachable", at: Date()))
                call.journey.branches[journeyIndex].endedAt = Date()
            }
            branch.final = 503
            branch.flowFailed = true
            considerFlowFailure(call)
            tryNextFlow(call, after: branch)
            return
        }
        branch.sent = result.request
        branch.flow = result.flow
        log("call.fork", ["call": call.journey.callID, "binding": branch.binding.id.uuidString, "late": branch.isLate ? "yes" : "no"])
        // A CANCEL wanted once a provisional came, which came before the send was known.
        if branch.gotProvisional, let reason = branch.cancelWanted { sendCancel(branch, reason: reason) }
    }

    /// A send that needed a connection first finished after its fork: the call may have moved on.
    private func branchSentLater(_ id: UUID, _ index: Int, _ result: SentRequest<Flow>?) {
        guard let call = calls[id], call.branches.indices.contains(index) else { return }
        branchSent(call, call.branches[index], result)
        if result == nil, call.phase == .ringing { finishIfNothingRings(call, nothingText: call.pushFailures.first ?? "no device woke in time") }
    }

    /// A branch that reached no device counts as a 408: below every answer a device gave, and
    /// never sent upstream as it is (`finishIfNothingRings` makes it a 480 saying why).
    private func considerFlowFailure(_ call: Call) {
        call.selector.consider(SIPResponse(replyingTo: call.invite, statusCode: 408, reasonPhrase: "Request Timeout"))
    }

    /// RFC 5626 §5.3: a branch whose flow failed (the connection closed under it, no answer at all,
    /// 408, 430 Flow Failed) is replaced by one over the device's next flow, when it has one; the
    /// failed flow is only left out, its binding and push channels stay.
    private func tryNextFlow(_ call: Call, after failed: Branch) {
        guard let signaling, let instance = failed.binding.instance else { return }
        let flows = CallTargets.flowsByDevice(directory.bindings(for: call.callee), reach: signaling.reach)
            .first { $0.first?.binding.instance == instance } ?? []
        guard let next = untriedFlow(call, among: flows) else { return }
        call.journey.events.append(JourneyEvent(
            at: Date(), text: "the flow to \(failed.binding.userAgent ?? "the device") failed; trying its next flow (\(next.flow.transport))"))
        // A next flow that fails at once tries the one after it (`fork` calls back here).
        fork(call, to: next, late: failed.isLate)
    }

    private func branchEvent(_ id: UUID, _ index: Int, _ event: ClientTransactionEvent) {
        guard let call = calls[id], call.branches.indices.contains(index) else { return }
        let branch = call.branches[index]
        let response = event.response
        let status = response.statusCode
        if let journeyIndex = branch.journeyIndex, status != 100 || call.journey.branches[journeyIndex].responses.isEmpty {
            let isRetransmission = status >= 200 && branch.final != nil
            if !isRetransmission {
                call.journey.branches[journeyIndex].responses.append(JourneyResponse(status: status, reason: response.reasonPhrase, at: Date()))
            }
        }
        if status < 200 {
            branch.gotProvisional = true
            if let reason = branch.cancelWanted, !branch.cancelSent {
                sendCancel(branch, reason: reason)
            } else if status > 100, call.phase != .ended, !call.answered {
                signaling?.respond(ProxyRules.upstream(response), to: call.handle)
            }
            return
        }
        let isFirstFinal = branch.final == nil
        branch.final = status
        if let journeyIndex = branch.journeyIndex, isFirstFinal { call.journey.branches[journeyIndex].endedAt = Date() }
        if (200..<300).contains(status) {
            // §16.7 step 5: every 2xx goes upstream at once, retransmissions included.
            signaling?.relay2xx(ProxyRules.upstream(response), to: call.handle, callerFlow: call.callerFlow)
            if isFirstFinal, !call.answered, call.phase != .ended {
                answered(call, by: branch)
            }
            return
        }
        guard isFirstFinal, call.phase != .ended, !call.answered else { return }
        // RFC 5626 §5.3: the flow failed, not the device's answer (430, 408, or the transport).
        let flowFailed = status == 430 || status == 408 || { if case .transportError = event { return true } else { return false } }()
        if let declined = branch.declinedAs {
            // Cancelled because its device declined over HTTP: it counts as that answer, not 487.
            call.selector.consider(SIPResponse(replyingTo: call.invite, statusCode: declined.status, reasonPhrase: declined.phrase))
        } else if flowFailed {
            considerFlowFailure(call)
        } else {
            call.selector.consider(ProxyRules.upstream(response))
        }
        if status >= 600 {
            // §16.7: a 6xx ends the search; the other branches are cancelled.
            end(call, response: Self.stripped(call.selector.chosen, call: call), outcome: .failed,
                reason: "\(branch.binding.userAgent ?? "a device") answered \(status) \(response.reasonPhrase)", cancelReason: nil, pushReason: "declined")
            return
        }
        if flowFailed, branch.cancelWanted == nil {
            branch.flowFailed = true
            tryNextFlow(call, after: branch)
        }
        if call.phase == .ringing { finishIfNothingRings(call, nothingText: call.pushFailures.first ?? "no device woke in time") }
    }

    private func answered(_ call: Call, by branch: Branch) {
        call.answered = true
        call.answeredByTag = call.devices.first { belongs(branch.binding, to: $0) }?.tag
        let now = Date()
        call.journey.answeredAt = now
        let device = branch.journeyIndex.map { call.journey.branches[$0].device } ?? "device"
        call.journey.answeredBy = device
        call.journey.events.append(JourneyEvent(at: now, text: "answered by \(device) after \(Self.seconds(now.timeIntervalSince(call.arrivedAt)))"))
        for other in call.branches where other !== branch && other.final == nil {
            cancel(other, of: call, reason: ProxyRules.completedElsewhere, because: "answered elsewhere")
        }
        close(call, outcome: .answered, finalStatus: 200, reason: "answered by \(device)", pushReason: "answered_elsewhere")
    }

    /// Ends the call when nothing rings and nothing is still to come: with the best branch answer,
    /// or 480 saying why.
    private func finishIfNothingRings(_ call: Call, nothingText: String) {
        guard call.phase == .ringing, !call.answered else { return }
        if call.branches.contains(where: { $0.final == nil }) { return }
        let chosen = call.selector.chosen
        if let chosen, chosen.statusCode != 408, chosen.statusCode != 480 {
            if [486, 600].contains(chosen.statusCode) { call.missed = true }
            end(call, response: Self.stripped(chosen, call: call), outcome: .failed,
                reason: "every device refused the call (best answer \(chosen.statusCode) \(chosen.reasonPhrase))", cancelReason: nil, pushReason: "declined")
            return
        }
        let text = call.branches.isEmpty ? nothingText : (call.devices.isEmpty ? "no device answered" : nothingText)
        end(call, response: unavailable(call, text), outcome: .unanswered, reason: text, cancelReason: nil, pushReason: "timeout")
    }

    private func ringTimedOut(_ call: Call) {
        guard call.phase != .ended, !call.answered else { return }
        let text = "no answer within \(Self.seconds(settings.ringTimeout))"
        end(call, response: unavailable(call, text), outcome: .unanswered, reason: text, cancelReason: ProxyRules.reason(cause: 480, text: text),
            pushReason: "timeout")
    }

    // MARK: - Woken devices coming back

    private func deviceMayBeBack(_ call: Call, bindings: [Binding]) {
        guard call.phase == .waiting || call.phase == .ringing, !call.answered else { return }
        var anyBack = false
        // A binding registered after the push is the woken app, awake by definition, even when
        // another instance holds its connection (the SIP side routes through that instance).
        for binding in bindings {
            for state in call.devices where state.declined == nil {
                guard let sentAt = state.sentAt, binding.registeredAt >= sentAt.addingTimeInterval(-0.05), state.device.matches(binding),
                    !state.returnedBindings.contains(binding.id)
                else { continue }
                state.returnedBindings.insert(binding.id)
                if case .woke = state.wake {} else {
                    let ms = max(0, Int(Date().timeIntervalSince(sentAt) * 1000))
                    state.wake = .woke(afterMilliseconds: ms)
                    metrics?.wakeLatency.observe(Double(ms) / 1000)
                    if let index = state.journeyIndex {
                        call.journey.pushes[index].wake = state.wake
                        journeys?.recordWake(pushID: state.pushID, state.wake)
                    }
                    call.journey.events.append(JourneyEvent(at: Date(), text: "\(state.device.name) registered again: \(state.wake.words)"))
                }
                anyBack = true
                // While the call waits, the woken app ends the wait and rings with the others; once
                // the call rings elsewhere, the late-comer joins the fork at once (late fork). Its
                // first fresh flow does; a second reg-id registering just after it does not.
                fork(call, to: binding, late: call.phase == .ringing, supersedingFlowsBefore: sentAt.addingTimeInterval(-0.05))
            }
        }
        if anyBack, call.phase == .waiting { waitEnded(call, because: nil) }
    }

    private func graceDevicesMayBeBack(_ aor: AddressOfRecord, bindings: [Binding]) {
        guard let signaling else { return }
        let now = Date()
        var remaining: [GraceDevice] = []
        for grace in graceDevices[aor] ?? [] where grace.until > now {
            guard let binding = bindings.first(where: { grace.device.matches($0) && $0.registeredAt >= grace.sentAt }),
                let target = try? SIPURI(parsing: binding.contact)
            else {
                remaining.append(grace)
                continue
            }
            // product.md: the INVITE and at once a CANCEL, so CallKit ends the call it showed.
            let request = ProxyRules.branchRequest(from: grace.invite, to: target)
            let holder = GraceSend()
            let ms = max(0, Int(now.timeIntervalSince(grace.sentAt) * 1000))
            let late = WakeResult.late(afterMilliseconds: ms)
            // The journey (if the call is still kept) says so too, so a later rewrite of it keeps it.
            if let call = calls[grace.callID], let index = call.journey.pushes.firstIndex(where: { $0.id == grace.pushID }) {
                call.journey.pushes[index].wake = late
                call.journey.events.append(JourneyEvent(at: now, text: "\(grace.device.name) registered again after the call ended: INVITE and CANCEL sent"))
                recordAfterEnd(call)
            }
            journeys?.recordWake(pushID: grace.pushID, late)
            signaling.sendInvite(request, to: binding, callerFlow: grace.callerFlow, sent: { [weak self] result in
                guard let self else { return }
                self.queue.async {
                    holder.sent = result
                    self.cancelGraceInvite(holder, reason: grace.reason)
                }
            }, onResponse: { [weak self] event in
                guard let self, event.response.statusCode < 200 else { return }
                self.queue.async {
                    holder.provisional = true
                    self.cancelGraceInvite(holder, reason: grace.reason)
                }
            })
            log("call.grace_invite", ["call": grace.invite.callID ?? "", "binding": binding.id.uuidString])
        }
        graceDevices[aor] = remaining.isEmpty ? nil : remaining
    }

    /// The CANCEL of a grace device's INVITE, once it is out and a provisional came (§9.1).
    private func cancelGraceInvite(_ holder: GraceSend, reason: String) {
        guard holder.provisional, !holder.cancelled, let sent = holder.sent else { return }
        holder.cancelled = true
        signaling?.sendCancel(ProxyRules.cancel(of: sent.request, reason: reason), over: sent.flow)
    }

    // MARK: - Declines and status (call tokens)

    /// Whether `binding` belongs to a pushed device of the call (its bindings then, its fresh
    /// REGISTER since, or a match by instance or token).
    private func belongs(_ binding: Binding, to state: DeviceState) -> Bool {
        state.device.bindingIDs.contains(binding.id) || state.returnedBindings.contains(binding.id)
            || (!state.device.isPostedOnly && state.device.matches(binding))
    }

    private func declinedDevice(_ call: Call, has binding: Binding) -> Bool {
        call.devices.contains { $0.declined != nil && belongs(binding, to: $0) }
    }

    private func deviceDeclined(_ call: Call, _ state: DeviceState, reason: DeclineReason) {
        guard state.declined == nil, call.phase != .ended, !call.answered else { return }
        state.declined = reason
        let answer: (status: Int, phrase: String) = reason == .busy ? (486, "Busy Here") : (603, "Decline")
        call.journey.events.append(JourneyEvent(at: Date(), text: "\(state.device.name) declined the call from the device (\(reason.rawValue))"))
        journeys?.recordCall(call.journey)
        log("call.declined", ["call": call.journey.callID, "device": state.device.name, "reason": reason.rawValue])
        for branch in call.branches where branch.final == nil && belongs(branch.binding, to: state) {
            branch.declinedAs = answer
            cancel(branch, of: call, reason: ProxyRules.reason(cause: answer.status, text: reason == .busy ? "busy" : "declined"),
                   because: "declined on the device")
        }
        guard call.devices.allSatisfy({ $0.declined != nil }) else {
            endWaitIfEveryPushFailed(call)
            return
        }
        // Every woken device said no. A desk phone still rings (or is still to ring after the wait).
        let otherBranchRings = call.branches.contains { $0.final == nil && $0.declinedAs == nil }
        if call.phase == .waiting, call.targets?.hasDeskPhone == true {
            waitEnded(call, because: "every pushed device declined")
            return
        }
        guard !otherBranchRings else { return }
        let busy = call.devices.allSatisfy { $0.declined == .busy }
        var response = SIPResponse(replyingTo: call.invite, statusCode: busy ? 486 : 603, reasonPhrase: busy ? "Busy Here" : "Decline", toTag: call.toTag)
        let text = busy ? "every device is busy" : "every device declined"
        response.headers.add(.reason, ProxyRules.reason(cause: busy ? 486 : 603, text: text))
        response.headers.add(.server, serverName)
        if busy { call.missed = true }
        end(call, response: response, outcome: .failed, reason: text, cancelReason: nil, pushReason: busy ? "busy" : "declined")
    }

    /// The `reason` of a missed-call notice for a cancel push's reason code.
    static func missedReason(forPushReason code: String) -> String {
        switch code {
        case "caller_hangup", "busy": return code
        default: return "no_answer"
        }
    }

    /// Issue 11: a call that ended unanswered shows as a missed call on each device that took part
    /// and can show one: FCM data (`call.missed`) or an APNs alert to the regular token. A device
    /// that declined, one whose push failed, and an iPhone known only by its VoIP token get none.
    private func wantsMissedNotice(_ call: Call, _ state: DeviceState) -> Bool {
        call.missed && state.accepted && state.declined == nil && state.device.cancelChannel != nil
    }

    /// The push that stops `state` ringing (when `cancelReason` is given), then its missed-call
    /// notice (when the call was missed), in that order: on FCM both share the ring's collapse
    /// key, so a device that was offline keeps the notice, the last of them.
    private func pushEndOfCall(_ call: Call, _ state: DeviceState, cancelReason: String?, until: Date) {
        guard let channel = state.device.cancelChannel else { return }
        let missedReason = wantsMissedNotice(call, state) ? Self.missedReason(forPushReason: cancelReason ?? "timeout") : nil
        guard cancelReason != nil || missedReason != nil else { return }
        let content = call.content
        let aor = call.callee.description
        let name = state.device.name
        let id = call.id
        Task { [self] in
            var lines: [String] = []
            if let cancelReason {
                let outcome = await pusher.cancel(content, reason: cancelReason, to: channel, expiresAt: until, aor: aor)
                lines.append("stopped ringing on \(name): call.canceled (\(cancelReason)) push \(outcome.word)"
                    + (outcome.word == "accepted" ? "" : ": \(outcome.explanation)"))
            }
            if let missedReason {
                let outcome = await pusher.missed(content, reason: missedReason, to: channel, aor: aor)
                lines.append("missed-call notice to \(name): \(outcome.word)" + (outcome.word == "accepted" ? "" : ": \(outcome.explanation)"))
            }
            let done = lines
            queue.async { [self] in
                guard let call = calls[id] else { return }
                for line in done { call.journey.events.append(JourneyEvent(at: Date(), text: line)) }
                recordAfterEnd(call)
            }
        }
    }

    /// Records a journey that changed after its call ended (a late push answer, a cancel push's
    /// outcome), in the answered call's talking copy too, so the BYE's rewrite keeps the change.
    private func recordAfterEnd(_ call: Call) {
        talking.update(call.journey, for: call.journey.callID)
        journeys?.recordCall(call.journey)
    }

    /// Keeps how a call ended while its tokens may still ask, then forgets it. A call that pushed
    /// nobody issued no token, so nothing is kept (it may have ended while starting).
    private func rememberEnd(_ call: Call, outcome: CallOutcome, reason: String) {
        guard callTokens != nil, !call.devices.isEmpty else { return }
        endedCalls[call.id] = EndedCall(
            callee: call.callee, outcome: outcome, reason: reason, answeredByTag: call.answeredByTag, missed: call.missed,
            declinedTags: Set(call.devices.filter { $0.declined != nil }.map(\.tag)))
        let id = call.id
        let keep = max(0, call.ringDeadline.timeIntervalSinceNow) + Self.callTokenMargin + 5
        queue.asyncAfter(deadline: .now() + keep) { [weak self] in self?.endedCalls[id] = nil }
    }

    private func status(of call: Call, for claims: CallTokenClaims) -> CallStatus {
        let declinedHere = call.devices.contains { $0.tag == claims.device && $0.declined != nil }
        return CallStatus(state: .ringing, reason: declinedHere ? "declined on this device" : nil, declinedHere: declinedHere)
    }

    private static func status(of ended: EndedCall, for claims: CallTokenClaims) -> CallStatus {
        let declinedHere = ended.declinedTags.contains(claims.device)
        switch ended.outcome {
        case .answered:
            let here = ended.answeredByTag == claims.device
            let words = here ? "answered on this device" : "answered on another device"
            return CallStatus(state: ended.hungUp ? .ended : .answered, reason: ended.hungUp ? "hung up after it was \(words)" : words,
                              answeredHere: here, declinedHere: declinedHere)
        case .canceled:
            return CallStatus(state: .canceled, reason: ended.reason, missed: ended.missed, declinedHere: declinedHere)
        case .ringing, .unanswered, .failed:
            return CallStatus(state: .ended, reason: ended.reason, missed: ended.missed, declinedHere: declinedHere)
        }
    }

    /// The ringing call a token names, when this instance holds it.
    private func ringingCall(_ claims: CallTokenClaims) -> Call? {
        guard let call = calls[claims.callID], call.callee == claims.aor, call.phase != .ended else { return nil }
        return call
    }

    // MARK: - Ending

    /// Ends an unanswered call: the final response to the caller, CANCEL to the branches, cancel
    /// pushes to woken devices that are not ringing over SIP.
    private func end(_ call: Call, response: SIPResponse, outcome: CallOutcome, reason: String, cancelReason: String?, pushReason: String) {
        guard call.phase != .ended else { return }
        signaling?.respond(response, to: call.handle)
        for branch in call.branches where branch.final == nil {
            cancel(branch, of: call, reason: cancelReason ?? ProxyRules.reason(cause: response.statusCode, text: reason), because: reason)
        }
        close(call, outcome: outcome, finalStatus: response.statusCode, reason: reason, pushReason: pushReason)
    }

    private func close(_ call: Call, outcome: CallOutcome, finalStatus: Int, reason: String, pushReason: String) {
        let now = Date()
        call.phase = .ended
        call.journey.outcome = outcome
        call.journey.finalStatus = finalStatus
        call.journey.reason = reason
        // An answered call ends when its BYE passes (`dialogEnded`); until then it is talking.
        call.journey.endedAt = outcome == .answered ? nil : now
        call.journey.events.append(JourneyEvent(at: now, text: "call \(outcome.rawValue): \(finalStatus) \(reason)"))
        if outcome == .unanswered || outcome == .canceled { call.missed = true }
        call.journey.missed = call.missed
        stopWokenDevices(call, reason: pushReason)
        rememberEnd(call, outcome: outcome, reason: reason)
        for state in call.devices where state.wake == .pending && state.journeyIndex != nil {
            state.wake = outcome == .unanswered ? .notInTime : .callEnded
            if let index = state.journeyIndex { call.journey.pushes[index].wake = state.wake }
        }
        liveCallsByCallee[call.callee]?.remove(call.id)
        if liveCallsByCallee[call.callee]?.isEmpty == true { liveCallsByCallee[call.callee] = nil }
        metrics?.live.set(Double(liveCallsByCallee.values.reduce(0) { $0 + $1.count }))
        metrics?.calls.increment(["outcome": outcome.rawValue])
        journeys?.recordCall(call.journey)
        if outcome == .answered {
            talking.insert(call.journey, for: call.journey.callID, at: now)
            armTalkingPrune()
        }
        log("call.ended", ["call": call.journey.callID, "outcome": outcome.rawValue, "status": String(finalStatus), "reason": reason])
        // Keep the call for late responses (2xx retransmissions, CANCEL answers), then forget it.
        let id = call.id
        queue.asyncAfter(deadline: .now() + settings.endedCallKeep.timeInterval) { [weak self] in
            guard let self, let call = self.calls.removeValue(forKey: id) else { return }
            self.callByHandle[call.handle] = nil
        }
    }

    /// Lets go of answered calls whose BYE did not pass within `maxCallDuration`, when the oldest
    /// of them reaches it (one timer at a time).
    private func armTalkingPrune() {
        guard !talkingPruneArmed, let oldest = talking.oldestInsertedAt else { return }
        talkingPruneArmed = true
        let delay = max(0, oldest.addingTimeInterval(talking.maxAge).timeIntervalSinceNow)
        queue.asyncAfter(deadline: .now() + delay) { [weak self] in
            guard let self else { return }
            talkingPruneArmed = false
            talking.prune(now: Date())
            armTalkingPrune()
        }
    }

    /// product.md step 5: a woken device must stop ringing when the call ends before it answered.
    private func stopWokenDevices(_ call: Call, reason: String) {
        let until = Date().addingTimeInterval(settings.cancelGrace.timeInterval)
        for state in call.devices where state.sentAt != nil && state.wake != .notPushed && state.declined == nil {
            let ringingOverSIP = call.branches.contains { branch in
                branch.gotProvisional && (state.device.bindingIDs.contains(branch.binding.id) || state.returnedBindings.contains(branch.binding.id))
            }
            if ringingOverSIP {
                // Its SIP CANCEL stops the ring; a missed call is still told.
                pushEndOfCall(call, state, cancelReason: nil, until: until)
            } else if state.device.cancelChannel != nil {
                pushEndOfCall(call, state, cancelReason: reason, until: until)
            } else if state.device.ringChannel.family == .apns {
                // An iPhone with only its VoIP token: never a second VoIP push. If it registers
                // within the grace period, it gets the INVITE and at once a CANCEL.
                graceDevices[call.callee, default: []].append(GraceDevice(
                    callID: call.id, device: state.device, pushID: state.pushID, sentAt: state.sentAt ?? Date(), until: until,
                    invite: call.invite, callerFlow: call.callerFlow, reason: Self.sipReason(forPushReason: reason)))
                forgetGraceDevices(of: call.callee, at: until)
                call.journey.events.append(JourneyEvent(
                    at: Date(), text: "\(state.device.name) has only a VoIP token: if it registers within \(Self.seconds(settings.cancelGrace)) it gets the INVITE and a CANCEL"))
            }
        }
    }

    /// Lets go of the grace devices of `aor` whose grace has passed, at `until`: an iPhone that
    /// never registers again is not kept for ever.
    private func forgetGraceDevices(of aor: AddressOfRecord, at until: Date) {
        queue.asyncAfter(deadline: .now() + max(0, until.timeIntervalSinceNow)) { [weak self] in
            guard let self, let devices = graceDevices[aor] else { return }
            let now = Date()
            let remaining = devices.filter { $0.until > now }
            graceDevices[aor] = remaining.isEmpty ? nil : remaining
        }
    }

    /// The RFC 3326 Reason of the CANCEL a late iPhone gets, for a cancel push's reason code.
    static func sipReason(forPushReason code: String) -> String {
        switch code {
        case "answered_elsewhere": return ProxyRules.completedElsewhere
        case "caller_hangup": return ProxyRules.reason(cause: 487, text: "caller hung up")
        case "timeout": return ProxyRules.reason(cause: 480, text: "no answer")
        default: return ProxyRules.reason(cause: 487, text: "call ended")
        }
    }

    private func cancel(_ branch: Branch, of call: Call, reason: String, because why: String) {
        guard branch.final == nil else { return }
        branch.cancelWanted = reason
        if let index = branch.journeyIndex { call.journey.branches[index].canceledBecause = why }
        // §9.1: a CANCEL may only follow a provisional response; otherwise it is sent when one comes.
        if branch.gotProvisional { sendCancel(branch, reason: reason) }
    }

    private func sendCancel(_ branch: Branch, reason: String) {
        guard let sent = branch.sent, let flow = branch.flow, !branch.cancelSent else { return }
        branch.cancelSent = true
        signaling?.sendCancel(ProxyRules.cancel(of: sent, reason: reason), over: flow)
    }

    // MARK: - Helpers

    private func respondAtOnce(_ request: SIPRequest, _ handle: ServerTransactionHandle, _ status: Int, _ reason: String) {
        var response = SIPResponse(replyingTo: request, statusCode: status, reasonPhrase: reason, toTag: Self.makeTag())
        response.headers.add(.server, serverName)
        signaling?.respond(response, to: handle)
    }

    /// 480 with the reason in the status line and in a Reason header (decisions.md).
    private func unavailable(_ call: Call, _ text: String) -> SIPResponse {
        var response = SIPResponse(replyingTo: call.invite, statusCode: 480, reasonPhrase: Self.phrase(text), toTag: call.toTag)
        response.headers.add(.reason, ProxyRules.reason(cause: 480, text: text))
        response.headers.add(.server, serverName)
        return response
    }

    /// A branch's response as the caller's final answer; nil falls back to 480.
    private static func stripped(_ response: SIPResponse?, call: Call) -> SIPResponse {
        response ?? SIPResponse(replyingTo: call.invite, statusCode: 480, reasonPhrase: "Temporarily Unavailable", toTag: call.toTag)
    }

    /// A reason phrase: the text with a capital letter, limited to what a status line may hold.
    static func phrase(_ text: String) -> String {
        let cleaned = String(text.filter { $0 != "\r" && $0 != "\n" }.prefix(120))
        return cleaned.prefix(1).uppercased() + cleaned.dropFirst()
    }

    private func schedule(_ call: Call, at deadline: Date, _ body: @escaping @Sendable (Call) -> Void) {
        let delay = max(0, deadline.timeIntervalSinceNow)
        let id = call.id
        queue.asyncAfter(deadline: .now() + delay) { [weak self] in
            guard let self, let call = self.calls[id] else { return }
            body(call)
        }
    }

    static func makeTag() -> String {
        var generator = SystemRandomNumberGenerator()
        return String(generator.next() as UInt64, radix: 36)
    }

    static func seconds(_ duration: Duration) -> String { seconds(duration.timeInterval) }

    static func seconds(_ interval: TimeInterval) -> String {
        interval == interval.rounded() ? "\(Int(interval)) s" : String(format: "%.1f s", interval)
    }

    static func isVideo(_ invite: SIPRequest) -> Bool {
        // Bytes, not Foundation's String search: the body comes from the network.
        let needle = Array("m=video".utf8)
        let body = invite.body
        guard body.count >= needle.count else { return false }
        return (0...(body.count - needle.count)).contains { start in body[start..<(start + needle.count)].elementsEqual(needle) }
    }

    // MARK: - State

    enum Phase { case starting, waiting, ringing, ended }

    /// One call in progress. @unchecked Sendable: only touched on the coordinator's `queue`.
    final class Call: @unchecked Sendable {
        let id = UUID()
        let invite: SIPRequest
        let handle: ServerTransactionHandle
        let callerFlow: Flow
        let callee: AddressOfRecord
        let arrivedAt: Date
        var journey: CallJourney
        let toTag: String
        var phase = Phase.starting
        var targets: CallTargets?
        var content = CallPushContent(callID: "", callerNumber: "", calleeNumber: "", ringTimeoutSeconds: 0)
        var devices: [DeviceState] = []
        var branches: [Branch] = []
        var selector = ForkResponseSelector()
        var answered = false
        var waitDeadline = Date.distantFuture
        var ringDeadline = Date.distantFuture
        var pushFailures: [String] = []
        /// The posted tokens and dead marks have been read (or could not be).
        var tokensRead = false
        /// The call token device tag of the device whose branch answered.
        var answeredByTag: String?
        /// The extension is told of a missed call when this call ends.
        var missed = false

        init(invite: SIPRequest, handle: ServerTransactionHandle, callerFlow: Flow, callee: AddressOfRecord, arrivedAt: Date, journey: CallJourney, toTag: String) {
            self.invite = invite
            self.handle = handle
            self.callerFlow = callerFlow
            self.callee = callee
            self.arrivedAt = arrivedAt
            var journey = journey
            journey.id = id
            self.journey = journey
            self.toTag = toTag
        }
    }

    /// A pushed device of a call. @unchecked Sendable: only touched on `queue`.
    final class DeviceState: @unchecked Sendable {
        var device: WakeDevice
        let pushID = UUID()
        var sentAt: Date?
        var accepted = false
        var wake = WakeResult.pending
        var journeyIndex: Int?
        var returnedBindings: Set<UUID> = []
        /// Declined from the device (over HTTP, with its call token).
        var declined: DeclineReason?
        /// The device part of its call token.
        let tag: String

        init(device: WakeDevice) {
            self.device = device
            tag = CallTokenSigner.deviceTag(device.key)
        }
    }

    /// A branch's binding and the flow it went over (a binding that registered again from a new
    /// connection is a new branch).
    struct BranchKey: Hashable {
        var bindingID: UUID
        var flow: String
        var instance: String

        init(_ binding: Binding) {
            bindingID = binding.id
            flow = binding.flow.connectionID
            instance = binding.flow.instanceID
        }
    }

    /// One branch of the fork. @unchecked Sendable: only touched on `queue`.
    final class Branch: @unchecked Sendable {
        let key: BranchKey
        let binding: Binding
        let isLate: Bool
        var sent: SIPRequest?
        var flow: Flow?
        var journeyIndex: Int?
        var gotProvisional = false
        var final: Int?
        var cancelWanted: String?
        var cancelSent = false
        /// Cancelled because its device declined: the answer it stands for.
        var declinedAs: (status: Int, phrase: String)?
        /// Its flow failed (RFC 5626 §5.3): it does not keep the device's other flows from the call.
        var flowFailed = false

        init(key: BranchKey, binding: Binding, isLate: Bool) {
            self.key = key
            self.binding = binding
            self.isLate = isLate
        }
    }

    /// How a call ended, for its tokens' status questions.
    struct EndedCall: Sendable {
        var callee: AddressOfRecord
        var outcome: CallOutcome
        var reason: String
        var answeredByTag: String?
        var missed: Bool
        var declinedTags: Set<String>
        /// The answered call's BYE has passed.
        var hungUp = false
    }

    struct GraceDevice: Sendable {
        var callID: UUID
        var device: WakeDevice
        var pushID: UUID
        var sentAt: Date
        var until: Date
        var invite: SIPRequest
        var callerFlow: Flow
        var reason: String
    }

    /// The INVITE of a grace device and whether its CANCEL went. @unchecked Sendable: only
    /// touched on `queue`.
    final class GraceSend: @unchecked Sendable {
        var sent: SentRequest<Flow>?
        var provisional = false
        var cancelled = false
    }

    /// Hands the result of a branch's send to the fork that asked for it when it came before
    /// `sendInvite` returned, else to the queue. Thread-safe: a lock guards both fields.
    final class SendHandoff: @unchecked Sendable {
        private let lock = NSLock()
        private var forkReturned = false
        private var early: SentRequest<Flow>??

        /// From the send: true when the fork has returned, so the result must go through the queue.
        func passLater(_ result: SentRequest<Flow>?) -> Bool {
            lock.withLock {
                if forkReturned { return true }
                early = .some(result)
                return false
            }
        }

        /// From the fork once `sendInvite` returned: the result, when it came already.
        func takeInline() -> SentRequest<Flow>?? {
            lock.withLock {
                forkReturned = true
                return early
            }
        }
    }
}

extension CallCoordinator: CallControl {
    public func decline(_ claims: CallTokenClaims, reason: DeclineReason, completion: @escaping @Sendable (CallStatus?) -> Void) {
        queue.async { [self] in
            if let call = ringingCall(claims), let state = call.devices.first(where: { $0.tag == claims.device }) {
                deviceDeclined(call, state, reason: reason)
            }
            completion(currentStatus(claims))
        }
    }

    public func status(_ claims: CallTokenClaims, completion: @escaping @Sendable (CallStatus?) -> Void) {
        queue.async { [self] in completion(currentStatus(claims)) }
    }

    /// On `queue`: the status the token's device sees now.
    private func currentStatus(_ claims: CallTokenClaims) -> CallStatus? {
        if let call = ringingCall(claims) { return status(of: call, for: claims) }
        if let ended = endedCalls[claims.callID], ended.callee == claims.aor { return Self.status(of: ended, for: claims) }
        return nil
    }
}

/// The call metrics in `/metrics`.
struct CallMetrics: Sendable {
    let calls: MetricsRegistry.Counter
    let pushes: MetricsRegistry.Counter
    let pushLatency: MetricsRegistry.Histogram
    let wakeLatency: MetricsRegistry.Histogram
    let live: MetricsRegistry.Gauge

    init(_ registry: MetricsRegistry) {
        calls = registry.counter("rouse_calls_total", help: "Calls to extensions that ended, by outcome (answered, canceled, unanswered, failed).")
        pushes = registry.counter("rouse_call_pushes_total", help: "Ring pushes sent for calls, by provider and outcome (accepted, refused, failed).")
        pushLatency = registry.histogram("rouse_push_latency_seconds", help: "Time from sending a ring push to the provider's answer.")
        wakeLatency = registry.histogram(
            "rouse_wake_latency_seconds", help: "Time from a ring push to the woken device's fresh REGISTER.",
            buckets: [0.25, 0.5, 1, 1.5, 2, 3, 4, 6, 8, 12, 20, 45])
        live = registry.gauge("rouse_calls_live", help: "Calls ringing now on this instance.")
    }
}
