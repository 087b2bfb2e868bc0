public import Foundation
public import Push
public import Registrar
public import RouseVocabulary
public import SIPDNS
public import SIPMessage
public import SIPProxy
public import SIPTransaction

/// What the coordinator needs from the SIP side (SIPService implements it over real sockets; unit
/// tests may use a double). Every method returns at once and never blocks.
public protocol CallSignaling: AnyObject, Sendable {
    /// How the SIP side names the way to a device (a transport flow).
    associatedtype Flow: Hashable & Sendable

    /// Sends a response to the caller through its INVITE server transaction.
    func respond(_ response: SIPResponse, to handle: ServerTransactionHandle)
    /// Sends a branch's 2xx upstream: through the server transaction while it takes one, else
    /// straight over the caller's flow (a 2xx that crossed the caller's CANCEL or Rouse's 487 is
    /// still relayed, RFC 3261 §16.7 step 5, so the caller can ACK and BYE it, §9.1).
    func relay2xx(_ response: SIPResponse, to handle: ServerTransactionHandle, callerFlow: Flow)
    /// How `binding` can be reached now.
    func reach(_ binding: Binding) -> BindingReach
    /// Sends a branch INVITE to `binding` in a client transaction, adding Rouse's Via, a
    /// Record-Route that names both the caller's flow and the device's, and, for a binding held by
    /// another instance, a Route through it. Calls `sent` with the request as sent and its flow,
    /// or nil when the binding cannot be reached: before returning for a flow this instance holds,
    /// later and from another thread when a connection to another instance is set up first.
    func sendInvite(
        _ request: SIPRequest, to binding: Binding, callerFlow: Flow, sent: @escaping @Sendable (SentRequest<Flow>?) -> Void,
        onResponse: @escaping @Sendable (ClientTransactionEvent) -> Void
    )
    /// Sends a CANCEL (built by `ProxyRules.cancel`) over `flow` in its own client transaction.
    func sendCancel(_ cancel: SIPRequest, over flow: Flow)
    /// Resolves a route hop (RFC 3263: NAPTR, SRV, A/AAAA; an address needs no lookup) off the
    /// caller's thread; `completion` gets the addresses to try, in order (empty: none).
    func resolve(_ hop: RouteHop, completion: @escaping @Sendable ([ResolvedHop]) -> Void)
    /// Sends an outside call's INVITE to `hop` in a client transaction, adding Rouse's Via and a
    /// Record-Route that names the caller's flow and the hop's, so requests inside the dialog go
    /// both ways. `sent` as for `sendInvite` (a connection may be set up first).
    func sendOutside(
        _ request: SIPRequest, to hop: ResolvedHop, callerFlow: Flow, sent: @escaping @Sendable (SentRequest<Flow>?) -> Void,
        onResponse: @escaping @Sendable (ClientTransactionEvent) -> Void
    )
}

/// A request as it went out, and the flow it went over.
public struct SentRequest<Flow: Hashable & Sendable>: Sendable {
    public var request: SIPRequest
    public var flow: Flow

    public init(_ request: SIPRequest, over flow: Flow) {
        self.request = request
        self.flow = flow
    }
}

/// The callee's side of the directory: which extensions exist and their live bindings (the
/// registrar implements it).
public protocol CalleeDirectory: Sendable {
    func directorySnapshot() -> DirectorySnapshot
    func bindings(for aor: AddressOfRecord) -> [Binding]
}

/// Posted tokens and dead-token marks, read when a call arrives (PostgreSQL in production).
public protocol WakeTokenSource: Sendable {
    /// The extension's posted tokens, and which of `tokens` (and of the posted ones) are marked
    /// dead.
    func wakeTokens(for aor: AddressOfRecord, checking tokens: [PushChannel]) async throws -> (posted: [PostedToken], dead: Set<PushTokenID>)
}

/// Sends a call's ring and cancel pushes (PushService implements it).
public protocol CallPushing: Sendable {
    /// The ring push; returns the outcome and the push app used. Transient failures are tried
    /// again while the push can still ring the call (`expiresAt`: the wake wait of an app-only
    /// call, the ring timeout when something else rings and a late app can still join).
    func ring(_ call: CallPushContent, to channel: PushChannel, expiresAt: Date, aor: String) async -> (PushOutcome, Int64?)
    /// The cancel push (`call.canceled` with a reason).
    func cancel(_ call: CallPushContent, reason: String, to channel: PushChannel, expiresAt: Date, aor: String) async -> PushOutcome
    /// The `call.ended` push (with a reason) to the regular channel of the device that answered;
    /// never a VoIP push.
    func ended(_ call: CallPushContent, reason: String, to channel: PushChannel, expiresAt: Date, aor: String) async -> PushOutcome
    /// The missed-call notice (`call.missed`) to a channel that can show one; never a VoIP push.
    func missed(_ call: CallPushContent, reason: String, to channel: PushChannel, aor: String) async -> PushOutcome
}

extension PushService: CallPushing {
    public func ring(_ call: CallPushContent, to channel: PushChannel, expiresAt: Date, aor: String) async -> (PushOutcome, Int64?) {
        let appID = app(for: channel)?.id
        let outcome = await sendRing(call, to: channel, expiresAt: expiresAt, aor: aor, recordOutcome: false)
        return (outcome, appID)
    }

    public func cancel(_ call: CallPushContent, reason: String, to channel: PushChannel, expiresAt: Date, aor: String) async -> PushOutcome {
        await sendCancel(call, event: .canceled, reason: reason, to: channel, expiresAt: expiresAt, aor: aor)
    }

    public func ended(_ call: CallPushContent, reason: String, to channel: PushChannel, expiresAt: Date, aor: String) async -> PushOutcome {
        await sendCancel(call, event: .ended, reason: reason, to: channel, expiresAt: expiresAt, aor: aor)
    }

    public func missed(_ call: CallPushContent, reason: String, to channel: PushChannel, aor: String) async -> PushOutcome {
        await sendMissed(call, reason: reason, to: channel, aor: aor)
    }
}

extension Registrar: CalleeDirectory {}

/// The call settings (decisions.md "Settings and limits"): `wake_wait`, `wake_wait_with_desk_phone`,
/// `ring_timeout`, `cancel_grace`, `trusted_peers`.
public struct CallSettings: Sendable, Equatable {
    /// How long to wait for a woken app when nothing else can ring (default 8 s).
    public var wakeWait: Duration
    /// How long when a desk phone is registered (default 3 s).
    public var wakeWaitWithDeskPhone: Duration
    /// How long a call may ring before it ends with 480 (default 45 s).
    public var ringTimeout: Duration
    /// How long after a call ended a woken iPhone known only by its VoIP token is still sent the
    /// INVITE and its CANCEL when it registers, so CallKit ends the call (default 30 s).
    public var cancelGrace: Duration
    public var trustedPeers: TrustedPeers
    /// How long a call with nothing registered waits for the posted tokens and dead marks from
    /// PostgreSQL before it goes on without them (default 2 s): a slow or unreachable database
    /// never keeps a caller at 100 Trying.
    public var tokenReadTimeout: Duration
    /// How long an ended call is kept for late responses (a branch's 2xx retransmissions, the
    /// answers to its CANCELs): 64·T1 (RFC 3261 §13.3.1.4, Timer F), 32 s with the default T1.
    public var endedCallKeep: Duration
    /// How long an answered call is followed to its BYE (default 12 h, as Kamailio's dialog
    /// timeout): a call whose BYE Rouse never saw is then let go, its journey without a hang-up.
    public var maxCallDuration: Duration
    /// How long a dead-token mark is held in memory (default 24 h); PostgreSQL keeps it, and
    /// the next call to the extension reads it again.
    public var deadTokenMemory: Duration
    /// RFC 3261 §16.6 step 11: how long a branch may go without a final answer after its last
    /// provisional (more than 3 min; Rouse uses 181 s). A limit, not a setting.
    public var timerC: Duration
    /// The toll-fraud limits on outside calls (issue 19).
    public var outsideCallLimits: OutsideCallLimits
    /// `decline_is_busy` (default true): a 603 Decline counts as busy for the busy forwarding.
    public var declineIsBusy: Bool
    /// `max_diversions` (default 5): an INVITE diverted this many times already (its History-Info
    /// and Diversion entries) is not diverted again, and ends as it would have.
    public var maxDiversions: Int

    public init(
        wakeWait: Duration = .seconds(8), wakeWaitWithDeskPhone: Duration = .seconds(3), ringTimeout: Duration = .seconds(45),
        cancelGrace: Duration = .seconds(30), trustedPeers: TrustedPeers = TrustedPeers(), tokenReadTimeout: Duration = .seconds(2),
        endedCallKeep: Duration = .milliseconds(500) * 64, maxCallDuration: Duration = .seconds(12 * 3600),
        deadTokenMemory: Duration = .seconds(24 * 3600), timerC: Duration = .seconds(181), declineIsBusy: Bool = true, maxDiversions: Int = 5,
        outsideCallLimits: OutsideCallLimits = OutsideCallLimits()
    ) {
        self.declineIsBusy = declineIsBusy
        self.maxDiversions = maxDiversions
        self.wakeWait = wakeWait
        self.wakeWaitWithDeskPhone = wakeWaitWithDeskPhone
        self.ringTimeout = ringTimeout
        self.cancelGrace = cancelGrace
        self.trustedPeers = trustedPeers
        self.tokenReadTimeout = tokenReadTimeout
        self.endedCallKeep = endedCallKeep
        self.maxCallDuration = maxCallDuration
        self.deadTokenMemory = deadTokenMemory
        self.timerC = timerC
        self.outsideCallLimits = outsideCallLimits
    }
}

extension Duration {
    /// The duration in seconds, as a TimeInterval (for Date arithmetic and Dispatch deadlines).
    public var timeInterval: TimeInterval {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
