import Foundation
import Registrar
import RouseVocabulary
import SIPMessage
import XCTest

/// Gateway mode's upstream registration as a value, on a manual clock: the lease first, the
/// REGISTER with Rouse's own Contact, the PBX's challenge answered once, the refresh at half the
/// grant, the unregister when the last binding goes, standing by when the lease is another's.
final class UpstreamRegistrationTests: XCTestCase {
    let start = Date(timeIntervalSince1970: 1_800_000_000)
    let aor = AddressOfRecord(number: "1001", domain: "example.com")

    func registration(_ pbx: UpstreamPBX = UpstreamPBX(organisation: "example.com", host: "192.0.2.5", port: 5070, expires: 600)) -> UpstreamRegistration {
        UpstreamRegistration(
            aor: aor, pbx: pbx, contact: "sip:1001@192.0.2.10:5060", pathEntry: "sip:192.0.2.10:5060;lr", callID: "gw-1001@rouse",
            fromTag: "gwtag")
    }

    func sent(_ actions: [UpstreamRegistration.Action]) -> [SIPRequest] {
        actions.compactMap { if case .send(let request) = $0 { return request } else { return nil } }
    }

    func wake(_ actions: [UpstreamRegistration.Action]) -> Date? {
        actions.compactMap { if case .wake(let at) = $0 { return at } else { return nil } }.last
    }

    func reply(_ request: SIPRequest, _ status: Int, _ headers: [(String, String)] = []) -> SIPResponse {
        var response = SIPResponse(replyingTo: request, statusCode: status, toTag: "pbx")
        for (name, value) in headers { response.headers.add(SIPHeaderName(name), value) }
        return response
    }

    /// Live bindings, the lease granted: the first REGISTER.
    func registered(_ value: inout UpstreamRegistration, grant: Int = 120) throws -> SIPRequest {
        XCTAssertEqual(value.handle(.bindings(live: true), now: start), [.takeLease(until: start + 30)])
        let register = try XCTUnwrap(sent(value.handle(.lease(held: true, until: start + 30), now: start)).first)
        let actions = value.handle(.response(reply(register, 200, [("Contact", "<sip:1001@192.0.2.10:5060>;expires=\(grant)")])), now: start + 1)
        XCTAssertTrue(actions.contains(.registered(expires: grant)), "\(actions)")
        return register
    }

    func testRegistersRousesOwnContactAfterTakingTheLeaseAndRefreshesAtHalfTheGrant() throws {
        var value = registration()
        let register = try registered(&value)
        XCTAssertEqual(register.method, .register)
        XCTAssertEqual(register.uri.description, "sip:192.0.2.5:5070")
        XCTAssertEqual(register.headers[.to], "<sip:1001@192.0.2.5>")
        XCTAssertEqual(register.headers[.contact], "<sip:1001@192.0.2.10:5060>")
        XCTAssertEqual(register.headers[.expires], "600")
        XCTAssertEqual(register.headers[.cseq], "1 REGISTER")
        XCTAssertNil(register.headers[.path], "no Path unless the PBX is said to support it")
        guard case .registered(let refreshAt, let expiresAt) = value.state else { return XCTFail("\(value.state)") }
        XCTAssertEqual(refreshAt, start + 61, "refreshed at half the 120 s granted")
        XCTAssertEqual(expiresAt, start + 121)

        // The lease is renewed at half its length, then the refresh goes at 61 s with the same Call-ID.
        XCTAssertEqual(value.handle(.timer, now: start + 15).first, .takeLease(until: start + 45))
        _ = value.handle(.lease(held: true, until: start + 45), now: start + 15)
        XCTAssertEqual(sent(value.handle(.timer, now: start + 30)), [])
        _ = value.handle(.lease(held: true, until: start + 60), now: start + 30)
        XCTAssertEqual(sent(value.handle(.timer, now: start + 45)), [])
        _ = value.handle(.lease(held: true, until: start + 75), now: start + 45)
        let refresh = try XCTUnwrap(sent(value.handle(.timer, now: start + 61)).first)
        XCTAssertEqual(refresh.headers[.cseq], "2 REGISTER")
        XCTAssertEqual(refresh.callID, register.callID)
        XCTAssertEqual(refresh.from?.tag, "gwtag")
    }

    func testAnswersTheChallengeOnceWithThePBXCredentials() throws {
        var value = registration(UpstreamPBX(organisation: "example.com", host: "pbx.example.net", username: "rouse", password: "s3cret"))
        _ = value.handle(.bindings(live: true), now: start)
        let first = try XCTUnwrap(sent(value.handle(.lease(held: true, until: start + 30), now: start)).first)
        XCTAssertEqual(first.uri.description, "sip:pbx.example.net")
        let challenge = reply(first, 401, [("WWW-Authenticate", "Digest realm=\"pbx\", nonce=\"n1\", qop=\"auth\", algorithm=MD5")])
        let second = try XCTUnwrap(sent(value.handle(.response(challenge), now: start)).first)
        XCTAssertEqual(second.headers[.cseq], "2 REGISTER")
        let authorization = try XCTUnwrap(second.headers[.authorization])
        XCTAssertTrue(authorization.contains("username=\"rouse\""), authorization)
        XCTAssertTrue(authorization.contains("nonce=\"n1\""), authorization)
        XCTAssertFalse(authorization.contains("s3cret"))

        // The same nonce again means the credentials are wrong: no loop, a retry later.
        let again = reply(second, 401, [("WWW-Authenticate", "Digest realm=\"pbx\", nonce=\"n1\", qop=\"auth\"")])
        let actions = value.handle(.response(again), now: start + 1)
        XCTAssertEqual(sent(actions), [])
        XCTAssertTrue(actions.contains(.failed(status: 401, reason: "Unauthorized", retryAt: start + 31)), "\(actions)")
        XCTAssertEqual(wake(actions), start + 15, "the lease renewal comes first")
        XCTAssertEqual(value.handle(.timer, now: start + 15).first, .takeLease(until: start + 45))
        _ = value.handle(.lease(held: true, until: start + 45), now: start + 15)
        let retry = try XCTUnwrap(sent(value.handle(.timer, now: start + 31)).first)
        XCTAssertNil(retry.headers[.authorization], "a new attempt starts without the old answer")

        // A stale nonce is answered again.
        let stale = reply(retry, 401, [("WWW-Authenticate", "Digest realm=\"pbx\", nonce=\"n2\", qop=\"auth\"")])
        let answered = try XCTUnwrap(sent(value.handle(.response(stale), now: start + 31)).first)
        let staleAgain = reply(answered, 401, [("WWW-Authenticate", "Digest realm=\"pbx\", nonce=\"n2\", stale=true, qop=\"auth\"")])
        XCTAssertEqual(sent(value.handle(.response(staleAgain), now: start + 31)).count, 1)
    }

    func testWithoutCredentialsAChallengeIsAFailure() throws {
        var value = registration()
        _ = value.handle(.bindings(live: true), now: start)
        let first = try XCTUnwrap(sent(value.handle(.lease(held: true, until: start + 30), now: start)).first)
        let actions = value.handle(.response(reply(first, 407, [("Proxy-Authenticate", "Digest realm=\"pbx\", nonce=\"x\"")])), now: start)
        XCTAssertEqual(sent(actions), [])
        guard case .failed = value.state else { return XCTFail("\(value.state)") }
    }

    func testLastBindingGoneUnregistersThenReleasesTheLease() throws {
        var value = registration(UpstreamPBX(organisation: "example.com", host: "192.0.2.5", usesPath: true))
        let register = try registered(&value)
        XCTAssertEqual(register.headers[.path], "<sip:192.0.2.10:5060;lr>")
        XCTAssertEqual(register.headers[.supported], "path")
        let unregister = try XCTUnwrap(sent(value.handle(.bindings(live: false), now: start + 5)).first)
        XCTAssertEqual(unregister.headers[.expires], "0")
        XCTAssertEqual(unregister.headers[.contact], "<sip:1001@192.0.2.10:5060>")
        XCTAssertEqual(value.handle(.response(reply(unregister, 200)), now: start + 5), [.releaseLease, .stopped])
        XCTAssertEqual(value.state, .idle)
        XCTAssertNil(value.nextWake)
    }

    func testLeaseLostStopsRefreshingWithoutUnregistering() throws {
        var value = registration()
        _ = try registered(&value)
        _ = value.handle(.timer, now: start + 15)
        let lost = value.handle(.lease(held: false, until: start + 15), now: start + 15)
        XCTAssertEqual(sent(lost), [])
        XCTAssertEqual(value.state, .standby(retryAt: start + 30))
        XCTAssertFalse(value.holdsLease(at: start + 15))
        // It tries for the lease again, and sends nothing while another instance holds it.
        XCTAssertEqual(value.handle(.timer, now: start + 30).first, .takeLease(until: start + 60))
        XCTAssertEqual(sent(value.handle(.lease(held: false, until: start + 30), now: start + 30)), [])
        // The bindings going on this instance's watch: no unregister, that is the holder's to send.
        XCTAssertEqual(value.handle(.bindings(live: false), now: start + 40), [.stopped])
    }

    func testTakesOverWhenTheOtherInstanceLetsTheLeaseGo() throws {
        var value = registration()
        _ = value.handle(.bindings(live: true), now: start)
        XCTAssertEqual(sent(value.handle(.lease(held: false, until: start), now: start)), [])
        XCTAssertEqual(value.handle(.timer, now: start + 15).first, .takeLease(until: start + 45))
        let register = try XCTUnwrap(sent(value.handle(.lease(held: true, until: start + 45), now: start + 15)).first)
        XCTAssertEqual(register.headers[.expires], "600")
    }

    func testIntervalTooBriefAsksForTheMinimumAndFailuresBackOff() throws {
        var value = registration()
        _ = value.handle(.bindings(live: true), now: start)
        let first = try XCTUnwrap(sent(value.handle(.lease(held: true, until: start + 30), now: start)).first)
        let second = try XCTUnwrap(sent(value.handle(.response(reply(first, 423, [("Min-Expires", "1800")])), now: start)).first)
        XCTAssertEqual(second.headers[.expires], "1800")
        let actions = value.handle(.response(reply(second, 503, [("Retry-After", "5")])), now: start)
        XCTAssertTrue(actions.contains(.failed(status: 503, reason: "Service Unavailable", retryAt: start + 5)), "\(actions)")
        // A stale response (an older CSeq) changes nothing.
        XCTAssertEqual(value.handle(.response(reply(first, 200)), now: start + 1), [.wake(at: start + 5)])
    }

    func testBindingsGoneWhileTheLeaseIsAskedForGiveItBack() {
        var value = registration()
        _ = value.handle(.bindings(live: true), now: start)
        XCTAssertEqual(value.handle(.bindings(live: false), now: start), [.stopped])
        XCTAssertEqual(value.handle(.lease(held: true, until: start + 30), now: start), [.releaseLease])
    }

    func testPBXEntriesRead() throws {
        let pbx = try UpstreamPBX(parsing: "Example.com=pbx.example.net:5080;transport=tcp;domain=corp;user=rouse;password=s3;path", expires: 300)
        XCTAssertEqual(pbx.organisation, "example.com")
        XCTAssertEqual(pbx.host, "pbx.example.net")
        XCTAssertEqual(pbx.port, 5080)
        XCTAssertEqual(pbx.transport, .tcp)
        XCTAssertEqual(pbx.domain, "corp")
        XCTAssertEqual(pbx.username, "rouse")
        XCTAssertEqual(pbx.password, "s3")
        XCTAssertTrue(pbx.usesPath)
        XCTAssertEqual(pbx.expires, 300)
        XCTAssertFalse(pbx.description.contains("s3"), "the password is never shown")
        let plain = try UpstreamPBX(parsing: "example.com=[::1]", expires: 600)
        XCTAssertEqual([plain.host, String(plain.port), plain.transport.rawValue, plain.domain], ["[::1]", "5060", "udp", "[::1]"])
        for bad in ["pbx:5060", "example.com=", "example.com=pbx:0", "example.com=pbx;transport=tls", "example.com=pbx;user=x",
            "example.com=pbx;colour=red", "example.com=pbx;password=hidden"] {
            XCTAssertThrowsError(try UpstreamPBX(parsing: bad, expires: 600), bad) { error in
                XCTAssertFalse("\(error)".contains("hidden"), "\(error)")
            }
        }
    }
}
