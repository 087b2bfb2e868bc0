import Crypto
import Registrar
import XCTest

/// An extension's stored hashes as the directory holds them: bytes inline, read from and written
/// back to the hex the database stores, and refused when that text is not the hex of its digest.
final class ExtensionCredentialsTests: XCTestCase {
    let aor = AddressOfRecord(number: "1001", domain: "example.com")

    func testHashesOfAPasswordAreRFC7616sHA1s() {
        let credentials = ExtensionCredentials(aor: aor, password: "secret")
        XCTAssertEqual(credentials.ha1MD5, Digest.hex(.md5, "1001:example.com:secret"))
        XCTAssertEqual(credentials.ha1SHA256, Digest.hex(.sha256, "1001:example.com:secret"))
        XCTAssertEqual(credentials.md5.count, 16)
        XCTAssertEqual(credentials.sha256.count, 32)
        XCTAssertEqual(credentials.ha1(for: .sha256), credentials.ha1SHA256)
    }

    func testStoredHexReadsBackInEitherCaseAndEqualsThePasswordsHashes() throws {
        let hashed = ExtensionCredentials(aor: aor, password: "secret")
        let read = try XCTUnwrap(ExtensionCredentials(aor: aor, ha1MD5: hashed.ha1MD5.uppercased(), ha1SHA256: hashed.ha1SHA256))
        XCTAssertEqual(read, hashed)
        XCTAssertEqual(read.hashValue, hashed.hashValue)
        XCTAssertNotEqual(read, ExtensionCredentials(aor: aor, password: "other"))
    }

    func testTextThatIsNotTheHexOfItsDigestIsRefused() {
        let md5 = Digest.hex(.md5, "x")
        let sha256 = Digest.hex(.sha256, "x")
        XCTAssertNotNil(ExtensionCredentials(aor: aor, ha1MD5: md5, ha1SHA256: sha256))
        for (first, second) in [
            (sha256, sha256), (md5, md5), ("", sha256), (String(md5.dropLast()), sha256), (md5, String(sha256.dropLast()) + "g"),
            ("z" + md5.dropFirst(), sha256),
        ] {
            XCTAssertNil(ExtensionCredentials(aor: aor, ha1MD5: first, ha1SHA256: second), "\(first) \(second)")
        }
    }
}
