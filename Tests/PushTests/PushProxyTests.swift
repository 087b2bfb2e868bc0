import Foundation
import Push
import RouseTestSupport
import RouseVocabulary
import Testing

/// `push_proxy` (issue 20 item 5): APNs, FCM (its OAuth token fetch too) and web push reach the
/// stand-ins through a real HTTP CONNECT proxy (Debian's tinyproxy, with Basic authentication),
/// whose log shows each tunnel; a proxy that is down is a transport failure, tried again and
/// counted by the circuit breaker, never a hang; the password is never shown.
@Suite(.serialized)
struct PushProxyTests {
    static let password = "pr0xy-s3cret"

    func proxied(_ settings: PushSettings, _ proxy: TestHTTPProxy) throws -> PushSettings {
        var settings = settings
        settings.proxy = try PushProxy(parsing: proxy.url)
        return settings
    }

    @Test func apnsFCMAndWebPushGoThroughTheProxy() async throws {
        let proxy = try TestHTTPProxy(user: "rouse", password: Self.password)
        defer { proxy.stop() }

        let apns = try APNsFixture()
        let apnsService = PushService(settings: try proxied(try apns.settings(), proxy), apps: [apns.app()])
        let token = apnsToken("0700")
        let ring = await apnsService.sendRing(
            call, to: PushChannel(provider: .apns, token: token, param: nil, kind: .voip), expiresAt: Date().addingTimeInterval(30))
        #expect(ring.isAccepted, "\(ring)")
        #expect(try apns.production.requests().contains { $0.path == "/3/device/" + token }, "the push arrived at the APNs stand-in")
        #expect(proxy.waitForConnects(to: "127.0.0.1:\(apns.production.port)").contains("127.0.0.1:\(apns.production.port)"), "\(proxy.log())")

        let fcm = try FCMFixture()
        let fcmService = PushService(settings: try proxied(fcm.settings, proxy), apps: [fcm.app])
        let message = await fcmService.sendRing(
            call, to: PushChannel(provider: .fcm, token: "fcm-token-0700", param: nil, kind: .standard), expiresAt: Date().addingTimeInterval(30))
        #expect(message.isAccepted, "\(message)")
        let fcmPaths = try fcm.standIn.requests().map(\.path)
        #expect(fcmPaths.contains { $0.hasSuffix("/token") }, "the OAuth token was fetched (through the proxy: nothing else reaches the stand-in)")
        #expect(fcmPaths.contains { $0.hasSuffix("messages:send") }, "\(fcmPaths)")
        #expect(proxy.waitForConnects(to: "127.0.0.1:\(fcm.standIn.port)").contains("127.0.0.1:\(fcm.standIn.port)"), "\(proxy.log())")

        let web = try WebPushFixture(subscriptions: ["browser"], settings: try proxied(PushSettings(), proxy))
        let push = await web.service.sendRing(call, to: try web.channel("browser"), expiresAt: Date().addingTimeInterval(30))
        #expect(push.isAccepted, "\(push)")
        #expect(try web.standIn.requests().first?.plaintext?.contains("call.ring") == true, "the stand-in decrypted the push")
        #expect(proxy.waitForConnects(to: "127.0.0.1:\(web.standIn.port)").contains("127.0.0.1:\(web.standIn.port)"), "\(proxy.log())")
    }

    @Test func aProxyThatIsDownIsATransportFailureRetriedAndBackedOff() async throws {
        let fixture = try WebPushFixture(subscriptions: ["browser"])
        let closed = try FreePort.pick()
        var settings = PushSettings(
            retry: PushRetryPolicy(maxAttempts: 3, initialDelay: .milliseconds(10)),
            breaker: ProviderCircuitBreaker.Settings(failureThreshold: 2, initialBackoff: .seconds(60)))
        settings.proxy = try PushProxy(parsing: "http://rouse:\(Self.password)@127.0.0.1:\(closed)")
        let down = try WebPushFixture(subscriptions: [], settings: settings)
        let channel = try fixture.channel("browser")
        for _ in 0..<2 {
            let outcome = await down.service.sendRing(call, to: channel, expiresAt: Date().addingTimeInterval(30))
            guard case .failed(.connect, let message) = outcome.result else {
                Issue.record("expected a connect failure, got \(outcome)")
                return
            }
            #expect(message.contains("(3 attempts in "), "tried again like an unreachable provider: \(message)")
            #expect(!message.contains(Self.password))
        }
        let held = await down.service.sendRing(call, to: channel, expiresAt: Date().addingTimeInterval(30))
        #expect(held.reason == "backed off", "\(held)")
        #expect(try fixture.standIn.requests().isEmpty, "nothing reached the push service")
        #expect(!down.service.healthProblems.joined().contains(Self.password))

        let apns = try APNsFixture()
        var apnsSettings = try apns.settings()
        apnsSettings.proxy = settings.proxy
        let apnsDown = await PushService(settings: apnsSettings, apps: [apns.app()]).sendRing(
            call, to: PushChannel(provider: .apns, token: apnsToken("0701"), param: nil, kind: .voip), expiresAt: Date().addingTimeInterval(30))
        #expect(apnsDown.reason == "connect", "\(apnsDown)")
        #expect(try apns.production.requests().isEmpty)
    }

    @Test func aWrongProxyPasswordFailsWithoutShowingIt() async throws {
        let proxy = try TestHTTPProxy(user: "rouse", password: Self.password)
        defer { proxy.stop() }
        let fixture = try WebPushFixture(subscriptions: ["browser"])
        var settings = PushSettings(retry: PushRetryPolicy(maxAttempts: 1))
        settings.proxy = try PushProxy(parsing: "http://rouse:not-the-password@127.0.0.1:\(proxy.port)")
        let refused = try WebPushFixture(subscriptions: [], settings: settings)
        let outcome = await refused.service.sendRing(call, to: try fixture.channel("browser"), expiresAt: Date().addingTimeInterval(30))
        #expect(!outcome.isAccepted, "\(outcome)")
        #expect(!outcome.description.contains("not-the-password"), "\(outcome)")
        #expect(try fixture.standIn.requests().isEmpty, "the proxy let nothing through")
    }

    @Test func proxyURLsAreReadAndTheirPasswordNeverShown() throws {
        let proxy = try PushProxy(parsing: "http://ops%40example.com:p%3Ass@proxy.example.com:3128")
        #expect(proxy.host == "proxy.example.com" && proxy.port == 3128 && proxy.scheme == "http")
        #expect(proxy.user == "ops@example.com")
        #expect(proxy.description == "http://ops%40example.com:•••@proxy.example.com:3128")
        #expect(!String(reflecting: proxy).contains("p%3Ass") && !"\(proxy)".contains("p:ss"))
        #expect(try PushProxy(parsing: "https://proxy.example.com").port == 443)
        #expect(try PushProxy(parsing: "http://[::1]:8080").description == "http://[::1]:8080")
        for bad in ["proxy.example.com:3128", "socks5://proxy.example.com:1080", "http://proxy.example.com", "http://:3128",
                    "http://proxy.example.com:3128/path", "http://:secret@proxy.example.com:3128"] {
            #expect(throws: PushProxy.Problem.self, "\(bad)") { try PushProxy(parsing: bad) }
        }
        do {
            _ = try PushProxy(parsing: "ftp://u:topsecret@proxy.example.com:21")
        } catch {
            #expect(!error.description.contains("topsecret"))
        }
    }
}
