import Crypto
import Foundation
@testable import Registrar
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

    func testEachAnswerIsCheckedAgainstItsOwnMethodAndURI() throws {
        let authenticator = DigestAuthenticator(secret: Array("test-secret".utf8), nonceLifetime: 300)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let aor = AddressOfRecord(number: "1001", domain: "example.com")
        let stored = ExtensionCredentials(aor: aor, password: "pw")
        let nonce = try XCTUnwrap(DigestCredentials(header: authenticator.challenges(realm: "example.com", stale: false, now: now)[0])?.nonce)
        var count = 0
        func check(method: String, uri: String, signedMethod: String? = nil, signedURI: String? = nil) -> DigestAuthenticator.Verdict {
            count += 1
            let nc = String(format: "%08x", count)
            let ha2 = Digest.hex(.md5, "\(signedMethod ?? method):\(signedURI ?? uri)")
            let response = Digest.hex(.md5, "\(stored.ha1MD5):\(nonce):\(nc):c1:auth:\(ha2)")
            let header = "Digest username=\"1001\", realm=\"example.com\", nonce=\"\(nonce)\", uri=\"\(uri)\", "
                + "response=\"\(response)\", qop=auth, nc=\(nc), cnonce=\"c1\""
            return authenticator.verify(DigestCredentials(header: header)!, method: method, realm: "example.com", now: now) { $0 == aor ? stored : nil }
        }
        XCTAssertEqual(check(method: "REGISTER", uri: "sip:example.com"), .authenticated(aor))
        XCTAssertEqual(check(method: "REGISTER", uri: "sip:example.com"), .authenticated(aor), "the same method and URI again")
        XCTAssertEqual(check(method: "REGISTER", uri: "sip:example.com;transport=tcp"), .authenticated(aor), "another URI")
        XCTAssertEqual(check(method: "REGISTER", uri: "sip:example.com", signedURI: "sip:example.com;transport=tcp"), .rejected)
        XCTAssertEqual(check(method: "INVITE", uri: "sip:example.com", signedMethod: "REGISTER"), .rejected, "the method is in the hash")
        XCTAssertEqual(check(method: "INVITE", uri: "sip:example.com"), .authenticated(aor))
    }

    func testKnownNamesInAnyCaseAndTheirNearMisses() throws {
        let header = "Digest UserName=u, REALM=r, Nonce=n, URI=i, Response=p, CNonce=c, QoP=auth, nC=1, Opaque=o, Algorithm=sha-256, "
            + "usernamx=1, nonse=2, ur=3, urix=4, \u{00D1}C=5, n@=6, `lgorithm=7"
        let credentials = try XCTUnwrap(DigestCredentials(header: header))
        XCTAssertEqual(
            [credentials.username, credentials.realm, credentials.nonce, credentials.uri, credentials.response, credentials.cnonce, credentials.qop, credentials.nc, credentials.opaque],
            ["u", "r", "n", "i", "p", "c", "auth", "1", "o"]
        )
        XCTAssertEqual(credentials.algorithm, .sha256)
        let others = credentials.parameters.filter { !DigestCredentials.knownNames.contains($0.key) }
        XCTAssertEqual(others, ["usernamx": "1", "nonse": "2", "ur": "3", "urix": "4", "\u{00F1}c": "5", "n@": "6", "`lgorithm": "7"])
        for name in DigestCredentials.knownNames {
            XCTAssertNil(DigestCredentials(header: "Digest \(name)=a, \(name.uppercased())=b"), "\(name) twice")
        }
    }

    func testQuotedValuesWithEscapes() throws {
        let credentials = try XCTUnwrap(DigestCredentials(header: #"Digest uri="a\\\"b", nonce="x\,y", opaque="", cnonce="\"", realm="r""#))
        XCTAssertEqual(credentials.uri, #"a\"b"#)
        XCTAssertEqual(credentials.nonce, "x,y")
        XCTAssertEqual(credentials.opaque, "")
        XCTAssertEqual(credentials.cnonce, "\"")
        XCTAssertEqual(credentials.realm, "r")
    }

    func testElementsSplitWhereTheFirstEqualsAndTheQuotesSay() throws {
        let escapedEquals = try XCTUnwrap(DigestCredentials(header: #"Digest "x\=y"=1, realm=r"#))
        XCTAssertEqual(escapedEquals.parameters[#""x\"#], #"y"=1"#, "the first = names the parameter, even one escaped in quotes")
        let trailingEscape = try XCTUnwrap(DigestCredentials(header: #"Digest realm="a"\"b", nonce = "n" "#))
        XCTAssertEqual(trailingEscape.realm, #"a""b"#, "a backslash between the outer quotes is unescaped")
        XCTAssertEqual(trailingEscape.nonce, "n")
        let angles = try XCTUnwrap(DigestCredentials(header: "Digest uri=<sip:a,b>, realm=x,"))
        XCTAssertEqual(angles.uri, "<sip:a,b>", "no split inside angle brackets")
        XCTAssertEqual(angles.realm, "x")
        let escapedQuote = try XCTUnwrap(DigestCredentials(header: #"Digest realm="a\"b, c", nonce="p\\q", opaque=o"#))
        XCTAssertEqual(escapedQuote.realm, #"a"b, c"#, "an escaped quote does not end the string")
        XCTAssertEqual(escapedQuote.nonce, #"p\q"#)
        XCTAssertEqual(escapedQuote.opaque, "o")
        let unterminated = try XCTUnwrap(DigestCredentials(header: #"Digest nonce=n, realm="abc\"#))
        XCTAssertEqual(unterminated.realm, #""abc\"#, "a string left open by a last backslash is kept as written")
        XCTAssertEqual(unterminated.nonce, "n")
        let unquoted = try XCTUnwrap(DigestCredentials(header: #"Digest username="a\=b"=c"#))
        XCTAssertEqual(unquoted.username, #""a\=b"=c"#, "a value not wholly quoted is kept as written")
    }

    func testNonceCountsReadAsHexadecimalUInt32() {
        for text in ["00000001", "0000000a", "FfFfFfFf", "100000000", "", "+", "-", "+1", "-0", "-1", "0x1", " 1", "1 ", "000000000000000000002", "g"] {
            let parsed = Array(text.utf8).withUnsafeBytes { DigestAuthenticator.nonceCount($0) }
            XCTAssertEqual(parsed, UInt32(text, radix: 16), "nc=\(text)")
        }
    }

    func testRealmComparisons() throws {
        func realm(_ text: String) throws -> DigestCredentials { try XCTUnwrap(DigestCredentials(header: "Digest realm=\"\(text)\"")) }
        XCTAssertTrue(try realm("Example.COM").realmLowercasedEquals("example.com"))
        XCTAssertFalse(try realm("Example.COM").realmLowercasedEquals("Example.com"), "the domain is compared as given")
        XCTAssertFalse(try realm("example.co").realmLowercasedEquals("example.com"))
        XCTAssertFalse(try realm("example.com").realmLowercasedEquals("ex\u{00E4}mple.com"))
        XCTAssertTrue(try realm("a;B").realmLowercasedEquals("a\u{037E}b"), "String equality: U+037E is canonically a semicolon")
        XCTAssertTrue(try realm("EX\u{00C4}MPLE.com").realmLowercasedEquals("ex\u{00E4}mple.com"), "a non-ASCII realm is lower-cased in full")
        XCTAssertTrue(try realm("\u{0130}.org").realmLowercasedEquals("\u{0130}.org".lowercased()), "lower-casing that changes the length")
        XCTAssertFalse(try XCTUnwrap(DigestCredentials(header: "Digest nonce=n")).realmLowercasedEquals(""))
        XCTAssertTrue(try realm("Example.COM").realmIs("example.com"))
        XCTAssertFalse(try realm("a@b").realmIs("a`b"), "only letters fold")
        XCTAssertFalse(try realm("a[b").realmIs("a{b"), "only letters fold")
        XCTAssertFalse(try realm("\u{00C4}").realmIs("\u{00E4}"), "only ASCII letters fold")
        XCTAssertFalse(try realm("ab").realmIs("abc"))
    }

    func testNonceIssueTimeInEitherCaseAndMalformedNonces() throws {
        let authenticator = DigestAuthenticator(secret: Array("test-secret".utf8), nonceLifetime: 300)
        let now = Date(timeIntervalSince1970: 1_800_000_000.25)
        let nonce = authenticator.makeNonce(now: now)
        XCTAssertEqual(authenticator.nonceIssueTime(nonce), now)
        XCTAssertEqual(authenticator.nonceIssueTime(nonce.uppercased()), now)
        XCTAssertNil(authenticator.nonceIssueTime(String(nonce.dropLast())))
        XCTAssertNil(authenticator.nonceIssueTime(nonce + "0"))
        XCTAssertNil(authenticator.nonceIssueTime("g" + nonce.dropFirst()), "a byte that is not hex")
        XCTAssertNil(authenticator.nonceIssueTime(String(nonce.dropLast()) + "g"), "a byte that is not hex in the HMAC")
        XCTAssertNil(DigestAuthenticator(secret: Array("other".utf8), nonceLifetime: 300).nonceIssueTime(nonce), "another secret")
    }
}
