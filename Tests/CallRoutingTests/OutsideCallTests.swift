import CallRouting
import Crypto
import Foundation
import Registrar
import SIPDNS
import SIPMessage
import SIPProxy
import SIPTransaction
import XCTest

/// An outside call as a value: the requests each hop gets, failover, the trunk's challenge
/// answered with the route's credentials, the caller's CANCEL, what the caller hears.
final class OutsideCallTests: XCTestCase {
    let caller = AddressOfRecord(number: "1001", domain: "example.com")
    let first = ResolvedHop(transport: .udp, ip: "127.0.0.1", port: 5071, host: "127.0.0.1")
    let second = ResolvedHop(transport: .udp, ip: "127.0.0.1", port: 5072, host: "127.0.0.1")
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func route(identity: CallerIdentity = .assertedIdentity, username: String? = nil) throws -> OutboundRoute {
        OutboundRoute(
            id: 7, organisation: "example.com", name: "uk", position: 10, pattern: .prefix("00"), strip: 2, prepend: "+",
            hops: [try RouteHop(parsing: "127.0.0.1:5071"), try RouteHop(parsing: "127.0.0.1:5072")], hopTimeout: .seconds(4),
            username: username, callerIdentity: identity)
    }

    func invite() throws -> SIPRequest {
        var text = "INVITE sip:00442079460958@example.com SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKcaller\r\n"
        text += "Max-Forwards: 70\r\nFrom: \"Alice\" <sip:1001@example.com>;tag=a\r\nTo: <sip:00442079460958@example.com>\r\nCall-ID: out-1\r\n"
        text += "CSeq: 1 INVITE\r\nProxy-Authorization: Digest username=\"1001\"\r\nP-Asserted-Identity: <sip:ceo@example.com>\r\n"
        text += "Contact: <sip:1001@192.0.2.1:5060>\r\nContent-Length: 0\r\n\r\n"
        guard case .request(let request) = try SIPParser.parse(Array(text.utf8)) else { return try XCTUnwrap(nil, "the fixture is not a request") }
        return request
    }

    func machine(_ route: OutboundRoute, password: String? = nil, heldOff: Set<ResolvedHop> = []) throws -> OutsideCall<Int> {
        let invite = try invite()
        let target = try XCTUnwrap(DialledTarget(invite.uri))
        return OutsideCall(.init(invite: invite, caller: caller, target: target, route: route, password: password, toTag: "rouse", serverName: "Rouse/test", heldOff: heldOff))
    }

    /// The trunk's answer to what leg `request` sent, with Rouse's Via on top (the shell adds it
    /// as it sends).
    func answer(_ request: SIPRequest, _ status: Int, _ extra: [(String, String)] = []) -> ClientTransactionEvent {
        var response = SIPResponse(replyingTo: request, statusCode: status, toTag: status > 100 ? "trunk" : nil)
        response.headers.prepend(.via, "SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKrouse")
        for (name, value) in extra { response.headers.add(SIPHeaderName(name), value) }
        return .response(response)
    }

    func sends(_ actions: [OutsideCall<Int>.Action]) -> [(leg: Int, request: SIPRequest, hop: ResolvedHop)] {
        actions.compactMap { if case .send(let leg, let request, let hop) = $0 { return (leg, request, hop) } else { return nil } }
    }

    func responses(_ actions: [OutsideCall<Int>.Action]) -> [SIPResponse] {
        actions.compactMap {
            switch $0 {
            case .respond(let response), .relay2xx(let response): return response
            default: return nil
            }
        }
    }

    func ended(_ actions: [OutsideCall<Int>.Action]) -> (CallOutcome, Int)? {
        for action in actions { if case .ended(let outcome, let status, _) = action { return (outcome, status) } }
        return nil
    }

    /// Starts the call and resolves its first hop; the first leg's request is sent over flow 1.
    func started(_ call: inout OutsideCall<Int>) throws -> SIPRequest {
        let start = call.handle(.start, at: now)
        XCTAssertTrue(start.contains { if case .resolve(let hop) = $0 { return hop.description == "127.0.0.1:5071" } else { return false } })
        let sent = sends(call.handle(.resolved([first]), at: now))
        let leg = try XCTUnwrap(sent.first)
        XCTAssertEqual(leg.hop, first)
        XCTAssertTrue(call.handle(.sent(leg: leg.leg, SentRequest(leg.request, over: 1)), at: now).isEmpty)
        return leg.request
    }

    func testTheRequestCarriesTheTranslatedNumberAndTheExtensionAsAssertedIdentity() throws {
        var call = try machine(try route())
        let request = try started(&call)
        XCTAssertEqual(request.uri.description, "sip:+442079460958@127.0.0.1:5071", "00 stripped, + put in front, at the hop")
        XCTAssertEqual(request.headers.values(SIPHeaderName("P-Asserted-Identity")), ["\"Alice\" <sip:1001@example.com>"],
                       "the caller's own claim replaced by the extension Rouse authenticated")
        XCTAssertNil(request.headers[.proxyAuthorization], "the caller's credentials were for Rouse")
        XCTAssertEqual(request.maxForwards, 69)
        XCTAssertEqual(request.headers[.from], "\"Alice\" <sip:1001@example.com>;tag=a")
    }

    func testA503MovesToTheNextHopAndHoldsTheFirstOffThenTheCallIsAnswered() throws {
        var call = try machine(try route())
        let request = try started(&call)
        let failed = call.handle(.response(leg: 1, answer(request, 503, [("Retry-After", "30")])), at: now)
        XCTAssertTrue(failed.contains { if case .holdOff(let hop, let duration) = $0 { return hop == first && duration == .seconds(30) } else { return false } })
        XCTAssertTrue(responses(failed).isEmpty, "the caller hears nothing of a hop that failed")
        let next = sends(call.handle(.resolved([second]), at: now))
        XCTAssertEqual(next.map(\.hop), [second])
        XCTAssertEqual(next.first?.request.uri.description, "sip:+442079460958@127.0.0.1:5072")
        let secondRequest = try XCTUnwrap(next.first?.request)
        _ = call.handle(.sent(leg: 2, SentRequest(secondRequest, over: 2)), at: now)
        let ringing = responses(call.handle(.response(leg: 2, answer(secondRequest, 180)), at: now))
        XCTAssertEqual(ringing.map(\.statusCode), [180])
        XCTAssertEqual(ringing.first?.headers.lines(.via).count, 1, "Rouse's own Via is taken off upstream")
        let answered = call.handle(.response(leg: 2, answer(secondRequest, 200)), at: now)
        XCTAssertEqual(responses(answered).map(\.statusCode), [200])
        XCTAssertEqual(ended(answered)?.0, .answered)
    }

    func testAfterARingingHopAFailureGoesToTheCallerAndNoOtherHopIsTried() throws {
        var call = try machine(try route())
        let request = try started(&call)
        _ = call.handle(.response(leg: 1, answer(request, 183)), at: now)
        let busy = call.handle(.response(leg: 1, answer(request, 503)), at: now)
        XCTAssertTrue(sends(busy).isEmpty)
        XCTAssertFalse(busy.contains { if case .resolve = $0 { return true } else { return false } })
        XCTAssertEqual(responses(busy).map(\.statusCode), [503])
        XCTAssertEqual(ended(busy)?.0, .failed)
    }

    func testASilentHopIsLeftAndCancelledIfItRingsLate() throws {
        var call = try machine(try route())
        let request = try started(&call)
        let silence = call.handle(.hopTimerFired(attempt: 1), at: now.addingTimeInterval(4))
        XCTAssertTrue(silence.contains { if case .record(.hopOutcome(_, let outcome)) = $0 { return outcome == "no response in 4 s" } else { return false } })
        _ = call.handle(.resolved([second]), at: now)
        let late = call.handle(.response(leg: 1, answer(request, 180)), at: now.addingTimeInterval(5))
        XCTAssertTrue(late.contains { if case .cancel(let cancel, over: 1) = $0 { return cancel.method == .cancel } else { return false } },
                      "§9.1: a CANCEL for the leg left behind, once it answered provisionally")
        XCTAssertTrue(responses(late).isEmpty, "its ringing is not the caller's")
    }

    func testEveryHopSilentGives408() throws {
        var call = try machine(try route())
        _ = try started(&call)
        _ = call.handle(.hopTimerFired(attempt: 1), at: now)
        _ = call.handle(.resolved([second]), at: now)
        let last = call.handle(.hopTimerFired(attempt: 2), at: now)
        XCTAssertEqual(responses(last).map(\.statusCode), [408])
        XCTAssertEqual(responses(last).first?.headers[.reason], "SIP;cause=408;text=\"no hop of route uk answered\"")
    }

    func testTheTrunksChallengeIsAnsweredOnceWithTheRoutesCredentials() throws {
        var call = try machine(try route(username: "rouse-trunk"), password: "trunk-secret")
        let request = try started(&call)
        let challenge = "Digest realm=\"trunk.example\", nonce=\"n1\", qop=\"auth\", algorithm=MD5"
        let retried = call.handle(.response(leg: 1, answer(request, 407, [("Proxy-Authenticate", challenge)])), at: now)
        XCTAssertTrue(responses(retried).isEmpty, "the caller does not see the trunk's challenge")
        let retry = try XCTUnwrap(sends(retried).first)
        XCTAssertEqual(retry.hop, first, "the same address, authenticated")
        XCTAssertEqual(retry.request.cseq?.number, request.cseq?.number, "the caller's dialog knows nothing of the retry")
        let credentials = try XCTUnwrap(retry.request.headers[.proxyAuthorization].flatMap(DigestCredentials.init(header:)))
        XCTAssertEqual(credentials.username, "rouse-trunk")
        XCTAssertEqual(credentials.realm, "trunk.example")
        let ha1 = Digest.hex(.md5, "rouse-trunk:trunk.example:trunk-secret")
        let ha2 = Digest.hex(.md5, "INVITE:\(request.uri.description)")
        XCTAssertEqual(credentials.response, Digest.hex(.md5, "\(ha1):n1:\(credentials.nc ?? ""):\(credentials.cnonce ?? ""):auth:\(ha2)"))
        _ = call.handle(.sent(leg: retry.leg, SentRequest(retry.request, over: 1)), at: now)
        let refused = call.handle(.response(leg: retry.leg, answer(retry.request, 407, [("Proxy-Authenticate", challenge)])), at: now)
        XCTAssertEqual(responses(refused).map(\.statusCode), [403], "a second challenge: the route's credentials are wrong")
        XCTAssertEqual(responses(refused).first?.headers[.reason], "SIP;cause=403;text=\"the trunk refused the route's credentials\"")
    }

    func testAChallengeWithoutCredentialsIs403ForTheCaller() throws {
        var call = try machine(try route())
        let request = try started(&call)
        let refused = call.handle(.response(leg: 1, answer(request, 401, [("WWW-Authenticate", "Digest realm=\"t\", nonce=\"n\"")])), at: now)
        XCTAssertEqual(responses(refused).map(\.statusCode), [403])
    }

    func testTheCallersCancelStopsTheRingingHop() throws {
        var call = try machine(try route())
        let request = try started(&call)
        _ = call.handle(.response(leg: 1, answer(request, 180)), at: now)
        let canceled = call.handle(.callerCanceled(reason: nil), at: now)
        XCTAssertTrue(canceled.contains { if case .cancel(_, over: 1) = $0 { return true } else { return false } })
        XCTAssertEqual(responses(canceled).map(\.statusCode), [487])
        XCTAssertEqual(ended(canceled)?.0, .canceled)
        let crossed = call.handle(.response(leg: 1, answer(request, 200)), at: now)
        XCTAssertEqual(responses(crossed).map(\.statusCode), [200], "a 2xx that crossed the CANCEL still goes up, so the caller can BYE it")
    }

    func testFromRewrittenToTheRoutesNumberAndRestoredUpstream() throws {
        var call = try machine(try route(identity: .fromNumber("+442071234567")))
        let request = try started(&call)
        XCTAssertEqual(request.headers[.from], "\"Alice\" <sip:+442071234567@example.com>;tag=a")
        XCTAssertTrue(request.headers.values(SIPHeaderName("P-Asserted-Identity")).isEmpty)
        let ringing = responses(call.handle(.response(leg: 1, answer(request, 180)), at: now))
        XCTAssertEqual(ringing.first?.headers[.from], "\"Alice\" <sip:1001@example.com>;tag=a")
    }

    func testADivertedCallCarriesDiversionWhenTheRouteAsks() throws {
        var route = try route()
        route.diversionHeader = true
        let diverted = HistoryInfo.retarget(try invite(), to: try SIPURI(parsing: "sip:00442079460958@example.com"), cause: .noAnswer)
        var call = OutsideCall<Int>(.init(
            invite: diverted, caller: caller, target: try XCTUnwrap(DialledTarget(diverted.uri)), route: route, password: nil, toTag: "rouse",
            serverName: "Rouse/test"))
        let request = try started(&call)
        XCTAssertEqual(request.headers[SIPHeaderName("Diversion")], "<sip:00442079460958@example.com>;reason=no-answer;counter=1")
        XCTAssertEqual(request.headers[SIPHeaderName("History-Info")], "<sip:00442079460958@example.com?Reason=SIP%3Bcause%3D408>;index=1, "
            + "<sip:00442079460958@example.com;cause=408>;index=1.1;mp=1, <sip:+442079460958@127.0.0.1:5071>;index=1.1.1;rc=1.1",
            "History-Info beside it, with an entry for the trunk's Request-URI (RFC 7044 §9.1)")
    }

    func testAHeldOffHopIsSkippedWhileAnotherRemains() throws {
        var call = try machine(try route(), heldOff: [first])
        _ = call.handle(.start, at: now)
        let skipped = call.handle(.resolved([first]), at: now)
        XCTAssertTrue(sends(skipped).isEmpty)
        XCTAssertTrue(skipped.contains { if case .resolve(let hop) = $0 { return hop.description == "127.0.0.1:5072" } else { return false } })
    }
}
