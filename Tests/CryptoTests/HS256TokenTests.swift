import Crypto
import Foundation
import XCTest

/// The shared HS256 JWT of call tokens and wake credentials: one key per purpose and audience.
final class HS256TokenTests: XCTestCase {
    let secret = Array("shared-secret".utf8)
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func testATokenVerifiesUnderItsOwnKeyUntilItsFractionalExpiry() throws {
        let key = HS256TokenKey(secret: secret, purpose: "test v1", audience: "rouse:test")
        let token = key.sign([("sub", JSONString.quoted("1001@example.com")), ("exp", "1800000008.250")])
        guard case .success(let claims) = key.verify(token, now: now.addingTimeInterval(8.249)) else { return XCTFail("refused in time") }
        XCTAssertEqual(claims["sub"] as? String, "1001@example.com")
        XCTAssertEqual(claims["aud"] as? String, "rouse:test")
        XCTAssertEqual(key.verify(token, now: now.addingTimeInterval(8.25)).refusal, .expired)
    }

    func testAnotherPurposeOrAudienceOrAnAlteredTokenIsRefused() throws {
        let key = HS256TokenKey(secret: secret, purpose: "call v1", audience: "rouse:call")
        let token = key.sign([("exp", "1800000060")])
        // The same secret under another purpose is another key.
        XCTAssertEqual(HS256TokenKey(secret: secret, purpose: "wake v1", audience: "rouse:call").verify(token, now: now).refusal, .badSignature)
        // The same key expecting another audience.
        XCTAssertEqual(HS256TokenKey(secret: secret, purpose: "call v1", audience: "rouse:wake").verify(token, now: now).refusal, .wrongAudience)
        var altered = Array(token)
        altered[altered.count / 2] = altered[altered.count / 2] == "A" ? "B" : "A"
        XCTAssertNotNil(key.verify(String(altered), now: now).refusal)
        XCTAssertEqual(key.verify("a.b", now: now).refusal, .malformed)
        XCTAssertEqual(key.verify(token + "=", now: now).refusal, .malformed)
    }
}

extension Result where Failure == HS256TokenKey.Refusal {
    /// The refusal, or nil when the token was accepted.
    var refusal: HS256TokenKey.Refusal? {
        if case .failure(let refusal) = self { return refusal }
        return nil
    }
}
