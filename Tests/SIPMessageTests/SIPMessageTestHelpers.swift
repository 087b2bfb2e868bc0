import Foundation
import SIPMessage
import XCTest

/// Turns a Swift multi-line literal into wire bytes: every "\n" becomes CRLF.
func wire(_ text: String) -> [UInt8] {
    Array(text.replacingOccurrences(of: "\n", with: "\r\n").utf8)
}

/// A small deterministic generator (SplitMix64) so random chunking is the same on every run.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Feeds `bytes` to a framer in chunks of the given sizes (cycled) and collects every event.
func frame(_ bytes: [UInt8], chunkSizes: [Int], limits: SIPParserLimits = .default) throws -> [SIPStreamFramer.Event] {
    var framer = SIPStreamFramer(limits: limits)
    var events: [SIPStreamFramer.Event] = []
    var offset = 0
    var k = 0
    while offset < bytes.count {
        let size = max(1, chunkSizes[k % chunkSizes.count])
        k += 1
        framer.append(bytes[offset..<min(bytes.count, offset + size)])
        offset += size
        while let event = try framer.next() { events.append(event) }
    }
    return events
}

func randomChunkSizes(seed: UInt64, count: Int = 64) -> [Int] {
    var generator = SeededGenerator(seed: seed)
    return (0..<count).map { _ in Int.random(in: 1...97, using: &generator) }
}

/// Parses the bytes as a datagram, then through a stream framer fed whole, one byte at a time and
/// in random chunks; asserts every way gives the same message, and that it round-trips through the
/// serializer. Returns the message.
func parseEveryWay(_ bytes: [UInt8], file: StaticString = #filePath, line: UInt = #line) throws -> SIPMessage {
    let message = try SIPParser.parse(bytes)
    var ways: [(String, [Int])] = [("whole", [bytes.count]), ("byte by byte", [1])]
    for seed in 1...3 { ways.append(("random chunks \(seed)", randomChunkSizes(seed: UInt64(seed)))) }
    for (name, sizes) in ways {
        let events = try frame(bytes, chunkSizes: sizes)
        guard events.count == 1, case .message(let framed) = events[0] else {
            XCTFail("\(name): expected one framed message, got \(events)", file: file, line: line)
            continue
        }
        XCTAssertEqual(try SIPParser.parse(framed), message, "\(name)", file: file, line: line)
    }
    assertRoundTrip(message, file: file, line: line)
    return message
}

/// parse(serialize(message)) == message.
func assertRoundTrip(_ message: SIPMessage, file: StaticString = #filePath, line: UInt = #line) {
    let bytes = SIPSerializer.serialize(message)
    do {
        let again = try SIPParser.parse(bytes)
        XCTAssertEqual(again, message, "round trip changed the message", file: file, line: line)
        XCTAssertEqual(SIPSerializer.serialize(again), bytes, file: file, line: line)
    } catch {
        XCTFail("serialized message does not parse: \(error)\n\(String(decoding: bytes, as: UTF8.self))", file: file, line: line)
    }
}

func request(_ message: SIPMessage, file: StaticString = #filePath, line: UInt = #line) throws -> SIPRequest {
    guard case .request(let request) = message else {
        XCTFail("expected a request", file: file, line: line)
        throw SIPValueError("not a request")
    }
    return request
}

func response(_ message: SIPMessage, file: StaticString = #filePath, line: UInt = #line) throws -> SIPResponse {
    guard case .response(let response) = message else {
        XCTFail("expected a response", file: file, line: line)
        throw SIPValueError("not a response")
    }
    return response
}

/// The error parsing `bytes` throws, failing the test when it parses.
func parseError(_ bytes: [UInt8], limits: SIPParserLimits = .default, file: StaticString = #filePath, line: UInt = #line) -> SIPParseError? {
    do {
        let message = try SIPParser.parse(bytes, limits: limits)
        XCTFail("expected an error, parsed \(message)", file: file, line: line)
        return nil
    } catch {
        return error
    }
}
