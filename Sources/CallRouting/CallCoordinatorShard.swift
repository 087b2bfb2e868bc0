import Dispatch
public import Foundation
public import Metrics
import Push
public import Registrar
public import RouseLog
import RouseVocabulary
public import SIPMessage
import SIPProxy
public import SIPTransaction

/// One shard of the call coordinator (`CallCoordinator`, which describes the whole): the shell
/// around the `CallStateMachine` of each call whose Call-ID hashes to it. It admits an INVITE,
/// feeds the call's machine its events with the time, and carries out the actions it returns: SIP
/// answers, branches and CANCELs through `CallSignaling`, pushes through `CallPushing`, timers
/// through a `TimerScheduler`, the journey through a `JourneyRecorder` into the `JourneyStore`.
/// It keeps what spans its calls: the calls of each callee, its copy of the dead-token marks
/// (every shard gets each mark), VoIP-only iPhones in their cancel grace, and answered calls
/// until their BYE (which carries the same Call-ID, so it comes to the same shard).
///
/// Threading: all state lives on the shard's serial queue (`rouse.calls.<n>`); every entry point
/// hops onto it and returns at once. Pushes run as tasks whose results hop back onto the queue;
/// SIP sends go through `CallSignaling`, which never blocks. What the shards share (the live-call
/// count, the toll-fraud guard) is in `CallShardsShared`.
///
/// Not generic over the SIP side: flows are `CallFlow`s and the SIP side is reached through a
/// `CallSignalingEdge`, so this code and the machines it runs are specialised here.
final class CallCoordinatorShard: @unchecked Sendable {
    // @unchecked: every mutable property below is only touched on `queue`; `edge` and
    // `spreadDeadMark` are set once by `attach` before the SIP side delivers any INVITE.
    typealias Flow = CallFlow

    let queue: DispatchQueue
    /// This shard's place among the coordinator's.
    let index: Int
    private var edge: (any CallSignalingEdge)?
    /// The SIP side, while it is there.
    var signaling: (any CallSignalingEdge)? {
        guard let edge, edge.isAttached else { return nil }
        return edge
    }
    /// Hands a dead-token mark made here to the other shards (the coordinator in front does).
    private var spreadDeadMark: (@Sendable (PushTokenID, AddressOfRecord, Date) -> Void)?
    let shared: CallShardsShared
    private let directory: any CalleeDirectory
    private let tokens: (any WakeTokenSource)?
    /// The stale-device record: which tokens not to push, where ring-push ends go.
    let liveness: (any DeviceLiveness)?
    let pusher: any CallPushing
    let journeys: (any JourneyStore)?
    private let authenticator: DigestAuthenticator
    private let throttle: AuthFailureThrottle?
    let settings: CallSettings
    private let ownNames: Set<String>
    let serverName: String
    let instanceID: String
    private let metrics: CallMetrics?
    private let callTokens: CallTokenSigner?
    let wakeCredentials: WakeCredentialMinting?
    let scheduler: any TimerScheduler
    let clock: @Sendable () -> Date
    let logger: Logger

    /// What this instance holds for each callee.
    var callees: [AddressOfRecord: CalleeCalls] = [:]
    private var callByHandle: [ServerTransactionHandle: (callee: AddressOfRecord, id: UUID)] = [:]
    /// Tokens a provider called dead (seen here, or read from PostgreSQL), by `family:token`, with
    /// when: not pushed again until a binding carrying the token registers after that moment.
    /// Forgotten after `deadTokenMemory` (PostgreSQL keeps the mark; the next call reads it again).
    private var deadTokens: ExpiringTable<PushTokenID, Date>
    /// The tokens of each AOR this shard marked dead (some may have left `deadTokens` since),
    /// and so the AORs it told `shared` it holds marks of.
    private var deadMarksByAOR: [AddressOfRecord: Set<PushTokenID>] = [:]
    /// Answered calls whose dialog is still up, by SIP Call-ID: their journey gets the hang-up. At
    /// most 100,000, each for at most `maxCallDuration` (a BYE Rouse never saw lets go of it).
    var talking: ExpiringTable<String, CallJourney>
    /// Answered calls whose answering device can be told by push that the call ended
    /// (`AnsweredCall`), by SIP Call-ID; as many and as long as `talking`.
    var answeredCalls: ExpiringTable<String, AnsweredEntry>
    /// A prune of `talking` is scheduled.
    private var talkingPruneArmed = false
    /// Outside calls (issue 19): their machines, the routes, the toll-fraud guard.
    var outside: OutsideCalls<Flow>
    /// How each call ended, kept while its call tokens can still ask (`status`).
    private var endedCalls: [UUID: (callee: AddressOfRecord, ending: CallEnding)] = [:]

    /// The coordinator makes its shards (see `CallCoordinator.init` for the parameters); what
    /// they share is passed in once, made by it.
    init(
        index: Int, shared: CallShardsShared, directory: any CalleeDirectory, tokens: (any WakeTokenSource)?, pusher: any CallPushing,
        journeys: (any JourneyStore)?, authenticator: DigestAuthenticator, throttle: AuthFailureThrottle?, settings: CallSettings,
        ownNames: Set<String>, serverName: String, instanceID: String, metrics: CallMetrics?, outsideMetrics: OutsideCallMetrics?,
        callTokens: CallTokenSigner?, wakeCredentials: WakeCredentialMinting?, scheduler: any TimerScheduler,
        clock: @escaping @Sendable () -> Date, logger: Logger, liveness: (any DeviceLiveness)?
    ) {
        self.index = index
        queue = DispatchQueue(label: index == 0 ? "rouse.calls" : "rouse.calls.\(index)")
        self.shared = shared
        self.liveness = liveness
        self.callTokens = callTokens
        self.wakeCredentials = wakeCredentials
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
        self.metrics = metrics
        self.scheduler = scheduler
        self.clock = clock
        self.logger = logger
        deadTokens = ExpiringTable(limit: 100_000, maxAge: settings.deadTokenMemory.timeInterval)
        talking = ExpiringTable(limit: 100_000, maxAge: settings.maxCallDuration.timeInterval)
        answeredCalls = ExpiringTable(limit: 100_000, maxAge: settings.maxCallDuration.timeInterval)
        outside = OutsideCalls(metrics: outsideMetrics)
    }

    /// Connects the SIP side, and the coordinator in front that spreads dead-token marks.
    func attach(_ edge: any CallSignalingEdge, spreadDeadMark: @escaping @Sendable (PushTokenID, AddressOfRecord, Date) -> Void) {
        queue.sync {
            self.edge = edge
            self.spreadDeadMark = spreadDeadMark
        }
    }

    /// What this shard holds now (`CallCoordinator.occupancy`), counted on its queue.
    var occupancy: CallOccupancy {
        queue.sync {
            CallOccupancy(
                calls: callees.values.reduce(0) { $0 + $1.calls.count }, endedCalls: endedCalls.count, talking: talking.count,
                deadTokens: deadTokens.count, graceDevices: callees.values.reduce(0) { $0 + $1.grace.count }, callees: callees.count)
        }
    }

    // MARK: - Entry points

    /// An INVITE outside any dialog arrived (its server transaction already sent 100 Trying).
    func handleInvite(_ invite: SIPRequest, handle: ServerTransactionHandle, callerFlow: Flow, sourceIP: String, transport: String) {
        queue.async { [self] in
            let arrivedAt = clock()
            if let tooMany = ProxyRules.tooManyHops(invite) {
                signaling?.respond(tooMany, to: handle)
                return
            }
            if ProxyRules.isLooping(invite, instanceMarker: instanceID), isLoop(invite) {
                var response = SIPResponse(replyingTo: invite, statusCode: 482, reasonPhrase: "Loop Detected", toTag: Self.makeTag())
                response.headers.add(.server, serverName)
                signaling?.respond(response, to: handle)
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
                // Gateway mode: the PBX keeps the dialplan, so even a call to another extension goes there.
                if let caller, outside.policy.gateway(for: caller.domain) != nil, let target = DialledTarget(invite.uri) {
                    return beginOutside(
                        invite, handle: handle, callerFlow: callerFlow, target: target, caller: caller, inOwnDomain: true, source: sourceIP,
                        transport: transport, at: arrivedAt, toExtension: true)
                }
                begin(
                    invite, handle: handle, callerFlow: callerFlow, callee: callee, caller: caller, source: sourceIP, transport: transport, at: arrivedAt,
                    snapshot: snapshot)
            case .outside(let target, let caller, let inOwnDomain):
                beginOutside(
                    invite, handle: handle, callerFlow: callerFlow, target: target, caller: caller, inOwnDomain: inOwnDomain, source: sourceIP,
                    transport: transport, at: arrivedAt)
            }
        }
    }

    /// §16.3 step 4 for an INVITE that already passed through this instance (its Via says so):
    /// a loop when a call in progress here arrived with the same Call-ID, From tag, CSeq and
    /// Request-URI; otherwise a spiral (the PBX of gateway mode sends a call of Rouse's back to
    /// the Contact Rouse registered there, a new Request-URI) and it is taken as a new call.
    private func isLoop(_ invite: SIPRequest) -> Bool {
        func same(_ other: SIPRequest) -> Bool {
            other.callID == invite.callID && other.from?.tag == invite.from?.tag && other.cseq?.number == invite.cseq?.number
                && other.uri == invite.uri
        }
        return callees.values.contains { $0.calls.values.contains { $0.machine.phase != .ended && same($0.machine.setup.invite) } }
            || outside.calls.values.contains { !$0.ended && same($0.machine.setup.invite) }
    }

    /// The caller's CANCEL matched the INVITE transaction `handle` (already answered 200).
    func handleCancel(of handle: ServerTransactionHandle, reason: String?) {
        queue.async { [self] in
            if outsideCanceled(handle, reason: reason) { return }
            guard let key = callByHandle[handle] else { return }
            deliver(.callerCanceled(reason: reason), to: key.callee, key.id)
        }
    }

    /// The bindings of `aor` changed (a REGISTER here, or another instance's, announced by NOTIFY).
    func bindingsChanged(_ aor: AddressOfRecord) {
        queue.async { [self] in
            let held = callees[aor]
            let hasCalls = (held?.live ?? 0) > 0
            let hasGrace = !(held?.grace.isEmpty ?? true)
            let marks = deadMarksByAOR[aor]
            guard hasCalls || hasGrace || marks != nil else { return }
            let bindings = directory.bindings(for: aor)
            // A device that registers its token again revives it (product.md "The pushes").
            for binding in bindings {
                for channel in binding.pushChannels {
                    let key = channel.tokenID
                    if let markedAt = deadTokens[key], binding.registeredAt > markedAt { deadTokens.removeValue(forKey: key) }
                }
            }
            if let marks { keepDeadMarks(of: aor, marks, held: Set(bindings.flatMap { $0.pushChannels.map(\.tokenID) })) }
            for entry in held?.calls.values.filter({ $0.machine.phase != .ended }) ?? [] {
                run(.bindingsChanged, on: entry, bindings: bindings)
            }
            if hasGrace { graceDevicesMayBeBack(aor, bindings: bindings) }
        }
    }

    /// After a change of `aor`'s bindings: its marks still in `deadTokens` of tokens it still
    /// holds stay. A token it no longer holds left it, and whoever registers that token next
    /// does so after the mark, which revives it: that mark goes too. With none left, the AOR's
    /// changes stop reaching this shard.
    private func keepDeadMarks(of aor: AddressOfRecord, _ marks: Set<PushTokenID>, held: Set<PushTokenID>) {
        var kept: Set<PushTokenID> = []
        for key in marks where deadTokens[key] != nil {
            if held.contains(key) { kept.insert(key) } else { deadTokens.removeValue(forKey: key) }
        }
        if kept.isEmpty {
            deadMarksByAOR[aor] = nil
            shared.setHoldsDeadMarks(false, of: aor, shard: index)
        } else {
            deadMarksByAOR[aor] = kept
        }
    }

    /// A BYE of an answered call passed through Rouse: its journey gets the end of the talk.
    /// `fromCallee` says which side hung up, when known.
    func dialogEnded(callID: String, fromCallee: Bool?) {
        queue.async { [self] in
            answeredCallEvent(.byeForwarded(fromCallee: fromCallee), callID: callID)
            guard let journey = talking.removeValue(forKey: callID), let answeredAt = journey.answeredAt else { return }
            let now = clock()
            endedCalls[journey.id]?.ending.hungUp = true
            var recorder = JourneyRecorder(continuing: journey)
            _ = recorder.apply(.hungUp(fromCallee: fromCallee, afterTalk: now.timeIntervalSince(answeredAt)), at: now)
            callees[journey.callee]?.calls[journey.id]?.recorder = recorder
            journeys?.recordCall(recorder.journey)
            keepForEndedPush(recorder.journey, callID: callID)
        }
    }

    /// Ends every call still ringing (Rouse is stopping): 503 to the caller with the reason,
    /// CANCEL to the branches, cancel pushes, and the journey recorded. Returns how many it ended.
    func endAll(reason: String) -> Int {
        queue.sync { [self] in
            let live = callees.values.flatMap(\.calls.values).filter { $0.machine.phase != .ended && !$0.machine.answered }
            for entry in live { run(.stopping(reason: reason), on: entry) }
            return live.count + stopOutsideCalls(reason: reason)
        }
    }

    /// Waits until every queued event has been handled (tests and shutdown).
    func drain() {
        queue.sync {}
    }

    // MARK: - Starting a call

    /// Starts a call for `callee` on the caller's server transaction `handle`. `diverted`: the
    /// call is the target's side of a diversion (the handle then moves to it from the diverted
    /// call, whose To tag it keeps). `snapshot`: the directory as the admission read it (read
    /// again when not given).
    private func begin(
        _ invite: SIPRequest, handle: ServerTransactionHandle, callerFlow: Flow, callee: AddressOfRecord, caller: AddressOfRecord?,
        source: String, transport: String, at arrivedAt: Date, diverted: (from: AddressOfRecord, cause: DiversionCause, toTag: String)? = nil,
        snapshot: DirectorySnapshot? = nil
    ) {
        guard diverted != nil || callByHandle[handle] == nil else { return }
        let from = invite.from
        let id = UUID()
        let journey = CallJourney(
            id: id, callID: invite.callID ?? "", callee: callee, caller: from?.uri.description ?? "", callerName: from?.displayName,
            transport: transport, source: source, instanceID: instanceID, startedAt: arrivedAt)
        var recorder = JourneyRecorder(journey, authenticatedAs: caller)
        if let diverted { _ = recorder.apply(.divertedHere(from: diverted.from, cause: diverted.cause), at: arrivedAt) }
        let snapshot = snapshot ?? directory.directorySnapshot()
        let rules = usableDiversion(snapshot.diversions[callee], of: callee, in: snapshot, recorder: &recorder, at: arrivedAt)
        let machine = CallStateMachine<Flow>(.init(
            id: id, invite: invite, callee: callee, arrivedAt: arrivedAt, toTag: diverted?.toTag ?? Self.makeTag(), serverName: serverName,
            settings: settings, diversion: rules, calleeName: snapshot.displayNames[callee],
            callerExtensionName: caller.flatMap { snapshot.displayNames[$0] }))
        let entry = CallEntry(machine: machine, recorder: recorder, handle: handle, callerFlow: callerFlow, caller: caller)
        hold(callee)
        callees[callee, default: CalleeCalls()].calls[id] = entry
        callees[callee]?.live += 1
        shared.addLiveCalls(1)
        callByHandle[handle] = (callee, id)
        logger.info("call.started", ["call": journey.callID, "callee": callee.description, "caller": journey.caller])

        let bindings = directory.bindings(for: callee)
        deadTokens.prune(now: arrivedAt)
        run(.admitted(targets(bindings, posted: []), tokensPending: tokens != nil), on: entry, bindings: bindings)
        guard let tokens else { return }
        // Posted tokens and dead marks made by other instances are read meanwhile and join the
        // call when they arrive.
        let channels = bindings.flatMap(\.pushChannels)
        Task { [self] in
            let found: (posted: [PostedToken], dead: Set<PushTokenID>)?
            do {
                found = try await tokens.wakeTokens(for: callee, checking: channels)
            } catch {
                found = nil
                logger.info("call.tokens_unavailable", ["call": journey.callID, "error": "\(error)"])
            }
            queue.async { [self] in
                let now = clock()
                for key in found?.dead ?? [] where deadTokens[key] == nil { markDead(key, of: callee, at: now) }
                deliver(.tokensRead(targets(bindings, posted: found?.posted ?? []), readFailed: found == nil), to: callee, id)
            }
        }
    }

    // MARK: - Diversion

    /// The local extension a forwarding target names: a SIP URI at one of Rouse's domains whose
    /// user part is an extension there.
    private static func localExtension(_ target: SIPURI, in snapshot: DirectorySnapshot) -> AddressOfRecord? {
        guard target.scheme != .tel, let user = target.user, snapshot.domains.contains(target.host.lowercased()) else { return nil }
        let aor = AddressOfRecord(number: user, domain: target.host)
        return snapshot.extensions[aor] == nil ? nil : aor
    }

    /// Whether the coordinator can follow a forwarding to `target` now, and if not why.
    private func unusable(_ target: SIPURI, in snapshot: DirectorySnapshot, diverting: AddressOfRecord) -> String? {
        if Self.localExtension(target, in: snapshot) != nil { return nil }
        if target.scheme != .tel, snapshot.domains.contains(target.host.lowercased()), target.parameters.value("user")?.lowercased() != "phone",
            DialledTarget(target)?.isNumber != true
        {
            return "no such extension"
        }
        guard let target = DialledTarget(target) else { return "no number or user to dial" }
        return outside.policy.routes.route(for: target, organisation: diverting.domain) == nil ? "no route for \(target) in \(diverting.domain)" : nil
    }

    /// The callee's forwarding without the targets that cannot be followed (each said in the
    /// journey), so the call rings the callee instead of failing.
    private func usableDiversion(
        _ rules: DiversionRules?, of diverting: AddressOfRecord, in snapshot: DirectorySnapshot, recorder: inout JourneyRecorder, at now: Date
    ) -> DiversionRules? {
        guard var rules, !rules.isEmpty else { return nil }
        for target in rules.targets {
            guard let why = unusable(target, in: snapshot, diverting: diverting) else { continue }
            _ = recorder.apply(.diversionRefused(target: target.description, because: why), at: now)
            if rules.always == target { rules.always = nil }
            if rules.busy == target { rules.busy = nil }
            if rules.noAnswer == target { rules.noAnswer = nil }
            if rules.unreachable == target { rules.unreachable = nil }
        }
        return rules
    }

    /// The call of `entry` was diverted: a local extension gets a new call on the same server
    /// transaction and caller flow; any other target goes out through the diverting extension's
    /// routes (and its class of service), as its own outside call would. A target that
    /// cannot be used now gets the caller the answer the call would have had.
    private func divert(_ order: DiversionOrder, from entry: CallEntry, at now: Date) {
        let snapshot = directory.directorySnapshot()
        let journey = entry.recorder.journey
        logger.info("call.diverted", ["call": journey.callID, "from": order.divertedBy.description, "target": order.target.description,
                                      "cause": String(order.cause.rawValue)])
        if let callee = Self.localExtension(order.target, in: snapshot) {
            begin(order.request, handle: entry.handle, callerFlow: entry.callerFlow, callee: callee, caller: entry.caller, source: journey.source,
                  transport: journey.transport, at: now, diverted: (order.divertedBy, order.cause, entry.machine.setup.toTag))
        } else if unusable(order.target, in: snapshot, diverting: order.divertedBy) == nil, let target = DialledTarget(order.target) {
            beginOutside(
                order.request, handle: entry.handle, callerFlow: entry.callerFlow, target: target, caller: order.divertedBy, inOwnDomain: true,
                source: journey.source, transport: journey.transport, at: now,
                forwarded: (identity: Self.originalCaller(of: entry), fallback: order.fallback))
        } else {
            signaling?.respond(order.fallback, to: entry.handle)
            let why = unusable(order.target, in: snapshot, diverting: order.divertedBy) ?? "no such extension"
            recordLate([.diversionRefused(target: order.target.description, because: why)], callee: order.divertedBy, entry.machine.setup.id)
        }
    }

    /// Whom a forwarded call asserts to a trunk: the extension that authenticated the original
    /// call, else the trusted peer's From (its tag left out); the caller's display name either way.
    private static func originalCaller(of entry: CallEntry) -> SIPNameAddress? {
        let from = entry.machine.setup.invite.from
        if let caller = entry.caller { return SIPNameAddress(displayName: from?.displayName, uri: SIPURI(user: caller.number, host: caller.domain)) }
        return from.map { SIPNameAddress(displayName: $0.displayName, uri: $0.uri) }
    }

    /// Who the call goes to, with reachability as the SIP side sees it now and the dead marks of
    /// its tokens (looked up one by one, never the whole table).
    private func targets(_ bindings: [Binding], posted: [PostedToken]) -> CallTargets {
        let keys = (bindings.flatMap(\.pushChannels) + posted.map(\.channel)).map(\.tokenID)
        let dead = Set(keys.filter { deadTokens[$0] != nil })
        return CallTargets(
            bindings: bindings, posted: posted, deadTokens: dead, staleTokens: liveness?.staleTokens(among: keys, now: clock()) ?? [],
            reach: { [signaling] in signaling?.reach($0) ?? .gone })
    }

    // MARK: - Running a call's machine

    private func deliver(_ event: CallEvent<Flow>, to callee: AddressOfRecord, _ id: UUID) {
        guard let entry = callees[callee]?.calls[id] else { return }
        run(event, on: entry)
    }

    /// Feeds `first` to the call's machine, carries out its actions, and feeds it the results
    /// that come back at once (a branch sent over a flow this instance holds), then writes the
    /// journey if it must be. `bindings`: the callee's bindings, when already read.
    private func run(_ first: CallEvent<Flow>, on entry: CallEntry, bindings: [Binding]? = nil) {
        let callee = entry.machine.setup.callee
        let view = CallStateMachine<Flow>.CalleeView(
            bindings: { [directory] in bindings ?? directory.bindings(for: callee) }, reach: { [signaling] in signaling?.reach($0) ?? .gone })
        let endedBefore = entry.machine.phase == .ended
        var journeyChanged = false
        var writeCall = false
        var events = [first]
        while !events.isEmpty {
            let event = events.removeFirst()
            let now = clock()
            noteStaleDevices(event, on: entry, at: now)
            if case .branchSent(let index, .some) = event, entry.machine.branches.indices.contains(index) {
                let branch = entry.machine.branches[index]
                logger.info("call.fork", ["call": entry.recorder.journey.callID, "binding": branch.binding.id.uuidString, "late": branch.isLate ? "yes" : "no"])
            }
            for action in entry.machine.handle(event, at: now, callee: view) {
                switch action {
                case .respond(let response):
                    signaling?.respond(response, to: entry.handle)
                case .relay2xx(let response):
                    signaling?.relay2xx(response, to: entry.handle, callerFlow: entry.callerFlow)
                case .push(let order):
                    push(order, of: entry)
                case .endOfCallPush(let order):
                    pushEndOfCall(order, of: entry)
                case .fork(let index, let request, let binding):
                    if let inline = fork(index, request, to: binding, of: entry) { events.append(.branchSent(index, inline)) }
                case .cancel(let request, let flow):
                    signaling?.sendCancel(request, over: flow)
                case .startTimer(let timer, let deadline):
                    arm(timer, at: deadline, for: entry, now: now)
                case .stopTimer(let timer):
                    entry.timers.removeValue(forKey: timer)?.timer.cancel()
                case .record(let fact):
                    journeyChanged = true
                    if record(fact, on: entry, at: now) { writeCall = true }
                case .markDead(let key):
                    markDead(key, of: entry.machine.setup.callee, at: now)
                case .graceDevice(let device):
                    keepInGrace(device, of: entry, now: now)
                case .ended(let ending):
                    ended(entry, ending, now: now)
                case .divert(let order):
                    divert(order, from: entry, at: now)
                }
            }
        }
        reportRingPushEnds(of: entry, now: clock())
        // A journey that changed after its call ended (a late push answer) is written again, in
        // the answered call's talking copy too, so the BYE's rewrite keeps the change.
        if writeCall || (endedBefore && journeyChanged) {
            journeys?.recordCall(entry.recorder.journey)
            talking.update(entry.recorder.journey, for: entry.recorder.journey.callID)
        }
    }

    /// Puts a fact in the journey, writes what it asks, and counts it; true when the whole
    /// journey is to be written.
    private func record(_ fact: CallFact, on entry: CallEntry, at now: Date) -> Bool {
        switch fact {
        case .pushAnswered(let line):
            metrics?.pushes.increment(["provider": line.provider.rawValue, "outcome": line.outcome])
            metrics?.pushLatency.observe(Double(line.latencyMilliseconds) / 1000)
            logger.info("call.push", ["call": entry.recorder.journey.callID, "device": line.device, "outcome": line.outcome, "ms": String(line.latencyMilliseconds)])
        case .woke(_, _, let wake):
            if let ms = wake.milliseconds { metrics?.wakeLatency.observe(Double(ms) / 1000) }
        case .declined(let device, let reason):
            logger.info("call.declined", ["call": entry.recorder.journey.callID, "device": device, "reason": reason.rawValue])
        case .tokensOverdue(let timeout):
            logger.info("call.tokens_unavailable", ["call": entry.recorder.journey.callID, "error": "no answer within \(CallText.seconds(timeout.timeInterval))"])
        default:
            break
        }
        switch entry.recorder.apply(fact, at: now) {
        case .push(let line): journeys?.recordPush(line, of: entry.recorder.journey)
        case .wake(let pushID, let wake): journeys?.recordWake(pushID: pushID, wake)
        case .call: return true
        case nil: break
        }
        return false
    }

    /// Facts learnt after the call's machine is done with them (the outcome of a cancel push, a
    /// late iPhone's return), written at once.
    private func recordLate(_ facts: [CallFact], callee: AddressOfRecord, _ id: UUID) {
        guard let entry = callees[callee]?.calls[id] else { return }
        let now = clock()
        for fact in facts { _ = entry.recorder.apply(fact, at: now) }
        journeys?.recordCall(entry.recorder.journey)
        talking.update(entry.recorder.journey, for: entry.recorder.journey.callID)
    }

    private func arm(_ timer: CallTimer, at deadline: Date, for entry: CallEntry, now: Date) {
        entry.timers.removeValue(forKey: timer)?.timer.cancel()
        let callee = entry.machine.setup.callee
        let id = entry.machine.setup.id
        entry.timerGeneration += 1
        let generation = entry.timerGeneration
        let scheduled = scheduler.schedule(after: Self.delay(deadline.timeIntervalSince(now))) { [weak self] in
            guard let self else { return }
            queue.async { self.fired(timer, generation: generation, callee: callee, id) }
        }
        entry.timers[timer] = (generation, scheduled)
    }

    /// A timer fired; one stopped or armed again since (its firing already on its way) is ignored.
    private func fired(_ timer: CallTimer, generation: Int, callee: AddressOfRecord, _ id: UUID) {
        guard let entry = callees[callee]?.calls[id], entry.timers[timer]?.generation == generation else { return }
        entry.timers[timer] = nil
        if timer == .tokenRead {
            // The call goes on with what is registered now.
            let bindings = directory.bindings(for: callee)
            run(.tokensOverdue(targets(bindings, posted: [])), on: entry, bindings: bindings)
        } else {
            run(.timerFired(timer), on: entry)
        }
    }

    /// Runs `body` on the queue after `seconds` (through the scheduler, so a manual clock moves it).
    func later(_ seconds: TimeInterval, _ body: @escaping @Sendable (CallCoordinatorShard) -> Void) {
        _ = scheduler.schedule(after: Self.delay(seconds)) { [weak self] in
            guard let self else { return }
            queue.async { body(self) }
        }
    }

    static func delay(_ seconds: TimeInterval) -> Duration {
        .milliseconds(Int64((max(0, seconds) * 1000).rounded(.up)))
    }

    /// A token of `aor` a provider called dead, here and (through the coordinator) on every other shard.
    private func markDead(_ key: PushTokenID, of aor: AddressOfRecord, at now: Date) {
        deadTokens.insert(now, for: key, at: now)
        noteDeadMark(key, of: aor)
        spreadDeadMark?(key, aor, now)
    }

    /// Another shard's dead mark.
    func takeDeadMark(_ key: PushTokenID, of aor: AddressOfRecord, at markedAt: Date) {
        queue.async { [self] in
            if deadTokens[key] == nil { deadTokens.insert(markedAt, for: key, at: markedAt) }
            noteDeadMark(key, of: aor)
        }
    }

    /// Files a mark under its AOR, telling `shared` when it is the AOR's first. AORs whose marks
    /// have all left `deadTokens` are let go once they outnumber the marks (amortised, so the
    /// list stays bounded even for AORs that never register again).
    private func noteDeadMark(_ key: PushTokenID, of aor: AddressOfRecord) {
        if deadMarksByAOR[aor] == nil { shared.setHoldsDeadMarks(true, of: aor, shard: index) }
        deadMarksByAOR[aor, default: []].insert(key)
        guard deadMarksByAOR.count > 2 * max(deadTokens.count, 512) else { return }
        for (marked, keys) in deadMarksByAOR where !keys.contains(where: { deadTokens[$0] != nil }) {
            deadMarksByAOR[marked] = nil
            shared.setHoldsDeadMarks(false, of: marked, shard: index)
        }
    }

    // MARK: - Pushes

    private func push(_ order: CallPushOrder, of entry: CallEntry) {
        var content = order.content
        let callee = entry.machine.setup.callee
        let id = entry.machine.setup.id
        if let callTokens {
            content.callToken = callTokens.issue(CallTokenClaims(
                callID: id, callUUID: content.uuid, aor: callee, device: order.tag, instanceID: instanceID, expiresAt: order.callTokenExpiresAt))
        }
        content.wakeCredential = wakeCredential(for: order, of: entry, now: clock())
        let ready = content
        Task { [self] in
            let (outcome, appID) = await pusher.ring(ready, to: order.channel, expiresAt: order.expiresAt, aor: callee.description)
            queue.async { [self] in deliver(.pushAnswered(device: order.device, outcome, appID: appID), to: callee, id) }
        }
    }

    /// The push that stops a device ringing, then its missed-call notice, in that order: on FCM
    /// both share the ring's collapse key, so a device that was offline keeps the notice, the last
    /// of them.
    private func pushEndOfCall(_ order: EndOfCallPush, of entry: CallEntry) {
        let callee = entry.machine.setup.callee
        let id = entry.machine.setup.id
        Task { [self] in
            var facts: [CallFact] = []
            if let reason = order.cancelReason {
                let outcome = await pusher.cancel(order.content, reason: reason.rawValue, to: order.channel, expiresAt: order.until, aor: callee.description)
                facts.append(.stoppedRinging(device: order.device, reason: reason, outcome))
            }
            if let reason = order.missedReason {
                let outcome = await pusher.missed(order.content, reason: reason, to: order.channel, aor: callee.description)
                facts.append(.missedNotice(device: order.device, outcome))
            }
            let done = facts
            queue.async { [self] in recordLate(done, callee: callee, id) }
        }
    }

    // MARK: - Branches

    /// Sends branch `index`'s INVITE. A flow this instance holds is sent on at once, and its
    /// result returned; one through another instance may first need a connection to it, and the
    /// call queue does not wait for that: its result comes back as an event.
    private func fork(_ index: Int, _ request: SIPRequest, to binding: Binding, of entry: CallEntry) -> SentRequest<Flow>?? {
        guard let signaling else { return .some(nil) }
        let callee = entry.machine.setup.callee
        let id = entry.machine.setup.id
        let handoff = SendHandoff<Flow>()
        signaling.sendInvite(request, to: binding, callerFlow: entry.callerFlow, sent: { [weak self] result in
            guard handoff.passLater(result), let self else { return }
            self.queue.async { self.deliver(.branchSent(index, result), to: callee, id) }
        }, onResponse: { [weak self] event in
            guard let self else { return }
            self.queue.async { self.deliver(.branchResponse(index, event), to: callee, id) }
        })
        return handoff.takeInline()
    }

    // MARK: - Ending

    private func ended(_ entry: CallEntry, _ ending: CallEnding, now: Date) {
        let callee = entry.machine.setup.callee
        let id = entry.machine.setup.id
        callees[callee]?.live -= 1
        shared.addLiveCalls(-1)
        metrics?.calls.increment(["outcome": ending.outcome.rawValue])
        retireWakeCredentials(of: entry, now: now)
        logger.info("call.ended", ["call": entry.recorder.journey.callID, "outcome": ending.outcome.rawValue, "status": String(ending.finalStatus),
                           "reason": ending.reason])
        // How it ended, while its call tokens may still ask; a call that pushed nobody issued none.
        if callTokens != nil, ending.pushedAnyDevice {
            endedCalls[id] = (callee, ending)
            later(ending.tokensExpireAt.timeIntervalSince(now) + 5) { $0.endedCalls[id] = nil }
        }
        if ending.outcome == .answered {
            talking.insert(entry.recorder.journey, for: entry.recorder.journey.callID, at: now)
            armTalkingPrune(now: now)
            if let device = ending.answeredDevice { rememberAnswered(device, callID: entry.recorder.journey.callID, now: now) }
        }
        // Kept for late responses (2xx retransmissions, CANCEL answers), then forgotten.
        let handle = entry.handle
        later(settings.endedCallKeep.timeInterval) { coordinator in
            coordinator.callees[callee]?.calls.removeValue(forKey: id)?.timers.values.forEach { $0.timer.cancel() }
            // A diverted call's handle belongs to the target's call now.
            if coordinator.callByHandle[handle]?.id == id { coordinator.callByHandle[handle] = nil }
            coordinator.forgetIfEmpty(callee)
        }
    }

    /// Notes, before `callee` gets an entry here, that its binding changes must reach this shard.
    private func hold(_ callee: AddressOfRecord) {
        if callees[callee] == nil { shared.watch(callee, shard: index) }
    }

    private func forgetIfEmpty(_ callee: AddressOfRecord) {
        guard let held = callees[callee], held.calls.isEmpty, held.grace.isEmpty else { return }
        callees[callee] = nil
        shared.unwatch(callee, shard: index)
    }

    /// Lets go of answered calls whose BYE did not pass within `maxCallDuration`, when the oldest
    /// of them reaches it (one timer at a time).
    func armTalkingPrune(now: Date) {
        guard !talkingPruneArmed, let oldest = talking.oldestInsertedAt else { return }
        talkingPruneArmed = true
        later(oldest.addingTimeInterval(talking.maxAge).timeIntervalSince(now)) { coordinator in
            coordinator.talkingPruneArmed = false
            let now = coordinator.clock()
            coordinator.talking.prune(now: now)
            coordinator.armTalkingPrune(now: now)
        }
    }

    // MARK: - VoIP-only iPhones after their call

    private func keepInGrace(_ device: GraceDevice, of entry: CallEntry, now: Date) {
        let callee = entry.machine.setup.callee
        hold(callee)
        callees[callee, default: CalleeCalls()].grace.append(Grace(device: device, callID: entry.machine.setup.id, callerFlow: entry.callerFlow))
        // An iPhone that never registers again is not kept for ever.
        later(device.until.timeIntervalSince(now)) { coordinator in
            let now = coordinator.clock()
            coordinator.callees[callee]?.grace.removeAll { $0.device.until <= now }
            coordinator.forgetIfEmpty(callee)
        }
    }

    private func graceDevicesMayBeBack(_ aor: AddressOfRecord, bindings: [Binding]) {
        guard let signaling else { return }
        let now = clock()
        var remaining: [Grace] = []
        for grace in callees[aor]?.grace ?? [] where grace.device.until > now {
            let device = grace.device
            guard let binding = bindings.first(where: { device.device.matches($0) && $0.registeredAt >= device.sentAt }),
                let target = try? SIPURI(parsing: binding.contact)
            else {
                remaining.append(grace)
                continue
            }
            // product.md: the INVITE and at once a CANCEL, so CallKit ends the call it showed.
            let request = ProxyRules.branchRequest(from: device.invite, to: target)
            let holder = GraceSend<Flow>()
            let late = WakeResult.late(afterMilliseconds: max(0, Int(now.timeIntervalSince(device.sentAt) * 1000)))
            // The journey (if the call is still kept) says so too, so a later rewrite of it keeps it.
            recordLate([.lateReturn(pushID: device.pushID, device: device.device.name, late)], callee: aor, grace.callID)
            journeys?.recordWake(pushID: device.pushID, late)
            signaling.sendInvite(request, to: binding, callerFlow: grace.callerFlow, sent: { [weak self] result in
                guard let self else { return }
                self.queue.async {
                    holder.sent = result
                    self.cancelGraceInvite(holder, reason: device.reason)
                }
            }, onResponse: { [weak self] event in
                guard let self, event.response.statusCode < 200 else { return }
                self.queue.async {
                    holder.provisional = true
                    self.cancelGraceInvite(holder, reason: device.reason)
                }
            })
            logger.info("call.grace_invite", ["call": device.invite.callID ?? "", "binding": binding.id.uuidString])
        }
        callees[aor]?.grace = remaining
        forgetIfEmpty(aor)
    }

    /// The CANCEL of a grace device's INVITE, once it is out and a provisional came (§9.1).
    private func cancelGraceInvite(_ holder: GraceSend<Flow>, reason: String) {
        guard holder.provisional, !holder.cancelled, let sent = holder.sent else { return }
        holder.cancelled = true
        signaling?.sendCancel(ProxyRules.cancel(of: sent.request, reason: reason), over: sent.flow)
    }

    static func makeTag() -> String {
        var generator = SystemRandomNumberGenerator()
        return String(generator.next() as UInt64, radix: 36)
    }

    // MARK: - State

    /// One call: its machine and journey, and the I/O handles and timers the machine does not
    /// hold. @unchecked Sendable: only touched on the coordinator's `queue`.
    final class CallEntry: @unchecked Sendable {
        var machine: CallStateMachine<Flow>
        var recorder: JourneyRecorder
        let handle: ServerTransactionHandle
        let callerFlow: Flow
        /// The extension that authenticated the INVITE (nil for a trusted peer).
        let caller: AddressOfRecord?
        /// The armed timers, each with the generation it was armed in.
        var timers: [CallTimer: (generation: Int, timer: any ScheduledTimer)] = [:]
        var timerGeneration = 0
        /// Stale devices the journey named, and pushes whose end went to `liveness`.
        var staleNoted: Set<PushTokenID> = []
        var livenessReported: Set<UUID> = []

        init(machine: CallStateMachine<Flow>, recorder: JourneyRecorder, handle: ServerTransactionHandle, callerFlow: Flow, caller: AddressOfRecord?) {
            self.machine = machine
            self.recorder = recorder
            self.handle = handle
            self.callerFlow = callerFlow
            self.caller = caller
        }
    }

    /// A grace device and the call it was pushed for.
    struct Grace: Sendable {
        var device: GraceDevice
        var callID: UUID
        var callerFlow: Flow
    }

    /// What this instance holds for one callee: its calls (live, and ended ones kept for late
    /// responses) and its VoIP-only iPhones in their cancel grace.
    struct CalleeCalls {
        var calls: [UUID: CallEntry] = [:]
        /// Calls not yet ended.
        var live = 0
        var grace: [Grace] = []
    }
}

/// The INVITE of a grace device and whether its CANCEL went. @unchecked Sendable: only touched on
/// the coordinator's queue.
final class GraceSend<Flow: Hashable & Sendable>: @unchecked Sendable {
    var sent: SentRequest<Flow>?
    var provisional = false
    var cancelled = false
}

/// Hands the result of a branch's send to the fork that asked for it when it came before
/// `sendInvite` returned, else to the queue. Thread-safe: a lock guards both fields.
final class SendHandoff<Flow: Hashable & Sendable>: @unchecked Sendable {
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

extension CallCoordinatorShard {
    /// Whether this shard holds the call a token names (ringing, kept after its end, or its
    /// ending kept for the tokens). On `queue`.
    private func holds(_ claims: CallTokenClaims) -> Bool {
        callees[claims.aor]?.calls[claims.callID] != nil || endedCalls[claims.callID]?.callee == claims.aor
    }

    /// A call token's `decline` (with `reason`) or `status` (without), when this shard holds the
    /// call: the device's sign of life, the decline, then `completion` with the status after it.
    /// When it does not hold the call, `elsewhere` runs instead (on this queue, so it must not
    /// block).
    func answer(
        _ claims: CallTokenClaims, declining reason: DeclineReason?, elsewhere: @escaping @Sendable () -> Void,
        completion: @escaping @Sendable (CallStatus?) -> Void
    ) {
        queue.async { [self] in
            guard holds(claims) else { return elsewhere() }
            callTokenUsed(claims)
            if let reason, let entry = ringingCall(claims) { run(.declined(deviceTag: claims.device, reason), on: entry) }
            completion(currentStatus(claims))
        }
    }

    /// The ringing call a token names, when this instance holds it.
    private func ringingCall(_ claims: CallTokenClaims) -> CallEntry? {
        guard let entry = callees[claims.aor]?.calls[claims.callID], entry.machine.phase != .ended else { return nil }
        return entry
    }

    /// On `queue`: the status the token's device sees now.
    private func currentStatus(_ claims: CallTokenClaims) -> CallStatus? {
        if let entry = ringingCall(claims) { return entry.machine.status(forDevice: claims.device) }
        if let ended = endedCalls[claims.callID], ended.callee == claims.aor { return ended.ending.status(forDevice: claims.device) }
        return nil
    }
}

/// The call metrics in `/metrics`.
struct CallMetrics: Sendable {
    let calls: MetricsRegistry.Counter
    let pushes: MetricsRegistry.Counter
    let pushLatency: MetricsRegistry.Histogram
    let wakeLatency: MetricsRegistry.Histogram

    init(_ registry: MetricsRegistry, shared: CallShardsShared) {
        calls = registry.counter("rouse_calls_total", help: "Calls to extensions that ended, by outcome (answered, canceled, unanswered, failed).")
        pushes = registry.counter("rouse_call_pushes_total", help: "Ring pushes sent for calls, by provider and outcome (accepted, refused, failed).")
        pushLatency = registry.histogram("rouse_push_latency_seconds", help: "Time from sending a ring push to the provider's answer.")
        wakeLatency = registry.histogram(
            "rouse_wake_latency_seconds", help: "Time from a ring push to the woken device's fresh REGISTER.",
            buckets: [0.25, 0.5, 1, 1.5, 2, 3, 4, 6, 8, 12, 20, 45])
        registry.gauge("rouse_calls_live", help: "Calls ringing now on this instance.") { Double(shared.liveCallCount) }
    }
}
