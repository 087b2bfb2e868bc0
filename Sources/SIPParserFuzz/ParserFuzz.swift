// libFuzzer harness for the SIP parser, the stream framer and the serializer.
// Build (the target exists only when ROUSE_FUZZ=1; see Package.swift):
//   ROUSE_FUZZ=1 swift build --scratch-path /tmp/rouse-fuzz -c release --product SIPParserFuzz \
//     --sanitize=fuzzer -Xswiftc -parse-as-library
// (SwiftPM's --sanitize=fuzzer, not -Xswiftc -sanitize=fuzzer: with the latter the link fails on an
// undefined SIPParserFuzz_main.)
// Run: SWIFT_BACKTRACE=enable=no /tmp/rouse-fuzz/release/SIPParserFuzz -max_total_time=60 \
//   -artifact_prefix=fuzz-artifacts/ Tests/Fuzz/sip-corpus   (or scripts/fuzz.sh)
import SIPDifferential
import SIPMessage

/// Parses the input as a datagram and as a stream (whole, then in small pieces); every message
/// that parses must serialize to bytes that parse to an equal message. Traps otherwise.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let limits = SIPParserLimits(maxMessageBytes: 8_192, maxHeaderCount: 64, maxLineBytes: 1_024)

    if let message = try? SIPParser.parse(bytes, limits: limits) {
        checkRoundTrip(message, limits: limits)
    } else if case .failure(let error) = Result(catching: { () throws(SIPParseError) in
        try SIPParser.parse(bytes, limits: limits)
    }), let answer = error.response(toTag: "fuzz") {
        // An error response must itself be a well-formed response, but for a line it copied from a
        // request that lacked it or had it malformed.
        let wire = SIPSerializer.serialize(answer)
        if case .failure(let own) = Result(catching: { () throws(SIPParseError) in try SIPParser.parse(wire) }),
            !SIPDifferentialCheck.isAboutCopiedLine(own)
        {
            fatalError("error response does not parse (\(own)): \(String(decoding: wire, as: UTF8.self))")
        }
    }

    var whole = SIPStreamFramer(limits: limits)
    whole.append(bytes)
    let wholeEvents = drain(&whole, limits: limits)

    var pieces = SIPStreamFramer(limits: limits)
    var events: [SIPStreamFramer.Event] = []
    var offset = 0
    var step = 1
    while offset < bytes.count {
        let end = min(bytes.count, offset + step)
        pieces.append(bytes[offset..<end])
        events += drain(&pieces, limits: limits)
        offset = end
        step = step % 7 + 1
    }
    // Cutting the stream into pieces never changes what the framer finds (until an error).
    guard events.count >= wholeEvents.count, Array(events.prefix(wholeEvents.count)) == wholeEvents else {
        fatalError("framer events depend on chunking")
    }
    return 0
}

private func drain(_ framer: inout SIPStreamFramer, limits: SIPParserLimits) -> [SIPStreamFramer.Event] {
    var events: [SIPStreamFramer.Event] = []
    while true {
        guard let event = try? framer.next() else { return events }
        events.append(event)
        if case .message(let bytes) = event, let message = try? SIPParser.parse(bytes, limits: limits) {
            checkRoundTrip(message, limits: limits)
        }
    }
}

private func checkRoundTrip(_ message: SIPMessage, limits: SIPParserLimits) {
    let wire = SIPSerializer.serialize(message)
    let again: SIPMessage
    do {
        again = try SIPParser.parse(wire, limits: limits)
    } catch {
        fatalError("serialized message does not parse (\(error)): \(String(decoding: wire, as: UTF8.self))")
    }
    guard again == message else {
        fatalError("round trip changed the message: \(String(decoding: wire, as: UTF8.self))")
    }
    // Typed accessors never trap on what the parser accepted.
    if case .request(let request) = message {
        _ = (request.vias, request.contacts, request.from, request.to, request.cseq, request.expires)
    }
}
