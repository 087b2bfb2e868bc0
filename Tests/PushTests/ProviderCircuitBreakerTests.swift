import Foundation
@testable import Push
import Testing

/// The circuit breaker as a state machine on its own clock, the retry policy's decisions, and what
/// counts as the provider failing.
struct ProviderCircuitBreakerTests {
    let start = ContinuousClock.now
    let settings = ProviderCircuitBreaker.Settings(failureThreshold: 3, initialBackoff: .seconds(10), maximumBackoff: .seconds(25))

    @Test func opensAfterTheThresholdAndRefusesUntilTheBackoffEnds() {
        var breaker = ProviderCircuitBreaker(settings: settings)
        for second in 0..<2 {
            #expect(breaker.admit(now: start + .seconds(second)) == .send)
            breaker.failed("connect: refused", now: start + .seconds(second))
        }
        #expect(!breaker.isBackedOff, "two failures are under the threshold")
        #expect(breaker.admit(now: start + .seconds(2)) == .send)
        breaker.failed("503 ServiceUnavailable", now: start + .seconds(2))
        #expect(breaker.state == .open(until: start + .seconds(12)))
        let refused = breaker.admit(now: start + .seconds(11))
        guard case .refuse(let backedOff) = refused else {
            Issue.record("expected a refusal, got \(refused)")
            return
        }
        #expect(backedOff.failures == 3)
        #expect(backedOff.lastFailure == "503 ServiceUnavailable")
        #expect(backedOff.retryAt == start + .seconds(12))
    }

    @Test func aFailedProbeDoublesTheBackoffUpToItsCapAndASuccessfulOneCloses() {
        var breaker = ProviderCircuitBreaker(settings: settings)
        for _ in 0..<3 { breaker.failed("timeout", now: start) }
        #expect(breaker.admit(now: start + .seconds(10)) == .probe)
        // While the probe is out, every other push is refused.
        guard case .refuse = breaker.admit(now: start + .seconds(10)) else {
            Issue.record("a second push went out with the probe")
            return
        }
        breaker.failed("timeout", now: start + .seconds(11))
        #expect(breaker.state == .open(until: start + .seconds(31)), "twice the back-off")
        #expect(breaker.admit(now: start + .seconds(31)) == .probe)
        breaker.failed("timeout", now: start + .seconds(31))
        #expect(breaker.state == .open(until: start + .seconds(56)), "capped at 25 s")
        #expect(breaker.admit(now: start + .seconds(56)) == .probe)
        breaker.succeeded()
        #expect(breaker.state == .closed)
        #expect(breaker.consecutiveFailures == 0)
        #expect(breaker.backoff == .seconds(10), "the next opening starts from the first back-off again")
        #expect(breaker.admit(now: start + .seconds(57)) == .send)
    }

    @Test func aSuccessBetweenFailuresStartsTheCountAgain() {
        var breaker = ProviderCircuitBreaker(settings: settings)
        breaker.failed("timeout", now: start)
        breaker.failed("timeout", now: start)
        breaker.succeeded()
        breaker.failed("timeout", now: start)
        breaker.failed("timeout", now: start)
        #expect(!breaker.isBackedOff)
    }

    @Test func aLostProbeIsReplacedAfterTheLongestBackoff() {
        var breaker = ProviderCircuitBreaker(settings: settings)
        for _ in 0..<3 { breaker.failed("timeout", now: start) }
        #expect(breaker.admit(now: start + .seconds(10)) == .probe)
        guard case .refuse = breaker.admit(now: start + .seconds(34)) else {
            Issue.record("a push went out while the probe may still answer")
            return
        }
        #expect(breaker.admit(now: start + .seconds(35)) == .probe)
    }

    @Test func onlyTheProviderFailingCountsAgainstIt() {
        func counts(_ result: PushOutcome.Result) -> Bool {
            let circuit = ProviderCircuit(provider: "apns", app: "com.example.app", settings: .init(failureThreshold: 1))
            circuit.record(PushOutcome(result: result, latency: .zero))
            return circuit.isBackedOff
        }
        #expect(counts(.failed(.connect, message: "127.0.0.1:1: Connection refused")))
        #expect(counts(.failed(.timeout, message: "no answer")))
        #expect(counts(.failed(.connectionLost, message: "reset")))
        #expect(counts(.refused(status: 503, reason: "ServiceUnavailable", explanation: "")))
        #expect(counts(.refused(status: 500, reason: "InternalServerError", explanation: "")))
        #expect(!counts(.refused(status: 410, reason: "Unregistered", explanation: "")), "the provider answered about the token")
        #expect(!counts(.refused(status: 429, reason: "TooManyRequests", explanation: "")))
        #expect(!counts(.failed(.credentials, message: "bad key")))
        #expect(!counts(.accepted(providerID: nil)))
    }

    @Test func theCircuitSaysInWordsWhyPushesFailAtOnce() {
        let clock = ManualInstant(start)
        let circuit = ProviderCircuit(
            provider: "apns", app: "com.example.app", settings: .init(failureThreshold: 2, initialBackoff: .seconds(8)), now: { clock.now })
        #expect(circuit.problem == nil)
        circuit.record(PushOutcome(result: .failed(.connect, message: "127.0.0.1:1: Connection refused"), latency: .zero))
        circuit.record(PushOutcome(result: .failed(.connect, message: "127.0.0.1:1: Connection refused"), latency: .zero))
        #expect(circuit.problem == "push provider apns (com.example.app) backed off: 2 failures, last: connect: 127.0.0.1:1: Connection refused; next try in 8 s")
        let outcome = circuit.admit()
        #expect(outcome?.description == "failed: provider apns (com.example.app) backed off after 2 failures: connect: 127.0.0.1:1: Connection refused")
        #expect(outcome?.reason == "backed off")
        clock.advance(by: .seconds(8))
        #expect(circuit.admit() == nil, "the probe goes")
        circuit.record(PushOutcome(result: .accepted(providerID: nil), latency: .zero))
        #expect(circuit.problem == nil)
        #expect(!circuit.isBackedOff)
    }

    @Test func theRetryPolicyStaysWithinItsAttemptsAndTheDeadline() {
        let policy = PushRetryPolicy(maxAttempts: 3, initialDelay: .milliseconds(100), maximumDelay: .milliseconds(150), minimumAttemptTime: .milliseconds(200))
        #expect(policy.decide(afterAttempt: 1, retryAfter: nil, remaining: .seconds(5)) == .retry(after: .milliseconds(100)))
        #expect(policy.decide(afterAttempt: 2, retryAfter: nil, remaining: .seconds(5)) == .retry(after: .milliseconds(150)), "doubled, capped")
        #expect(policy.decide(afterAttempt: 3, retryAfter: nil, remaining: .seconds(5)) == .attemptsUsed)
        #expect(policy.decide(afterAttempt: 1, retryAfter: nil, remaining: .milliseconds(250)) == .pastDeadline, "no time for the wait and an attempt")
        #expect(policy.decide(afterAttempt: 1, retryAfter: .seconds(2), remaining: .seconds(5)) == .retry(after: .seconds(2)), "Retry-After honoured")
        #expect(policy.decide(afterAttempt: 1, retryAfter: .seconds(30), remaining: .seconds(5)) == .pastDeadline)
        #expect(PushRetryPolicy.isTransient(status: 503, retryAfter: nil))
        #expect(PushRetryPolicy.isTransient(status: 429, retryAfter: .seconds(1)))
        #expect(!PushRetryPolicy.isTransient(status: 429, retryAfter: nil))
        #expect(!PushRetryPolicy.isTransient(status: 410, retryAfter: nil))
        #expect(PushRetryPolicy.retryAfter(" 3 ") == .seconds(3))
        #expect(PushRetryPolicy.retryAfter("Wed, 21 Oct 2015 07:28:00 GMT") == nil)
    }
}

/// A clock the test moves by hand. Thread-safe.
final class ManualInstant: @unchecked Sendable {
    // @unchecked: `current` is only touched under `lock`.
    private let lock = NSLock()
    private var current: ContinuousClock.Instant

    init(_ start: ContinuousClock.Instant) { current = start }

    var now: ContinuousClock.Instant {
        lock.lock()
        defer { lock.unlock() }
        return current
    }

    func advance(by duration: Duration) {
        lock.lock()
        current = current + duration
        lock.unlock()
    }
}
