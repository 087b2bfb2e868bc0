import Foundation
import SIPDifferential
import SIPMessage
import XCTest

/// A corpus of malformed messages, each with what Rouse must do with it: answer with a status and
/// reason, or drop it silently (RFC 3261 §8.2, §16.3, §18.1.2). A request is answered whenever
/// the answer can reach its client transaction (a usable top Via and a CSeq), even when it lacks
/// From, To or Call-ID (RFC 4475 §3.3.1); otherwise it is dropped, and an ACK is never answered.
final class SIPParserMalformedTests: XCTestCase {
    enum Outcome: Equatable {
        /// Answer with this status and reason phrase.
        case answer(Int, String)
        /// Drop silently; the error still names the problem for the log.
        case drop(Int, String)
    }

    /// A request with every mandatory line; `replace` swaps lines by prefix, `remove` drops them.
    static func invite(
        start: String = "INVITE sip:bob@example.com SIP/2.0", replace: [String: String] = [:], remove: [String] = [],
        add: [String] = [], body: String = ""
    ) -> [UInt8] {
        var lines = [
            "Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKbad1",
            "Max-Forwards: 70",
            "From: \"Alice\" <sip:alice@example.com>;tag=f1",
            "To: <sip:bob@example.com>",
            "Call-ID: bad-1@192.0.2.1",
            "CSeq: 1 INVITE",
            "Content-Length: \(body.utf8.count)",
        ]
        lines = lines.compactMap { line in
            let name = String(line.prefix { $0 != ":" })
            if remove.contains(name) { return nil }
            return replace[name].map { name + ": " + $0 } ?? line
        }
        return Array((([start] + lines + add).joined(separator: "\r\n") + "\r\n\r\n" + body).utf8)
    }

    static let corpus: [(name: String, bytes: [UInt8], outcome: Outcome)] = [
        (
            "SIP version 7", invite(start: "INVITE sip:bob@example.com SIP/7.0"),
            .answer(505, "SIP Version Not Supported")
        ),
        ("HTTP version", invite(start: "INVITE sip:bob@example.com HTTP/1.1"), .answer(400, "Malformed Request-Line")),
        (
            "two spaces after method", invite(start: "INVITE  sip:bob@example.com SIP/2.0"),
            .answer(400, "Malformed Request-Line")
        ),
        (
            "space inside Request-URI", invite(start: "INVITE sip:bob @example.com SIP/2.0"),
            .answer(400, "Malformed Request-Line")
        ),
        (
            "method not a token", invite(start: "INV<ITE sip:bob@example.com SIP/2.0"),
            .answer(400, "Malformed Request-Line")
        ),
        (
            "mailto Request-URI", invite(start: "INVITE mailto:bob@example.com SIP/2.0"),
            .answer(416, "Unsupported URI Scheme")
        ),
        ("Request-URI without host", invite(start: "INVITE sip:bob@ SIP/2.0"), .answer(400, "Malformed Request-URI")),
        (
            "Request-URI with bad IPv6", invite(start: "INVITE sip:[2001:db8::1 SIP/2.0"),
            .answer(400, "Malformed Request-URI")
        ),
        ("missing Call-ID", invite(remove: ["Call-ID"]), .answer(400, "Missing Call-ID header")),
        ("missing Via", invite(remove: ["Via"]), .drop(400, "Missing Via header")),
        ("missing From", invite(remove: ["From"]), .answer(400, "Missing From header")),
        ("missing To", invite(remove: ["To"]), .answer(400, "Missing To header")),
        ("missing CSeq", invite(remove: ["CSeq"]), .drop(400, "Missing CSeq header")),
        ("two Call-IDs", invite(add: ["Call-ID: other@192.0.2.1"]), .answer(400, "Multiple Call-ID headers")),
        (
            "Max-Forwards not a number", invite(replace: ["Max-Forwards": "seventy"]),
            .answer(400, "Malformed Max-Forwards header")
        ),
        (
            "Max-Forwards negative", invite(replace: ["Max-Forwards": "-1"]),
            .answer(400, "Malformed Max-Forwards header")
        ),
        ("CSeq method differs", invite(replace: ["CSeq": "1 REGISTER"]), .answer(400, "CSeq method does not match")),
        ("CSeq without number", invite(replace: ["CSeq": "INVITE"]), .answer(400, "Malformed CSeq header")),
        ("CSeq number too big", invite(replace: ["CSeq": "4294967296 INVITE"]), .answer(400, "Malformed CSeq header")),
        (
            "Via without host", invite(replace: ["Via": "SIP/2.0/UDP ;branch=z9hG4bK1"]),
            .drop(400, "Malformed Via header")
        ),
        (
            "Via of another protocol", invite(replace: ["Via": "HTTP/1.1/TCP 192.0.2.1"]),
            .drop(400, "Malformed Via header")
        ),
        (
            "From display name unterminated", invite(replace: ["From": "\"Alice <sip:alice@example.com>;tag=1"]),
            .answer(400, "Malformed From header")
        ),
        (
            "To with junk after URI", invite(replace: ["To": "<sip:bob@example.com> bob"]),
            .answer(400, "Malformed To header")
        ),
        ("missing Via", invite(remove: ["Via"], add: ["To: <sip:bob@example.com>"]), .drop(400, "Missing Via header")),
        (
            "a second Via line malformed", invite(add: ["Via: SIP/2.0/UDP ;branch=z9hG4bK2"]),
            .answer(400, "Malformed Via header")
        ),
        (
            "empty elements in Via (RFC 4475 §3.1.2.1)", invite(replace: ["Via": "SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKbad1;;,;,,"]),
            .answer(400, "Malformed Via header")
        ),
        ("ACK without CSeq is never answered", invite(start: "ACK sip:bob@example.com SIP/2.0", remove: ["CSeq"]), .drop(400, "Missing CSeq header")),
        (
            "ACK with an overflowing CSeq is never answered",
            invite(start: "ACK sip:bob@example.com SIP/2.0", replace: ["CSeq": "99999999999999999999 ACK"]), .drop(400, "Malformed CSeq header")
        ),
        (
            "headers in the Request-URI (RFC 4475 §3.1.2.11)",
            invite(start: "INVITE sip:bob@example.com?Route=%3Csip:example.com%3E SIP/2.0"), .answer(400, "Malformed Request-URI")
        ),
        (
            "space inside <> (RFC 4475 §3.1.2.14)", invite(replace: ["To": "\"Watson, Thomas\" < sip:t.watson@example.org >"]),
            .answer(400, "Malformed To header")
        ),
        (
            "bare NUL inside a quoted string", invite(add: ["Subject: \"Al\u{0}ice\""]),
            .answer(400, "NUL byte in header")
        ),
        (
            "Content-Length with a space inside", invite(replace: ["Content-Length": "1 2"], body: "v=0\r\n\r\nabcd"),
            .answer(400, "Malformed Content-Length header")
        ),
        (
            "overlarge Content-Length", invite(replace: ["Content-Length": "99999999999999999999999"], body: "v=0\r\n"),
            .answer(400, "Content-Length exceeds body")
        ),
        ("Call-ID with a space", invite(replace: ["Call-ID": "a b"]), .answer(400, "Malformed Call-ID header")),
        ("Expires not a number", invite(add: ["Expires: soon"]), .answer(400, "Malformed Expires header")),
        (
            "Content-Length beyond body", invite(replace: ["Content-Length": "10"], body: "v=0\r\n"),
            .answer(400, "Content-Length exceeds body")
        ),
        (
            "Content-Length not a number", invite(replace: ["Content-Length": "ten"]),
            .answer(400, "Malformed Content-Length header")
        ),
        (
            "Content-Length negative", invite(replace: ["Content-Length": "-5"]),
            .answer(400, "Malformed Content-Length header")
        ),
        ("two Content-Lengths", invite(add: ["l: 0"]), .answer(400, "Multiple Content-Length headers")),
        ("NUL in a header value", invite(add: ["Subject: hi\u{0}there"]), .answer(400, "NUL byte in header")),
        ("header line without colon", invite(add: ["Subject hello"]), .answer(400, "Malformed header line")),
        ("header name not a token", invite(add: ["Sub ject: hello"]), .answer(400, "Malformed header line")),
        ("bare LF inside headers", invite(add: ["Subject: a\nb"]), .answer(400, "Malformed header line ending")),
        ("no blank line after headers", Array(invite().dropLast(2)), .answer(400, "Missing blank line after headers")),
        ("ACK is never answered",
            invite(start: "ACK sip:bob@example.com SIP/2.0", replace: ["CSeq": "1 ACK", "Max-Forwards": "x"]),
            .drop(400, "Malformed Max-Forwards header")),
        (
            "bare LF line ends", Array("OPTIONS sip:a@b SIP/2.0\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\n\n".utf8),
            .drop(400, "Malformed start line")
        ),
        ("only line ends", Array("\r\n\r\n\r\n".utf8), .drop(400, "Empty message")),
        ("binary garbage", [0x16, 0x03, 0x01, 0x00, 0xA5, 0x01, 0x00], .drop(400, "Malformed start line")),
        (
            "response status 99", Array("SIP/2.0 099 Odd\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\n\r\n".utf8),
            .drop(400, "Malformed Status-Line")
        ),
        (
            "response status 700", Array("SIP/2.0 700 Odd\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\n\r\n".utf8),
            .drop(400, "Malformed Status-Line")
        ),
        (
            "response of SIP/3.0", Array("SIP/3.0 200 OK\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\n\r\n".utf8),
            .drop(400, "Malformed Status-Line")
        ),
        ("response without CSeq", Array(
            ("SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@b>;tag=1\r\n"
                + "To: <sip:c@d>\r\nCall-ID: x\r\n\r\n").utf8),
            .drop(400, "Missing CSeq header")),
        ("response with body short of Content-Length", Array(
            ("SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@b>;tag=1\r\n"
                + "To: <sip:c@d>\r\nCall-ID: x\r\nCSeq: 1 INVITE\r\nContent-Length: 4\r\n\r\nab").utf8),
            .drop(400, "Content-Length exceeds body")),
    ]

    func testEveryMalformedMessageGetsItsExpectedOutcome() throws {
        XCTAssertGreaterThanOrEqual(Self.corpus.count, 20)
        for (name, bytes, expected) in Self.corpus {
            guard let error = parseError(bytes) else {
                XCTFail("\(name): parsed")
                continue
            }
            let answer = error.response(toTag: "t")
            let outcome: Outcome =
                answer == nil ? .drop(error.statusCode, error.reason) : .answer(error.statusCode, error.reason)
            XCTAssertEqual(outcome, expected, name)
            if let answer {
                XCTAssertEqual(answer.statusCode, error.statusCode, name)
                XCTAssertEqual(answer.reasonPhrase, error.reason, name)
                XCTAssertEqual(answer.topVia?.branch, "z9hG4bKbad1", name)
                // Each line the answer copies is the request's first, as received; To gains a tag.
                for key in [SIPHeaderName.from, .callID, .cseq] {
                    XCTAssertEqual(answer.headers[key], Self.firstValue(key, in: bytes), "\(name): \(key)")
                }
                let to = Self.firstValue(.to, in: bytes)
                let taggable = to.flatMap { try? SIPNameAddress(parsing: $0) }.map { $0.tag == nil } ?? false
                XCTAssertEqual(answer.headers[.to], taggable ? to.map { $0 + ";tag=t" } : to, name)
                let wireAnswer = SIPSerializer.serialize(answer)
                XCTAssertEqual(try frame(wireAnswer, chunkSizes: [1]), [.message(wireAnswer)], name)
                switch Result(catching: { () throws(SIPParseError) in try SIPParser.parse(wireAnswer) }) {
                case .success(let again):
                    XCTAssertEqual(SIPSerializer.serialize(again), wireAnswer, name)
                case .failure(let own):
                    // Only a line the request itself had wrong (or lacked) keeps the answer from parsing.
                    XCTAssertTrue(SIPDifferentialCheck.isAboutCopiedLine(own), "\(name): the answer does not parse: \(own)")
                }
            }
        }
    }

    /// The value of the first header line named `key` in raw message bytes.
    static func firstValue(_ key: SIPHeaderName, in bytes: [UInt8]) -> String? {
        let head = String(decoding: bytes, as: UTF8.self).components(separatedBy: "\r\n\r\n")[0]
        for line in head.components(separatedBy: "\r\n").dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            if SIPHeaderName(line[..<colon].trimmingCharacters(in: .whitespaces)) == key {
                return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
        }
        return nil
    }

    /// Max-Forwards above 255 is taken as absent (RFC 4475 §3.1.2.4): the request is served, and a
    /// proxy sends 70 on; leading zeros are the value.
    func testOverlargeMaxForwardsIsTakenAsAbsent() throws {
        for value in ["300", "256", "99999999999999999999999999"] {
            let message = try request(parseEveryWay(Self.invite(replace: ["Max-Forwards": value])))
            XCTAssertNil(message.maxForwards, value)
        }
        let zeros = try request(parseEveryWay(Self.invite(replace: ["Max-Forwards": String(repeating: "0", count: 40) + "70"])))
        XCTAssertEqual(zeros.maxForwards, 70)
        XCTAssertEqual(try request(parseEveryWay(Self.invite(replace: ["Max-Forwards": "0255"]))).maxForwards, 255)
    }

    /// The same bytes arriving over a stream give the same outcome as the datagram, whenever the
    /// framer can cut them as one message.
    func testStreamedMalformedMessagesGetTheSameOutcome() throws {
        for (name, bytes, _) in Self.corpus {
            let events: [SIPStreamFramer.Event]
            do {
                events = try frame(bytes, chunkSizes: [1])
            } catch {
                continue  // a framing error closes the connection
            }
            guard events.count == 1, case .message(let framed) = events[0], framed == bytes else { continue }
            XCTAssertEqual(parseError(framed), parseError(bytes), name)
        }
    }

    /// Contact is not the parser's to judge: a proxy forwards it untouched (RFC 3261 §16.6), and the
    /// registrar sees `contacts == nil` and answers 400 itself.
    func testMalformedContactParsesButHasNoContacts() throws {
        for contact in ["<sip:alice@[2001:db8::1>", "\"Alice <sip:alice@192.0.2.1>", "<sip:a@b>, junk<"] {
            let message = try request(SIPParser.parse(Self.invite(add: ["Contact: " + contact])))
            XCTAssertNil(message.contacts, contact)
            XCTAssertEqual(message.headers[.contact], contact)
        }
    }

    func testLimitsOnHeaderCountLineLengthAndMessageSize() throws {
        let limits = SIPParserLimits(maxMessageBytes: 1_000, maxHeaderCount: 10, maxLineBytes: 120)
        let manyHeaders = Self.invite(add: (1...5).map { "X-H\($0): v" })
        let tooMany = parseError(manyHeaders, limits: limits)
        XCTAssertEqual(tooMany?.statusCode, 513)
        XCTAssertEqual(tooMany?.reason, "Too many header lines")
        XCTAssertNotNil(tooMany?.response())

        let longLine = parseError(Self.invite(add: ["Subject: " + String(repeating: "x", count: 200)]), limits: limits)
        XCTAssertEqual(longLine?.statusCode, 513)
        XCTAssertEqual(longLine?.reason, "Header line too long")

        let folded = parseError(
            Self.invite(add: ["Subject: " + String(repeating: "x", count: 80), " " + String(repeating: "y", count: 80)]),
            limits: limits)
        XCTAssertEqual(folded?.reason, "Header line too long", "a folded line counts as one")

        let longURI = parseError(
            Self.invite(start: "INVITE sip:" + String(repeating: "b", count: 200) + "@example.com SIP/2.0"), limits: limits)
        XCTAssertEqual(longURI?.statusCode, 414)

        let big = parseError(Self.invite(body: String(repeating: "z", count: 1_200)), limits: limits)
        XCTAssertEqual(big?.statusCode, 513)
        XCTAssertEqual(big?.reason, "Message Too Large")

        // Exactly at the header limit is fine, and Content-Length does not count against it.
        let atLimit = Self.invite(add: ["X-H1: v", "X-H2: v", "X-H3: v"])
        XCTAssertNoThrow(try SIPParser.parse(atLimit, limits: limits))
    }
}
