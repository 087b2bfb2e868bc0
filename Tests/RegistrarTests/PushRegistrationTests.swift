import Foundation
import Registrar
import RouseVocabulary
import SIPMessage
import XCTest

final class PushRegistrationTests: XCTestCase {
    typealias F = RegistrarFixture
    let voipToken = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
    let remoteToken = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"

    func testRFC8599ParametersBecomeAPushChannelAndFeatureCaps() throws {
        var fixture = F()
        let contact = "<sip:1001@192.0.2.7:5060;pn-provider=apns;pn-prid=\(voipToken.uppercased());pn-param=DEF123GHIJ.com.example.app.voip>;+sip.pnsreg"
        let response = F.response(try fixture.registerAuthenticated(contacts: [contact]))
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(response.headers.lines(.featureCaps), ["*;+sip.pns=\"apns\";+sip.pnsreg=\"121\""])
        let channel = try XCTUnwrap(fixture.core.bindings(for: F.alice).first?.pushChannels.first)
        XCTAssertEqual(channel.provider, .apns)
        XCTAssertEqual(channel.token, voipToken, "APNs tokens are compared in lower case")
        XCTAssertEqual(channel.param, "DEF123GHIJ.com.example.app.voip")
        XCTAssertEqual(channel.kind, .voip)
        // The Contact URI keeps the pn-* parameters verbatim.
        XCTAssertTrue(fixture.core.bindings(for: F.alice)[0].contact.contains("pn-prid=\(voipToken.uppercased())"))
    }

    func testProviderWithoutPushAppGets555() throws {
        var fixture = F(push: [.fcm])
        let response = F.response(try fixture.registerAuthenticated(
            contacts: ["<sip:1001@192.0.2.7;pn-provider=apns;pn-prid=\(voipToken);pn-param=T.com.x.voip>"]))
        XCTAssertEqual(response.statusCode, 555)
        XCTAssertEqual(response.reasonPhrase, "Push Notification Service Not Supported")
        XCTAssertEqual(fixture.core.bindingCount, 0)
        let unknown = F.response(try fixture.registerAuthenticated(
            contacts: ["<sip:1001@192.0.2.7;pn-provider=carrier-pigeon;pn-prid=x>"], callID: "u"))
        XCTAssertEqual(unknown.statusCode, 555)
    }

    func testCapabilityQueryGetsFeatureCapsAndNoChannel() throws {
        var fixture = F()
        let response = F.response(try fixture.registerAuthenticated(contacts: ["<sip:1001@192.0.2.7;pn-provider=fcm>"]))
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(response.headers.lines(.featureCaps), ["*;+sip.pns=\"fcm\""])
        XCTAssertEqual(fixture.core.bindings(for: F.alice).first?.pushChannels, [])
    }

    func testLinphoneMultiTokenDialectGivesVoipAndRemoteChannels() throws {
        var fixture = F()
        let contact = "<sip:1001@192.0.2.7;pn-provider=apns.dev;pn-prid=\(remoteToken):remote&\(voipToken):voip;pn-param=ABCD1234.org.linphone.phone.remote&voip>"
        XCTAssertEqual(F.response(try fixture.registerAuthenticated(contacts: [contact])).statusCode, 200)
        let channels = try XCTUnwrap(fixture.core.bindings(for: F.alice).first?.pushChannels)
        XCTAssertEqual(channels, [
            PushChannel(provider: .apnsSandbox, token: remoteToken, param: "ABCD1234.org.linphone.phone", kind: .remote),
            PushChannel(provider: .apnsSandbox, token: voipToken, param: "ABCD1234.org.linphone.phone.voip", kind: .voip),
        ])
    }

    func testLinphoneTokenCountMismatchIsRefused() throws {
        var fixture = F()
        let contact = "<sip:1001@192.0.2.7;pn-provider=apns;pn-prid=\(remoteToken):remote&\(voipToken):voip;pn-param=ABCD1234.org.linphone.phone.voip>"
        let response = F.response(try fixture.registerAuthenticated(contacts: [contact]))
        XCTAssertEqual(response.statusCode, 400)
    }

    func testPushParametersAfterTheAngleBracketAreAcceptedToo() throws {
        var fixture = F()
        let response = F.response(try fixture.registerAuthenticated(
            contacts: ["<sip:1001@192.0.2.7>;pn-provider=firebase;pn-prid=fcmTokenXYZ:APA91b;pn-param=123456789012"]))
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(fixture.core.bindings(for: F.alice).first?.pushChannels,
            [PushChannel(provider: .fcm, token: "fcmTokenXYZ:APA91b", param: "123456789012", kind: .standard)])
    }

    func testTokenMovesToTheExtensionThatRegistersItNow() throws {
        var fixture = F()
        let pushContact = "<sip:1001@192.0.2.7;pn-provider=fcm;pn-prid=shared-token;pn-param=proj>"
        _ = try fixture.registerAuthenticated(F.alice, contacts: [pushContact], callID: "alice")
        let decision = try fixture.registerAuthenticated(
            F.bob, password: "bob-secret", contacts: ["<sip:1002@192.0.2.9;pn-provider=fcm;pn-prid=shared-token;pn-param=proj>"], callID: "bob")
        guard case .commit(let changes, _, let response, _) = decision else { return XCTFail("\(decision)") }
        XCTAssertEqual(response.statusCode, 200)
        // Alice's binding stays reachable over SIP but loses the push channel.
        let alice = try XCTUnwrap(fixture.core.bindings(for: F.alice).first)
        XCTAssertEqual(alice.pushChannels, [])
        XCTAssertEqual(fixture.core.bindings(for: F.bob).first?.pushChannels.map(\.token), ["shared-token"])
        XCTAssertTrue(changes.contains(.save(alice)), "the old holder's loss is made durable too")
    }

    func testReinstallWithSameTokenReplacesTheOlderBinding() throws {
        var fixture = F()
        _ = try fixture.registerAuthenticated(
            contacts: ["<sip:1001@192.0.2.7:5060;pn-provider=fcm;pn-prid=tok-1;pn-param=p>;+sip.instance=\"<urn:uuid:old>\""], callID: "old")
        _ = try fixture.registerAuthenticated(
            contacts: ["<sip:1001@192.0.2.7:6000;pn-provider=fcm;pn-prid=tok-1;pn-param=p>;+sip.instance=\"<urn:uuid:new>\""], callID: "new")
        let list = fixture.core.bindings(for: F.alice)
        XCTAssertEqual(list.map(\.instance), ["<urn:uuid:new>"])
    }

    func testLegacyLinphoneParameters() throws {
        let address = try SIPNameAddress(parsing: "<sip:1001@192.0.2.7;pn-type=apple;app-id=org.linphone.phone.dev;pn-tok=\(voipToken)>")
        let parameters = try XCTUnwrap(try PushParameters.parse(address))
        XCTAssertEqual(parameters.provider, .apnsSandbox)
        XCTAssertEqual(parameters.channels.first?.token, voipToken)
        XCTAssertEqual(parameters.channels.first?.param, "org.linphone.phone")

        let android = try XCTUnwrap(try PushParameters.parse(try SIPNameAddress(parsing: "<sip:1@h;pn-provider=android;pn-prid=abc;pn-param=p>")))
        XCTAssertEqual(android.provider, .fcm)
        XCTAssertNil(try PushParameters.parse(try SIPNameAddress(parsing: "<sip:1@h;transport=tcp>")))
    }
}
