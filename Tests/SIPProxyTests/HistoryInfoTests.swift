import SIPMessage
import SIPProxy
import XCTest

/// History-Info (RFC 7044, RFC 4458 causes) and Diversion (RFC 5806) as the diverting proxy
/// writes them, on bytes: an INVITE parsed from the wire, retargeted, serialized again.
final class HistoryInfoTests: XCTestCase {
    func testTheFirstDiversionAddsTheOriginalTargetAndTheNewOneWithItsCause() throws {
        let invite = try parse(Self.invite(extra: ""))
        let diverted = HistoryInfo.retarget(invite, to: try SIPURI(parsing: "sip:1002@example.com"), cause: .noAnswer)
        let wire = String(decoding: SIPSerializer.serialize(diverted), as: UTF8.self)
        XCTAssertTrue(wire.hasPrefix("INVITE sip:1002@example.com SIP/2.0\r\n"), wire)
        XCTAssertTrue(wire.contains(
            "\r\nHistory-Info: <sip:1001@example.com?Reason=SIP%3Bcause%3D408>;index=1, <sip:1002@example.com;cause=408>;index=1.1;mp=1\r\n"),
            wire)
        XCTAssertTrue(wire.contains("\r\nTo: <sip:1001@example.com>\r\n"), "the To header keeps the number dialled")
        XCTAssertEqual(HistoryInfo.diversionCount(of: try parse(wire)), 1, "read back from the bytes it wrote")
    }

    func testAnUnconditionalDiversionGivesNoReasonToTheTargetItLeft() throws {
        let invite = try parse(Self.invite(extra: ""))
        let diverted = HistoryInfo.retarget(invite, to: try SIPURI(parsing: "sip:vm1001@pbx.example"), cause: .unconditional)
        XCTAssertEqual(diverted.headers["History-Info"], "<sip:1001@example.com>;index=1, <sip:vm1001@pbx.example;cause=302>;index=1.1;mp=1")
    }

    func testASecondDiversionIsAChildOfTheEntryForTheCurrentTarget() throws {
        // As a first diversion left it (1001 → 1002, no answer), with the Request-URI 1002.
        let invite = try parse(Self.invite(
            uri: "sip:1002@example.com",
            extra: "History-Info: <sip:1001@example.com>;index=1,<sip:1002@example.com;cause=408>;index=1.1;mp=1\r\n"))
        XCTAssertEqual(HistoryInfo.diversionCount(of: invite), 1)
        let diverted = HistoryInfo.retarget(invite, to: try SIPURI(parsing: "sip:+441234567@example.com;user=phone"), cause: .busy)
        XCTAssertEqual(
            diverted.headers["History-Info"],
            "<sip:1001@example.com>;index=1, <sip:1002@example.com;cause=408?Reason=SIP%3Bcause%3D486>;index=1.1;mp=1, "
                + "<sip:+441234567@example.com;user=phone;cause=486>;index=1.1.1;mp=1.1")
        XCTAssertEqual(diverted.headers.lines(HistoryInfo.header).count, 1, "one line replaces the old ones")
        XCTAssertEqual(HistoryInfo.diversionCount(of: diverted), 2)
    }

    func testEntriesFromOtherProxiesCountAndBrokenOnesAreLeftOut() throws {
        let invite = try parse(Self.invite(extra:
            "History-Info: <sip:a@one.example>;index=1\r\nHistory-Info: <sip:b@two.example;cause=486>;index=1.1;mp=1\r\n"
            + "History-Info: <sip:c@three.example>;index=x.y\r\nHistory-Info: garbage\r\n"
            + "History-Info: <sip:1001@example.com;cause=302>;index=1.1.1;mp=1.1\r\n"))
        XCTAssertEqual(HistoryInfo.entries(of: invite).map(\.index), ["1", "1.1", "1.1.1"])
        XCTAssertEqual(HistoryInfo.diversionCount(of: invite), 2)
    }

    func testDiversionEntriesCountWhenThereIsNoHistoryInfo() throws {
        let invite = try parse(Self.invite(extra:
            "Diversion: <sip:2000@pbx.example>;reason=no-answer;counter=1, <sip:3000@pbx.example>;reason=user-busy\r\n"))
        XCTAssertEqual(HistoryInfo.diversionCount(of: invite), 2)
    }

    func testADiversionHeaderNamesTheTargetDivertedAway() throws {
        let invite = try parse(Self.invite(extra: "Diversion: <sip:3000@pbx.example>;reason=user-busy;counter=1\r\n"))
        let diverted = HistoryInfo.addingDiversion(
            to: invite, from: try SIPURI(parsing: "sip:1001@example.com;cause=408?Reason=x"), cause: .unreachable)
        let wire = String(decoding: SIPSerializer.serialize(diverted), as: UTF8.self)
        XCTAssertTrue(wire.contains(
            "\r\nCSeq: 1 INVITE\r\nDiversion: <sip:1001@example.com>;reason=unavailable;counter=1, <sip:3000@pbx.example>;reason=user-busy;counter=1\r\n"),
            wire)
    }

    // MARK: - Fixtures

    static func invite(uri: String = "sip:1001@example.com", extra: String) -> String {
        "INVITE \(uri) SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKhi1\r\nMax-Forwards: 70\r\n"
            + "From: <sip:2000@example.com>;tag=f\r\nTo: <sip:1001@example.com>\r\nCall-ID: hi-1\r\nCSeq: 1 INVITE\r\n"
            + extra + "Content-Length: 0\r\n\r\n"
    }

    func parse(_ text: String) throws -> SIPRequest {
        guard case .request(let request) = try SIPParser.parse(Array(text.utf8)) else { throw SIPValueError("not a request") }
        return request
    }
}
