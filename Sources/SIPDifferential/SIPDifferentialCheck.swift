public import SIPMessage

/// The differential check of the two ways bytes reach Rouse's SIP core: as a UDP datagram
/// (`SIPParser` alone) and as a TCP/TLS stream (`SIPStreamFramer`, then `SIPParser` on each framed
/// message). Both must reach the same verdict on the same bytes, up to the one difference RFC 3261
/// §18.3 makes: a datagram without Content-Length takes the rest of the datagram as its body, a
/// stream message without one has none. The libFuzzer harness `SIPDifferentialFuzz` traps on a
/// disagreement; `make test` replays its corpus through the same function.
///
/// Threading: pure functions, no state.
public enum SIPDifferentialCheck {
    /// What the stream side made of the bytes: its events and, when framing stopped, why.
    public struct Framing: Equatable, Sendable {
        public var events: [SIPStreamFramer.Event] = []
        public var failure: SIPStreamFramer.FramingError?
    }

    /// The first disagreement found between the datagram and the stream reading of `bytes`, in
    /// words, or nil when they agree. Also checks that framing does not depend on how the stream
    /// is cut into reads, and that every message and error response Rouse would build from the
    /// bytes serializes to bytes that read back the same.
    public static func disagreement(in bytes: [UInt8], limits: SIPParserLimits = .default) -> String? {
        let datagram = Result { () throws(SIPParseError) in try SIPParser.parse(bytes, limits: limits) }
        let whole = frame(bytes, reads: [bytes.count], limits: limits)
        for reads in [[1], [3, 1, 7, 2], [64, 5]] {
            let cut = frame(bytes, reads: reads, limits: limits)
            if cut != whole { return "framing depends on how the stream is read: \(reads) gave \(cut), whole gave \(whole)" }
        }

        let messages = whole.events.compactMap { event -> [UInt8]? in
            if case .message(let framed) = event { return framed }
            return nil
        }
        for framed in messages {
            if let problem = framedMessageProblem(framed, limits: limits) { return problem }
        }
        if let problem = outcomeProblem(datagram, whole, messages.first, limits: limits) { return problem }
        switch datagram {
        case .success(let message): return roundTripProblem(message, limits: limits)
        case .failure(let error): return errorResponseProblem(error)
        }
    }

    /// One framed message: the parser must accept the length the framer cut it by, and a message
    /// it parses must carry exactly the framed body.
    private static func framedMessageProblem(_ framed: [UInt8], limits: SIPParserLimits) -> String? {
        switch Result(catching: { () throws(SIPParseError) in try SIPParser.parse(framed, limits: limits) }) {
        case .failure(let error):
            if error.reason == "Malformed Content-Length header" || error.reason == "Content-Length exceeds body" {
                return "the framer cut a message by a Content-Length the parser refuses (\(error))"
            }
            return errorResponseProblem(error)
        case .success(let message):
            let body: [UInt8]
            switch message {
            case .request(let request): body = request.body
            case .response(let response): body = response.body
            }
            guard let headerEnd = headerEnd(of: framed), Array(framed[(headerEnd + 4)...]) == body else {
                return "the framer and the parser disagree on where the body ends"
            }
            return roundTripProblem(message, limits: limits)
        }
    }

    /// The datagram's verdict against the stream's first message.
    private static func outcomeProblem(
        _ datagram: Result<SIPMessage, SIPParseError>, _ framing: Framing, _ first: [UInt8]?,
        limits: SIPParserLimits
    ) -> String? {
        let stream = first.map { framed in Result { () throws(SIPParseError) in try SIPParser.parse(framed, limits: limits) } }
        switch datagram {
        case .success(let message):
            // (A framing failure after the first message is about the bytes that follow it.)
            guard let stream else {
                return "the datagram parses but the stream " + (framing.failure.map { "fails: \($0)" } ?? "waits for more")
            }
            guard case .success(let streamed) = stream else {
                return "the datagram parses but the same message over a stream does not: \(stream)"
            }
            if streamed == message { return nil }
            // RFC 3261 §18.3: without Content-Length a datagram's body is the rest, a stream's is empty.
            if withoutBody(message) == streamed { return nil }
            return "the datagram and the stream read different messages"
        case .failure(let error):
            guard let stream else { return nil }
            // The datagram's size limit counts every byte of it, the stream's only its first message.
            if error.statusCode == 513 { return nil }
            switch stream {
            case .success:
                return "the stream parses a message the datagram refuses (\(error))"
            case .failure(let streamError):
                return streamError == error ? nil : "datagram error \(error) but stream error \(streamError)"
            }
        }
    }

    /// The message as a stream reads it when the datagram gave it the rest of the bytes as body
    /// for want of a Content-Length: no body and `Content-Length: 0`.
    private static func withoutBody(_ message: SIPMessage) -> SIPMessage {
        func clear(_ headers: SIPHeaders) -> SIPHeaders {
            var headers = headers
            headers.set(.contentLength, "0")
            return headers
        }
        switch message {
        case .request(var request):
            request.body = []
            request.headers = clear(request.headers)
            return .request(request)
        case .response(var response):
            response.body = []
            response.headers = clear(response.headers)
            return .response(response)
        }
    }

    /// A parsed message serializes to bytes that parse to an equal message, and a stream frames
    /// those bytes as exactly one message.
    private static func roundTripProblem(_ message: SIPMessage, limits: SIPParserLimits) -> String? {
        let wire = SIPSerializer.serialize(message)
        guard let again = try? SIPParser.parse(wire, limits: wide), again == message else {
            return "serialize then parse changes the message: \(String(decoding: wire, as: UTF8.self))"
        }
        if frame(wire, reads: [wire.count], limits: wide).events != [.message(wire)] {
            return "a serialized message is not framed as one message"
        }
        if case .request(let request) = message {
            // Typed accessors never trap on what the parser accepted.
            _ = (request.vias, request.contacts, request.from, request.to, request.cseq, request.expires, request.maxForwards)
        }
        return nil
    }

    /// An error response is framed as one message, and parses unless a line it copies from the
    /// request was missing or malformed there (then only that line keeps it from parsing).
    private static func errorResponseProblem(_ error: SIPParseError) -> String? {
        guard let answer = error.response(toTag: "differential") else { return nil }
        let wire = SIPSerializer.serialize(answer)
        if frame(wire, reads: [wire.count], limits: wide).events != [.message(wire)] {
            return "the error response is not framed as one message"
        }
        guard case .failure(let own) = Result(catching: { () throws(SIPParseError) in try SIPParser.parse(wire, limits: wide) })
        else { return nil }
        if isAboutCopiedLine(own) { return nil }
        return "the error response to \(error) does not parse (\(own)): \(String(decoding: wire, as: UTF8.self))"
    }

    /// True when a parse error names one of the lines an error response copies from its request.
    public static func isAboutCopiedLine(_ error: SIPParseError) -> Bool {
        ["Via", "From", "To", "Call-ID", "CSeq"].contains { error.reason.hasSuffix(" \($0) header") || error.reason.hasSuffix(" \($0) headers") }
    }

    /// Limits for reading back what Rouse writes: a message that fit the limits may grow a little.
    private static let wide = SIPParserLimits(maxMessageBytes: 1 << 20, maxHeaderCount: 1 << 16, maxLineBytes: 1 << 20)

    /// Feeds the bytes to a framer in reads of the given sizes (cycled) until it fails or the
    /// bytes run out.
    public static func frame(_ bytes: [UInt8], reads: [Int], limits: SIPParserLimits) -> Framing {
        var framer = SIPStreamFramer(limits: limits)
        var framing = Framing()
        var offset = 0
        var k = 0
        repeat {
            let size = max(1, reads[k % reads.count])
            k += 1
            framer.append(bytes[offset..<min(bytes.count, offset + size)])
            offset = min(bytes.count, offset + size)
            do throws(SIPStreamFramer.FramingError) {
                while let event = try framer.next() { framing.events.append(event) }
            } catch {
                framing.failure = error
                return framing
            }
        } while offset < bytes.count
        return framing
    }

    /// The index of the CR of the first CRLFCRLF.
    private static func headerEnd(of bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for i in 0...(bytes.count - 4) where bytes[i] == 0x0D && bytes[i + 1] == 0x0A && bytes[i + 2] == 0x0D && bytes[i + 3] == 0x0A {
            return i
        }
        return nil
    }
}
