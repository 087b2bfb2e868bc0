import Crypto
import XCTest

/// PBKDF2-HMAC-SHA256 against RFC 7914 §11, and the stored form's round trip.
final class PasswordTests: XCTestCase {
    func testRFC7914Vector() {
        let derived = Password.pbkdf2SHA256(password: Array("passwd".utf8), salt: Array("salt".utf8), iterations: 1, length: 64)
        XCTAssertEqual(
            Hex.encode(derived),
            "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc"
                + "49ca9cccf179b645991664b39d77ef317c71b845b1e30bd509112041d3a19783")
    }

    func testHashAndVerify() {
        let stored = Password.hash("correct horse", iterations: 1000)
        let parts = stored.split(separator: "$")
        XCTAssertEqual(parts.count, 4)
        XCTAssertEqual(parts[0], "pbkdf2-sha256")
        XCTAssertEqual(parts[1], "1000")
        XCTAssertEqual(parts[2].count, 32)
        XCTAssertEqual(parts[3].count, 64)
        XCTAssertTrue(Password.verify("correct horse", against: stored))
        XCTAssertFalse(Password.verify("correct horsf", against: stored))
        XCTAssertFalse(Password.verify("", against: stored))
        XCTAssertNotEqual(stored, Password.hash("correct horse", iterations: 1000), "salts differ")
    }

    func testDefaultCostAndMalformedHashes() {
        XCTAssertGreaterThanOrEqual(Password.defaultIterations, 200_000)
        let stored = Password.hash("pw")
        XCTAssertTrue(stored.hasPrefix("pbkdf2-sha256$\(Password.defaultIterations)$"))
        XCTAssertTrue(Password.verify("pw", against: stored))
        for bad in ["", "pw", "pbkdf2-sha256$x$00$00", "md5$1$00$00", "pbkdf2-sha256$1$zz$00"] {
            XCTAssertFalse(Password.verify("pw", against: bad), bad)
        }
    }
}
