import Foundation
import SIPDifferential
import SIPMessage
import XCTest

/// The RFC 4475 torture messages, the RFC 5118 IPv6 cases and Rouse's own cases from issue 16, as
/// the literal bytes in Tests/Fuzz/sip-differential-corpus (the differential fuzz harness's seed
/// corpus): each valid one parses, as a datagram and through the stream framer fed whole and one
/// byte at a time; each invalid one gets its answer or is dropped, the same over both.
final class SIPTortureTests: XCTestCase {
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz")

    static func bytes(_ name: String) throws -> [UInt8] {
        Array(try Data(contentsOf: corpus.appendingPathComponent("sip-differential-corpus/\(name).sip")))
    }

    /// What the stream framer does with an invalid message that a datagram answers.
    enum Stream: Equatable {
        /// Frames it as one message, which parses to the same error.
        case sameError
        /// Waits for the body Content-Length promises (the idle timeout closes the connection).
        case waits
        /// Cannot frame it: the connection is closed.
        case closes(SIPStreamFramer.FramingError)
    }

    /// Invalid messages: the status and reason, whether it is answered, and what a stream does.
    static let invalid: [(name: String, status: Int, reason: String, answered: Bool, stream: Stream)] = [
        ("rfc4475-3.1.2.1-badinv01", 400, "Malformed Via header", true, .sameError),
        ("rfc4475-3.1.2.2-clerr", 400, "Content-Length exceeds body", true, .waits),
        ("rfc4475-3.1.2.3-ncl", 400, "Malformed Content-Length header", true, .closes(.badContentLength)),
        ("rfc4475-3.1.2.4-scalar02", 400, "Malformed CSeq header", true, .sameError),
        ("rfc4475-3.1.2.5-scalarlg", 400, "Malformed CSeq header", false, .sameError),
        ("rfc4475-3.1.2.6-quotbal", 400, "Malformed To header", true, .sameError),
        ("rfc4475-3.1.2.7-ltgtruri", 400, "Malformed Request-URI", true, .sameError),
        ("rfc4475-3.1.2.8-lwsruri", 400, "Malformed Request-Line", true, .sameError),
        ("rfc4475-3.1.2.9-lwsstart", 400, "Malformed Request-Line", true, .sameError),
        ("rfc4475-3.1.2.10-trws", 400, "Malformed Request-Line", true, .sameError),
        ("rfc4475-3.1.2.11-escruri", 400, "Malformed Request-URI", true, .sameError),
        ("rfc4475-3.1.2.14-badaspec", 400, "Malformed To header", true, .sameError),
        ("rfc4475-3.1.2.15-baddn", 400, "Malformed From header", true, .sameError),
        ("rfc4475-3.1.2.16-badvers", 505, "SIP Version Not Supported", true, .sameError),
        ("rfc4475-3.1.2.17-mismatch01", 400, "CSeq method does not match", true, .sameError),
        ("rfc4475-3.1.2.18-mismatch02", 400, "CSeq method does not match", true, .sameError),
        ("rfc4475-3.1.2.19-bigcode", 400, "Malformed Status-Line", false, .sameError),
        ("rfc4475-3.3.1-insuf", 400, "Missing From header", true, .sameError),
        ("rfc4475-3.3.2-unkscm", 416, "Unsupported URI Scheme", true, .sameError),
        ("rfc4475-3.3.3-novelsc", 416, "Unsupported URI Scheme", true, .sameError),
        // A registrar refuses an AOR that is no SIP URI (RFC 4475 §3.3.4); Rouse's parser does so for every request.
        ("rfc4475-3.3.4-unksm2", 400, "Malformed From header", true, .sameError),
        ("rfc4475-3.3.8-multi01", 400, "Multiple From headers", true, .sameError),
        ("rfc4475-3.3.9-mcl01", 400, "Multiple Content-Length headers", true, .closes(.badContentLength)),
        ("rfc5118-4.2-ipv6-bad", 400, "Malformed Request-URI", true, .sameError),
        ("rouse-escaped-host-nul", 400, "Malformed Request-URI", true, .sameError),
        ("rouse-bare-nul-display-name", 400, "NUL byte in header", true, .sameError),
        ("rouse-content-length-1-2", 400, "Malformed Content-Length header", true, .closes(.badContentLength)),
        ("rouse-content-length-split-fold", 400, "Malformed Content-Length header", true, .closes(.badContentLength)),
        ("rouse-content-length-overlarge", 400, "Content-Length exceeds body", true, .closes(.messageTooLarge)),
        ("rouse-missing-call-id", 400, "Missing Call-ID header", true, .sameError),
        // No CSeq: the client could not match an answer to its transaction (RFC 3261 §17.1.3).
        ("rouse-missing-cseq", 400, "Missing CSeq header", false, .sameError),
        ("rouse-missing-from", 400, "Missing From header", true, .sameError),
        ("rouse-missing-to", 400, "Missing To header", true, .sameError),
        ("rouse-missing-via", 400, "Missing Via header", false, .sameError),
        ("rouse-cseq-overflow", 400, "Malformed CSeq header", true, .sameError),
    ]

    func testInvalidMessagesGetTheirAnswerOverADatagramAndAStream() throws {
        for (name, status, reason, answered, stream) in Self.invalid {
            let bytes = try Self.bytes(name)
            guard let error = parseError(bytes) else {
                XCTFail("\(name) parsed")
                continue
            }
            XCTAssertEqual(error.statusCode, status, name)
            XCTAssertEqual(error.reason, reason, name)
            let answer = error.response(toTag: "t")
            XCTAssertEqual(answer != nil, answered, "\(name): answered")
            if let answer {
                // The answer goes back the way the request came: its Via lines, as received.
                XCTAssertEqual(answer.headers.lines(.via), try XCTUnwrap(Self.viaLines(bytes)), name)
                XCTAssertEqual(answer.statusCode, status, name)
            }
            for reads in [[bytes.count], [1]] {
                let framing = SIPDifferentialCheck.frame(bytes, reads: reads, limits: .default)
                switch stream {
                case .sameError:
                    guard case .message(let framed)? = framing.events.first else {
                        XCTFail("\(name) \(reads): not framed: \(framing)")
                        continue
                    }
                    XCTAssertEqual(parseError(framed), error, "\(name) \(reads)")
                case .waits:
                    XCTAssertEqual(framing.events, [], "\(name) \(reads)")
                    XCTAssertNil(framing.failure, "\(name) \(reads)")
                case .closes(let failure):
                    XCTAssertEqual(framing.failure, failure, "\(name) \(reads)")
                }
            }
        }
    }

    /// The Via header lines of raw request bytes, as a parser would keep them (folded lines joined).
    static func viaLines(_ bytes: [UInt8]) -> [String]? {
        let head = String(decoding: bytes, as: UTF8.self).components(separatedBy: "\r\n\r\n")[0]
        return head.components(separatedBy: "\r\n").dropFirst().compactMap { line in
            guard let colon = line.firstIndex(of: ":"),
                SIPHeaderName(line[..<colon].trimmingCharacters(in: .whitespaces)) == .via
            else { return nil }
            return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
    }

    /// Parses one valid corpus message every way (datagram; stream whole, byte by byte, random reads).
    func valid(_ name: String, file: StaticString = #filePath, line: UInt = #line) throws -> SIPMessage {
        try parseEveryWay(try Self.bytes(name), file: file, line: line)
    }

    func testRFC4475ValidMessagesParse() throws {
        let wsinv = try request(valid("rfc4475-3.1.1.1-wsinv"))
        XCTAssertEqual(wsinv.maxForwards, 68, "leading zeros")
        XCTAssertEqual(wsinv.cseq, SIPCSeq(9, .invite), "leading zeros")
        XCTAssertEqual(wsinv.vias.count, 3)
        XCTAssertEqual(wsinv.body.count, 150)

        let intmeth = try request(valid("rfc4475-3.1.1.2-intmeth"))
        XCTAssertEqual(intmeth.method.rawValue, "!interesting-Method0123456789_*+`.%indeed'~")
        XCTAssertEqual(intmeth.uri.user, "1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*")
        XCTAssertEqual(intmeth.uri.password, "&it+has=1,weird!*pas$wo~d_too.(doesn't-it)")
        XCTAssertEqual(intmeth.uri.host, "example.com")
        XCTAssertEqual(intmeth.to?.displayName, "BEL:\u{7} NUL:\u{0} DEL:\u{7F}", "quoted-pairs, NUL included")
        XCTAssertEqual(intmeth.to?.uri.user, "1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*")
        XCTAssertEqual(intmeth.from?.displayName, "token1~` token2'+_ token3*%!.-")
        XCTAssertEqual(intmeth.from?.tag, "_token~1'+`*%!-.")
        XCTAssertEqual(intmeth.callID, "intmeth.word%ZK-!.*_+'@word`~)(><:\\/\"][?}{")
        XCTAssertEqual(intmeth.maxForwards, 255)
        // Forwarded, the To line keeps its quoted NUL byte for byte.
        let forwarded = SIPSerializer.serialize(intmeth)
        XCTAssertTrue(forwarded.firstRange(of: Array("NUL:\\\u{0} DEL".utf8)) != nil)

        let esc01 = try request(valid("rfc4475-3.1.1.3-esc01"))
        XCTAssertEqual(esc01.uri.user, "sips%3Auser%40example.com", "reserved characters stay escaped")
        XCTAssertEqual(esc01.uri.host, "example.net")
        XCTAssertEqual(esc01.to?.uri.user, "user", "%75se%72 is user")
        XCTAssertEqual(esc01.from?.uri.user, "I%20have%20spaces")
        guard case .address(let escapedContact)? = esc01.contacts?.first else { return XCTFail("esc01: no Contact") }
        XCTAssertEqual(escapedContact.uri.user, "caller")
        XCTAssertTrue(escapedContact.uri.parameters.contains("lr"), "%6C%72 is lr")
        XCTAssertEqual(escapedContact.uri.parameters.value("name"), "value%2541", "%25 stays an escaped %")

        let escnull = try request(valid("rfc4475-3.1.1.4-escnull"))
        XCTAssertEqual(escnull.to?.uri.user, "null-%00-null")
        let nullUsers = (escnull.contacts ?? []).compactMap { contact -> String? in
            if case .address(let address) = contact { return address.uri.user }
            return nil
        }
        XCTAssertEqual(nullUsers, ["%00", "%00%00"], "two distinct Contacts, not cut short at a NUL")

        let esc02 = try request(valid("rfc4475-3.1.1.5-esc02"))
        XCTAssertNotEqual(esc02.method, .register, "% is no escape in a method")
        XCTAssertEqual(esc02.from?.displayName, "%Z%45")
        XCTAssertEqual(esc02.contacts?.count, 3)

        XCTAssertEqual(try request(valid("rfc4475-3.1.1.6-lwsdisp")).from?.displayName, "caller")

        let longreq = try request(valid("rfc4475-3.1.1.7-longreq"))
        XCTAssertEqual(longreq.vias.count, 34)
        XCTAssertTrue(longreq.to?.displayName?.hasPrefix("I have a user name of extremeextreme") ?? false)

        let dblreq = try Self.bytes("rfc4475-3.1.1.8-dblreq")
        let first = try request(SIPParser.parse(dblreq))
        XCTAssertEqual(first.method, .register)
        XCTAssertEqual(first.body, [], "a datagram's octets beyond Content-Length are not the message's")
        let framed = SIPDifferentialCheck.frame(dblreq, reads: [1], limits: .default).events
        XCTAssertEqual(framed.count, 2, "over a stream they are the next message")

        XCTAssertEqual(try request(valid("rfc4475-3.1.1.9-semiuri")).uri.user, "user;par=u%40example.net")
        XCTAssertEqual(
            try request(valid("rfc4475-3.1.1.10-transports")).vias.map(\.transport), ["UDP", "SCTP", "TLS", "UNKNOWN", "TCP"])
        let mpart = try request(valid("rfc4475-3.1.1.11-mpart01"))
        XCTAssertEqual(mpart.headers[.contentLength], String(mpart.body.count))

        let unreason = try response(valid("rfc4475-3.1.1.12-unreason"))
        XCTAssertEqual(unreason.statusCode, 200)
        XCTAssertTrue(unreason.reasonPhrase.hasPrefix("= 2**3 * 5**2 но сто"), unreason.reasonPhrase)
        let noreason = try response(valid("rfc4475-3.1.1.13-noreason"))
        XCTAssertEqual(noreason.statusCode, 100)
        XCTAssertEqual(noreason.reasonPhrase, "")
    }

    func testRFC4475MessagesAnElementMayAccept() throws {
        XCTAssertEqual(try request(valid("rfc4475-3.1.2.12-baddate")).headers["Date"], "Fri, 01 Jan 2010 16:00:00 EST")
        // The parser leaves Contact to the registrar, which answers 400 for `contacts == nil`.
        XCTAssertNil(try request(valid("rfc4475-3.1.2.13-regbadct")).contacts)
        XCTAssertEqual(try request(valid("rfc4475-3.2.1-badbranch")).topVia?.hasRFC3261Branch, false, "the cookie alone is no branch")
        XCTAssertEqual(try request(valid("rfc4475-3.3.11-zeromf")).maxForwards, 0)
        guard case .address(let headerParam)? = try request(valid("rfc4475-3.3.12-cparam01")).contacts?.first,
            case .address(let uriParam)? = try request(valid("rfc4475-3.3.13-cparam02")).contacts?.first,
            case .address(let escaped)? = try request(valid("rfc4475-3.3.14-regescrt")).contacts?.first
        else { return XCTFail("no Contact") }
        XCTAssertTrue(headerParam.parameters.contains("unknownparam"))
        XCTAssertTrue(uriParam.uri.parameters.contains("unknownparam"))
        XCTAssertEqual(escaped.uri.headers, [SIPParameter("Route", "%3Csip:sip.example.com%3E")])
        XCTAssertNil(try request(valid("rfc4475-3.4.1-inv2543")).topVia?.branch)
        // Parsed; what to answer is the handlers' (420, 415, a challenge, a response for no transaction, 406).
        XCTAssertEqual(try request(valid("rfc4475-3.3.5-bext01")).headers.values(.require), ["nothingSupportsThis", "nothingSupportsThisEither"])
        XCTAssertEqual(try request(valid("rfc4475-3.3.6-invut")).headers[.contentType], "application/unknownformat")
        XCTAssertEqual(try request(valid("rfc4475-3.3.7-regaut01")).headers[.authorization], "NoOneKnowsThisScheme opaque-data=here")
        XCTAssertEqual(try response(valid("rfc4475-3.3.10-bcast")).vias.last?.host, "255.255.255.255")
        XCTAssertEqual(try request(valid("rfc4475-3.3.15-sdp01")).headers[.accept], "text/nobodyKnowsThis")
    }

    func testRFC5118IPv6Messages() throws {
        XCTAssertEqual(try request(valid("rfc5118-4.1-ipv6-good")).uri.host, "[2001:db8::10]")
        let ambiguous = try request(valid("rfc5118-4.3-port-ambiguous")).uri
        XCTAssertEqual(ambiguous.host, "[2001:db8::10:5070]")
        XCTAssertNil(ambiguous.port)
        let unambiguous = try request(valid("rfc5118-4.4-port-unambiguous")).uri
        XCTAssertEqual(unambiguous.host, "[2001:db8::10]")
        XCTAssertEqual(unambiguous.port, 5070)
        XCTAssertEqual(try request(valid("rfc5118-4.5-via-received-with-delim")).topVia?.received, "[2001:db8::9:255]")
        XCTAssertEqual(try request(valid("rfc5118-4.5-via-received-no-delim")).topVia?.received, "2001:db8::9:255")
        XCTAssertEqual(
            try request(valid("rfc5118-4.6-mult-ip-in-header")).vias.map(\.host), ["[2001:db8::9:1]", "192.0.2.1", "[2001:db8::9:255]"])
        XCTAssertEqual(try request(valid("rfc5118-4.9-ipv4-mapped")).topVia?.host, "[::ffff:192.0.2.10]")
    }

    /// Issue 16's cases: escapes anywhere in a SIP URI, leading zeros, overlarge values, a NUL
    /// carried by a quoted-pair, and Content-Length as both framer and parser read it.
    func testEscapesLeadingZerosOverlargeValuesAndQuotedNUL() throws {
        let register = try request(valid("rouse-escaped-transport-param"))
        guard case .address(let contact)? = register.contacts?.first else { return XCTFail("no Contact") }
        XCTAssertEqual(contact.uri.transportParameter, "udp", "transport=%55DP is transport=UDP")
        XCTAssertTrue(contact.uri.parameters.contains("lr"))
        XCTAssertEqual(contact.uri.description, "sip:1001@192.0.2.7:5060;transport=UDP;lr")

        let options = try request(valid("rouse-escaped-user-and-host"))
        XCTAssertEqual(options.uri.user, "1001")
        XCTAssertEqual(options.uri.host, "example.com")
        XCTAssertEqual(options.from?.uri.userAtHost, "alice@example.com")

        let zeros = try request(valid("rouse-leading-zeros"))
        XCTAssertEqual(zeros.maxForwards, 70)
        XCTAssertEqual(zeros.cseq, SIPCSeq(7, .register))
        XCTAssertEqual(zeros.expires, 600)
        XCTAssertEqual(zeros.headers[.contentLength], "0")

        let overlarge = try request(valid("rouse-scalar-overlarge-expiry"))
        XCTAssertNil(overlarge.maxForwards, "Max-Forwards 300 is taken as absent")
        XCTAssertEqual(overlarge.expires, Int(UInt32.max), "an overlarge Expires reads as the largest, never wraps")
        guard case .address(let overlargeContact)? = overlarge.contacts?.first else { return XCTFail("no Contact") }
        XCTAssertEqual(overlargeContact.expires, Int(UInt32.max))
        XCTAssertEqual(overlarge.cseq?.number, 36)

        let nul = try request(valid("rouse-quoted-pair-nul-display-name"))
        guard case .address(let named)? = nul.contacts?.first else { return XCTFail("no Contact") }
        XCTAssertEqual(named.displayName, "Bob\u{0}s \"phone\"")
        XCTAssertEqual(try SIPNameAddress(parsing: named.description), named, "written back as a quoted-pair")
        XCTAssertTrue(nul.headers[.userAgent]?.contains("\u{0}") ?? false)

        XCTAssertEqual(try request(valid("rouse-content-length-folded")).body, Array("hello".utf8))
        XCTAssertEqual(try request(valid("rouse-content-length-leading-zeros")).body, Array("hello".utf8))
    }

    /// `make test` replays the differential fuzz corpus (and the parser fuzz corpus) through the
    /// same check the harness runs, with the default limits and the harness's small ones.
    func testDifferentialCorpusAgrees() throws {
        var count = 0
        for folder in ["sip-differential-corpus", "sip-corpus"] {
            let directory = Self.corpus.appendingPathComponent(folder)
            for name in try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() {
                let bytes = Array(try Data(contentsOf: directory.appendingPathComponent(name)))
                count += 1
                for limits in [SIPParserLimits.default, SIPParserLimits(maxMessageBytes: 8_192, maxHeaderCount: 64, maxLineBytes: 1_024)] {
                    XCTAssertNil(SIPDifferentialCheck.disagreement(in: bytes, limits: limits), "\(folder)/\(name)")
                }
            }
        }
        XCTAssertGreaterThanOrEqual(count, 80)
    }
}
