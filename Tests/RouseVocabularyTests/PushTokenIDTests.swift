import RouseVocabulary
import XCTest

final class PushTokenIDTests: XCTestCase {
    func testATokenIsOneIdentityWhateverTheAPNsHostOrCase() {
        let production = PushChannel(provider: .apns, token: "ABCD01", param: "T.com.example.voip", kind: .voip)
        let sandbox = PushChannel(provider: .apnsSandbox, token: "abcd01", param: "T.com.example", kind: .remote)
        XCTAssertEqual(production.tokenID, sandbox.tokenID)
        XCTAssertEqual(production.tokenID, PushTokenID(family: .apns, token: "AbCd01"))
        XCTAssertNotEqual(
            PushChannel(provider: .fcm, token: "Tok", param: nil, kind: .standard).tokenID, PushTokenID(family: .fcm, token: "tok"),
            "FCM tokens are case-sensitive")
    }

    func testKeyRoundTrips() {
        let id = PushTokenID(family: .webpush, token: "https://push.example.net/abc:def")
        XCTAssertEqual(id.key, "webpush:https://push.example.net/abc:def")
        XCTAssertEqual(PushTokenID(key: id.key), id)
        XCTAssertEqual(PushTokenID(key: "apns:ABCD"), PushTokenID(family: .apns, token: "abcd"))
        XCTAssertNil(PushTokenID(key: "carrier-pigeon:abcd"))
        XCTAssertNil(PushTokenID(key: "no colon"))
    }
}
