/// Cuts a TCP/TLS byte stream into whole SIP messages by Content-Length (RFC 3261 §18.3), and
/// recognises RFC 5626 §3.5.1 keep-alives between messages (a double CRLF "ping", a single CRLF
/// "pong"). Holds at most one message's worth of bytes: anything bigger is a framing error, after
/// which the flow must be closed. Not thread-safe: one framer per connection, used by its owner.
public struct SIPStreamFramer: Sendable {
    /// What the stream produced.
    public enum Event: Hashable, Sendable {
        /// The bytes of one whole message (start line, headers, blank line, body).
        case message([UInt8])
        /// A double CRLF keep-alive ping: answer with a single CRLF.
        case keepAlivePing
    }

    /// Why the stream cannot be framed any further.
    public enum FramingError: Error, Hashable, Sendable, CustomStringConvertible {
        case messageTooLarge
        case badContentLength

        public var description: String {
            switch self {
            case .messageTooLarge: return "message too large"
            case .badContentLength: return "bad Content-Length"
            }
        }
    }

    public let limits: SIPParserLimits
    private var buffer: [UInt8] = []
    private var start = 0
    /// Where the search for the end of the header block resumes.
    private var scanFrom = 0
    private var failed: FramingError?

    public init(limits: SIPParserLimits = .default) {
        self.limits = limits
    }

    /// Bytes held that do not yet make a whole message.
    public var bufferedByteCount: Int { buffer.count - start }

    public mutating func append<Bytes: Sequence>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        if start > 0, start >= buffer.count / 2 {
            buffer.removeSubrange(0..<start)
            scanFrom -= start
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// The next event, nil when more bytes are needed. After an error, every call throws it again.
    public mutating func next() throws(FramingError) -> Event? {
        if let failed { throw failed }
        // Keep-alives and stray line ends between messages.
        while buffer.count - start >= 2, buffer[start] == 0x0D, buffer[start + 1] == 0x0A {
            let held = buffer.count - start
            if held >= 4, buffer[start + 2] == 0x0D, buffer[start + 3] == 0x0A {
                start += 4
                scanFrom = start
                return .keepAlivePing
            }
            // CRLF or CRLF CR could still become a ping: wait for the next bytes.
            if held == 2 || (held == 3 && buffer[start + 2] == 0x0D) { return nil }
            start += 2  // a pong, or a stray CRLF before a message (RFC 3261 §7.5)
            scanFrom = start
        }
        if buffer.count - start == 1, buffer[start] == 0x0D { return nil }
        guard buffer.count > start else { return nil }

        guard let headerEnd = findHeaderEnd() else {
            if buffer.count - start > limits.maxMessageBytes { return try fail(.messageTooLarge) }
            return nil
        }
        let bodyStart = headerEnd + 4
        let contentLength = try contentLength(in: start..<headerEnd)
        if bodyStart - start + contentLength > limits.maxMessageBytes { return try fail(.messageTooLarge) }
        guard buffer.count >= bodyStart + contentLength else { return nil }
        let message = Array(buffer[start..<(bodyStart + contentLength)])
        start = bodyStart + contentLength
        scanFrom = start
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: buffer.capacity <= 2 * limits.maxMessageBytes)
            start = 0
            scanFrom = 0
        }
        return .message(message)
    }

    private mutating func fail(_ error: FramingError) throws(FramingError) -> Event? {
        failed = error
        buffer = []
        start = 0
        scanFrom = 0
        throw error
    }

    /// Index of the CR of the first CRLFCRLF at or after the message start.
    private mutating func findHeaderEnd() -> Int? {
        var i = max(scanFrom, start)
        let end = buffer.count - 3
        while i < end {
            if buffer[i + 3] != 0x0A {
                i += buffer[i + 3] == 0x0D ? 1 : 4
                continue
            }
            if buffer[i] == 0x0D, buffer[i + 1] == 0x0A, buffer[i + 2] == 0x0D { return i }
            i += 1
        }
        scanFrom = max(start, buffer.count - 3)
        return nil
    }

    /// The Content-Length of the header block (0 when absent); several differing values are an
    /// error. `range` runs from the start line to the CR of the blank line; a value folded onto
    /// continuation lines (RFC 3261 §7.3.1) is read across them.
    private func contentLength(in range: Range<Int>) throws(FramingError) -> Int {
        var found: Int? = nil
        guard var lineStart = buffer[range].firstIndex(of: 0x0A).map({ $0 + 1 }) else { return 0 }
        while lineStart < range.upperBound {
            var lineEnd = lineStart
            while true {
                while lineEnd < range.upperBound, buffer[lineEnd] != 0x0A { lineEnd += 1 }
                if lineEnd + 1 < range.upperBound, buffer[lineEnd + 1] == 0x20 || buffer[lineEnd + 1] == 0x09 {
                    lineEnd += 1
                    continue
                }
                break
            }
            if let value = try contentLengthValue(lineStart..<lineEnd) {
                if let found, found != value { throw .badContentLength }
                found = value
            }
            lineStart = lineEnd + 1
        }
        return found ?? 0
    }

    private func contentLengthValue(_ line: Range<Int>) throws(FramingError) -> Int? {
        guard let colon = buffer[line].firstIndex(of: UInt8(ascii: ":")) else { return nil }
        var nameEnd = colon
        while nameEnd > line.lowerBound, buffer[nameEnd - 1] == 0x20 || buffer[nameEnd - 1] == 0x09 {
            nameEnd -= 1
        }
        let name = buffer[line.lowerBound..<nameEnd]
        let isContentLength: Bool
        if name.count == 1 {
            isContentLength = name.first! | 0x20 == UInt8(ascii: "l")
        } else if name.count == 14 {
            isContentLength = zip(name, "content-length".utf8).allSatisfy { ($0 | 0x20) == $1 || $0 == $1 }
        } else {
            isContentLength = false
        }
        guard isContentLength else { return nil }
        var value = 0
        var digits = 0
        for byte in buffer[(colon + 1)..<line.upperBound] {
            if byte == 0x20 || byte == 0x09 || byte == 0x0D || byte == 0x0A { continue }
            guard byte >= 0x30, byte <= 0x39, digits < 9 else { throw .badContentLength }
            value = value * 10 + Int(byte - 0x30)
            digits += 1
        }
        guard digits > 0 else { throw .badContentLength }
        return value
    }
}
