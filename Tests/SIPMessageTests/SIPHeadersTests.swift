import SIPMessage
import XCTest

/// Editing header lines in place: the top Via a server annotates (RFC 3261 §18.2.1) and the
/// element a proxy removes (§16.7 step 3).
final class SIPHeadersTests: XCTestCase {
    func testTheSourceIsNotedInTheFirstElementKeepingTheLineItsPlaceItsSpellingAndTheOtherElements() throws {
        var headers: SIPHeaders = [
            ("Max-Forwards", "70"), ("v", "SIP/2.0/udp a.example;branch=z9hG4bK1 ,  SIP/2.0/TCP b.example;branch=z9hG4bK2"),
            ("Via", "SIP/2.0/UDP c.example;branch=z9hG4bK3"),
        ]
        headers.noteSourceInTopVia(received: "192.0.2.1", rport: nil)
        XCTAssertEqual(headers.fields.map(\.name), ["Max-Forwards", "v", "Via"])
        XCTAssertEqual(
            headers.lines(.via),
            ["SIP/2.0/udp a.example;branch=z9hG4bK1;received=192.0.2.1, SIP/2.0/TCP b.example;branch=z9hG4bK2",
             "SIP/2.0/UDP c.example;branch=z9hG4bK3"])
        XCTAssertEqual(headers.values(.via).count, 3)
        XCTAssertEqual(try SIPVia(parsing: headers.values(.via)[0]).received, "192.0.2.1")
    }

    /// RFC 3581 §4: a valueless rport gets the source port where it stands; a received already
    /// there (a spoofed one) is replaced in place; a quoted `;` is no parameter boundary.
    func testRportIsFilledInPlaceAndAnEarlierReceivedIsReplaced() throws {
        var headers: SIPHeaders = [("Via", "SIP/2.0/UDP a.example:5062; rport ;received=10.9.9.9;x=\"a;rport\";branch=z9hG4bK1")]
        headers.noteSourceInTopVia(received: "198.51.100.7", rport: 40000)
        XCTAssertEqual(headers.lines(.via), ["SIP/2.0/UDP a.example:5062;rport=40000;received=198.51.100.7;x=\"a;rport\";branch=z9hG4bK1"])
        let via = try SIPVia(parsing: headers.values(.via)[0])
        XCTAssertEqual(via.parameters["rport"], "40000")
        XCTAssertEqual(via.parameters["x"], "\"a;rport\"")
        XCTAssertEqual(via.branch, "z9hG4bK1")
    }

    func testAnIPv6SentByAndAViaWithoutParameters() {
        var headers: SIPHeaders = [("Via", "SIP/2.0/TCP [2001:db8::1]:5060"), ("Contact", "<sip:x@example.com>")]
        headers.noteSourceInTopVia(received: "2001:db8::9", rport: nil)
        XCTAssertEqual(headers.lines(.via), ["SIP/2.0/TCP [2001:db8::1]:5060;received=2001:db8::9"])
        var none: SIPHeaders = [("From", "<sip:a@example.com>;tag=1")]
        none.noteSourceInTopVia(received: "192.0.2.1", rport: 5060)
        XCTAssertEqual(none.fields.map(\.name), ["From"])
    }

    /// Nothing stored can add a line: CR, LF and NUL in a value are written as spaces wherever
    /// they stand in a long value (the serializer looks at 16 bytes at a time), a tab is kept.
    func testTheSerializerWritesNoLineBreakOrNULOfAValue() {
        let long = String(repeating: "abcdefgh", count: 5)
        for (value, written) in [
            (long + "\r\nX-Injected: 1", long + "  X-Injected: 1"), ("\t" + long + "\u{0}" + long, "\t" + long + " " + long),
            (long + "\n", long + " "), (long + "\t" + long, long + "\t" + long), (long, long),
        ] {
            let response = SIPResponse(statusCode: 200, headers: [("Subject", value)])
            let text = String(decoding: SIPSerializer.serialize(response), as: UTF8.self)
            XCTAssertTrue(text.contains("\r\nSubject: \(written)\r\n"), text)
            XCTAssertFalse(text.contains("\r\nX-Injected"))
        }
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

    /// A parsed line keeps its value as received bytes: read as text, as bytes, compared and
    /// hashed, it is the same as a line given as text; changing it makes it text.
    func testAReceivedValueReadsComparesAndChangesAsAGivenOne() throws {
        let bytes = wire("""
            OPTIONS sip:rouse.example SIP/2.0
            Via: SIP/2.0/UDP a.example;branch=z9hG4bK1
            From: <sip:a@example.com>;tag=1
            To: <sip:rouse.example>
            Call-ID: c1@a.example
            CSeq: 7 OPTIONS
            Subject:   lunch  \u{20}
            Content-Length: 0


            """)
        guard case .request(var request) = try SIPParser.parse(bytes) else { return XCTFail("not a request") }
        let subject = try XCTUnwrap(request.headers.first(.init("subject")))
        XCTAssertEqual(subject.value, "lunch")
        XCTAssertEqual(subject.withValueBytes { Array($0) }, Array("lunch".utf8))
        XCTAssertEqual(subject, SIPHeader(name: "Subject", value: "lunch"))
        XCTAssertEqual(subject.hashValue, SIPHeader(name: "Subject", value: "lunch").hashValue)
        XCTAssertNotEqual(subject, SIPHeader(name: "Subject", value: "lunch!"))
        XCTAssertEqual(request.cseq, SIPCSeq(7, .options))
        XCTAssertEqual(request.from?.tag, "1")

        request.headers.set(.init("subject"), "dinner")
        XCTAssertEqual(request.headers[.init("subject")], "dinner")
        XCTAssertEqual(String(decoding: SIPSerializer.serialize(request), as: UTF8.self).contains("Subject: dinner\r\n"), true)
    }

    /// A response copies its request's lines as received, byte for byte, under the spellings this
    /// stack writes (RFC 3261 §8.2.6.2), and adds the To tag only where there is none.
    func testAResponseCopiesTheRequestsLinesAsReceived() throws {
        let bytes = wire("""
            REGISTER sip:rouse.example SIP/2.0
            v: SIP/2.0/UDP a.example;branch=z9hG4bK1, SIP/2.0/UDP b.example;branch=z9hG4bK2
            f: "A, B" <sip:a@example.com>;tag=1
            t: <sip:a@example.com>
            i: c1@a.example
            CSEQ: 7 REGISTER
            l: 0


            """)
        guard case .request(let request) = try SIPParser.parse(bytes) else { return XCTFail("not a request") }
        let response = SIPResponse(replyingTo: request, statusCode: 200, toTag: "xyz")
        XCTAssertEqual(
            String(decoding: SIPSerializer.serialize(response), as: UTF8.self),
            "SIP/2.0 200 OK\r\n"
                + "v: SIP/2.0/UDP a.example;branch=z9hG4bK1, SIP/2.0/UDP b.example;branch=z9hG4bK2\r\n"
                + "From: \"A, B\" <sip:a@example.com>;tag=1\r\n"
                + "To: <sip:a@example.com>;tag=xyz\r\n"
                + "Call-ID: c1@a.example\r\n"
                + "CSeq: 7 REGISTER\r\n"
                + "Content-Length: 0\r\n\r\n")
    }

    /// What the parser kept of the lines every message has reads as parsing the lines again
    /// would: before and after the source is noted in the top Via, after a line is added, and
    /// after any other change; headers compare and hash by their lines alone.
    func testTheLinesTheParserKeptReadAsTheLinesThemselvesThroughEveryChange() throws {
        let bytes = wire("""
            REGISTER sip:rouse.example SIP/2.0
            Max-Forwards: 70
            v: SIP/2.0/UDP a.example:5062;rport;branch=z9hG4bK1 , SIP/2.0/UDP b.example;branch=z9hG4bK2
            f: "A" <sip:a@example.com>;TAG=f1
            t: <sip:a@example.com>
            i: c1@a.example
            CSeq: 7 REGISTER
            l: 0


            """)
        guard case .request(var request) = try SIPParser.parse(bytes) else { return XCTFail("not a request") }
        func assertAsParsedAgain(_ request: SIPRequest, _ note: String) throws {
            let built = SIPRequest(method: request.method, uri: request.uri, headers: SIPHeaders(request.headers.fields))
            XCTAssertEqual(request.headers, built.headers, note)
            XCTAssertEqual(request.headers.hashValue, built.headers.hashValue, note)
            XCTAssertEqual(request.topVia, built.topVia, note)
            XCTAssertEqual(request.to, built.to, note)
            XCTAssertEqual(request.from, built.from, note)
            XCTAssertEqual(request.cseq, built.cseq, note)
            XCTAssertEqual(request.callID, built.callID, note)
            XCTAssertEqual(request.toTag, built.to?.tag, note)
            XCTAssertEqual(request.fromTag, built.from?.tag, note)
            XCTAssertEqual(built.toTag, built.to?.tag, note)
            XCTAssertEqual(built.fromTag, built.from?.tag, note)
            let response = SIPResponse(replyingTo: request, statusCode: 200, toTag: "x1")
            XCTAssertEqual(response, SIPResponse(replyingTo: built, statusCode: 200, toTag: "x1"), note)
        }
        XCTAssertEqual(request.topVia?.host, "a.example")
        XCTAssertEqual(request.fromTag, "f1")
        XCTAssertNil(request.toTag)
        XCTAssertEqual(request.cseq, SIPCSeq(7, .register))
        try assertAsParsedAgain(request, "as parsed")

        request.headers.noteSourceInTopVia(received: "192.0.2.1", rport: 40000)
        XCTAssertEqual(request.topVia?.received, "192.0.2.1")
        XCTAssertEqual(request.topVia?.rport, .some(40000))
        try assertAsParsedAgain(request, "source noted")
        request.headers.noteSourceInTopVia(received: "192.0.2.2", rport: nil)
        XCTAssertEqual(request.headers.lines(.via).first?.hasPrefix("SIP/2.0/UDP a.example:5062;rport=40000;branch=z9hG4bK1;received=192.0.2.2, SIP/2.0/UDP b.example"), true)
        try assertAsParsedAgain(request, "source noted twice")

        request.headers.add(.to, "<sip:b@example.com>;tag=t2")
        XCTAssertEqual(request.to?.uri.user, "a")
        try assertAsParsedAgain(request, "a line added")

        request.headers.set(.to, "<sip:c@example.com>;tag=t3")
        XCTAssertEqual(request.toTag, "t3")
        try assertAsParsedAgain(request, "To replaced")

        request.headers.removeFirstValue(.via)
        XCTAssertEqual(request.topVia?.host, "b.example")
        try assertAsParsedAgain(request, "top Via removed")

        var headers = request.headers
        headers.add(.from, "<sip:z@example.com>;tag=z")
        headers.prepend(.via, "SIP/2.0/TCP p.example;branch=z9hG4bK3")
        request.headers = headers
        XCTAssertEqual(request.topVia?.host, "p.example")
        try assertAsParsedAgain(request, "a Via prepended")
        request.headers.remove(.cseq)
        XCTAssertNil(request.cseq)
        try assertAsParsedAgain(request, "CSeq removed")
    }

    /// The tags read off the lines' bytes are those of the parsed addresses: any case of `tag`,
    /// none for a valueless one, and none for a malformed address.
    func testTagsReadOffTheLinesAreThoseOfTheParsedAddresses() {
        for (from, tag) in [
            ("<sip:a@example.com>;Tag=a1;tag=a2", "a1"), ("sip:a@example.com;tag=b", "b"), ("\"x;tag=no\" <sip:a@example.com>", nil),
            ("<sip:a@example.com;tag=uri>", nil), ("<sip:a@example.com>;tag", nil), ("<sip:a@example.com", nil),
        ] as [(String, String?)] {
            let request = SIPRequest(method: .options, uri: SIPURI(host: "example.com"), headers: [("From", from), ("To", from)])
            XCTAssertEqual(request.fromTag, tag, from)
            XCTAssertEqual(request.toTag, tag, from)
            XCTAssertEqual(request.fromTag, request.from?.tag, from)
        }
    }
}
