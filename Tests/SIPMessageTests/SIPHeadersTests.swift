import SIPMessage
import XCTest

/// Editing header lines in place: the top Via a server annotates (RFC 3261 §18.2.1) and the
/// element a proxy removes (§16.7 step 3).
final class SIPHeadersTests: XCTestCase {
    func testReplacingTheFirstElementKeepsTheLineItsPlaceItsSpellingAndTheOtherElements() {
        var headers: SIPHeaders = [
            ("Max-Forwards", "70"), ("v", "SIP/2.0/UDP a.example;branch=z9hG4bK1 ,  SIP/2.0/TCP b.example;branch=z9hG4bK2"),
            ("Via", "SIP/2.0/UDP c.example;branch=z9hG4bK3"),
        ]
        headers.replaceFirstValue(.via, with: "SIP/2.0/UDP a.example;branch=z9hG4bK1;received=192.0.2.1")
        XCTAssertEqual(headers.fields.map(\.name), ["Max-Forwards", "v", "Via"])
        XCTAssertEqual(
            headers.lines(.via),
            ["SIP/2.0/UDP a.example;branch=z9hG4bK1;received=192.0.2.1, SIP/2.0/TCP b.example;branch=z9hG4bK2",
             "SIP/2.0/UDP c.example;branch=z9hG4bK3"])
        XCTAssertEqual(headers.values(.via).count, 3)
    }

    func testReplacingALineOfOneElementAndAQuotedCommaThatIsNoSeparator() {
        var headers: SIPHeaders = [("Via", "SIP/2.0/UDP a.example;branch=z9hG4bK1"), ("Contact", "\"Doe, J\" <sip:j@example.com>, <sip:k@example.com>")]
        headers.replaceFirstValue(.via, with: "SIP/2.0/UDP a.example;branch=z9hG4bK1;rport=5062")
        XCTAssertEqual(headers.lines(.via), ["SIP/2.0/UDP a.example;branch=z9hG4bK1;rport=5062"])
        headers.replaceFirstValue(.contact, with: "<sip:x@example.com>")
        XCTAssertEqual(headers.lines(.contact), ["<sip:x@example.com>, <sip:k@example.com>"])
    }

    func testReplacingWhenThereIsNoLineAddsOne() {
        var headers: SIPHeaders = [("From", "<sip:a@example.com>;tag=1")]
        headers.replaceFirstValue(.via, with: "SIP/2.0/UDP a.example;branch=z9hG4bK1")
        XCTAssertEqual(headers.fields.map(\.name), ["From", "Via"])
    }

    /// What the serializer writes of a Via is what the parser reads back: the rewritten top Via
    /// is the one the transaction layer matches on without parsing it again.
    func testAViaWrittenOutParsesBackEqual() throws {
        var via = try SIPVia(parsing: "SIP/2.0/udp [2001:db8::1]:5060;branch=z9hG4bKx;rport;lr")
        via.parameters.set("received", "2001:db8::9")
        via.parameters.set("rport", "40000")
        XCTAssertEqual(via.description, "SIP/2.0/UDP [2001:db8::1]:5060;branch=z9hG4bKx;rport=40000;lr;received=2001:db8::9")
        XCTAssertEqual(try SIPVia(parsing: via.description), via)
        let bare = SIPVia(transport: "tcp", host: "b.example")
        XCTAssertEqual(bare.description, "SIP/2.0/TCP b.example")
        XCTAssertEqual(try SIPVia(parsing: bare.description), bare)
    }
}
