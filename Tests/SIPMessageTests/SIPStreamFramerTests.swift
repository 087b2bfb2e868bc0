import SIPMessage
import XCTest

/// The stream framer: several messages per read, keep-alives between them, and the framing
/// errors after which the connection is closed.
final class SIPStreamFramerTests: XCTestCase {
    static let options = wire(
        """
        OPTIONS sip:sip.example.com SIP/2.0
        Via: SIP/2.0/TCP 192.0.2.9:50000;branch=z9hG4bKo1
        Max-Forwards: 70
        From: <sip:monitor@example.com>;tag=o
        To: <sip:sip.example.com>
        Call-ID: o1
        CSeq: 1 OPTIONS
        Content-Length: 0


        """)
    static let message = wire(
        """
        MESSAGE sip:bob@example.com SIP/2.0
        Via: SIP/2.0/TCP 192.0.2.9:50000;branch=z9hG4bKm9
        Max-Forwards: 70
        From: <sip:alice@example.com>;tag=m
        To: <sip:bob@example.com>
        Call-ID: m9
        CSeq: 2 MESSAGE
        l: 12

        Hello
        Bob

        """)

    func testSeveralMessagesAndKeepAlivesInAnyChunking() throws {
        let crlf: [UInt8] = [0x0D, 0x0A]
        let stream = crlf + crlf + Self.options + crlf + crlf + Self.message + crlf + Self.options + crlf + crlf
        let expected: [SIPStreamFramer.Event] = [
            .keepAlivePing, .message(Self.options), .keepAlivePing, .message(Self.message), .message(Self.options),
            .keepAlivePing,
        ]
        XCTAssertEqual(try frame(stream, chunkSizes: [stream.count]), expected, "one read")
        XCTAssertEqual(try frame(stream, chunkSizes: [1]), expected, "byte by byte")
        for seed in 1...20 {
            XCTAssertEqual(try frame(stream, chunkSizes: randomChunkSizes(seed: UInt64(seed))), expected, "seed \(seed)")
        }
        let body = try request(SIPParser.parse(Self.message)).body
        XCTAssertEqual(String(decoding: body, as: UTF8.self), "Hello\r\nBob\r\n")
    }

    /// Regression: a ping split as CRLF | CR | LF across reads was taken for a pong and a stray CR.
    func testPingSplitAcrossReadsIsStillAPing() throws {
        var framer = SIPStreamFramer()
        var events: [SIPStreamFramer.Event] = []
        for piece in [[0x0D, 0x0A], [0x0D], [0x0A]] as [[UInt8]] {
            framer.append(piece)
            while let event = try framer.next() { events.append(event) }
        }
        XCTAssertEqual(events, [.keepAlivePing])
        XCTAssertEqual(framer.bufferedByteCount, 0)
    }

    func testAPongBeforeAMessageIsSkipped() throws {
        let stream = [0x0D, 0x0A] + Self.options
        XCTAssertEqual(try frame(stream, chunkSizes: [1]), [.message(Self.options)])
    }

    func testFoldedContentLengthIsRead() throws {
        let folded = wire(
            """
            MESSAGE sip:bob@example.com SIP/2.0
            Via: SIP/2.0/TCP 192.0.2.9;branch=z9hG4bKf
            From: <sip:alice@example.com>;tag=m
            To: <sip:bob@example.com>
            Call-ID: f1
            CSeq: 2 MESSAGE
            Content-Length:
              3

            abc
            """)
        let events = try frame(folded + Self.options, chunkSizes: [7])
        XCTAssertEqual(events, [.message(folded), .message(Self.options)])
        XCTAssertEqual(try request(SIPParser.parse(folded)).body, Array("abc".utf8))
    }

    func testFramingErrorsAreFinal() {
        var framer = SIPStreamFramer()
        framer.append(Array("INVITE sip:a@b SIP/2.0\r\nContent-Length: 1x\r\n\r\n".utf8))
        XCTAssertThrowsError(try framer.next()) { XCTAssertEqual($0 as? SIPStreamFramer.FramingError, .badContentLength) }
        framer.append(Self.options)
        XCTAssertThrowsError(try framer.next(), "after an error the flow must be closed")

        var conflicting = SIPStreamFramer()
        conflicting.append(Array("INVITE sip:a@b SIP/2.0\r\nl: 1\r\nContent-Length: 2\r\n\r\nab".utf8))
        XCTAssertThrowsError(try conflicting.next()) {
            XCTAssertEqual($0 as? SIPStreamFramer.FramingError, .badContentLength)
        }

        let limits = SIPParserLimits(maxMessageBytes: 300)
        var huge = SIPStreamFramer(limits: limits)
        huge.append(Array("INVITE sip:a@b SIP/2.0\r\nContent-Length: 5000\r\n\r\n".utf8))
        XCTAssertThrowsError(try huge.next()) { XCTAssertEqual($0 as? SIPStreamFramer.FramingError, .messageTooLarge) }

        var endless = SIPStreamFramer(limits: limits)
        XCTAssertThrowsError(
            try {
                for _ in 0..<100 {
                    endless.append(Array("X-Header: no end in sight\r\n".utf8))
                    _ = try endless.next()
                }
            }()
        ) { XCTAssertEqual($0 as? SIPStreamFramer.FramingError, .messageTooLarge) }
    }

    /// The framer reads Content-Length as the parser does (RFC 3261 §20.14): leading zeros are the
    /// value, white space only around the digits, a folded value read across its lines; what one
    /// refuses the other refuses too.
    func testContentLengthIsReadAsTheParserReadsIt() throws {
        func message(_ value: String, _ body: String) -> [UInt8] {
            Array("MESSAGE sip:bob@example.com SIP/2.0\r\nVia: SIP/2.0/TCP 192.0.2.9;branch=z9hG4bKcl\r\nFrom: <sip:a@example.com>;tag=1\r\nTo: <sip:bob@example.com>\r\nCall-ID: cl\r\nCSeq: 1 MESSAGE\r\nContent-Length: \(value)\r\n\r\n\(body)".utf8)
        }
        for value in [String(repeating: "0", count: 40) + "5", "\r\n 5", "5 ", "\t5"] {
            let bytes = message(value, "hello")
            XCTAssertEqual(try frame(bytes, chunkSizes: [1]), [.message(bytes)], value.debugDescription)
            XCTAssertEqual(try request(SIPParser.parse(bytes)).body, Array("hello".utf8), value.debugDescription)
        }
        for value in ["1 2", "1\r\n 2", "+5", "5a", "-5", "0x5"] {
            let bytes = message(value, "hello world!")
            XCTAssertThrowsError(try frame(bytes, chunkSizes: [bytes.count]), value.debugDescription) {
                XCTAssertEqual($0 as? SIPStreamFramer.FramingError, .badContentLength, value.debugDescription)
            }
            XCTAssertEqual(parseError(bytes)?.reason, "Malformed Content-Length header", value.debugDescription)
        }
        let overlarge = message(String(repeating: "9", count: 30), "hello")
        XCTAssertThrowsError(try frame(overlarge, chunkSizes: [1])) {
            XCTAssertEqual($0 as? SIPStreamFramer.FramingError, .messageTooLarge)
        }
        XCTAssertEqual(parseError(overlarge)?.reason, "Content-Length exceeds body")
        // A line that is no header line (no colon after the name) is no Content-Length to either.
        let notAHeader = Array("OPTIONS sip:a@b SIP/2.0\r\nContent-Length 5\r\n\r\n".utf8)
        XCTAssertEqual(try frame(notAHeader, chunkSizes: [1]), [.message(notAHeader)])
        XCTAssertEqual(parseError(notAHeader)?.reason, "Malformed header line")
    }

    func testPartialMessageWaitsForMoreBytes() throws {
        var framer = SIPStreamFramer()
        framer.append(Self.message.dropLast(3))
        XCTAssertNil(try framer.next())
        XCTAssertEqual(framer.bufferedByteCount, Self.message.count - 3)
        framer.append(Self.message.suffix(3))
        XCTAssertEqual(try framer.next(), .message(Self.message))
        XCTAssertNil(try framer.next())
        XCTAssertEqual(framer.bufferedByteCount, 0)
    }
}
