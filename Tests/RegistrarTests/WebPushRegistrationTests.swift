import Foundation
import Registrar
import RouseVocabulary
import SIPMessage
import XCTest

/// RFC 8599 `pn-provider=webpush` on literal REGISTER texts: supported without any push app once
/// the VAPID key is loaded, the endpoint kept as the channel's token, and the key offered in the
/// 2xx as `+sip.vapid` (also to a capability query, so a browser can subscribe with it before it
/// has an endpoint to register).
final class WebPushRegistrationTests: XCTestCase {
    typealias F = RegistrarFixture
    let vapidKey = "BDd3_hVL9fZi9Ybo2UUzA284WG5FZR30_95YeZJsiApwXKpNcF1rRPF3foIiBHXRdJI2Qhumhf6_LFTeZaNndIo"
    let endpoint = "https://push.example.net/wpush/v2/gAAAAABm-3xyZ"

    func testWebpushIsRefusedWithoutVAPIDKeyAndNeedsNoPushApp() throws {
        var withoutKey = F(push: [.apns, .fcm])
        let contact = "<sip:1001@192.0.2.7;transport=tcp;pn-provider=webpush;pn-prid=\(endpoint)>"
        XCTAssertEqual(F.response(try withoutKey.registerAuthenticated(contacts: [contact])).statusCode, 555)

        var withKey = F(push: [])
        withKey.core.vapidPublicKey = vapidKey
        let response = F.response(try withKey.registerAuthenticated(contacts: [contact]))
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(response.headers.lines(.featureCaps), ["*;+sip.pns=\"webpush\";+sip.vapid=\"\(vapidKey)\""])
        let channel = try XCTUnwrap(withKey.core.bindings(for: F.alice).first?.pushChannels.first)
        XCTAssertEqual(channel, PushChannel(provider: .webpush, token: endpoint, param: nil, kind: .standard))
        // Another provider still needs its push app.
        let apns = F.response(try withKey.registerAuthenticated(
            contacts: ["<sip:1001@192.0.2.8;pn-provider=apns;pn-prid=\(String(repeating: "ab", count: 32))>"], callID: "apns"))
        XCTAssertEqual(apns.statusCode, 555)
    }

    func testCapabilityQueryLearnsTheKeyAndEscapedEndpointsAreRead() throws {
        var fixture = F()
        fixture.core.vapidPublicKey = vapidKey
        let query = F.response(try fixture.registerAuthenticated(contacts: ["<sip:1001@192.0.2.7;pn-provider=webpush>;+sip.pnsreg"]))
        XCTAssertEqual(query.statusCode, 200)
        XCTAssertEqual(query.headers.lines(.featureCaps), ["*;+sip.pns=\"webpush\";+sip.vapid=\"\(vapidKey)\";+sip.pnsreg=\"121\""])
        XCTAssertEqual(fixture.core.bindings(for: F.alice).first?.pushChannels, [])

        // `?` and `=` are not allowed in a URI parameter: the endpoint arrives %-escaped.
        let escaped = "https://push.example.net/push%3Ftoken%3Dabc"
        let response = F.response(try fixture.registerAuthenticated(
            contacts: ["<sip:1001@192.0.2.9;pn-provider=webpush;pn-prid=\(escaped)>"], callID: "escaped"))
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertTrue(fixture.core.bindings(for: F.alice).contains { $0.pushChannels.first?.token == "https://push.example.net/push?token=abc" })
        // An APNs REGISTER's answer carries no VAPID key.
        let apns = F.response(try fixture.registerAuthenticated(
            contacts: ["<sip:1001@192.0.2.8;pn-provider=apns;pn-prid=\(String(repeating: "ab", count: 32))>"], callID: "apns"))
        XCTAssertEqual(apns.headers.lines(.featureCaps), ["*;+sip.pns=\"apns\""])
    }
}
