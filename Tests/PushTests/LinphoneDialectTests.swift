import Crypto
import Foundation
import Push
import Registrar
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import Testing

/// Linphone's legacy push parameters (`pn-type`, `app-id`, `pn-tok`) as its iOS builds write them:
/// `app-id=<bundle>[.voip].<prod|dev>`, in the Contact URI or after `>`, in either order. Read from
/// the bytes, then chosen an app and a host for, then pushed through the real HTTP/2 client.
@Suite(.serialized)
struct LinphoneDialectTests {
    static let token = "6D3B1A0F" + String(repeating: "C", count: 56)

    static func channels(_ contact: String) throws -> PushParameters {
        try #require(try PushParameters.parse(try SIPNameAddress(parsing: contact)))
    }

    @Test(arguments: [
        // A production build with PushKit: the VoIP topic, production host.
        ("<sip:1001@192.0.2.7:5060;transport=tcp;app-id=org.example.phone.voip.prod;pn-type=apple;pn-tok=\(token);pn-msg-str=IM_MSG;pn-call-str=IC_MSG;pn-call-snd=ring.caf;pn-msg-snd=msg.caf;pn-timeout=0;pn-silent=1>",
         PushProvider.apns, "org.example.phone.voip", PushChannelKind.voip),
        // The same as a development build: the sandbox host.
        ("<sip:1001@192.0.2.7:5060;app-id=org.example.phone.voip.dev;pn-type=apple;pn-tok=\(token);pn-timeout=0;pn-silent=1>",
         .apnsSandbox, "org.example.phone.voip", .voip),
        // Without PushKit (iOS 7 and earlier builds): the regular topic.
        ("<sip:1001@192.0.2.7:5060;app-id=org.example.phone.prod;pn-type=apple;pn-tok=\(token);pn-msg-str=IM_MSG>",
         .apns, "org.example.phone", .remote),
        ("<sip:1001@192.0.2.7:5060;app-id=org.example.phone.dev;pn-type=apple;pn-tok=\(token)>",
         .apnsSandbox, "org.example.phone", .remote),
        // Set as contact (header) parameters rather than URI parameters, pn-type first.
        ("<sip:1001@192.0.2.7:5060>;pn-type=apple;app-id=org.example.phone.voip.prod;pn-tok=\(token);+sip.instance=\"<urn:uuid:0bd5e3a8-8f4f-4c5e-9d0e-6a3c0f1f2b10>\"",
         .apns, "org.example.phone.voip", .voip),
    ])
    func legacyAppleParametersGiveTopicHostAndChannel(contact: String, provider: PushProvider, topic: String, kind: PushChannelKind) throws {
        let parameters = try Self.channels(contact)
        #expect(parameters.provider == provider)
        #expect(parameters.channels == [PushChannel(provider: provider, token: Self.token, param: topic, kind: kind)])
    }

    @Test func legacyAndroidParametersKeepTheSenderID() throws {
        let parameters = try Self.channels("<sip:1001@192.0.2.7;app-id=929724111839;pn-type=firebase;pn-timeout=0;pn-tok=fHk3:APA91bGz;pn-silent=1>")
        #expect(parameters.channels == [PushChannel(provider: .fcm, token: "fHk3:APA91bGz", param: "929724111839", kind: .standard)])
        let google = try Self.channels("<sip:1001@192.0.2.7>;app-id=929724111839;pn-type=google;pn-tok=abc")
        #expect(google.channels.first?.param == "929724111839")
    }

    @Test func legacyChannelsSelectTheAppByBundleID() throws {
        let key = SigningKey.generateP256().privateKeyPEM()
        func apns(_ id: Int64, _ topic: String, param: String = "") -> PushApp {
            PushApp(id: id, credentials: .apns(APNsCredentials(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", topic: topic, privateKeyPEM: key)), param: param)
        }
        let selector = PushAppSelector(apps: [apns(1, "com.default.app"), apns(2, "org.example.phone"), apns(3, "org.other.app.voip")])
        for contact in [
            "<sip:1@h;pn-type=apple;app-id=org.example.phone.voip.prod;pn-tok=\(Self.token)>",
            "<sip:1@h;pn-type=apple;app-id=org.example.phone.voip.dev;pn-tok=\(Self.token)>",
            "<sip:1@h;pn-type=apple;app-id=org.example.phone.prod;pn-tok=\(Self.token)>",
            "<sip:1@h;pn-type=apple;app-id=org.example.phone.dev;pn-tok=\(Self.token)>",
        ] {
            let channel = try #require(try Self.channels(contact).channels.first)
            #expect(selector.app(for: channel)?.id == 2, "\(contact)")
        }
        let other = try #require(try Self.channels("<sip:1@h;pn-type=apple;app-id=org.other.app.voip.prod;pn-tok=\(Self.token)>").channels.first)
        #expect(selector.app(for: other)?.id == 3)
        let unknown = try #require(try Self.channels("<sip:1@h;pn-type=apple;app-id=net.unknown.voip.prod;pn-tok=\(Self.token)>").channels.first)
        #expect(selector.app(for: unknown)?.id == 1)
    }

    /// The phone that never rang: a production Linphone build's REGISTER now gets a VoIP ring push
    /// on Apple's production host, and a development build's on the sandbox host.
    @Test func legacyProductionAndDevelopmentBuildsRingOnTheirHosts() async throws {
        let fixture = try APNsFixture(sandbox: true)
        let service = PushService(settings: try fixture.settings(), apps: [fixture.app()])
        let production = try #require(try Self.channels(
            "<sip:1002@192.0.2.7;app-id=com.example.app.voip.prod;pn-type=apple;pn-tok=\(apnsToken("0a11").uppercased())>").channels.first)
        let outcome = await service.sendRing(call, to: production, expiresAt: Date().addingTimeInterval(30))
        #expect(outcome.isAccepted, "\(outcome)")
        let development = try #require(try Self.channels(
            "<sip:1002@192.0.2.7;app-id=com.example.app.voip.dev;pn-type=apple;pn-tok=\(apnsToken("0a12"))>").channels.first)
        let sandboxOutcome = await service.sendRing(call, to: development, expiresAt: Date().addingTimeInterval(30))
        #expect(sandboxOutcome.isAccepted, "\(sandboxOutcome)")
        let ring = try #require(try fixture.production.requests().first)
        #expect(ring.path == "/3/device/\(apnsToken("0a11"))")
        #expect(ring.headers["apns-topic"] == "com.example.app.voip")
        #expect(ring.headers["apns-push-type"] == "voip")
        #expect(ring.jsonBody?["event"]?.stringValue == "call.ring")
        let sandboxRing = try #require(try fixture.sandbox?.requests().first)
        #expect(sandboxRing.path == "/3/device/\(apnsToken("0a12"))")
        #expect(sandboxRing.headers["apns-topic"] == "com.example.app.voip")
        #expect(sandboxRing.headers["apns-push-type"] == "voip")
        #expect(try fixture.production.requests().count == 1)
    }
}
