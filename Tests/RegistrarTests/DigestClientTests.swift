import Crypto
import Foundation
import SIPMessage
import XCTest

@testable import Registrar

/// The client side of digest: RFC 7616 §3.9.1's worked example, the choice among offers, the
/// nonce count, and a round trip through Rouse's own authenticator.
final class DigestClientTests: XCTestCase {
    private let example = "Digest realm=\"http-auth@example.org\", qop=\"auth, auth-int\", nonce=\"7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v\", opaque=\"FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS\""

    func testRFC7616WorkedExampleForMD5AndSHA256() throws {
        var client = DigestClient(username: "Mufasa", password: "Circle of Life")
        let cnonce = "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ"
        let md5 = client.answer(try XCTUnwrap(DigestChallenge(header: example + ", algorithm=MD5")), method: "GET", uri: "/dir/index.html", cnonce: cnonce)
        XCTAssertTrue(md5.contains("response=\"8ca523f5e9506fed4657c9700eebdbec\""), md5)
        XCTAssertTrue(md5.contains("nc=00000001"))
        var fresh = DigestClient(username: "Mufasa", password: "Circle of Life")
        let sha = fresh.answer(try XCTUnwrap(DigestChallenge(header: example + ", algorithm=SHA-256")), method: "GET", uri: "/dir/index.html", cnonce: cnonce)
        XCTAssertTrue(sha.contains("response=\"753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1\""), sha)
        XCTAssertTrue(sha.contains("opaque=\"FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS\""))
    }

    func testTheStrongestOfferIsAnsweredAndEachUseOfANonceIsCounted() throws {
        guard case .response(var challenge) = try SIPParser.parse(Array("SIP/2.0 407 Proxy Authentication Required\r\nVia: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK1\r\nFrom: <sip:a@x>;tag=1\r\nTo: <sip:b@x>;tag=2\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n".utf8)) else { return XCTFail("not a response") }
        challenge.headers.add(.proxyAuthenticate, "Digest realm=\"trunk\", nonce=\"n1\", algorithm=MD5, qop=\"auth\"")
        challenge.headers.add(.proxyAuthenticate, "Digest realm=\"trunk\", nonce=\"n1\", algorithm=SHA-256, qop=\"auth\"")
        challenge.headers.add(.proxyAuthenticate, "Digest realm=\"trunk\", nonce=\"n1\", algorithm=SHA-512-256")
        var client = DigestClient(username: "acme", password: "secret")
        let first = try XCTUnwrap(client.authorization(answering: challenge, method: "INVITE", uri: "sip:+4420@trunk"))
        XCTAssertEqual(first.name, .proxyAuthorization)
        XCTAssertTrue(first.value.contains("algorithm=SHA-256"))
        let second = try XCTUnwrap(client.authorization(answering: challenge, method: "INVITE", uri: "sip:+4420@trunk"))
        XCTAssertTrue(second.value.contains("nc=00000002"), second.value)
        client.preferredAlgorithm = .md5
        XCTAssertTrue(try XCTUnwrap(client.authorization(answering: challenge, method: "INVITE", uri: "sip:x@trunk")).value.contains("algorithm=MD5"))
        XCTAssertNil(DigestChallenge(header: "Basic realm=\"x\""))
        XCTAssertNil(DigestChallenge(header: "Digest realm=\"x\""), "no nonce")
    }

    func testRousesOwnAuthenticatorAcceptsTheAnswer() throws {
        let authenticator = DigestAuthenticator(secret: Array("0123456789abcdef".utf8), nonceLifetime: 60)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let aor = AddressOfRecord(number: "1001", domain: "example.com")
        let credentials = ExtensionCredentials(aor: aor, password: "pw")
        for line in authenticator.challenges(realm: "example.com", stale: false, now: now) {
            var client = DigestClient(username: "1001", password: "pw")
            let value = client.answer(try XCTUnwrap(DigestChallenge(header: line)), method: "REGISTER", uri: "sip:example.com")
            let offered = try XCTUnwrap(DigestCredentials(header: value))
            let verdict = authenticator.verify(offered, method: "REGISTER", realm: "example.com", now: now) { $0 == aor ? credentials : nil }
            XCTAssertEqual(verdict, .authenticated(aor), line)
        }
    }
}
