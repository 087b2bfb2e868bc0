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
        if contentLength > limits.maxMessageBytes - (bodyStart - start) { return try fail(.messageTooLarge) }
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
    /// continuation lines (RFC 3261 §7.3.1) is read across them. Header lines are recognised and
    /// values read by the functions the parser uses, so the two agree on every length.
    private func contentLength(in range: Range<Int>) throws(FramingError) -> Int {
        let result = buffer.withUnsafeBufferPointer { bytes in SIPStreamFramer.contentLength(bytes, range) }
        guard let length = result else { throw .badContentLength }
        return length
    }

    /// The length, 0 without a Content-Length line, nil when a value is malformed or two differ.
    private static func contentLength(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Int? {
        typealias Scanner = SIPHeaderValueScanner
        var found: Int? = nil
        guard var lineStart = Scanner.firstIndex(of: 0x0A, in: bytes, range).map({ $0 + 1 }) else { return 0 }
        while lineStart < range.upperBound {
            var lineEnd = lineStart
            while true {
                while lineEnd < range.upperBound, bytes[lineEnd] != 0x0A { lineEnd += 1 }
                if lineEnd + 1 < range.upperBound, bytes[lineEnd + 1] == 0x20 || bytes[lineEnd + 1] == 0x09 {
                    lineEnd += 1
                    continue
                }
                break
            }
            if let (name, colon) = Scanner.headerName(bytes, lineStart..<lineEnd),
                SIPHeaderName.recognise(bytes, name).checked == .contentLength
            {
                guard let value = Scanner.contentLength(bytes, (colon + 1)..<lineEnd) else { return nil }
                if let found, found != value { return nil }
                found = value
            }
            lineStart = lineEnd + 1
        }
        return found ?? 0
    }
}
