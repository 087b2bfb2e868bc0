import Foundation
import Push
import Registrar
import RouseTestSupport
import RouseVocabulary
import Testing

/// A provider that fails (issue 9 item 3): answers 503, drops connections, stalls, or cannot be
/// reached. Each push is tried again a bounded number of times within its deadline (the stand-in's
/// request log counts the attempts), says what happened in words, and a provider that keeps
/// failing is backed off by its circuit breaker and comes back after a successful probe.
@Suite(.serialized)
struct PushFaultScenarioTests {
    func ring(_ service: PushService, _ token: String, expiresIn seconds: TimeInterval = 30, deadline: Date? = nil) async -> PushOutcome {
        await service.sendRing(
            call, to: PushChannel(provider: .apns, token: token, param: nil, kind: .voip), expiresAt: Date().addingTimeInterval(seconds),
            deadline: deadline)
    }

    func pushRequests(_ standIn: PushStandIn, _ token: String) throws -> [StandInRequest] {
        try standIn.requests().filter { $0.path.hasSuffix(token) || $0.body.contains(token) }
    }

    @Test func apnsUnavailableIsTriedThreeTimesAndSaysSo() async throws {
        let fixture = try APNsFixture()
        try fixture.production.setFault(.unavailable(retryAfterSeconds: nil))
        let service = PushService(settings: try fixture.settings(), apps: [fixture.app()])
        let token = apnsToken("0401")
        let outcome = await ring(service, token)
        guard case .refused(503, "ServiceUnavailable", let explanation) = outcome.result else {
            Issue.record("expected 503, got \(outcome)")
            return
        }
        #expect(explanation.hasPrefix("Apple's service is unavailable for now (3 attempts in "), "\(explanation)")
        #expect(try pushRequests(fixture.production, token).map(\.verdictStatus) == [503, 503, 503])
    }

    @Test func aTransient503IsRetriedAndAccepted() async throws {
        let fixture = try APNsFixture()
        let service = PushService(settings: try fixture.settings(), apps: [fixture.app()])
        let token = apnsToken("5555")
        let outcome = await ring(service, token)
        #expect(outcome.isAccepted, "\(outcome)")
        #expect(try pushRequests(fixture.production, token).map(\.verdictStatus) == [503, 200])
    }

    @Test func aRetryAfterPastTheDeadlineIsNotWaitedFor() async throws {
        let standIn = try FCMFixture()
        try standIn.standIn.setFault(.unavailable(retryAfterSeconds: 30))
        let service = PushService(settings: standIn.settings, apps: [standIn.app])
        let token = "fcm-token-0402"
        let started = ContinuousClock.now
        let outcome = await service.sendRing(
            call, to: PushChannel(provider: .fcm, token: token, param: nil, kind: .standard), expiresAt: Date().addingTimeInterval(5))
        // Not a speed check: the 30 s Retry-After was not waited for (a loaded machine may take
        // seconds over the request itself).
        #expect(ContinuousClock.now - started < .seconds(25), "the push did not wait out the 30 s Retry-After")
        guard case .refused(503, "UNAVAILABLE", let explanation) = outcome.result else {
            Issue.record("expected 503, got \(outcome)")
            return
        }
        #expect(explanation.hasSuffix("(Retry-After 30 s is past the push's deadline)"), "\(explanation)")
        #expect(try pushRequests(standIn.standIn, token).count == 1)
        // A short Retry-After is waited for, and the next attempt gets through.
        try standIn.standIn.setFault(.unavailable(retryAfterSeconds: 2))
        let retried = Task { await service.sendRing(
            call, to: PushChannel(provider: .fcm, token: "fcm-token-0403", param: nil, kind: .standard), expiresAt: Date().addingTimeInterval(60)) }
        // Generous: suites run side by side, and the retry must still fall before the push's deadline.
        _ = try standIn.standIn.waitForRequests(count: 3, timeout: 45)
        try standIn.standIn.setFault(.none)
        let second = await retried.value
        #expect(second.isAccepted, "\(second)")
        #expect(try pushRequests(standIn.standIn, "fcm-token-0403").map(\.verdictStatus) == [503, 200])
    }

    @Test func droppedAndRefusedConnectionsAreTriedAgainWithinTheAttempts() async throws {
        let fixture = try APNsFixture()
        try fixture.production.setFault(.reset)
        let service = PushService(settings: try fixture.settings(), apps: [fixture.app()])
        let token = apnsToken("0404")
        let lost = await ring(service, token)
        guard case .failed(.connectionLost, let message) = lost.result else {
            Issue.record("expected a lost connection, got \(lost)")
            return
        }
        #expect(message.contains("(3 attempts in "), "\(message)")
        #expect(try pushRequests(fixture.production, token).count == 3)

        let closedPort = PushService(
            settings: PushSettings(apns: APNsEndpoints(production: "https://127.0.0.1:1"), timeout: .seconds(2)), apps: [fixture.app()])
        let refused = await ring(closedPort, apnsToken("0405"))
        guard case .failed(.connect, let refusal) = refused.result else {
            Issue.record("expected a refused connection, got \(refused)")
            return
        }
        #expect(refusal.contains("(3 attempts in "), "\(refusal)")
    }

    @Test func aStalledProviderTimesOutOnceWithinTheDeadline() async throws {
        let fixture = try APNsFixture()
        try fixture.production.setFault(.stall)
        // A push timeout far beyond the caller's deadline, so which of the two ended the push shows
        // however slowly a loaded machine runs the test.
        let service = PushService(settings: try fixture.settings(timeout: .seconds(60)), apps: [fixture.app()])
        let token = apnsToken("0406")
        let started = ContinuousClock.now
        let outcome = await ring(service, token, deadline: Date().addingTimeInterval(0.8))
        guard case .failed(.timeout, _) = outcome.result else {
            Issue.record("expected a timeout, got \(outcome)")
            return
        }
        #expect(ContinuousClock.now - started < .seconds(30), "the caller's 0.8 s deadline, not the 60 s push timeout, ended it")
        #expect(try pushRequests(fixture.production, token).count == 1, "a timeout is not sent again")
    }

    @Test func aProviderThatKeepsFailingIsBackedOffThenRecoversAfterAProbe() async throws {
        let fixture = try APNsFixture()
        try fixture.production.setFault(.unavailable(retryAfterSeconds: nil))
        var settings = try fixture.settings()
        settings.retry = PushRetryPolicy(maxAttempts: 1)
        settings.breaker = ProviderCircuitBreaker.Settings(failureThreshold: 2, initialBackoff: .milliseconds(500))
        let service = PushService(settings: settings, apps: [fixture.app()])
        #expect(await ring(service, apnsToken("0411")).status == 503)
        #expect(service.providerProblems.isEmpty)
        #expect(await ring(service, apnsToken("0412")).status == 503)
        #expect(service.backedOffProviderCount == 1)
        let problems = service.providerProblems
        #expect(problems.count == 1)
        #expect(problems.first?.hasPrefix("push provider apns (com.example.app) backed off: 2 failures, last: 503 ServiceUnavailable; next try in ") == true, "\(problems)")

        let backedOff = await ring(service, apnsToken("0413"))
        #expect(backedOff.description == "failed: provider apns (com.example.app) backed off after 2 failures: 503 ServiceUnavailable")
        #expect(try pushRequests(fixture.production, apnsToken("0413")).isEmpty, "no request while backed off")

        // Apple is back; once the back-off is over, the next push is the probe and closes the breaker.
        try fixture.production.setFault(.none)
        let deadline = ContinuousClock.now + .seconds(20)
        var probe = backedOff
        var number = 0x420
        while !probe.isAccepted, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            number += 1
            probe = await ring(service, apnsToken(String(format: "%04x", number)))
        }
        #expect(probe.isAccepted, "\(probe)")
        #expect(service.providerProblems.isEmpty)
        #expect(service.backedOffProviderCount == 0)
    }

    /// FCM's INVALID_ARGUMENT covers a bad token and a bad message alike (Google's "FCM error
    /// codes"): the token is marked dead only when the answer is about the token.
    @Test func fcmInvalidArgumentMarksTheTokenDeadOnlyWhenItNamesTheToken() async throws {
        let fixture = try FCMFixture()
        let stores = MemoryPushStores()
        let service = PushService(settings: fixture.settings, apps: [fixture.app], deadTokens: stores, records: stores)
        func ring(_ token: String) async -> PushOutcome {
            await service.sendRing(call, to: PushChannel(provider: .fcm, token: token, param: nil, kind: .standard), expiresAt: Date().addingTimeInterval(30))
        }
        // Google's answer to a token that is not an FCM registration token (no field violation).
        let notAToken = await ring("invalid-token-0501")
        #expect(notAToken.result == .refused(status: 400, reason: "INVALID_ARGUMENT", explanation: "FCM says the registration token is not valid: the token is dead"))
        #expect(notAToken.isDeadToken)
        // A field violation at message.token.
        try fixture.standIn.setFault(.invalidArgument(field: "message.token"))
        let badTokenField = await ring("fcm-token-0502")
        #expect(badTokenField.isDeadToken, "\(badTokenField)")
        // A field violation anywhere else is the message's fault: the token stays alive.
        try fixture.standIn.setFault(.invalidArgument(field: "message.data[0].value"))
        let badData = await ring("fcm-token-0503")
        #expect(badData.result == .refused(
            status: 400, reason: "INVALID_ARGUMENT",
            explanation: "FCM refused the message at message.data[0].value (Rouse's bug): Invalid value at 'message.data[0].value' (fault file)"))
        #expect(!badData.isDeadToken)
        #expect(await stores.dead.map(\.token) == ["invalid-token-0501", "fcm-token-0502"])
        #expect(try pushRequests(fixture.standIn, "fcm-token-0503").map(\.verdictStatus) == [400], "a refusal is not sent again")
    }
}
