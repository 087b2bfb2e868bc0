import Crypto
import Foundation
@testable import Registrar
import RouseVocabulary
import SIPMessage
import XCTest

final class RegisterTests: XCTestCase {
    typealias F = RegistrarFixture

    func testFirstRegisterIsChallengedWithMD5AloneByDefault() throws {
        var fixture = F()
        let response = F.response(try fixture.send(F.register()))
        XCTAssertEqual(response.statusCode, 401)
        let challenges = response.headers.lines(.wwwAuthenticate)
        XCTAssertEqual(challenges.count, 1, "SIPp 3.6.1 and libre give up on a SHA-256 challenge: \(challenges)")
        XCTAssertTrue(challenges[0].contains("algorithm=MD5"), challenges[0])
        XCTAssertTrue(challenges[0].contains("realm=\"example.com\""))
        XCTAssertTrue(challenges[0].contains("qop=\"auth\""))
        XCTAssertFalse(challenges[0].contains("stale"))
        XCTAssertEqual(fixture.core.bindingCount, 0)
    }

    func testConfiguredAlgorithmsAreOfferedInTheirOrderWithOneNonce() throws {
        for algorithms: [Digest.Algorithm] in [[.sha256, .md5], [.md5, .sha256], [.sha256]] {
            var fixture = F(algorithms: algorithms)
            let challenges = F.response(try fixture.send(F.register())).headers.lines(.wwwAuthenticate)
            XCTAssertEqual(challenges.compactMap { DigestCredentials(header: $0)?.algorithm }, algorithms)
            XCTAssertEqual(Set(challenges.compactMap { DigestCredentials(header: $0)?.nonce }).count, 1, "\(challenges)")
        }
    }

    func testAnswerInAnAlgorithmThatWasNotOfferedIsChallengedAgain() throws {
        var fixture = F()
        let challenge = F.response(try fixture.send(F.register()))
        // The phone computes SHA-256 over the MD5 challenge's nonce: not what was offered.
        let offered = challenge.headers.lines(.wwwAuthenticate)[0]
        let answer = F.answer(offered.replacingOccurrences(of: "algorithm=MD5", with: "algorithm=SHA-256"), password: "alice-secret")
        let response = F.response(try fixture.send(F.register(cseq: 2, authorization: answer)))
        XCTAssertEqual(response.statusCode, 401)
        XCTAssertEqual(fixture.core.bindingCount, 0)
    }

    func testMD5RegisterSucceedsAndTheOKListsTheBinding() throws {
        var fixture = F()
        let decision = try fixture.registerAuthenticated(algorithm: "MD5")
        guard case .commit(let changes, let events, let response, _) = decision else { return XCTFail("\(decision)") }
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(response.headers.values(.contact), ["<sip:1001@192.0.2.7:5060>;expires=3600"])
        XCTAssertEqual(changes.count, 1)
        XCTAssertEqual(events.map(\.kind), [.added])
        let binding = try XCTUnwrap(fixture.core.bindings(for: F.alice).first)
        XCTAssertEqual(binding.userAgent, "TestPhone/1.0")
        XCTAssertEqual(binding.flow.sourceText, "192.0.2.7:5060")
        XCTAssertEqual(binding.cseq, 2)
    }

    func testSHA256RegisterSucceedsWhenOffered() throws {
        for algorithms: [Digest.Algorithm] in [[.sha256], [.sha256, .md5], [.md5, .sha256]] {
            var fixture = F(algorithms: algorithms)
            XCTAssertEqual(F.response(try fixture.registerAuthenticated(algorithm: "SHA-256")).statusCode, 200, "\(algorithms)")
            var md5 = F(algorithms: algorithms)
            let expected = algorithms.contains(.md5) ? 200 : 401
            let challenge = F.response(try md5.send(F.register())).headers.lines(.wwwAuthenticate)[0]
            let answer = F.answer(challenge.replacingOccurrences(of: "algorithm=SHA-256", with: "algorithm=MD5"), password: "alice-secret")
            XCTAssertEqual(F.response(try md5.send(F.register(cseq: 2, authorization: answer))).statusCode, expected, "\(algorithms)")
        }
    }

    func testUsernameMayBeNumberAtDomain() throws {
        var fixture = F()
        let challenge = F.response(try fixture.send(F.register()))
        let offer = challenge.headers.lines(.wwwAuthenticate)[0]
        let authorization = F.answer(offer, password: "alice-secret", username: "1001@example.com")
        XCTAssertEqual(F.response(try fixture.send(F.register(cseq: 2, authorization: authorization))).statusCode, 200)
    }

    func testWrongPasswordAndUnknownExtensionGetIdentical401sInEveryConfiguration() throws {
        for algorithms: [Digest.Algorithm] in [[.md5], [.sha256, .md5], [.sha256]] {
            try assertIdentical401s(algorithms: algorithms)
        }
    }

    private func assertIdentical401s(algorithms: [Digest.Algorithm]) throws {
        var fixture = F(algorithms: algorithms)
        func attempt(_ aor: AddressOfRecord, _ password: String) throws -> String {
            let challenge = F.response(try fixture.send(F.register(aor, callID: "probe")))
            let authorization = F.answer(challenge.headers.lines(.wwwAuthenticate).last!, number: aor.number, password: password)
            let response = F.response(try fixture.send(F.register(aor, callID: "probe", cseq: 2, authorization: authorization)))
            XCTAssertEqual(response.statusCode, 401)
            // Blank what must differ per request: the nonce, and what is echoed from the request (To).
            var text = response.description
            text = text.replacingOccurrences(of: #"nonce="[0-9a-f]+""#, with: "nonce=N", options: .regularExpression)
            text = text.replacingOccurrences(of: #"To: [^\r]*"#, with: "To: T", options: .regularExpression)
            text = text.replacingOccurrences(of: #"From: [^\r]*"#, with: "From: F", options: .regularExpression)
            text = text.replacingOccurrences(of: #"Date: [^\r]*"#, with: "Date: D", options: .regularExpression)
            return text
        }
        let wrongPassword = try attempt(F.alice, "not-the-password")
        let unknownExtension = try attempt(AddressOfRecord(number: "1999", domain: "example.com"), "whatever")
        XCTAssertEqual(wrongPassword, unknownExtension, "\(algorithms)")
        XCTAssertEqual(wrongPassword.components(separatedBy: "WWW-Authenticate:").count - 1, algorithms.count)
    }

    func testExpiredNonceGetsStaleTrue() throws {
        var fixture = F()
        let challenge = F.response(try fixture.send(F.register()))
        let authorization = F.answer(challenge.headers.lines(.wwwAuthenticate)[0], password: "alice-secret")
        fixture.now = fixture.now.addingTimeInterval(301)
        let response = F.response(try fixture.send(F.register(cseq: 2, authorization: authorization)))
        XCTAssertEqual(response.statusCode, 401)
        XCTAssertTrue(response.headers.lines(.wwwAuthenticate).allSatisfy { $0.contains("stale=true") })
    }

    func testReplayedNonceCountIsRefused() throws {
        var fixture = F()
        let challenge = F.response(try fixture.send(F.register()))
        let authorization = F.answer(challenge.headers.lines(.wwwAuthenticate)[0], password: "alice-secret")
        XCTAssertEqual(F.response(try fixture.send(F.register(cseq: 2, authorization: authorization))).statusCode, 200)
        // The same nc again, on a new request: a replay.
        XCTAssertEqual(F.response(try fixture.send(F.register(cseq: 3, authorization: authorization))).statusCode, 401)
        // A higher nc with the same nonce is fine.
        let next = F.answer(challenge.headers.lines(.wwwAuthenticate)[0], password: "alice-secret", nc: "00000002")
        XCTAssertEqual(F.response(try fixture.send(F.register(cseq: 4, authorization: next))).statusCode, 200)
    }

    func testRegisteringSomeoneElsesAddressIsForbidden() throws {
        var fixture = F()
        let challenge = F.response(try fixture.send(F.register(F.bob)))
        // Alice's credentials, Bob's address.
        let authorization = F.answer(challenge.headers.lines(.wwwAuthenticate)[0], number: "1001", password: "alice-secret")
        XCTAssertEqual(F.response(try fixture.send(F.register(F.bob, cseq: 2, authorization: authorization))).statusCode, 403)
    }

    func testUnknownDomainGets404() throws {
        var fixture = F()
        XCTAssertEqual(F.response(try fixture.send(F.register(toDomain: "elsewhere.org"))).statusCode, 404)
    }

    func testTooBriefGets423WithMinExpires() throws {
        var fixture = F()
        let response = F.response(try fixture.registerAuthenticated(expires: 30))
        XCTAssertEqual(response.statusCode, 423)
        XCTAssertEqual(response.headers[.minExpires], "60")
        let push = F.response(try fixture.registerAuthenticated(
            contacts: ["<sip:1001@192.0.2.7:5060;pn-provider=fcm;pn-prid=tokA;pn-param=proj>"], expires: 120, callID: "push"))
        XCTAssertEqual(push.statusCode, 423)
        XCTAssertEqual(push.headers[.minExpires], "240", "a push binding must live long enough to be pushed")
    }

    func testLongerThanMaximumIsGrantedTheMaximum() throws {
        var fixture = F()
        let response = F.response(try fixture.registerAuthenticated(expires: 999_999))
        XCTAssertEqual(response.headers.values(.contact), ["<sip:1001@192.0.2.7:5060>;expires=86400"])
    }

    func testPerContactExpiresWinsOverHeader() throws {
        var fixture = F()
        let response = F.response(try fixture.registerAuthenticated(
            contacts: ["<sip:1001@192.0.2.7:5060>;expires=600", "<sip:1001@192.0.2.8:5060>"], expires: 1200))
        XCTAssertEqual(Set(response.headers.values(.contact)), ["<sip:1001@192.0.2.7:5060>;expires=600", "<sip:1001@192.0.2.8:5060>;expires=1200"])
    }

    func testWildcardWithExpiresZeroRemovesEveryBinding() throws {
        var fixture = F()
        _ = try fixture.registerAuthenticated(contacts: ["<sip:1001@192.0.2.7:5060>", "<sip:1001@192.0.2.8:5060>"])
        XCTAssertEqual(fixture.core.bindingCount, 2)
        let decision = try fixture.registerAuthenticated(contacts: ["*"], expires: 0, callID: "call-1", cseq: 5)
        guard case .commit(let changes, let events, let response, _) = decision else { return XCTFail("\(decision)") }
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertFalse(response.headers.contains(.contact))
        XCTAssertEqual(changes.count, 2)
        XCTAssertEqual(events.map(\.kind), [.removed, .removed])
        XCTAssertEqual(fixture.core.bindingCount, 0)
    }

    func testWildcardWithoutExpiresZeroIsRefused() throws {
        var fixture = F()
        XCTAssertEqual(F.response(try fixture.registerAuthenticated(contacts: ["*"], expires: 3600)).statusCode, 400)
        XCTAssertEqual(F.response(try fixture.registerAuthenticated(contacts: ["*", "<sip:1001@192.0.2.7>"], expires: 0, callID: "x")).statusCode, 400)
    }

    func testStaleCSeqForTheSameCallIDIsRefused() throws {
        var fixture = F()
        _ = try fixture.registerAuthenticated(callID: "c", cseq: 10)  // binding holds CSeq 11
        let response = F.response(try fixture.registerAuthenticated(callID: "c", cseq: 5))  // answers with CSeq 6
        XCTAssertEqual(response.statusCode, 400)
        XCTAssertEqual(response.reasonPhrase, "Invalid CSeq number")
    }

    func testQueryWithoutContactListsBindingsAndChangesNothing() throws {
        var fixture = F()
        _ = try fixture.registerAuthenticated()
        fixture.now = fixture.now.addingTimeInterval(100)
        let decision = try fixture.registerAuthenticated(contacts: [], expires: nil, callID: "query")
        guard case .respond(let response) = decision else { return XCTFail("a query changes nothing") }
        XCTAssertEqual(response.headers.values(.contact), ["<sip:1001@192.0.2.7:5060>;expires=3500"])
    }

    func testRemovingOneContactWithExpiresZero() throws {
        var fixture = F()
        _ = try fixture.registerAuthenticated(contacts: ["<sip:1001@192.0.2.7:5060>", "<sip:1001@192.0.2.8:5060>"])
        let response = F.response(try fixture.registerAuthenticated(contacts: ["<sip:1001@192.0.2.7:5060>;expires=0"], callID: "c2"))
        XCTAssertEqual(response.headers.values(.contact), ["<sip:1001@192.0.2.8:5060>;expires=3600"])
    }

    func testSameInstanceReplacesItsBindingEvenWithNewCallIDAndPort() throws {
        var fixture = F()
        let instance = "+sip.instance=\"<urn:uuid:00000000-0000-1000-8000-AABBCCDDEEFF>\";reg-id=1"
        _ = try fixture.registerAuthenticated(contacts: ["<sip:1001@192.0.2.7:5060;ob>;\(instance)"], callID: "first", flow: F.flow("192.0.2.7:5060"))
        let first = try XCTUnwrap(fixture.core.bindings(for: F.alice).first)
        let decision = try fixture.registerAuthenticated(
            contacts: ["<sip:1001@192.0.2.7:40123;transport=tcp;ob>;\(instance)"], callID: "second", flow: F.flow("192.0.2.7:40123", transport: "tcp"))
        let response = F.response(decision)
        XCTAssertEqual(response.statusCode, 200)
        let list = fixture.core.bindings(for: F.alice)
        XCTAssertEqual(list.count, 1)
        XCTAssertEqual(list[0].id, first.id)
        XCTAssertEqual(list[0].flow.transport.rawValue, "tcp")
        XCTAssertEqual(response.headers.values(.contact), [
            "<sip:1001@192.0.2.7:40123;transport=tcp;ob>;expires=3600;+sip.instance=\"<urn:uuid:00000000-0000-1000-8000-AABBCCDDEEFF>\""
        ], "without Supported: outbound the reg-id is ignored (RFC 5626 §6)")
    }

    func testPathIsStoredAndEchoed() throws {
        var fixture = F()
        let decision = try fixture.registerAuthenticated(extra: ["Path: <sip:edge.example.com;lr>", "Supported: path"])
        let response = F.response(decision)
        XCTAssertEqual(response.headers.values(.path), ["<sip:edge.example.com;lr>"])
        XCTAssertEqual(fixture.core.bindings(for: F.alice).first?.path, ["<sip:edge.example.com;lr>"])
    }

    func testBindingCapEvictsOldestWithoutInstance() throws {
        var fixture = F(policy: RegistrationPolicy(maxBindingsPerExtension: 2))
        _ = try fixture.registerAuthenticated(contacts: ["<sip:1001@192.0.2.1>"], callID: "a")
        fixture.now = fixture.now.addingTimeInterval(1)
        _ = try fixture.registerAuthenticated(contacts: ["<sip:1001@192.0.2.2>;+sip.instance=\"<urn:uuid:1>\""], callID: "b")
        fixture.now = fixture.now.addingTimeInterval(1)
        _ = try fixture.registerAuthenticated(contacts: ["<sip:1001@192.0.2.3>"], callID: "c")
        let contacts = Set(fixture.core.bindings(for: F.alice).map(\.contact))
        XCTAssertEqual(contacts, ["sip:1001@192.0.2.2", "sip:1001@192.0.2.3"])
    }

    func testBindingsExpireOnTime() throws {
        var fixture = F()
        _ = try fixture.registerAuthenticated(contacts: ["<sip:1001@192.0.2.7>;expires=60", "<sip:1001@192.0.2.8>;expires=120"])
        var (changes, events) = fixture.core.expire(now: fixture.now.addingTimeInterval(59))
        XCTAssertTrue(changes.isEmpty)
        (changes, events) = fixture.core.expire(now: fixture.now.addingTimeInterval(60))
        XCTAssertEqual(events.map(\.kind), [.expired])
        XCTAssertEqual(events.first?.binding.contact, "sip:1001@192.0.2.7")
        XCTAssertEqual(fixture.core.bindings(for: F.alice).map(\.contact), ["sip:1001@192.0.2.8"])
    }

    func testMalformedContactGets400() throws {
        var fixture = F()
        XCTAssertEqual(F.response(try fixture.registerAuthenticated(contacts: ["<sip:1001@192.0.2.7"])).statusCode, 400)
        XCTAssertEqual(F.response(try fixture.registerAuthenticated(contacts: ["<sip:1001@192.0.2.7>;expires=soon"], callID: "e")).statusCode, 400)
    }
}

final class RegistrarFormattingTests: XCTestCase {
    func testDateHeaderIsRFC1123InGMT() throws {
        var fixture = RegistrarFixture()
        let response = RegistrarFixture.response(try fixture.registerAuthenticated())
        // 1_800_000_000 s after the epoch.
        XCTAssertEqual(response.headers["Date"], "Fri, 15 Jan 2027 08:00:00 GMT")
    }

    func testDateFormattingAgreesWithFoundationAcrossLeapYearsAndCenturies() {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        for seconds in [0, 59, 951_782_400, 951_868_799, 1_709_164_800, 4_102_444_799, 4_107_542_399] {
            let date = Date(timeIntervalSince1970: TimeInterval(seconds))
            XCTAssertEqual(RegistrarCore.httpDate(date), formatter.string(from: date), "\(seconds)")
        }
    }

    func testToTagDependsOnlyOnCallIDAndCSeq() throws {
        let first = try RegistrarFixture.parse(RegistrarFixture.register(callID: "same", cseq: 4))
        let again = try RegistrarFixture.parse(RegistrarFixture.register(callID: "same", cseq: 4, extra: ["Subject: retransmitted"]))
        let next = try RegistrarFixture.parse(RegistrarFixture.register(callID: "same", cseq: 5))
        XCTAssertEqual(RegistrarCore.tag(for: first), RegistrarCore.tag(for: again))
        XCTAssertNotEqual(RegistrarCore.tag(for: first), RegistrarCore.tag(for: next))
        XCTAssertEqual(RegistrarCore.tag(for: first), "1jfgwpk2v0opb", "FNV-1a of \"same 4\": the same across processes and instances")
    }
}
