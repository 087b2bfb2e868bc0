import Foundation

/// The circuit breaker of one push provider host for one push app (settings
/// `push_breaker_failures`, `push_breaker_backoff`, `push_breaker_max_backoff`): after
/// `failureThreshold` pushes in a row failed for the provider's sake (no connection, no answer in
/// time, a 5xx), it opens and pushes fail at once, without a request, for a back-off; then one
/// push is let through as a probe (half-open). The probe's success closes it; its failure opens it
/// again for twice the back-off, up to `maximumBackoff`. A refusal about a token (410, 400) is the
/// provider working: it counts as a success.
///
/// A state machine (a value; no I/O, no clock of its own): events carry the time, so tests drive
/// it without sleeping. `ProviderCircuit` owns one behind a lock.
public struct ProviderCircuitBreaker: Sendable, Equatable {
    /// When it opens and for how long.
    public struct Settings: Sendable, Equatable {
        /// Failures in a row that open the breaker (at least 1).
        public var failureThreshold: Int
        /// The first back-off; doubled each time a probe fails.
        public var initialBackoff: Duration
        /// The longest back-off.
        public var maximumBackoff: Duration

        public init(failureThreshold: Int = 5, initialBackoff: Duration = .seconds(10), maximumBackoff: Duration = .seconds(300)) {
            self.failureThreshold = max(1, failureThreshold)
            self.initialBackoff = max(.milliseconds(1), initialBackoff)
            self.maximumBackoff = max(self.initialBackoff, maximumBackoff)
        }
    }

    /// Where the breaker is.
    public enum State: Sendable, Equatable {
        /// Pushes go through.
        case closed
        /// Pushes fail at once until `until`.
        case open(until: ContinuousClock.Instant)
        /// One probe is out since `since`; other pushes fail at once until it answers.
        case halfOpen(since: ContinuousClock.Instant)
    }

    /// The answer to "may this push be sent?".
    public enum Admission: Sendable, Equatable {
        /// Send it.
        case send
        /// Send it as the probe: its outcome decides whether the breaker closes.
        case probe
        /// Do not send it: fail it at once.
        case refuse(BackedOff)
    }

    /// Why pushes are refused: the failures in a row, the last one in words, and when the next
    /// probe may go.
    public struct BackedOff: Sendable, Equatable {
        public let failures: Int
        public let lastFailure: String
        public let retryAt: ContinuousClock.Instant
    }

    public let settings: Settings
    public private(set) var state: State = .closed
    /// Pushes in a row that failed for the provider's sake.
    public private(set) var consecutiveFailures = 0
    /// The last such failure in words.
    public private(set) var lastFailure: String?
    /// The back-off the breaker opened (or will open) with.
    public private(set) var backoff: Duration

    public init(settings: Settings = Settings()) {
        self.settings = settings
        backoff = settings.initialBackoff
    }

    /// A probe out longer than this is taken as lost: another may go.
    var probeAllowance: Duration { settings.maximumBackoff }

    /// A push wants to go at `now`.
    public mutating func admit(now: ContinuousClock.Instant) -> Admission {
        switch state {
        case .closed:
            return .send
        case .open(let until):
            guard now >= until else { return .refuse(backedOff(retryAt: until)) }
            state = .halfOpen(since: now)
            return .probe
        case .halfOpen(let since):
            guard now - since >= probeAllowance else { return .refuse(backedOff(retryAt: since + probeAllowance)) }
            state = .halfOpen(since: now)
            return .probe
        }
    }

    /// A push the provider answered (any answer about the push itself).
    public mutating func succeeded() {
        state = .closed
        consecutiveFailures = 0
        lastFailure = nil
        backoff = settings.initialBackoff
    }

    /// A push failed for the provider's sake at `now`; `description` says how, in words.
    public mutating func failed(_ description: String, now: ContinuousClock.Instant) {
        consecutiveFailures += 1
        lastFailure = description
        switch state {
        case .closed:
            guard consecutiveFailures >= settings.failureThreshold else { return }
            state = .open(until: now + backoff)
        case .halfOpen:
            // The probe (or a push sent before the breaker opened) failed: back off for longer.
            backoff = min(backoff * 2, settings.maximumBackoff)
            state = .open(until: now + backoff)
        case .open:
            // A push sent before the breaker opened: it does not move the reopening.
            break
        }
    }

    /// Whether pushes are being refused (open, or half-open with its probe out).
    public var isBackedOff: Bool { state != .closed }

    private func backedOff(retryAt: ContinuousClock.Instant) -> BackedOff {
        BackedOff(failures: consecutiveFailures, lastFailure: lastFailure ?? "unknown", retryAt: retryAt)
    }
}

/// One provider host of one push app with its `ProviderCircuitBreaker`: the client asks it before
/// each push and tells it each outcome; `/health` reads `problem` and `/metrics` `isBackedOff`.
///
/// Threading: thread-safe (a lock around the breaker); every method is quick and never blocks.
public final class ProviderCircuit: @unchecked Sendable {
    // @unchecked: `breaker` is only touched under `lock`.
    /// The provider as records name it: `apns`, `apns.dev`, `fcm` or `webpush`.
    public let provider: String
    /// The push app: an APNs bundle id, an FCM project id; for web push, the push service's
    /// origin (`https://updates.push.services.mozilla.com`).
    public let app: String
    private let lock = NSLock()
    private var breaker: ProviderCircuitBreaker
    private let now: @Sendable () -> ContinuousClock.Instant

    public init(
        provider: String, app: String, settings: ProviderCircuitBreaker.Settings,
        now: @escaping @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now }
    ) {
        self.provider = provider
        self.app = app
        breaker = ProviderCircuitBreaker(settings: settings)
        self.now = now
    }

    /// "apns (com.example.app)".
    public var name: String { "\(provider) (\(app))" }

    /// Sends one push through the breaker (APNs, FCM and web push alike): while backed off it
    /// fails at once, saying so, without `send` running; else `send`'s outcome is recorded.
    /// `isolation`: the caller's actor, so that `send` may use its state.
    func guarding(isolation: isolated (any Actor)? = #isolation, _ send: () async -> PushOutcome) async -> PushOutcome {
        if let backedOff = admit() { return backedOff }
        let outcome = await send()
        record(outcome)
        return outcome
    }

    /// May a push go now? On refusal, the outcome the push gets instead.
    func admit() -> PushOutcome? {
        lock.lock()
        defer { lock.unlock() }
        guard case .refuse(let backedOff) = breaker.admit(now: now()) else { return nil }
        return PushOutcome(
            result: .failed(.backedOff, message: "provider \(name) backed off after \(backedOff.failures) failures: \(backedOff.lastFailure)"),
            latency: .zero)
    }

    /// Tells the breaker how a push it let through ended.
    func record(_ outcome: PushOutcome) {
        lock.lock()
        defer { lock.unlock() }
        if let failure = Self.providerFailure(outcome) {
            breaker.failed(failure, now: now())
        } else {
            breaker.succeeded()
        }
    }

    /// The failure in words when `outcome` says the provider itself failed (no connection, no
    /// answer in time, a 5xx); nil when the provider answered about the push.
    static func providerFailure(_ outcome: PushOutcome) -> String? {
        switch outcome.result {
        case .accepted:
            return nil
        case .refused(let status, let reason, _):
            return status >= 500 ? "\(status) \(reason)" : nil
        case .failed(let kind, let message):
            switch kind {
            case .connect, .tls, .timeout, .connectionLost, .other: return "\(kind.rawValue): \(message)"
            case .noApp, .credentials, .backedOff: return nil
            }
        }
    }

    /// Whether pushes through this circuit fail at once now.
    public var isBackedOff: Bool {
        lock.lock()
        defer { lock.unlock() }
        return breaker.isBackedOff
    }

    /// The breaker as it is (tests, `/health`).
    public var snapshot: ProviderCircuitBreaker {
        lock.lock()
        defer { lock.unlock() }
        return breaker
    }

    /// For `/health`, while backed off: "push provider apns (com.example.app) backed off: 5
    /// failures, last: connect: 127.0.0.1:1: Connection refused; next try in 8 s".
    public var problem: String? {
        lock.lock()
        let breaker = self.breaker
        let current = now()
        lock.unlock()
        let next: ContinuousClock.Instant
        switch breaker.state {
        case .closed: return nil
        case .open(let until): next = until
        case .halfOpen: return "push provider \(name) backed off: \(breaker.consecutiveFailures) failures, last: \(breaker.lastFailure ?? "unknown"); a probe push is out"
        }
        let seconds = max(0, Int((next - current).components.seconds) + ((next - current).components.attoseconds > 0 ? 1 : 0))
        return "push provider \(name) backed off: \(breaker.consecutiveFailures) failures, last: \(breaker.lastFailure ?? "unknown"); next try in \(seconds) s"
    }
}
