import Foundation
import SIPMessage
import SIPProxy
import XCTest

final class ProxyRulesTests: XCTestCase {
    static let invite = """
        INVITE sip:1002@example.com SIP/2.0\r
        Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKcaller1;rport\r
        Max-Forwards: 70\r
        From: "Alice" <sip:1001@example.com>;tag=a1\r
        To: <sip:1002@example.com>\r
        Call-ID: call-1@192.0.2.1\r
        CSeq: 2 INVITE\r
        Contact: <sip:1001@192.0.2.1:5060>\r
        Proxy-Authorization: Digest username="1001", realm="example.com", nonce="n", uri="sip:1002@example.com", response="r"\r
        Content-Type: application/sdp\r
        Content-Length: 0\r
        \r

        """

    func parse(_ text: String) throws -> SIPRequest {
        guard case .request(let request) = try SIPParser.parse(Array(text.utf8)) else { return try XCTUnwrap(nil, "the fixture is not a request") }
        return request
    }

    func testBranchRequestTargetsTheContactDecrementsMaxForwardsAndDropsOurCredentials() throws {
        let invite = try parse(Self.invite)
        let target = try SIPURI(parsing: "sip:1002@198.51.100.7:40000;transport=tcp;ob")
        let branch = ProxyRules.branchRequest(from: invite, to: target)
        XCTAssertEqual(branch.uri, target)
        XCTAssertEqual(branch.maxForwards, 69)
        XCTAssertFalse(branch.headers.contains(.proxyAuthorization))
        XCTAssertEqual(branch.headers[.from], invite.headers[.from])
        XCTAssertEqual(branch.callID, invite.callID)
    }

    func testTooManyHopsAnswers483() throws {
        var invite = try parse(Self.invite)
        XCTAssertNil(ProxyRules.tooManyHops(invite))
        invite.headers.set(.maxForwards, "0")
        XCTAssertEqual(ProxyRules.tooManyHops(invite)?.statusCode, 483)
    }

    func testLoopIsSeenByTheInstanceMarkerInAVia() throws {
        var invite = try parse(Self.invite)
        XCTAssertFalse(ProxyRules.isLooping(invite, instanceMarker: "me"))
        invite.headers.prepend(.via, "SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKx;rouse=me")
        XCTAssertTrue(ProxyRules.isLooping(invite, instanceMarker: "me"))
        XCTAssertFalse(ProxyRules.isLooping(invite, instanceMarker: "other"))
    }

    func testLoopNeedsTheMarkerAsTheViaParameterNotElsewhereInTheLine() throws {
        var invite = try parse(Self.invite)
        invite.headers.prepend(.via, "SIP/2.0/UDP me.example.com:5060;branch=z9hG4bKme;rouse=mine")
        XCTAssertFalse(ProxyRules.isLooping(invite, instanceMarker: "me"), "the text of the marker in a host, branch or other value is no loop")
        invite.headers.prepend(.via, "SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKa, SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKb;RousE=me")
        XCTAssertTrue(ProxyRules.isLooping(invite, instanceMarker: "me"), "a marked element later in a line, the parameter in any case")
    }

    func testCancelCopiesWhatRFC3261Section9Point1Asks() throws {
        var sent = ProxyRules.branchRequest(from: try parse(Self.invite), to: try SIPURI(parsing: "sip:1002@198.51.100.7:40000"))
        sent.headers.prepend(.via, "SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKrouse1;rport")
        sent.headers.prepend(.route, "<sip:192.0.2.99;lr>")
        let cancel = ProxyRules.cancel(of: sent, reason: ProxyRules.completedElsewhere)
        XCTAssertEqual(cancel.method, .cancel)
        XCTAssertEqual(cancel.uri, sent.uri)
        XCTAssertEqual(cancel.vias.count, 1)
        XCTAssertEqual(cancel.topVia?.branch, "z9hG4bKrouse1")
        XCTAssertEqual(cancel.cseq, SIPCSeq(2, .cancel))
        XCTAssertEqual(cancel.headers[.to], sent.headers[.to])
        XCTAssertEqual(cancel.headers[.from], sent.headers[.from])
        XCTAssertEqual(cancel.headers.values(.route), ["<sip:192.0.2.99;lr>"])
        XCTAssertEqual(cancel.headers[.reason], "SIP;cause=200;text=\"Call completed elsewhere\"")
    }

    func testUpstreamResponseLosesOnlyTheTopVia() throws {
        let invite = try parse(Self.invite)
        var response = SIPResponse(replyingTo: invite, statusCode: 180, toTag: "t")
        response.headers.prepend(.via, "SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKrouse1")
        let upstream = ProxyRules.upstream(response)
        XCTAssertEqual(upstream.vias.map(\.branch), ["z9hG4bKcaller1"])
    }

    func testUpstreamResponseLosesOnlyTheFirstElementOfAJoinedViaLine() throws {
        let invite = try parse(Self.invite)
        var response = SIPResponse(replyingTo: invite, statusCode: 180, toTag: "t")
        response.headers.prepend(.via, "SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKrouse1;note=\"a, b\", SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKmid")
        XCTAssertEqual(ProxyRules.upstream(response).vias.map(\.branch), ["z9hG4bKmid", "z9hG4bKcaller1"])
        response.headers.prepend(.via, "SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKrouse2;note=\"a, b\"")
        XCTAssertEqual(
            ProxyRules.upstream(response).vias.map(\.branch), ["z9hG4bKrouse1", "z9hG4bKmid", "z9hG4bKcaller1"],
            "a comma inside quotes does not make two elements")
    }

    func testForkSelectorFollowsRFC3261Section16Point7() throws {
        let invite = try parse(Self.invite)
        func response(_ status: Int) -> SIPResponse { SIPResponse(replyingTo: invite, statusCode: status) }
        var selector = ForkResponseSelector()
        XCTAssertNil(selector.chosen)
        selector.consider(response(408))
        selector.consider(response(486))
        XCTAssertEqual(selector.chosen?.statusCode, 486, "a real answer beats a branch that timed out")
        selector.consider(response(302))
        XCTAssertEqual(selector.chosen?.statusCode, 302, "the lowest class wins")
        selector.consider(response(603))
        XCTAssertEqual(selector.chosen?.statusCode, 603, "any 6xx wins")

        var overloaded = ForkResponseSelector()
        overloaded.consider(response(503))
        XCTAssertEqual(overloaded.chosen?.statusCode, 500, "a 503 goes upstream as 500")
        overloaded.consider(response(407))
        XCTAssertEqual(overloaded.chosen?.statusCode, 407)
    }
}
