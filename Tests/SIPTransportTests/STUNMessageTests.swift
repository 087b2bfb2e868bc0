@testable import SIPTransport
import XCTest

/// The STUN codec and keep-alive responder on literal bytes: the RFC 5769 test vectors, and the
/// Binding request a phone sends as an RFC 5626 §8 keep-alive.
final class STUNMessageTests: XCTestCase {
    static func bytes(_ hex: String) -> [UInt8] {
        let digits = Array(hex.filter { !$0.isWhitespace })
        return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(digits[$0...$0 + 1]), radix: 16)! }
    }

    static let transactionID = bytes("b7e7a701bc34d686fa87dfae")

    /// RFC 5769 §2.1: SOFTWARE, PRIORITY, ICE-CONTROLLED, USERNAME, MESSAGE-INTEGRITY, FINGERPRINT.
    static let sampleRequest = bytes("""
        000100582112a442b7e7a701bc34d686fa87dfae
        80220010 5354554e20746573742063 6c69656e74
        00240004 6e0001ff
        80290008 932ff9b151263b36
        00060009 6576746a3a6836765920 2020
        00080014 9aeaa70cbfd8cb56781ef2b5b2d3f249c1b571a2
        80280004 e57a3bcf
        """)

    /// RFC 5769 §2.2: the answer for 192.0.2.1 port 32853.
    static let sampleIPv4Response = bytes("""
        0101003c2112a442b7e7a701bc34d686fa87dfae
        8022000b 7465737420766563746f7220
        00200008 0001a147e112a643
        00080014 2b91f599fd9e90c38c7489f92af9ba53f06be7d7
        80280004 c07d4c96
        """)

    /// RFC 5769 §2.3: the answer for 2001:db8:1234:5678:11:2233:4455:6677 port 32853.
    static let sampleIPv6Response = bytes("""
        010100482112a442b7e7a701bc34d686fa87dfae
        8022000b 7465737420766563746f7220
        00200014 0002a1470113a9faa5d3f179bc25f4b5bed2b9d9
        00080014 a382954e4be67bf11784c97c8292c275bfe3ed41
        80280004 c8fb0b4c
        """)

    func testTheRFC5769SampleRequestParsesWithItsFingerprintChecked() throws {
        let message = try STUNMessage(parsing: Self.sampleRequest)
        XCTAssertEqual(message.messageClass, .request)
        XCTAssertEqual(message.method, STUNMessage.bindingMethod)
        XCTAssertEqual(message.transactionID, Self.transactionID)
        XCTAssertTrue(message.hadFingerprint)
        XCTAssertEqual(message.attributes.map(\.type), [0x8022, 0x0024, 0x8029, 0x0006, 0x0008])
        XCTAssertEqual(message.attribute(STUNAttribute.software)?.value, Array("STUN test client".utf8))
        XCTAssertEqual(message.attribute(STUNAttribute.username)?.value, Array("evtj:h6vY".utf8), "the value without its padding")
    }

    func testTheRFC5769SampleResponsesCarryTheirXorMappedAddresses() throws {
        let v4 = try STUNMessage(parsing: Self.sampleIPv4Response)
        XCTAssertEqual(v4.messageClass, .successResponse)
        XCTAssertTrue(v4.hadFingerprint)
        let mapped4 = try XCTUnwrap(v4.attribute(STUNAttribute.xorMappedAddress)?.xorMappedAddress(transactionID: v4.transactionID))
        XCTAssertEqual(mapped4.ip, [192, 0, 2, 1])
        XCTAssertEqual(mapped4.port, 32853)

        let v6 = try STUNMessage(parsing: Self.sampleIPv6Response)
        let mapped6 = try XCTUnwrap(v6.attribute(STUNAttribute.xorMappedAddress)?.xorMappedAddress(transactionID: v6.transactionID))
        XCTAssertEqual(mapped6.ip, Self.bytes("20010db8123456780011223344556677"))
        XCTAssertEqual(mapped6.port, 32853)
    }

    func testXorMappedAddressIsEncodedAsTheRFC5769VectorsHaveIt() {
        let v4 = STUNAttribute.xorMappedAddress(ip: [192, 0, 2, 1], port: 32853, transactionID: Self.transactionID)
        XCTAssertEqual(v4.value, Self.bytes("0001a147e112a643"))
        let v6 = STUNAttribute.xorMappedAddress(
            ip: Self.bytes("20010db8123456780011223344556677"), port: 32853, transactionID: Self.transactionID)
        XCTAssertEqual(v6.value, Self.bytes("0002a1470113a9faa5d3f179bc25f4b5bed2b9d9"))
    }

    func testAFingerprintIsComputedAsTheRFC5769VectorsHaveIt() {
        // The CRC-32 of everything before the FINGERPRINT attribute, XOR 0x5354554e.
        for vector in [Self.sampleRequest, Self.sampleIPv4Response, Self.sampleIPv6Response] {
            let crc = STUNMessage.fingerprint(of: vector.dropLast(8))
            XCTAssertEqual([UInt8(crc >> 24), UInt8(crc >> 16 & 0xFF), UInt8(crc >> 8 & 0xFF), UInt8(crc & 0xFF)], Array(vector.suffix(4)))
        }
    }

    func testAWrongFingerprintOrLengthIsRefused() {
        var corrupted = Self.sampleIPv4Response
        corrupted[corrupted.count - 1] ^= 0x01
        XCTAssertThrowsError(try STUNMessage(parsing: corrupted)) { XCTAssertEqual($0 as? STUNParseError, .badFingerprint) }
        var flipped = Self.sampleIPv4Response
        flipped[30] ^= 0x01  // inside SOFTWARE: the CRC no longer matches
        XCTAssertThrowsError(try STUNMessage(parsing: flipped)) { XCTAssertEqual($0 as? STUNParseError, .badFingerprint) }
        XCTAssertThrowsError(try STUNMessage(parsing: Array(Self.sampleIPv4Response.dropLast(4)))) {
            XCTAssertEqual($0 as? STUNParseError, .badLength)
        }
        XCTAssertNil(STUNKeepAliveResponder.response(to: corrupted, fromIP: [127, 0, 0, 1], port: 5060))
    }

    func testSIPAndCRLFAreNotSTUN() {
        XCTAssertFalse(STUNMessage.looksLikeSTUN(Array("OPTIONS sip:127.0.0.1 SIP/2.0\r\n\r\n".utf8)))
        XCTAssertFalse(STUNMessage.looksLikeSTUN([0x0D, 0x0A, 0x0D, 0x0A]))
        XCTAssertFalse(STUNMessage.looksLikeSTUN(Array(Self.sampleRequest.prefix(19))))
        var noCookie = Self.bytes("000100002112a443b7e7a701bc34d686fa87dfae")
        XCTAssertFalse(STUNMessage.looksLikeSTUN(noCookie))
        noCookie[7] = 0x42
        XCTAssertTrue(STUNMessage.looksLikeSTUN(noCookie))
    }

    func testABareBindingRequestGetsItsSourceInXorMappedAddress() {
        // What a phone sends as a keep-alive: a header and nothing else.
        let request = Self.bytes("000100002112a442") + Self.transactionID
        let response = STUNKeepAliveResponder.response(to: request, fromIP: [127, 0, 0, 1], port: 5060)
        // 5060 = 0x13c4 ^ 0x2112 = 0x32d6; 127.0.0.1 ^ 21 12 a4 42 = 5e 12 a4 43.
        XCTAssertEqual(response, Self.bytes("0101000c2112a442") + Self.transactionID + Self.bytes("00200008 000132d6 5e12a443"))
    }

    func testARequestWithAFingerprintGetsOneBack() throws {
        let request = STUNMessage(method: STUNMessage.bindingMethod, messageClass: .request, transactionID: Self.transactionID)
        let response = try XCTUnwrap(STUNKeepAliveResponder.response(
            to: request.encoded(fingerprint: true), fromIP: Self.bytes("20010db8000000000000000000000001"), port: 40000))
        let parsed = try STUNMessage(parsing: response)
        XCTAssertTrue(parsed.hadFingerprint)
        XCTAssertEqual(parsed.messageClass, .successResponse)
        let mapped = try XCTUnwrap(parsed.attribute(STUNAttribute.xorMappedAddress)?.xorMappedAddress(transactionID: Self.transactionID))
        XCTAssertEqual(mapped.ip, Self.bytes("20010db8000000000000000000000001"))
        XCTAssertEqual(mapped.port, 40000)
    }

    func testAnUnknownComprehensionRequiredAttributeGets420() throws {
        // The RFC 5769 request is an ICE check: PRIORITY (0x0024) is not plain STUN.
        let response = try XCTUnwrap(STUNKeepAliveResponder.response(to: Self.sampleRequest, fromIP: [192, 0, 2, 1], port: 32853))
        let parsed = try STUNMessage(parsing: response)
        XCTAssertEqual(parsed.messageClass, .errorResponse)
        XCTAssertEqual(parsed.method, STUNMessage.bindingMethod)
        XCTAssertEqual(parsed.transactionID, Self.transactionID)
        XCTAssertEqual(Array(response[0..<2]), [0x01, 0x11], "Binding error response")
        XCTAssertEqual(parsed.attribute(STUNAttribute.errorCode)?.value, [0, 0, 4, 20] + Array("Unknown Attribute".utf8))
        XCTAssertEqual(parsed.attribute(STUNAttribute.unknownAttributes)?.value, [0x00, 0x24])
        XCTAssertTrue(parsed.hadFingerprint)
    }

    func testIndicationsResponsesAndOtherMethodsAreDropped() {
        let indication = Self.bytes("001100002112a442") + Self.transactionID
        XCTAssertNil(STUNKeepAliveResponder.response(to: indication, fromIP: [127, 0, 0, 1], port: 5060))
        XCTAssertNil(STUNKeepAliveResponder.response(to: Self.sampleIPv4Response, fromIP: [127, 0, 0, 1], port: 5060))
        let allocate = Self.bytes("000300002112a442") + Self.transactionID  // TURN Allocate
        XCTAssertNil(STUNKeepAliveResponder.response(to: allocate, fromIP: [127, 0, 0, 1], port: 5060))
    }
}
