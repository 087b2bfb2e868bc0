import Crypto
import Foundation
import Registrar
import XCTest

/// The one-pass Authorization parser, on header texts as phones write them and as they should not.
final class DigestCredentialsTests: XCTestCase {
    func testReadsEveryParameterQuotedOrNot() throws {
        let header = #"Digest username="1001",realm="Example.com", nonce="abc", uri="sip:example.com", "#
            + #"response="0123456789ABCDEF0123456789abcdef", ALGORITHM=md5, cnonce="0a4f113b", qop=auth, nc=00000001, opaque="5ccc""#
        let credentials = try XCTUnwrap(DigestCredentials(header: header))
        XCTAssertEqual(credentials.username, "1001")
        XCTAssertEqual(credentials.realm, "Example.com")
        XCTAssertEqual(credentials.nonce, "abc")
        XCTAssertEqual(credentials.uri, "sip:example.com")
        XCTAssertEqual(credentials.response, "0123456789ABCDEF0123456789abcdef")
        XCTAssertEqual(credentials.algorithm, .md5)
        XCTAssertEqual(credentials.cnonce, "0a4f113b")
        XCTAssertEqual(credentials.qop, "auth")
        XCTAssertEqual(credentials.nc, "00000001")
        XCTAssertEqual(credentials.opaque, "5ccc")
        XCTAssertEqual(credentials.parameters.count, 10)
    }

    func testEscapesCommasInQuotesAndUnknownParameters() throws {
        let credentials = try XCTUnwrap(DigestCredentials(header: "digest\tusername=\"a\\\"b, c\" ,, Stale=TRUE , realm=x.org"))
        XCTAssertEqual(credentials.username, "a\"b, c")
        XCTAssertEqual(credentials.realm, "x.org")
        XCTAssertEqual(credentials.parameters["stale"], "TRUE", "an unknown parameter is kept, its name lower-cased")
        XCTAssertEqual(credentials.algorithm, .md5, "MD5 when absent")
        XCTAssertNil(DigestCredentials(header: "Digest realm=x.org, algorithm=SHA-512-256")?.algorithm)
    }

    func testMalformedHeadersAreRefused() {
        XCTAssertNil(DigestCredentials(header: "Basic dXNlcjpwYXNz"))
        XCTAssertNil(DigestCredentials(header: "Digestusername=\"1001\""))
        XCTAssertNil(DigestCredentials(header: "Digest "))
        XCTAssertNil(DigestCredentials(header: "Digest username"), "an element without =")
        XCTAssertNil(DigestCredentials(header: "Digest =1001"), "an empty name")
        XCTAssertNil(DigestCredentials(header: "Digest username=a, USERNAME=b"), "a repeated name")
        XCTAssertNil(DigestCredentials(header: "Digest foo=a, Foo=b"), "a repeated unknown name")
    }

    func testSettingParametersReplacesThem() throws {
        var credentials = try XCTUnwrap(DigestCredentials(header: "Digest username=1001, nonce=old"))
        credentials.parameters["nonce"] = "new"
        XCTAssertEqual(credentials.nonce, "new")
        XCTAssertEqual(credentials.username, "1001")
    }

    func testAnUpperCaseResponseAuthenticatesAndAForeignNonceDoesNot() throws {
        let authenticator = DigestAuthenticator(secret: Array("test-secret".utf8), nonceLifetime: 300)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let aor = AddressOfRecord(number: "1001", domain: "example.com")
        let stored = ExtensionCredentials(aor: aor, password: "pw")
        let challenge = try XCTUnwrap(DigestCredentials(header: authenticator.challenges(realm: "example.com", stale: false, now: now)[0]))
        let nonce = try XCTUnwrap(challenge.nonce)
        func answer(nonce: String, nc: String, uppercase: Bool) -> DigestCredentials {
            let ha2 = Digest.hex(.md5, "REGISTER:sip:example.com")
            var response = Digest.hex(.md5, "\(stored.ha1MD5):\(nonce):\(nc):c1:auth:\(ha2)")
            if uppercase { response = response.uppercased() }
            return DigestCredentials(
                header: "Digest username=\"1001@EXAMPLE.com\", realm=\"example.com\", nonce=\"\(nonce)\", uri=\"sip:example.com\", "
                    + "response=\"\(response)\", qop=auth, nc=\(nc), cnonce=\"c1\"")!
        }
        let verdict = authenticator.verify(answer(nonce: nonce, nc: "00000001", uppercase: true), method: "REGISTER", realm: "example.com", now: now) {
            $0 == aor ? stored : nil
        }
        XCTAssertEqual(verdict, .authenticated(aor))
        let replay = authenticator.verify(answer(nonce: nonce, nc: "00000001", uppercase: false), method: "REGISTER", realm: "example.com", now: now) {
            $0 == aor ? stored : nil
        }
        XCTAssertEqual(replay, .rejected, "the same nonce count twice")
        var forged = Array(nonce.utf8)
        forged[40] = forged[40] == UInt8(ascii: "0") ? UInt8(ascii: "1") : UInt8(ascii: "0")
        let foreign = authenticator.verify(
            answer(nonce: String(decoding: forged, as: UTF8.self), nc: "00000002", uppercase: false), method: "REGISTER", realm: "example.com",
            now: now
        ) { $0 == aor ? stored : nil }
        XCTAssertEqual(foreign, .rejected, "a nonce whose HMAC is wrong")
    }
}
