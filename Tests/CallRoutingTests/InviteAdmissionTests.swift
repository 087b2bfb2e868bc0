import CallRouting
import Crypto
import Foundation
import Registrar
import RouseVocabulary
import SIPMessage
import SIPProxy
import XCTest

final class InviteAdmissionTests: XCTestCase {
    let caller = AddressOfRecord(number: "1001", domain: "example.com")
    let callee = AddressOfRecord(number: "1002", domain: "example.com")
    let authenticator = DigestAuthenticator(secret: Array("secret".utf8), nonceLifetime: 300)

    var directory: DirectorySnapshot {
        DirectorySnapshot(domains: ["example.com"], extensions: [
            caller: ExtensionCredentials(aor: caller, password: "pw-1001"), callee: ExtensionCredentials(aor: callee, password: "pw-1002"),
        ])
    }

    func invite(_ uri: String, authorization: String? = nil) throws -> SIPRequest {
        var text = "INVITE \(uri) SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK\(UUID().uuidString)\r\nMax-Forwards: 70\r\n"
        text += "From: <sip:1001@example.com>;tag=a\r\nTo: <\(uri)>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\n"
        if let authorization { text += "Proxy-Authorization: \(authorization)\r\n" }
        text += "Content-Length: 0\r\n\r\n"
        guard case .request(let request) = try SIPParser.parse(Array(text.utf8)) else { return try XCTUnwrap(nil, "the fixture is not a request") }
        return request
    }

    func decide(_ request: SIPRequest, from source: String = "198.51.100.9", throttle: AuthFailureThrottle? = nil, trusted: [String] = []) throws -> InviteAdmission {
        InviteAdmission.decide(
            request, sourceIP: source, directory: directory, ownNames: ["127.0.0.1"], trustedPeers: try TrustedPeers(parsing: trusted),
            authenticator: authenticator, throttle: throttle, serverName: "Rouse/test", now: Date())
    }

    func status(_ admission: InviteAdmission) -> Int? {
        if case .respond(let response) = admission { return response.statusCode }
        return nil
    }

    /// Answers the 407 in `challenge` as 1001 with `password`.
    func answer(_ admission: InviteAdmission, uri: String, password: String) throws -> String {
        guard case .respond(let challenge) = admission else { return try XCTUnwrap(nil, "no challenge: \(admission)") }
        let offer = try XCTUnwrap(challenge.headers.lines(.proxyAuthenticate).first { $0.contains("algorithm=MD5") })
        let nonce = try XCTUnwrap(DigestCredentials(header: offer)?.nonce)
        let ha1 = Digest.hex(.md5, "1001:example.com:\(password)")
        let response = Digest.hex(.md5, "\(ha1):\(nonce):00000001:c0ffee:auth:" + Digest.hex(.md5, "INVITE:\(uri)"))
        return "Digest username=\"1001\", realm=\"example.com\", nonce=\"\(nonce)\", uri=\"\(uri)\", response=\"\(response)\", algorithm=MD5, cnonce=\"c0ffee\", qop=auth, nc=00000001"
    }

    func testStrangersAreChallengedAndAnExtensionOfTheOrganisationGetsThrough() throws {
        let uri = "sip:1002@example.com"
        let challenge = try decide(try invite(uri))
        XCTAssertEqual(status(challenge), 407)
        let accepted = try decide(try invite(uri, authorization: try answer(challenge, uri: uri, password: "pw-1001")))
        guard case .accept(let to, let from) = accepted else { return XCTFail("\(accepted)") }
        XCTAssertEqual(to, callee)
        XCTAssertEqual(from, caller)
    }

    func testTrustedPeersNeedNoCredentialsAndOwnAddressMapsToTheExtension() throws {
        guard case .accept(let to, nil) = try decide(try invite("sip:1002@127.0.0.1"), from: "192.0.2.50", trusted: ["192.0.2.0/24"]) else {
            return XCTFail("a trusted peer is let through")
        }
        XCTAssertEqual(to, callee)
    }

    func testNeverAnOpenRelayAndUnknownTargetsGoToTheRoutesOnlyAfterAuthentication() throws {
        var stranger = try invite("sip:1002@elsewhere.example.net")
        stranger.headers.set(.from, "<sip:9999@elsewhere.example.net>;tag=s")
        XCTAssertEqual(status(try decide(stranger)), 403, "a From outside Rouse's organisations: never an open relay")
        XCTAssertEqual(status(try decide(try invite("sip:1002@elsewhere.example.net"), trusted: ["198.51.100.9"])), 403,
                       "a trusted peer's call is never sent on")
        let outside = "sip:1002@elsewhere.example.net"
        let relayChallenge = try decide(try invite(outside))
        XCTAssertEqual(status(relayChallenge), 407, "an extension calling out proves who it is first")
        let relayed = try decide(try invite(outside, authorization: try answer(relayChallenge, uri: outside, password: "pw-1001")))
        guard case .outside(let target, let who, false) = relayed else { return XCTFail("\(relayed)") }
        XCTAssertEqual(target.description, "1002@elsewhere.example.net")
        XCTAssertEqual(who, caller)
        XCTAssertEqual(status(try decide(try invite(outside, authorization: try answer(relayChallenge, uri: outside, password: "wrong")))), 407)

        let uri = "sip:1999@example.com"
        let challenge = try decide(try invite(uri))
        XCTAssertEqual(status(challenge), 407, "an unknown extension is not revealed before authentication")
        guard case .outside(let number, _, true) = try decide(try invite(uri, authorization: try answer(challenge, uri: uri, password: "pw-1001"))) else {
            return XCTFail("a number in the own domain that is no extension is for the routes (404 without one)")
        }
        XCTAssertEqual(number.user, "1999")
        XCTAssertEqual(status(try decide(try invite(uri), from: "192.0.2.50", trusted: ["192.0.2.0/24"])), 404, "a peer's call to no extension")
    }

    func testWrongPasswordsFromOneSourceGetItBlocked() throws {
        let throttle = AuthFailureThrottle(limit: 3, window: 60, blockFor: 300)
        let uri = "sip:1002@example.com"
        for _ in 0..<3 {
            let challenge = try decide(try invite(uri), throttle: throttle)
            let wrong = try invite(uri, authorization: try answer(challenge, uri: uri, password: "guess"))
            XCTAssertEqual(status(try decide(wrong, throttle: throttle)), 407)
        }
        let blocked = try decide(try invite(uri), throttle: throttle)
        XCTAssertEqual(status(blocked), 503)
        if case .respond(let response) = blocked { XCTAssertNotNil(response.headers[.retryAfter]) }
        XCTAssertEqual(status(try decide(try invite(uri), from: "198.51.100.10", throttle: throttle)), 407, "other sources are not blocked")
    }
}
