import Dispatch
public import Foundation
public import Metrics
public import Registrar
public import RouseVocabulary
public import RouseLog
public import SIPMessage
public import SIPTransaction

/// The call coordinator (product.md "What happens on a call"): admits each INVITE for an
/// extension or the outside, runs the call's machine, and carries out what it decides (SIP
/// answers, branches and CANCELs through `CallSignaling`, pushes through `CallPushing`, the
/// journey into the `JourneyStore`). The calls are split over shards (`CallCoordinatorShard`), each
/// a serial queue of its own, by a hash of the Call-ID: an INVITE, its loops and spirals, its
/// diversions and the BYE that ends it all go to the same shard, and so does the caller's CANCEL
/// (which carries the INVITE's Call-ID, RFC 3261 §9.1). A binding change goes only to the shards
/// that hold calls or grace devices of the AOR or may hold dead-token marks (`BindingWatch`,
/// looked up under a lock: a REGISTER for a phone nobody is calling wakes no shard). Every shard
/// gets each dead-token mark; the live-call count and the toll-fraud guard
/// are shared (`CallShardsShared`), so the guard's limits stay those of the instance.
///
/// Threading: every entry point hops onto a shard's queue and returns at once (the counts and
/// `drain` wait for the shards). No lock spans the shards except the guard's, taken for a
/// decision only.
public final class CallCoordinator<Signaling: CallSignaling>: Sendable {
    public typealias Flow = Signaling.Flow

    private let shards: [CallCoordinatorShard]
    private let shared: CallShardsShared

    /// - Parameters:
    ///   - scheduler: the call timers (a `DispatchTimerScheduler` by default; tests may pass a
    ///     manual one together with `clock`).
    ///   - clock: the time events are handled at.
    ///   - logger: one line per call event (`call.started`, `call.ended`, …).
    ///   - shards: serial queues the calls are split over (at least 1; `sip_threads` in Rouse).
    public init(
        directory: any CalleeDirectory, tokens: (any WakeTokenSource)?, pusher: any CallPushing, journeys: (any JourneyStore)?,
        authenticator: DigestAuthenticator, throttle: AuthFailureThrottle? = nil, settings: CallSettings, ownNames: Set<String>,
        serverName: String, instanceID: String, metrics: MetricsRegistry? = nil, callTokens: CallTokenSigner? = nil,
        wakeCredentials: WakeCredentialMinting? = nil, scheduler: (any TimerScheduler)? = nil, clock: @escaping @Sendable () -> Date = { Date() },
        logger: Logger = .discarding, liveness: (any DeviceLiveness)? = nil, shards: Int = 1
    ) {
        let shared = CallShardsShared(limits: settings.outsideCallLimits)
        self.shared = shared
        let callMetrics = metrics.map { CallMetrics($0, shared: shared) }
        let outsideMetrics = metrics.map { OutsideCallMetrics($0, shared: shared) }
        let scheduler = scheduler ?? DispatchTimerScheduler(queue: DispatchQueue(label: "rouse.calls.timers"))
        self.shards = (0..<max(1, shards)).map { index in
            CallCoordinatorShard(
                index: index, shared: shared, directory: directory, tokens: tokens, pusher: pusher, journeys: journeys,
                authenticator: authenticator, throttle: throttle, settings: settings, ownNames: ownNames, serverName: serverName,
                instanceID: instanceID, metrics: callMetrics, outsideMetrics: outsideMetrics, callTokens: callTokens,
                wakeCredentials: wakeCredentials, scheduler: scheduler, clock: clock, logger: logger, liveness: liveness)
        }
    }

    /// Connects the SIP side (which owns the coordinator, hence the weak references).
    public func attach(_ signaling: Signaling) {
        let edge = SignalingEdge(signaling)
        for shard in shards {
            let index = shard.index
            shard.attach(edge) { [weak self] key, aor, markedAt in self?.spreadDeadMark(key, of: aor, at: markedAt, from: index) }
        }
    }

    /// How many shards the calls are split over.
    public var shardCount: Int { shards.count }

    /// The shard of the call with SIP Call-ID `callID`: a hash of it (FNV-1a, the same in every
    /// run).
    public func shardIndex(ofCallID callID: String) -> Int {
        guard shards.count > 1 else { return 0 }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in callID.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return Int(hash % UInt64(shards.count))
    }

    private func shard(ofCallID callID: String?) -> CallCoordinatorShard {
        shards[shardIndex(ofCallID: callID ?? "")]
    }

    /// Calls not yet ended (after the events queued before).
    public var liveCallCount: Int {
        drain()
        return shared.liveCallCount
    }

    /// What the coordinator holds now, for tests and diagnostics.
    public typealias Occupancy = CallOccupancy

    /// Counted on each shard's queue (waits for the events before it).
    public var occupancy: Occupancy {
        shards.map(\.occupancy).reduce(Occupancy(calls: 0, endedCalls: 0, talking: 0, deadTokens: 0, graceDevices: 0, callees: 0)) { total, part in
            Occupancy(
                calls: total.calls + part.calls, endedCalls: total.endedCalls + part.endedCalls, talking: total.talking + part.talking,
                deadTokens: max(total.deadTokens, part.deadTokens), graceDevices: total.graceDevices + part.graceDevices,
                callees: total.callees + part.callees)
        }
    }

    // MARK: - Entry points

    /// An INVITE outside any dialog arrived (its server transaction already sent 100 Trying).
    public func handleInvite(_ invite: SIPRequest, handle: ServerTransactionHandle, callerFlow: Flow, sourceIP: String, transport: String) {
        shard(ofCallID: invite.callID).handleInvite(invite, handle: handle, callerFlow: CallFlow(callerFlow), sourceIP: sourceIP, transport: transport)
    }

    /// The caller's CANCEL (Call-ID `callID`, the INVITE's) matched the INVITE transaction
    /// `handle` (already answered 200): the shard of the Call-ID is told.
    public func handleCancel(of handle: ServerTransactionHandle, callID: String?, reason: String?) {
        shard(ofCallID: callID).handleCancel(of: handle, reason: reason)
    }

    /// The bindings of `aor` changed (a REGISTER here, or another instance's, announced by
    /// NOTIFY): the shards holding calls or grace devices of `aor`, or dead-token marks, are told.
    public func bindingsChanged(_ aor: AddressOfRecord) {
        for index in shared.shardsToTell(of: aor) { shards[index].bindingsChanged(aor) }
    }

    /// A BYE of an answered call passed through Rouse: its journey gets the end of the talk.
    /// `fromCallee` says which side hung up, when known.
    public func dialogEnded(callID: String, fromCallee: Bool?) {
        shard(ofCallID: callID).dialogEnded(callID: callID, fromCallee: fromCallee)
    }

    /// The BYE of an answered call toward the device that answered could not reach it:
    /// `status` 430 (its flow is gone), 408 (no answer) or 503 (the transport failed).
    public func dialogUnreachable(callID: String, status: Int) {
        shard(ofCallID: callID).dialogUnreachable(callID: callID, status: status)
    }

    /// Ends every call still ringing (Rouse is stopping): 503 to the caller with the reason,
    /// CANCEL to the branches, cancel pushes, and the journey recorded. Returns how many it ended.
    @discardableResult
    public func endAll(reason: String) -> Int {
        shards.reduce(0) { $0 + $1.endAll(reason: reason) }
    }

    /// Waits until every event queued on every shard has been handled (tests and shutdown).
    public func drain() {
        for shard in shards { shard.drain() }
    }

    /// Puts a new route table and classes of service in force (loaded from PostgreSQL at start and
    /// on every NOTIFY `rouse_routes`); calls already going keep the route they took.
    public func updateOutsidePolicy(_ policy: OutsideCallPolicy) {
        for shard in shards { shard.updateOutsidePolicy(policy) }
    }

    /// Extensions whose outside calls jumped (`OutsideCallGuard.surges`), for the admin pages.
    public var outsideCallSurges: [(caller: AddressOfRecord, lastHour: Int)] {
        let now = shards[0].clock()
        return shared.withOutside { $0.guardian.surges(now: now) }
    }

    /// Outside calls in progress.
    public var liveOutsideCallCount: Int { shards.reduce(0) { $0 + $1.liveOutsideCallCount } }

    /// A dead-token mark of one of `aor`'s tokens made on shard `index`, for every other shard.
    func spreadDeadMark(_ key: PushTokenID, of aor: AddressOfRecord, at markedAt: Date, from index: Int) {
        for shard in shards where shard.index != index { shard.takeDeadMark(key, of: aor, at: markedAt) }
    }

    /// When a device pushed at `sentAt` had had its whole chance to come back: the call's wake wait
    /// (less a timer's slack), or for a device pushed after it ended (a posted token read late),
    /// the shorter of the two waits from its push.
    public static func wakeWaitEnd(sentAt: Date, callWaitDeadline: Date, settings: CallSettings) -> Date {
        CallCoordinatorShard.wakeWaitEnd(sentAt: sentAt, callWaitDeadline: callWaitDeadline, settings: settings)
    }
}

extension CallCoordinator: CallControl {
    public func decline(_ claims: CallTokenClaims, reason: DeclineReason, completion: @escaping @Sendable (CallStatus?) -> Void) {
        answer(claims, declining: reason, from: 0, completion: completion)
    }

    public func status(_ claims: CallTokenClaims, completion: @escaping @Sendable (CallStatus?) -> Void) {
        answer(claims, declining: nil, from: 0, completion: completion)
    }

    /// Asks the shards in turn from `first` (a token names the call by its id, not its Call-ID);
    /// nil when none holds the call.
    private func answer(_ claims: CallTokenClaims, declining reason: DeclineReason?, from first: Int, completion: @escaping @Sendable (CallStatus?) -> Void) {
        guard shards.indices.contains(first) else { return completion(nil) }
        shards[first].answer(claims, declining: reason, elsewhere: { [self] in
            answer(claims, declining: reason, from: first + 1, completion: completion)
        }, completion: completion)
    }
}

/// What a call coordinator holds now (`CallCoordinator.occupancy`), for tests and diagnostics.
public struct CallOccupancy: Sendable, Equatable {
    /// Calls kept, live or ended (an ended one for `endedCallKeep`).
    public var calls: Int
    /// How ended calls ended, kept while their call tokens may ask.
    public var endedCalls: Int
    /// Answered calls followed to their BYE.
    public var talking: Int
    /// Tokens a provider called dead (each shard keeps every mark: counted once, the most any
    /// shard holds).
    public var deadTokens: Int
    /// VoIP-only iPhones still sent the INVITE and its CANCEL if they register (`cancel_grace`).
    public var graceDevices: Int
    /// Callees with anything kept, summed over the shards (a callee with calls on two shards
    /// counts twice).
    public var callees: Int
}
