import XCTest

@testable import SIPDNS

/// The codec on bytes: the query Rouse sends, and answers as servers write them (name
/// compression, the record types RFC 3263 reads), and bytes no server should send.
final class DNSMessageTests: XCTestCase {
    func testAQueryIsRecursiveWithOneQuestionAndAnEDNSRecord() {
        let bytes = DNSMessage.query(id: 0xBEEF, DNSQuestion("_sip._udp.Example.COM.", .srv))
        let expected: [UInt8] =
            [0xBE, 0xEF, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1]
            + [4] + Array("_sip".utf8) + [4] + Array("_udp".utf8) + [7] + Array("example".utf8) + [3] + Array("com".utf8) + [0]
            + [0, 33, 0, 1]
            + [0, 0, 41, 0x10, 0x00, 0, 0, 0, 0, 0, 0]
        XCTAssertEqual(bytes, expected)
    }

    func testAnSRVAnswerWithCompressedNamesAndGlueIsRead() throws {
        var response = Response(id: 7, question: ("_sip._tcp.example.com", 33))
        let srvName = response.pointer(to: 12)
        response.answer(name: srvName, type: 33, ttl: 300, data: [0, 10, 0, 60, 0x13, 0xC4] + Response.name("trunk1.example.com"))
        response.answer(name: srvName, type: 33, ttl: 120, data: [0, 20, 0, 0, 0x13, 0xC4] + [0])
        response.additional(name: Response.name("trunk1.example.com"), type: 1, ttl: 60, data: [198, 51, 100, 7])
        response.additional(name: Response.name("trunk1.example.com"), type: 28, ttl: 60, data: [0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [7])
        let message = try DNSMessage(parsing: response.bytes)
        XCTAssertEqual(message.id, 7)
        XCTAssertEqual(message.responseCode, .noError)
        XCTAssertEqual(message.questions, [DNSQuestion("_sip._tcp.example.com", .srv)])
        XCTAssertEqual(message.answers, [
            DNSRecord(name: "_sip._tcp.example.com", ttl: 300, data: .srv(priority: 10, weight: 60, port: 5060, target: "trunk1.example.com")),
            DNSRecord(name: "_sip._tcp.example.com", ttl: 120, data: .srv(priority: 20, weight: 0, port: 5060, target: "")),
        ])
        XCTAssertEqual(message.additional.map(\.data), [.address("198.51.100.7"), .address("2001:db8::7")])
    }

    func testANAPTRAnswerIsRead() throws {
        var response = Response(id: 9, question: ("example.com", 35))
        let data: [UInt8] = [0, 10, 0, 50] + [1] + Array("S".utf8) + [7] + Array("SIP+D2T".utf8) + [0] + Response.name("_sip._tcp.example.com")
        response.answer(name: response.pointer(to: 12), type: 35, ttl: 3600, data: data)
        let message = try DNSMessage(parsing: response.bytes)
        XCTAssertEqual(message.answers.first?.data, .naptr(order: 10, preference: 50, flags: "S", service: "SIP+D2T", regexp: "", replacement: "_sip._tcp.example.com"))
    }

    func testIPv6AddressesAreWrittenInTheirCanonicalForm() {
        XCTAssertEqual(DNSMessage.Reader.ipv6Text([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1]), "2001:db8:0:1::1")
        XCTAssertEqual(DNSMessage.Reader.ipv6Text([UInt8](repeating: 0, count: 15) + [1]), "::1")
        XCTAssertEqual(DNSMessage.Reader.ipv6Text([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1]), "2001:db8:0:1:1::1")
    }

    func testMalformedAnswersAreRefusedWithTheirReason() {
        var looping = Response(id: 1, question: ("a.example", 1))
        looping.answer(name: [0xC0, UInt8(looping.bytes.count)], type: 1, ttl: 1, data: [1, 2, 3, 4])
        XCTAssertThrowsError(try DNSMessage(parsing: looping.bytes)) { XCTAssertEqual($0 as? DNSParseError, .badName) }

        var cut = Response(id: 1, question: ("a.example", 1))
        cut.answer(name: cut.pointer(to: 12), type: 1, ttl: 1, data: [1, 2, 3, 4])
        XCTAssertThrowsError(try DNSMessage(parsing: Array(cut.bytes.dropLast(2)))) { XCTAssertEqual($0 as? DNSParseError, .truncatedMessage) }

        let query = DNSMessage.query(id: 1, DNSQuestion("a.example", .a))
        XCTAssertThrowsError(try DNSMessage(parsing: query)) { XCTAssertEqual($0 as? DNSParseError, .notAResponse) }
    }

    func testTruncationAndNameErrorsAreSeen() throws {
        let response = Response(id: 3, question: ("gone.example", 1), flags: 0x8383)
        let message = try DNSMessage(parsing: response.bytes)
        XCTAssertTrue(message.truncated)
        XCTAssertEqual(message.responseCode, .nameError)
    }

    /// A response built field by field, as a server writes one.
    struct Response {
        var bytes: [UInt8]
        private var answers = 0
        private var extras = 0

        init(id: UInt16, question: (String, UInt16), flags: UInt16 = 0x8180) {
            bytes = [UInt8(id >> 8), UInt8(id & 0xFF), UInt8(flags >> 8), UInt8(flags & 0xFF), 0, 1, 0, 0, 0, 0, 0, 0]
            bytes += Response.name(question.0) + [UInt8(question.1 >> 8), UInt8(question.1 & 0xFF), 0, 1]
        }

        static func name(_ text: String) -> [UInt8] {
            text.split(separator: ".").flatMap { [UInt8($0.utf8.count)] + Array($0.utf8) } + [0]
        }

        func pointer(to offset: Int) -> [UInt8] { [0xC0 | UInt8(offset >> 8), UInt8(offset & 0xFF)] }

        mutating func answer(name: [UInt8], type: UInt16, ttl: UInt32, data: [UInt8]) {
            precondition(extras == 0, "answers come before additional records")
            record(name: name, type: type, ttl: ttl, data: data)
            answers += 1
            bytes[7] = UInt8(answers)
        }

        mutating func additional(name: [UInt8], type: UInt16, ttl: UInt32, data: [UInt8]) {
            record(name: name, type: type, ttl: ttl, data: data)
            extras += 1
            bytes[11] = UInt8(extras)
        }

        private mutating func record(name: [UInt8], type: UInt16, ttl: UInt32, data: [UInt8]) {
            bytes += name + [UInt8(type >> 8), UInt8(type & 0xFF), 0, 1]
            bytes += [UInt8(ttl >> 24), UInt8((ttl >> 16) & 0xFF), UInt8((ttl >> 8) & 0xFF), UInt8(ttl & 0xFF)]
            bytes += [UInt8(data.count >> 8), UInt8(data.count & 0xFF)] + data
        }
    }
}
