import Foundation
public import Metrics
public import Registrar
import RouseLog
import SIPDNS
public import SIPMessage
public import SIPProxy
public import SIPTransaction

/// What a coordinator shard holds for calls to the outside (issue 19): each call's machine and the
/// routes and classes of service in force (the toll-fraud guard and the hops a 503 holds calls
/// off are shared by the shards, in `CallShardsShared`). Only touched on the shard's queue.
struct OutsideCalls<Flow: Hashable & Sendable> {
    var calls: [UUID: OutsideEntry<Flow>] = [:]
    var byHandle: [ServerTransactionHandle: UUID] = [:]
    var policy = OutsideCallPolicy.none
    let metrics: OutsideCallMetrics?
}

/// One outside call: its machine and journey, the I/O handles and the hop timers. Only touched on
/// the coordinator's queue (@unchecked Sendable for the closures that hop back onto it).
final class OutsideEntry<Flow: Hashable & Sendable>: @unchecked Sendable {
    var machine: OutsideCall<Flow>
    var recorder: JourneyRecorder
    let handle: ServerTransactionHandle
    let callerFlow: Flow
    let ticket: Int
    var hopTimers: [Int: any ScheduledTimer] = [:]
    /// Journey branch of each attempt.
    var branchOfAttempt: [Int: Int] = [:]
    var ended = false

    init(machine: OutsideCall<Flow>, recorder: JourneyRecorder, handle: ServerTransactionHandle, callerFlow: Flow, ticket: Int) {
        self.machine = machine
        self.recorder = recorder
        self.handle = handle
        self.callerFlow = callerFlow
        self.ticket = ticket
    }
}

/// The outside-call metrics in `/metrics`.
struct OutsideCallMetrics: Sendable {
    let calls: MetricsRegistry.Counter
    let refused: MetricsRegistry.Counter
    let surging: MetricsRegistry.Gauge

    init(_ registry: MetricsRegistry, shared: CallShardsShared) {
        calls = registry.counter("rouse_outside_calls_total", help: "Calls to the outside through a route that ended, by route and outcome.")
        refused = registry.counter(
            "rouse_outside_calls_refused_total", help: "Calls to the outside refused before any hop was tried, by why (no_route, class_of_service, limit).")
        registry.gauge("rouse_outside_calls_live", help: "Calls to the outside in progress on this instance.") {
            Double(shared.withOutside { $0.guardian.liveCount })
        }
        surging = registry.gauge(
            "rouse_outside_call_surging_extensions",
            help: "Extensions whose outside calls in the last hour jumped above outside_call_surge_factor times their hourly average.")
    }
}

extension CallCoordinatorShard {
    /// Puts a new route table and classes of service in force; calls already going keep the
    /// route they took.
    func updateOutsidePolicy(_ policy: OutsideCallPolicy) {
        queue.async { [self] in outside.policy = policy }
    }

    /// Outside calls in progress on this shard.
    var liveOutsideCallCount: Int { queue.sync { outside.calls.values.filter { !$0.ended }.count } }

    /// An authenticated extension's INVITE to a target that is no extension: a route, the
    /// toll-fraud guard, then the route's hops. Refusals are recorded as journeys too (the admin
    /// reads why a call did not go out). A diverted call comes `forwarded`: the original caller it
    /// asserts, and the answer it would have had, which a refusal gives the caller instead. `toExtension`: a call to another
    /// extension that gateway mode sends through the PBX (no toll-fraud guard; it costs nothing).
    func beginOutside(
        _ invite: SIPRequest, handle: ServerTransactionHandle, callerFlow: Flow, target: DialledTarget, caller: AddressOfRecord,
        inOwnDomain: Bool, source: String, transport: String, at now: Date, forwarded: (identity: SIPNameAddress?, fallback: SIPResponse)? = nil,
        toExtension: Bool = false
    ) {
        guard outside.byHandle[handle] == nil else { return }
        let from = invite.from
        let callee = AddressOfRecord(number: target.user, domain: target.domain.isEmpty || target.isNumber ? caller.domain : target.domain)
        let journey = CallJourney(
            callID: invite.callID ?? "", callee: callee, caller: from?.uri.description ?? "", callerName: from?.displayName, transport: transport,
            source: source, instanceID: instanceID, startedAt: now)
        var recorder = JourneyRecorder(journey, authenticatedAs: caller)
        let policy = outside.policy
        func refuse(_ status: Int, _ phrase: String, why: String, label: String) {
            var response = SIPResponse(replyingTo: invite, statusCode: status, reasonPhrase: phrase, toTag: Self.makeTag())
            response.headers.add(.reason, ProxyRules.reason(cause: status, text: why))
            response.headers.add(.server, serverName)
            signaling?.respond(forwarded?.fallback ?? response, to: handle)
            _ = recorder.apply(.ended(outcome: .failed, status: status, reason: why, missed: false), at: now)
            journeys?.recordCall(recorder.journey)
            outside.metrics?.refused.increment(["why": label])
            logger.info("call.outside_refused", ["call": journey.callID, "caller": caller.description, "target": target.description, "why": why])
        }
        guard let route = toExtension ? policy.gateway(for: caller.domain) : policy.route(for: target, organisation: caller.domain) else {
            let why = "no route for \(target) in \(caller.domain)"
            return inOwnDomain ? refuse(404, "Not Found", why: why, label: "no_route") : refuse(403, "No Route", why: why, label: "no_route")
        }
        let required = policy.required(for: target, organisation: caller.domain)
        let decision = toExtension
            ? .admit(ticket: 0)
            : shared.withOutside {
                $0.guardian.admit(caller: caller, classOfService: policy.classOfService(of: caller), required: required, route: route, now: now)
            }
        guard case .admit(let ticket) = decision else {
            if case .refuse(let why) = decision {
                refuse(403, "Forbidden", why: why, label: why.contains("limit") ? "limit" : "class_of_service")
            }
            return
        }
        reportSurges(now: now)
        let heldOff = shared.withOutside { outside in
            outside.heldOff = outside.heldOff.filter { $0.value > now }
            return Set(outside.heldOff.keys)
        }
        let machine = OutsideCall<Flow>(.init(
            id: journey.id, invite: invite, caller: caller, target: target, route: route, password: policy.password(of: route),
            toTag: Self.makeTag(), serverName: serverName, heldOff: heldOff, forwarded: forwarded))
        let entry = OutsideEntry(machine: machine, recorder: recorder, handle: handle, callerFlow: callerFlow, ticket: ticket)
        outside.calls[journey.id] = entry
        outside.byHandle[handle] = journey.id
        logger.info("call.outside_started", ["call": journey.callID, "caller": caller.description, "target": target.description, "route": route.name])
        run(.start, on: entry)
    }

    /// The caller's CANCEL, when it is for an outside call; false otherwise.
    func outsideCanceled(_ handle: ServerTransactionHandle, reason: String?) -> Bool {
        guard let id = outside.byHandle[handle], let entry = outside.calls[id] else { return false }
        run(.callerCanceled(reason: reason), on: entry)
        return true
    }

    /// Ends every outside call not yet answered (Rouse is stopping); how many.
    func stopOutsideCalls(reason: String) -> Int {
        let live = outside.calls.values.filter { !$0.ended }
        for entry in live { run(.stopping(reason: reason), on: entry) }
        return live.count
    }

    private func deliverOutside(_ event: OutsideCall<Flow>.Event, to id: UUID) {
        guard let entry = outside.calls[id] else { return }
        run(event, on: entry)
    }

    /// Feeds `first` to the call's machine and carries out its actions, feeding it the results
    /// that come back at once.
    private func run(_ first: OutsideCall<Flow>.Event, on entry: OutsideEntry<Flow>) {
        let id = entry.machine.setup.id
        var events = [first]
        while !events.isEmpty {
            let now = clock()
            for action in entry.machine.handle(events.removeFirst(), at: now) {
                switch action {
                case .respond(let response):
                    signaling?.respond(response, to: entry.handle)
                case .relay2xx(let response):
                    signaling?.relay2xx(response, to: entry.handle, callerFlow: entry.callerFlow)
                case .resolve(let hop):
                    guard let signaling else {
                        events.append(.resolved([]))
                        continue
                    }
                    signaling.resolve(hop) { [weak self] found in
                        guard let self else { return }
                        self.queue.async { self.deliverOutside(.resolved(found), to: id) }
                    }
                case .send(let leg, let request, let hop):
                    if let result = sendOutside(leg, request, to: hop, of: entry) { events.append(.sent(leg: leg, result)) }
                case .cancel(let cancel, let flow):
                    signaling?.sendCancel(cancel, over: flow)
                case .startHopTimer(let attempt, let after):
                    entry.hopTimers[attempt]?.cancel()
                    entry.hopTimers[attempt] = scheduler.schedule(after: after) { [weak self] in
                        guard let self else { return }
                        self.queue.async {
                            guard let entry = self.outside.calls[id], entry.hopTimers.removeValue(forKey: attempt) != nil else { return }
                            self.run(.hopTimerFired(attempt: attempt), on: entry)
                        }
                    }
                case .stopHopTimer(let attempt):
                    entry.hopTimers.removeValue(forKey: attempt)?.cancel()
                case .holdOff(let hop, let duration):
                    shared.withOutside { $0.heldOff[hop] = now.addingTimeInterval(duration.timeInterval) }
                case .record(let fact):
                    record(fact, of: entry, at: now)
                case .ended(let outcome, let status, let reason):
                    outsideEnded(entry, outcome: outcome, status: status, reason: reason, now: now)
                }
            }
        }
    }

    /// Sends a leg; returns its result when it came before `sendOutside` returned (a UDP hop),
    /// else nil (it comes back as an event).
    private func sendOutside(_ leg: Int, _ request: SIPRequest, to hop: ResolvedHop, of entry: OutsideEntry<Flow>) -> SentRequest<Flow>?? {
        guard let signaling else { return .some(nil) }
        let id = entry.machine.setup.id
        let handoff = SendHandoff<Flow>()
        signaling.sendOutside(request, to: hop, callerFlow: entry.callerFlow, sent: { [weak self] result in
            guard handoff.passLater(result), let self else { return }
            self.queue.async { self.deliverOutside(.sent(leg: leg, result), to: id) }
        }, onResponse: { [weak self] event in
            guard let self else { return }
            self.queue.async { self.deliverOutside(.response(leg: leg, event), to: id) }
        })
        return handoff.takeInline()
    }

    /// A fact in the journey: hops as its branches, the rest as lines.
    private func record(_ fact: OutsideCallFact, of entry: OutsideEntry<Flow>, at now: Date) {
        switch fact {
        case .hopTried(let hop, let attempt):
            entry.branchOfAttempt[attempt] = entry.recorder.journey.branches.count
            let transport = hop.split(separator: "=").last.map(String.init) ?? ""
            _ = entry.recorder.apply(.branchStarted(JourneyBranch(
                bindingID: UUID(), target: hop, device: "route \(entry.machine.setup.route.name)", transport: transport, startedAt: now,
                isLateFork: false)), at: now)
        case .hopResponse(_, let attempt, let status, let reason):
            if let branch = entry.branchOfAttempt[attempt] {
                _ = entry.recorder.apply(.branchResponse(branch: branch, status: status, reason: reason), at: now)
            }
        default:
            break
        }
        _ = entry.recorder.apply(.outside(fact), at: now)
    }

    private func outsideEnded(_ entry: OutsideEntry<Flow>, outcome: CallOutcome, status: Int, reason: String, now: Date) {
        guard !entry.ended else { return }
        entry.ended = true
        shared.withOutside { $0.guardian.ended(entry.ticket) }
        entry.hopTimers.values.forEach { $0.cancel() }
        entry.hopTimers = [:]
        if outcome == .answered { _ = entry.recorder.apply(.answered(device: "route \(entry.machine.setup.route.name)", after: now.timeIntervalSince(entry.recorder.journey.startedAt)), at: now) }
        _ = entry.recorder.apply(.ended(outcome: outcome, status: status, reason: reason, missed: false), at: now)
        journeys?.recordCall(entry.recorder.journey)
        outside.metrics?.calls.increment(["route": entry.machine.setup.route.name, "outcome": outcome.rawValue])
        logger.info("call.outside_ended", [
            "call": entry.recorder.journey.callID, "route": entry.machine.setup.route.name, "outcome": outcome.rawValue, "status": String(status),
            "reason": reason,
        ])
        if outcome == .answered {
            talking.insert(entry.recorder.journey, for: entry.recorder.journey.callID, at: now)
            armTalkingPrune(now: now)
        }
        // Kept for late responses (2xx retransmissions, CANCEL answers), then forgotten.
        let id = entry.machine.setup.id
        let handle = entry.handle
        later(settings.endedCallKeep.timeInterval) { coordinator in
            coordinator.outside.calls[id] = nil
            coordinator.outside.byHandle[handle] = nil
        }
    }

    /// Logs an extension whose outside calls jumped (once an hour each) and sets the gauge.
    private func reportSurges(now: Date) {
        let (surges, newlySurging) = shared.withOutside { outside in
            let surges = outside.guardian.surges(now: now)
            outside.surgeReported = outside.surgeReported.filter { now.timeIntervalSince($0.value) < 3600 }
            let newly = surges.filter { outside.surgeReported[$0.caller] == nil }
            for surge in newly { outside.surgeReported[surge.caller] = now }
            return (surges, newly)
        }
        outside.metrics?.surging.set(Double(surges.count))
        for surge in newlySurging {
            logger.warning("call.outside_surge", ["caller": surge.caller.description, "last_hour": String(surge.lastHour)])
        }
    }
}
