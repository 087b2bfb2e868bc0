import Foundation
import Push
import RouseTestSupport
import RouseVocabulary
import Testing

/// Web push takes APNs's and FCM's path (issue 20 item 5): a push service that fails for now (503,
/// a 429 that says when, a dropped connection) is tried again within the push's deadline, one that
/// keeps failing is backed off by the circuit breaker of its origin, and the operator's test push
/// reaches a web push subscription. Through libcurl to the Python stand-in, whose request log
/// counts the attempts.
@Suite(.serialized)
struct WebPushDeliveryTests {
    func pushRequests(_ fixture: WebPushFixture, _ name: String) throws -> [StandInRequest] {
        let id = try #require(fixture.standIn.subscriptions[name]).id
        return try fixture.standIn.requests().filter { $0.path == "/push/" + id }
    }

    @Test func anUnavailablePushServiceIsTriedThreeTimesAndSaysSo() async throws {
        let fixture = try WebPushFixture(subscriptions: ["browser"])
        try fixture.standIn.setFault(.unavailable(retryAfterSeconds: nil))
        let outcome = await fixture.service.sendRing(call, to: try fixture.channel("browser"), expiresAt: Date().addingTimeInterval(30))
        guard case .refused(503, _, let explanation) = outcome.result else {
            Issue.record("expected 503, got \(outcome)")
            return
        }
        #expect(explanation.hasPrefix("the push service is unavailable for now (3 attempts in "), "\(explanation)")
        #expect(try pushRequests(fixture, "browser").map(\.verdictStatus) == [503, 503, 503])
        #expect(!outcome.isDeadToken)
        #expect(await fixture.stores.dead.isEmpty)
    }

    @Test func aRetryAfterIsWaitedForAndTheNextAttemptGetsThrough() async throws {
        let fixture = try WebPushFixture(subscriptions: ["browser"])
        try fixture.standIn.setFault(.unavailable(retryAfterSeconds: 2))
        let channel = try fixture.channel("browser")
        let push = Task { await fixture.service.sendRing(call, to: channel, expiresAt: Date().addingTimeInterval(60)) }
        _ = try fixture.standIn.waitForRequests(count: 1, timeout: 45)
        try fixture.standIn.setFault(.none)
        let outcome = await push.value
        #expect(outcome.isAccepted, "\(outcome)")
        let attempts = try pushRequests(fixture, "browser")
        #expect(attempts.map(\.verdictStatus) == [503, 201])
        #expect(attempts.last?.plaintext?.contains(#""event":"call.ring""#) == true, "the retried push is the whole ring push")
        #expect(await fixture.stores.records.map(\.outcome) == ["accepted"], "one push, one record")
    }

    @Test func aDroppedConnectionIsTriedAgainAndA429WithRetryAfterToo() async throws {
        let fixture = try WebPushFixture(subscriptions: ["browser", "busy-tab"])
        try fixture.standIn.setFault(.reset)
        let dropped = await fixture.service.sendRing(call, to: try fixture.channel("browser"), expiresAt: Date().addingTimeInterval(30))
        guard case .failed(.connectionLost, let message) = dropped.result else {
            Issue.record("expected a lost connection, got \(dropped)")
            return
        }
        #expect(message.contains("(3 attempts in "), "\(message)")
        #expect(try pushRequests(fixture, "browser").count == 3)
        try fixture.standIn.setFault(.none)
        // The stand-in's busy-tab answers every push 429 with Retry-After: 1.
        let busy = await fixture.service.sendRing(call, to: try fixture.channel("busy-tab"), expiresAt: Date().addingTimeInterval(30))
        #expect(busy.status == 429 && !busy.isDeadToken, "\(busy)")
        #expect(busy.explanation.contains("(3 attempts in "), "\(busy)")
        #expect(try pushRequests(fixture, "busy-tab").map(\.verdictStatus) == [429, 429, 429])
    }

    @Test func aGoneSubscriptionIsNotTriedAgainAndIsMarkedDead() async throws {
        let fixture = try WebPushFixture(subscriptions: ["gone-tab"])
        let outcome = await fixture.service.sendRing(call, to: try fixture.channel("gone-tab"), expiresAt: Date().addingTimeInterval(30))
        #expect(outcome.status == 410 && outcome.isDeadToken, "\(outcome)")
        #expect(try pushRequests(fixture, "gone-tab").count == 1)
        #expect(await fixture.stores.dead.map(\.token) == [try fixture.channel("gone-tab").token])
    }

    @Test func aPushServiceThatKeepsFailingIsBackedOffByItsOriginAndComesBack() async throws {
        let settings = PushSettings(
            retry: PushRetryPolicy(maxAttempts: 1),
            breaker: ProviderCircuitBreaker.Settings(failureThreshold: 2, initialBackoff: .milliseconds(300), maximumBackoff: .seconds(2)))
        let fixture = try WebPushFixture(subscriptions: ["browser"], settings: settings)
        let channel = try fixture.channel("browser")
        try fixture.standIn.setFault(.unavailable(retryAfterSeconds: nil))
        for _ in 0..<2 {
            let failed = await fixture.service.sendRing(call, to: channel, expiresAt: Date().addingTimeInterval(30))
            #expect(failed.status == 503, "\(failed)")
        }
        let held = await fixture.service.sendRing(call, to: channel, expiresAt: Date().addingTimeInterval(30))
        guard case .failed(.backedOff, let message) = held.result else {
            Issue.record("expected the breaker to hold the push back, got \(held)")
            return
        }
        #expect(message.hasPrefix("provider webpush (\(fixture.standIn.baseURL)) backed off after 2 failures: 503"), "\(message)")
        #expect(try pushRequests(fixture, "browser").count == 2, "the held push sent no request")
        #expect(fixture.service.backedOffProviderCount == 1)
        #expect(fixture.service.healthProblems.contains { $0.hasPrefix("push provider webpush (\(fixture.standIn.baseURL)) backed off: 2 failures") },
                "\(fixture.service.healthProblems)")

        // Another push service has a breaker of its own: it is still tried.
        let elsewhere = PushChannel(provider: .webpush, token: "https://127.0.0.1:1/push/other", param: nil, kind: .standard)
        let other = await fixture.service.sendRing(call, to: elsewhere, expiresAt: Date().addingTimeInterval(30))
        #expect(other.reason == "connect", "\(other)")

        // After the back-off one probe goes; its success closes the breaker.
        try fixture.standIn.setFault(.none)
        let probeAt = ContinuousClock.now + .milliseconds(300)
        var probe = held
        while case .failed(.backedOff, _) = probe.result, ContinuousClock.now < probeAt + .seconds(30) {
            try await Task.sleep(for: .milliseconds(50))
            probe = await fixture.service.sendRing(call, to: channel, expiresAt: Date().addingTimeInterval(30))
        }
        #expect(probe.isAccepted, "\(probe)")
        #expect(fixture.service.providerProblems.filter { $0.contains(fixture.standIn.baseURL) }.isEmpty)
    }

    @Test func theTestPushReachesAWebPushSubscriptionMarkedTest() async throws {
        let fixture = try WebPushFixture(subscriptions: ["browser"])
        let outcome = await fixture.service.sendTest(to: try fixture.channel("browser"), calleeNumber: "1002", aor: "1002@example.com")
        #expect(outcome.isAccepted, "\(outcome)")
        let request = try #require(try pushRequests(fixture, "browser").first)
        let payload = try #require(request.jsonPlaintext)
        #expect(payload["event"]?.stringValue == "call.ring")
        #expect(payload["test"]?.stringValue == "true")
        #expect(payload["caller_name"]?.stringValue == "Rouse test push")
        #expect(payload["callee_number"]?.stringValue == "1002")
        #expect(request.headers["urgency"] == "high", "a test push goes exactly as a call's ring push")
    }
}
