import Crypto
import Foundation
import Push
import Registrar
import RouseTestSupport
import RouseVocabulary
import Testing

/// Subscription keys kept in memory, as Storage keeps the posted ones in PostgreSQL.
struct MemoryWebPushKeys: WebPushSubscriptionKeySource {
    let keys: [String: WebPushSubscriptionKeys]

    init(_ subscriptions: [StandInWebPushSubscription]) throws {
        var keys: [String: WebPushSubscriptionKeys] = [:]
        for subscription in subscriptions {
            keys[subscription.endpoint] = try WebPushSubscriptionKeys(p256dh: subscription.keys.p256dh, auth: subscription.keys.auth)
        }
        self.keys = keys
    }

    func keys(forEndpoint endpoint: String) async throws -> WebPushSubscriptionKeys? { keys[endpoint] }
}

/// A web push service stand-in, Rouse's VAPID key and a push service sending through them.
struct WebPushFixture {
    let standIn: PushStandIn
    let vapid: VAPIDKeys
    let stores = MemoryPushStores()
    let service: PushService

    /// `settings`' retry, breaker and proxy apply to the web push client as they do to APNs and FCM.
    init(subscriptions names: [String], keysKnown: Bool = true, settings: PushSettings = PushSettings()) throws {
        standIn = try PushStandIn.webPush(subscriptions: names)
        vapid = VAPIDKeys.generate().keys
        let known = keysKnown ? Array(standIn.subscriptions.values) : []
        let client = WebPushClient(
            vapid: vapid, contact: "mailto:ops@example.com", caFile: standIn.caFile, timeout: .seconds(5),
            subscriptions: try MemoryWebPushKeys(known), allowedHosts: WebPushHostPolicy(entries: ["127.0.0.1"]), retry: settings.retry,
            breaker: settings.breaker, proxy: settings.proxy)
        var settings = settings
        settings.caFile = standIn.caFile
        settings.timeout = .seconds(5)
        service = PushService(settings: settings, apps: [], deadTokens: stores, records: stores, webPush: client)
    }

    func channel(_ name: String) throws -> PushChannel {
        PushChannel(provider: .webpush, token: try #require(standIn.subscriptions[name]).endpoint, param: nil, kind: .standard)
    }
}

/// RFC 8291 encryption against Appendix A, and web push through libcurl to the Python stand-in,
/// which checks the VAPID JWT (RFC 8292) and decrypts every payload with the subscription's keys.
@Suite(.serialized)
struct WebPushTests {
    typealias Vector = WebPushCryptoVector

    @Test func encryptionReproducesRFC8291AppendixA() throws {
        let body = try WebPushEncryption.encrypt(
            Array(Vector.plaintext.utf8), to: try P256PublicKey(uncompressedPoint: try #require(Base64URL.decode(Vector.userAgentPublicKey))),
            authSecret: try #require(Base64URL.decode(Vector.authSecret)),
            senderKey: try P256KeyPair(rawPrivateKey: try #require(Base64URL.decode(Vector.applicationServerPrivateKey))),
            salt: try #require(Base64URL.decode(Vector.salt)))
        #expect(Base64URL.encode(body) == Vector.message)

        let receiver = try P256KeyPair(rawPrivateKey: try #require(Base64URL.decode(Vector.userAgentPrivateKey)))
        let auth = try #require(Base64URL.decode(Vector.authSecret))
        #expect(try WebPushEncryption.decrypt(try #require(Base64URL.decode(Vector.message)), with: receiver, authSecret: auth) == Array(Vector.plaintext.utf8))
        var wrongAuth = auth
        wrongAuth[0] ^= 0x01
        #expect(throws: WebPushError.self) { try WebPushEncryption.decrypt(body, with: receiver, authSecret: wrongAuth) }
    }

    @Test func freshMessagesDifferAndRoundTrip() throws {
        let receiver = P256KeyPair.generate()
        let auth = SecureRandom.bytes(16)
        let subscriber = try P256PublicKey(uncompressedPoint: receiver.publicKey)
        let plaintext = Array(#"{"event":"call.ring"}"#.utf8)
        let first = try WebPushEncryption.encrypt(plaintext, to: subscriber, authSecret: auth)
        let second = try WebPushEncryption.encrypt(plaintext, to: subscriber, authSecret: auth)
        #expect(first != second, "a fresh salt and sender key per message")
        #expect(first.count == WebPushEncryption.headerBytes + plaintext.count + 1 + 16)
        #expect(Array(first[16..<21]) == [0, 0, 0x10, 0, 65], "rs 4096, keyid of 65 bytes")
        #expect(try WebPushEncryption.decrypt(second, with: receiver, authSecret: auth) == plaintext)

        let largest = [UInt8](repeating: 0x61, count: WebPushEncryption.maxPlaintextBytes)
        #expect(try WebPushEncryption.encrypt(largest, to: subscriber, authSecret: auth).count == WebPushEncryption.maxBodyBytes)
        #expect(throws: WebPushError.self) { try WebPushEncryption.encrypt(largest + [0x61], to: subscriber, authSecret: auth) }
        #expect(throws: WebPushError.self) { try WebPushEncryption.encrypt(plaintext, to: subscriber, authSecret: Array(auth.prefix(8))) }
    }

    @Test func subscriptionKeysAreCheckedAndTheAuthSecretNeverShown() throws {
        let receiver = P256KeyPair.generate()
        let auth = Base64URL.encode(SecureRandom.bytes(16))
        let keys = try WebPushSubscriptionKeys(p256dh: Base64URL.encode(receiver.publicKey), auth: auth)
        #expect(!"\(keys)".contains(auth) && !String(reflecting: keys).contains(auth))
        for (p256dh, secret, field) in [(Base64URL.encode(receiver.publicKey.dropLast()), auth, "p256dh"), (Base64URL.encode(receiver.publicKey), "c2hvcnQ", "auth")] {
            do {
                _ = try WebPushSubscriptionKeys(p256dh: p256dh, auth: secret)
                Issue.record("keys with a bad \(field) were accepted")
            } catch {
                #expect(error.key == field)
            }
        }
        #expect(WebPushEndpoint.origin(of: "https://Push.Example.net/wpush/v2/abc?x=1") == "https://push.example.net")
        #expect(WebPushEndpoint.origin(of: "https://127.0.0.1:8443/push/a") == "https://127.0.0.1:8443")
        #expect(WebPushEndpoint.origin(of: "https://[::1]:443/push/a") == "https://[::1]")
        #expect(WebPushEndpoint.origin(of: "http://push.example.net/a") == nil)
        #expect(WebPushEndpoint.origin(of: "https://user:pw@push.example.net/a") == nil)
        #expect(WebPushEndpoint.origin(of: "https://push.example.net/a b") == nil)
        let vapid = VAPIDKeys.generate()
        #expect(!"\(vapid.keys)".contains("PRIVATE"))
        #expect(try VAPIDKeys(privateKeyPEM: vapid.privateKeyPEM).publicKey == vapid.keys.publicKey)
    }

    @Test func ringReachesTheStandInEncryptedAndSigned() async throws {
        let fixture = try WebPushFixture(subscriptions: ["browser"])
        let channel = try fixture.channel("browser")
        let outcome = await fixture.service.sendRing(call, to: channel, expiresAt: Date().addingTimeInterval(25), aor: "1002@example.com")
        #expect(outcome.isAccepted, "\(outcome)")
        let request = try #require(try fixture.standIn.requests().first)
        #expect(request.verdictStatus == 201, "\(request.verdictDetail ?? "")")
        #expect(request.path == "/push/" + (try #require(fixture.standIn.subscriptions["browser"])).id)
        #expect(request.headers["content-encoding"] == "aes128gcm")
        #expect(request.headers["urgency"] == "high")
        #expect(request.headers["topic"] == callUUID.replacingOccurrences(of: "-", with: ""))
        let ttl = try #require(request.headers["ttl"].flatMap { Int($0) })
        #expect(ttl > 0 && ttl <= 25)
        #expect(request.plaintext == #"{"event":"call.ring","call_id":"a84b4c76e66710@pc33.atlanta.com","uuid":"3b0254fb-479a-5e7e-9c89-a6287808379a","caller_number":"1001","caller_name":"Alice","callee_number":"1002","callee_name":"Bob","ring_timeout_secs":"30","is_video":"true","timestamp":"2023-11-14T22:13:20.000Z"}"#)
        #expect(request.vapidKey == fixture.vapid.publicKeyBase64URL)
        #expect(request.jwtHeader?["alg"]?.stringValue == "ES256")
        #expect(request.jwtClaims?["aud"]?.stringValue == fixture.standIn.baseURL)
        #expect(request.jwtClaims?["sub"]?.stringValue == "mailto:ops@example.com")
        let expires = try #require(request.jwtClaims?["exp"]?.intValue)
        #expect(Double(expires) > Date().timeIntervalSince1970 && Double(expires) <= Date().timeIntervalSince1970 + 24 * 3600)
        #expect(request.headers[":scheme"] == "https", "HTTP/2 over TLS: the stand-in speaks nothing else")

        let records = await fixture.stores.records
        #expect(records.count == 1)
        #expect(records.first?.provider == .webpush)
        #expect(records.first?.outcome == "accepted")
        #expect(records.first?.tokenShort == "https://127.0.0.1/…", "the endpoint is a capability: only its host is kept")
        #expect(records.first?.appID == nil)
    }

    @Test func cancelCarriesTheRingsTopicAndTheJWTIsReused() async throws {
        let fixture = try WebPushFixture(subscriptions: ["browser"])
        let channel = try fixture.channel("browser")
        #expect(await fixture.service.sendRing(call, to: channel, expiresAt: Date().addingTimeInterval(20)).isAccepted)
        let outcome = await fixture.service.sendCancel(call, reason: "caller hung up", to: channel, expiresAt: Date().addingTimeInterval(20))
        #expect(outcome.isAccepted, "\(outcome)")
        let requests = try fixture.standIn.waitForRequests(count: 2)
        #expect(requests[1].jsonPlaintext?["event"]?.stringValue == "call.canceled")
        #expect(requests[1].jsonPlaintext?["reason"]?.stringValue == "caller hung up")
        #expect(requests[1].headers["topic"] == requests[0].headers["topic"], "the cancel replaces a ring the push service still holds")
        #expect(requests[1].headers["authorization"] == requests[0].headers["authorization"], "one signed JWT per push service, reused")
        #expect(requests[0].connection == requests[1].connection, "one connection to the push service")
    }

    @Test func goneSubscriptionIsMarkedDead() async throws {
        let fixture = try WebPushFixture(subscriptions: ["gone-old"])
        let channel = try fixture.channel("gone-old")
        let outcome = await fixture.service.sendRing(call, to: channel, expiresAt: Date().addingTimeInterval(20))
        #expect(outcome.result == .refused(status: 410, reason: "Gone", explanation: "the subscription was unsubscribed or has expired: it is dead"))
        #expect(outcome.isDeadToken)
        let dead = await fixture.stores.dead
        #expect(dead.count == 1)
        #expect(dead.first?.family == .webpush && dead.first?.token == channel.token && dead.first?.reason == "Gone")
        #expect(try fixture.standIn.requests().first?.plaintext != nil, "the push itself was sound: the stand-in read it")
    }

    @Test func unsubscribedAndUnknownEndpointsAreDeadOtherRefusalsAreNot() async throws {
        let fixture = try WebPushFixture(subscriptions: ["browser", "busy-tab", "toolarge-tab"])
        let browser = try #require(fixture.standIn.subscriptions["browser"])
        try fixture.standIn.unsubscribe(browser)
        let gone = await fixture.service.sendRing(call, to: try fixture.channel("browser"), expiresAt: Date().addingTimeInterval(20))
        #expect(gone.status == 410 && gone.isDeadToken, "\(gone)")
        let unknown = PushChannel(provider: .webpush, token: fixture.standIn.baseURL + "/push/never-made", param: nil, kind: .standard)
        let notFound = await fixture.service.sendRing(call, to: unknown, expiresAt: Date().addingTimeInterval(20))
        #expect(notFound.status == 404 && notFound.isDeadToken && notFound.reason == "NotFound", "\(notFound)")
        let busy = await fixture.service.sendRing(call, to: try fixture.channel("busy-tab"), expiresAt: Date().addingTimeInterval(20))
        #expect(busy.status == 429 && !busy.isDeadToken, "\(busy)")
        #expect(busy.explanation.contains("Retry-After 1"), "\(busy)")
        let large = await fixture.service.sendRing(call, to: try fixture.channel("toolarge-tab"), expiresAt: Date().addingTimeInterval(20))
        #expect(large.status == 413 && !large.isDeadToken && large.reason == "PayloadTooLarge", "\(large)")
        #expect(await fixture.stores.dead.map { $0.token } == [browser.endpoint, unknown.token])
    }

    @Test func subscriptionMadeForAnotherServerKeyIsForbidden() async throws {
        let fixture = try WebPushFixture(subscriptions: [])
        let other = VAPIDKeys.generate().keys
        let subscription = try fixture.standIn.subscribe(name: "tab", applicationServerKey: other.publicKeyBase64URL)
        let outcome = await fixture.service.sendRing(
            call, to: PushChannel(provider: .webpush, token: subscription.endpoint, param: nil, kind: .standard),
            expiresAt: Date().addingTimeInterval(20))
        #expect(outcome.status == 403 && !outcome.isDeadToken, "\(outcome)")
        #expect(outcome.explanation.contains("applicationServerKey"), "\(outcome)")

        let mine = try fixture.standIn.subscribe(name: "tab", applicationServerKey: fixture.vapid.publicKeyBase64URL)
        let keys = try MemoryWebPushKeys([mine])
        let service = PushService(
            settings: PushSettings(caFile: fixture.standIn.caFile), apps: [],
            webPush: WebPushClient(vapid: fixture.vapid, contact: "https://example.com/contact", caFile: fixture.standIn.caFile, timeout: .seconds(5), subscriptions: keys,
                allowedHosts: WebPushHostPolicy(entries: ["127.0.0.1"])))
        let accepted = await service.sendRing(
            call, to: PushChannel(provider: .webpush, token: mine.endpoint, param: nil, kind: .standard), expiresAt: Date().addingTimeInterval(20))
        #expect(accepted.isAccepted, "\(accepted)")
        #expect(try fixture.standIn.requests().last?.jwtClaims?["sub"]?.stringValue == "https://example.com/contact")
    }

    @Test func endpointWithoutPostedKeysGetsAPushWithoutPayload() async throws {
        let fixture = try WebPushFixture(subscriptions: ["registered-only"], keysKnown: false)
        let outcome = await fixture.service.sendRing(call, to: try fixture.channel("registered-only"), expiresAt: Date().addingTimeInterval(20))
        #expect(outcome.isAccepted, "\(outcome)")
        #expect(outcome.explanation.contains("without payload"), "\(outcome)")
        let request = try #require(try fixture.standIn.requests().first)
        #expect(request.plaintext == nil && request.headers["content-encoding"] == nil)
        #expect(request.notes.contains("push without payload"))
        #expect(request.headers["urgency"] == "high")
    }

    @Test func unusableEndpointsAndMissingSetupFailBeforeTheNetwork() async throws {
        let fixture = try WebPushFixture(subscriptions: [])
        let plain = await fixture.service.sendRing(
            call, to: PushChannel(provider: .webpush, token: "http://127.0.0.1:1/push/x", param: nil, kind: .standard), expiresAt: Date())
        #expect(plain.reason == "other" && plain.explanation.contains("https"), "\(plain)")
        let unset = PushService(settings: PushSettings(), apps: [])
        let noVAPID = await unset.sendRing(
            call, to: PushChannel(provider: .webpush, token: "https://127.0.0.1:1/push/x", param: nil, kind: .standard), expiresAt: Date())
        #expect(noVAPID.reason == "no app" && noVAPID.explanation.contains("VAPID"), "\(noVAPID)")
        #expect(try fixture.standIn.requests().isEmpty)
    }
}

/// RFC 8291 Appendix A (base64url, line breaks removed).
enum WebPushCryptoVector {
    static let plaintext = "When I grow up, I want to be a watermelon"
    static let applicationServerPrivateKey = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
    static let userAgentPublicKey = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    static let userAgentPrivateKey = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"
    static let salt = "DGv6ra1nlYgDCS1FRnbzlw"
    static let authSecret = "BTBZMqHH6r4Tts7J_aSIgg"
    /// Section 5: the header (salt, rs 4096, idlen 65, the sender's key) and the one record.
    static let message = "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
}
