import Push
import XCTest

/// `webpush_allowed_hosts`: an endpoint comes from an app, so Rouse sends web pushes only to the
/// push services on the list, never to a host an extension names (an internal one, say).
final class WebPushHostPolicyTests: XCTestCase {
    func testTheBrowsersPushServicesAreAllowedAndOtherHostsAreNot() {
        let policy = WebPushHostPolicy()
        XCTAssertTrue(policy.permits("https://fcm.googleapis.com/fcm/send/abc"))
        XCTAssertTrue(policy.permits("https://updates.push.services.mozilla.com/wpush/v2/gAAA"))
        XCTAssertTrue(policy.permits("https://wns2-db5p.notify.windows.com/w/?token=x"))
        XCTAssertTrue(policy.permits("https://web.push.apple.com/QGuQ"))
        XCTAssertFalse(policy.permits("https://10.0.0.5/push/x"))
        XCTAssertFalse(policy.permits("https://push.services.mozilla.com.evil.example/x"))
        XCTAssertFalse(policy.permits("https://evilpush.apple.com.example/x"))
        XCTAssertFalse(policy.permits("not a url"))
        XCTAssertTrue(WebPushHostPolicy(entries: ["*"]).permits("https://10.0.0.5/push/x"))
        XCTAssertTrue(WebPushHostPolicy(entries: [" 127.0.0.1 "]).permits("https://127.0.0.1:8443/push/a"))
    }

    func testAPushToAHostNotOnTheListFailsInWordsWithoutBeingSent() async {
        let client = WebPushClient(
            vapid: VAPIDKeys.generate().keys, contact: "mailto:ops@example.com", caFile: nil, timeout: .seconds(5), subscriptions: nil)
        let outcome = await client.send(
            WebPushMessage(payload: Array("{}".utf8), ttlSeconds: 30, urgency: .high), to: "https://10.0.0.5/push/x")
        XCTAssertEqual(outcome.word, "failed")
        XCTAssertTrue(outcome.explanation.contains("https://10.0.0.5 is not a push service Rouse sends to"), outcome.explanation)
    }
}
