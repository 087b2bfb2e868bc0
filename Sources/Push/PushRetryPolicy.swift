import Foundation

/// When a push is sent again after a transient failure (setting `push_attempts`): a refused or lost
/// connection, or a 500, 503 or 429 from the provider. Each push has at most `maxAttempts`
/// attempts and never runs past its deadline (the wake window the caller gives): a wait and the
/// next attempt must both fit before it. The wait doubles from `initialDelay` up to `maximumDelay`,
/// or is the provider's `Retry-After` when it gives one that fits. A timeout is not tried again:
/// the provider may have taken the push, and the time is spent. A value; thread-safe.
public struct PushRetryPolicy: Sendable, Equatable {
    /// Attempts per push, the first included (at least 1).
    public var maxAttempts: Int
    /// The wait before the second attempt, doubled for each one after.
    public var initialDelay: Duration
    /// The longest wait the policy chooses itself (a `Retry-After` may be longer if it fits).
    public var maximumDelay: Duration
    /// Less time than this left before the deadline is not worth another attempt.
    public var minimumAttemptTime: Duration

    public init(
        maxAttempts: Int = 3, initialDelay: Duration = .milliseconds(100), maximumDelay: Duration = .seconds(1),
        minimumAttemptTime: Duration = .milliseconds(200)
    ) {
        self.maxAttempts = max(1, maxAttempts)
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.minimumAttemptTime = minimumAttemptTime
    }

    /// What to do after attempt number `attempt` (1 for the first) failed transiently.
    public enum Decision: Sendable, Equatable {
        /// Wait this long, then send again.
        case retry(after: Duration)
        /// Stop: the attempts are used up.
        case attemptsUsed
        /// Stop: the provider's `Retry-After` (or the wait and one more attempt) would end past the deadline.
        case pastDeadline
    }

    /// Whether to send again after attempt `attempt` failed, with `remaining` time before the
    /// deadline and the provider's `Retry-After`, if it gave one.
    public func decide(afterAttempt attempt: Int, retryAfter: Duration?, remaining: Duration) -> Decision {
        guard attempt < maxAttempts else { return .attemptsUsed }
        let wait: Duration
        if let retryAfter {
            wait = max(.zero, retryAfter)
        } else {
            var backoff = initialDelay
            for _ in 1..<attempt { backoff = min(backoff * 2, maximumDelay) }
            wait = min(backoff, maximumDelay)
        }
        guard wait + minimumAttemptTime <= remaining else { return .pastDeadline }
        return .retry(after: wait)
    }

    /// A `Retry-After` value in seconds (the HTTP-date form is not used by APNs or FCM: nil).
    public static func retryAfter(_ header: String?) -> Duration? {
        guard let text = header?.trimmingCharacters(in: .whitespaces), let seconds = Int(text), seconds >= 0 else { return nil }
        return .seconds(seconds)
    }

    /// Whether a provider's answer is worth sending again: 500, 502, 503, 504, and 429 when it
    /// says when (`Retry-After`).
    public static func isTransient(status: Int, retryAfter: Duration?) -> Bool {
        switch status {
        case 500, 502, 503, 504: return true
        case 429: return retryAfter != nil
        default: return false
        }
    }

    /// What one attempt of a push came to (`run`).
    enum Attempt {
        /// The push's outcome: accepted, or refused or failed for good.
        case final(PushOutcome)
        /// A transient failure: sent again if the policy and the deadline allow.
        case transient(PushOutcome, retryAfter: Duration?)
        /// Sent again at once and not counted (a credential the provider called expired was
        /// replaced); the attempt must not ask for this twice in a row.
        case again

        /// A failure without an answer: a refused or lost connection is worth another attempt;
        /// a timeout is not (the provider may have taken the push, and the time is spent).
        init(failure outcome: PushOutcome) {
            if case .failed(let kind, _) = outcome.result, kind == .connect || kind == .connectionLost {
                self = .transient(outcome, retryAfter: nil)
            } else {
                self = .final(outcome)
            }
        }

        /// libcurl's failure to get an answer (`init(failure:)`).
        init(_ error: HTTP2Error) {
            self.init(failure: PushOutcome.failure(error))
        }

        /// The provider's `response` as `outcome` classified it: transient for a 5xx or a 429
        /// with `Retry-After` (`isTransient`), else final.
        init(_ outcome: PushOutcome, answering response: HTTP2Response) {
            let retryAfter = PushRetryPolicy.retryAfter(response.header("retry-after"))
            if !outcome.isAccepted, PushRetryPolicy.isTransient(status: response.status, retryAfter: retryAfter) {
                self = .transient(outcome, retryAfter: retryAfter)
            } else {
                self = .final(outcome)
            }
        }
    }

    /// Sends one push (APNs, FCM and web push alike): calls `attempt` with that attempt's own
    /// timeout (one push `timeout`, less when the deadline is nearer) until it is final, the
    /// attempts are used up or no other fits before `deadline` (by default one `timeout` from
    /// now), and returns the push's outcome, saying how many attempts it took.
    /// `isolation`: the caller's actor, so that `attempt` may use its state.
    func run(
        timeout: Duration, deadline: Date?, isolation: isolated (any Actor)? = #isolation,
        _ attempt: (_ timeout: Duration) async -> Attempt
    ) async -> PushOutcome {
        let started = ContinuousClock.now
        let end = started + (deadline.map { .milliseconds(Int64($0.timeIntervalSinceNow * 1000)) } ?? timeout)
        var attempts = 0
        while true {
            attempts += 1
            let remaining = end - ContinuousClock.now
            switch await attempt(min(timeout, max(remaining, minimumAttemptTime))) {
            case .final(let outcome):
                return finished(outcome, attempts: attempts, since: started)
            case .again:
                attempts -= 1
            case .transient(let outcome, let retryAfter):
                if let final = await nextAttempt(
                    after: outcome, attempts: attempts, retryAfter: retryAfter, remaining: end - ContinuousClock.now, since: started)
                {
                    return final
                }
            }
        }
    }

    /// After failed attempt number `attempts`: waits and returns nil when another attempt is due,
    /// else the outcome to report (saying how many attempts were made, or why no more were).
    private func nextAttempt(
        after outcome: PushOutcome, attempts: Int, retryAfter: Duration?, remaining: Duration, since started: ContinuousClock.Instant
    ) async -> PushOutcome? {
        switch decide(afterAttempt: attempts, retryAfter: retryAfter, remaining: remaining) {
        case .retry(let wait):
            if wait > .zero { try? await Task.sleep(for: wait) }
            return nil
        case .attemptsUsed:
            return finished(outcome, attempts: attempts, since: started)
        case .pastDeadline:
            return finished(outcome, attempts: attempts, since: started, retryAfterPastDeadline: retryAfter)
        }
    }

    /// The last attempt's outcome as the push's: the latency from the first attempt, and the
    /// attempts in words when there were several (" (3 attempts in 0.4 s)"), or the
    /// `Retry-After` that would have ended past the deadline.
    private func finished(_ outcome: PushOutcome, attempts: Int, since started: ContinuousClock.Instant, retryAfterPastDeadline: Duration? = nil) -> PushOutcome {
        let elapsed = ContinuousClock.now - started
        var note = ""
        if attempts > 1 {
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            note += " (\(attempts) attempts in \(String(format: "%.1f", seconds)) s)"
        }
        if let retryAfter = retryAfterPastDeadline {
            note += " (Retry-After \(retryAfter.components.seconds) s is past the push's deadline)"
        }
        let result: PushOutcome.Result
        switch outcome.result {
        case .accepted: result = outcome.result
        case .refused(let status, let reason, let explanation): result = .refused(status: status, reason: reason, explanation: explanation + note)
        case .failed(let kind, let message): result = .failed(kind, message: message + note)
        }
        return PushOutcome(result: result, latency: elapsed, isDeadToken: outcome.isDeadToken)
    }
}
