import Dispatch
public import Foundation
public import Push
public import Registrar
public import RouseLog
public import RouseVocabulary

/// The bindings a refresh may be due for (the registrar implements it).
public protocol RefreshCandidateSource: Sendable {
    /// Live bindings with push channels expiring by `deadline`; the completion must not block. A
    /// source may hand each registration out once (the registrar does, from a queue keyed by
    /// expiry): the refresher keeps what it holds back for a later tick itself.
    func pushBindings(expiringBefore deadline: Date, completion: @escaping @Sendable ([Binding]) -> Void)
}

/// Makes sure one instance sends a binding's refresh push, once per registration (PostgreSQL in
/// production).
public protocol RefreshClaims: Sendable {
    /// True when this caller may push for `bindingID` now (nobody has since it last registered).
    func claim(bindingID: UUID) async throws -> Bool
}

/// Sends a binding-refresh push (PushService implements it).
public protocol BindingRefreshPushing: Sendable {
    func sendBindingRefresh(aor: String, expiresAt: Date, to channel: PushChannel) async -> PushOutcome
}

extension Registrar: RefreshCandidateSource {}
extension PushService: BindingRefreshPushing {}

/// RFC 8599 §5.5 binding-refresh pushes (issue 11): a push binding whose UA did not offer
/// `+sip.pnsreg` gets a background push `lead` before it expires (at least 120 s), so a sleeping
/// app registers again instead of silently dropping out. FCM data, or an APNs background push to
/// the regular token; never a VoIP push (an iPhone known only by its VoIP token gets none). Each
/// binding is pushed at most once per registration, claimed in PostgreSQL across instances, and
/// each token at most once per `minimumInterval`. Every push is recorded like any other.
///
/// Threading: its state lives on one serial queue; `tick` may be called from any thread.
public final class BindingRefresher: @unchecked Sendable {
    // @unchecked: `timer`, `lastPushByToken` and `heldBack` are only touched on `queue`.
    private let queue = DispatchQueue(label: "rouse.binding-refresh")
    private let source: any RefreshCandidateSource
    private let claims: any RefreshClaims
    private let pusher: any BindingRefreshPushing
    public let lead: TimeInterval
    public let minimumInterval: TimeInterval
    private let logger: Logger
    private var timer: (any DispatchSourceTimer)?
    private var lastPushByToken: [PushTokenID: Date] = [:]
    /// Candidates not pushed yet (their token was pushed within `minimumInterval`, or the claim
    /// could not be made): offered again at the next tick, since the source hands each out once.
    private var heldBack: [Binding] = []

    /// - Parameter lead: how long before expiry the push goes; raised to 120 s when shorter.
    public init(
        source: any RefreshCandidateSource, claims: any RefreshClaims, pusher: any BindingRefreshPushing, lead: TimeInterval,
        minimumInterval: TimeInterval = 60, logger: Logger = .discarding
    ) {
        self.source = source
        self.claims = claims
        self.pusher = pusher
        self.lead = max(120, lead)
        self.minimumInterval = minimumInterval
        self.logger = logger
    }

    /// How often `start` looks for due bindings: a tenth of the lead, between 1 and 15 s.
    public var scanInterval: TimeInterval { min(15, max(1, lead / 10)) }

    public func start() {
        queue.sync {
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.schedule(deadline: .now() + scanInterval, repeating: scanInterval)
            timer.setEventHandler { [weak self] in self?.tick(now: Date()) }
            timer.resume()
            self.timer = timer
        }
    }

    /// A binding was registered: when its refresh falls due before the next scan, a scan is
    /// scheduled for that moment (short registrations, as tests use).
    public func bindingChanged(_ binding: Binding) {
        guard !binding.pushChannels.isEmpty, !binding.refreshesItself else { return }
        let dueIn = binding.expiresAt.timeIntervalSinceNow - lead
        guard dueIn < scanInterval else { return }
        queue.asyncAfter(deadline: .now() + max(0, dueIn) + 0.05) { [weak self] in self?.tick(now: Date()) }
    }

    public func stop() {
        queue.sync {
            timer?.cancel()
            timer = nil
        }
    }

    /// Looks for bindings due at `now` and pushes them; `completion` runs once every push of this
    /// round has its outcome (tests wait on it).
    public func tick(now: Date, completion: (@Sendable ([BindingRefreshPush]) -> Void)? = nil) {
        source.pushBindings(expiringBefore: now.addingTimeInterval(lead)) { [self] bindings in
            queue.async { [self] in
                // Once per token: the flows (reg-ids) of one device share it, and one push wakes it.
                var due: [(binding: Binding, channel: PushChannel)] = []
                let fresh = Set(bindings.map(\.id))
                let candidates = heldBack.filter { !fresh.contains($0.id) } + bindings
                heldBack = []
                for item in Self.due(candidates, now: now) {
                    let key = item.channel.tokenID
                    guard lastPushByToken[key].map({ now.timeIntervalSince($0) >= minimumInterval }) ?? true else {
                        heldBack.append(item.binding)
                        continue
                    }
                    lastPushByToken[key] = now
                    due.append(item)
                }
                lastPushByToken = lastPushByToken.filter { now.timeIntervalSince($0.value) < minimumInterval }
                guard !due.isEmpty else {
                    completion?([])
                    return
                }
                Task { [self] in
                    var sent: [BindingRefreshPush] = []
                    for item in due {
                        if let push = await refresh(item) { sent.append(push) }
                    }
                    completion?(sent)
                }
            }
        }
    }

    private func refresh(_ item: (binding: Binding, channel: PushChannel)) async -> BindingRefreshPush? {
        do {
            guard try await claims.claim(bindingID: item.binding.id) else { return nil }
        } catch {
            logger.info("binding.refresh_unclaimed", ["aor": item.binding.aor.description, "error": "\(error)"])
            queue.async { [self] in heldBack.append(item.binding) }  // tried again at the next tick
            return nil
        }
        let outcome = await pusher.sendBindingRefresh(aor: item.binding.aor.description, expiresAt: item.binding.expiresAt, to: item.channel)
        logger.info("binding.refresh_push", ["aor": item.binding.aor.description, "provider": item.channel.provider.rawValue, "outcome": outcome.word])
        return BindingRefreshPush(bindingID: item.binding.id, channel: item.channel, outcome: outcome)
    }

    /// The bindings due a refresh push at `now` (expiring within the lead, not yet expired, and
    /// not refreshing themselves), each with the channel it goes to.
    static func due(_ bindings: [Binding], now: Date) -> [(binding: Binding, channel: PushChannel)] {
        bindings.compactMap { binding in
            guard !binding.refreshesItself, binding.expiresAt > now, let channel = refreshChannel(binding) else { return nil }
            return (binding, channel)
        }
    }

    /// FCM or web push as they are; on APNs only the regular token (a background push), never VoIP.
    static func refreshChannel(_ binding: Binding) -> PushChannel? {
        binding.pushChannels.first { $0.family != .apns } ?? binding.pushChannels.first { $0.kind == .remote }
    }
}

/// One binding-refresh push and what the provider said.
public struct BindingRefreshPush: Sendable {
    public var bindingID: UUID
    public var channel: PushChannel
    public var outcome: PushOutcome
}
