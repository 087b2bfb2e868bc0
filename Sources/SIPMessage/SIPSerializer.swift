/// Writes messages to wire bytes. Content-Length always states the body's real length; header
/// values are written without CR, LF or NUL so nothing stored can inject a header line.
public enum SIPSerializer {
    public static func serialize(_ request: SIPRequest) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(512 + request.body.count)
        appendClean(request.method.rawValue, to: &out)
        out.append(0x20)
        appendClean(request.uri.description, to: &out)
        out.append(0x20)
        appendClean(request.version, to: &out)
        out.append(contentsOf: crlf)
        appendHeaders(request.headers, bodyLength: request.body.count, to: &out)
        out.append(contentsOf: request.body)
        return out
    }

    public static func serialize(_ response: SIPResponse) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(512 + response.body.count)
        appendClean(response.version, to: &out)
        out.append(0x20)
        SIPHeaderValueScanner.appendDecimal(response.statusCode, to: &out)
        out.append(0x20)
        appendClean(response.reasonPhrase, to: &out)
        out.append(contentsOf: crlf)
        appendHeaders(response.headers, bodyLength: response.body.count, to: &out)
        out.append(contentsOf: response.body)
        return out
    }

    public static func serialize(_ message: SIPMessage) -> [UInt8] {
        switch message {
        case .request(let request): return serialize(request)
        case .response(let response): return serialize(response)
        }
    }

    private static let crlf: [UInt8] = [0x0D, 0x0A]

    /// Writes the header lines. Content-Length is written once, where the first one stood (as it was
    /// spelled) or last, with the body's real length (RFC 3261 §20.14), so a parsed message
    /// serializes back to a message that parses equal.
    private static func appendHeaders(_ headers: SIPHeaders, bodyLength: Int, to out: inout [UInt8]) {
        var wroteContentLength = false
        // By index: a for-in copies (retains and releases) every line.
        let fields = headers.fields
        for index in fields.indices {
            if fields[index].key == .contentLength {
                if wroteContentLength { continue }
                wroteContentLength = true
                appendClean(fields[index].name, to: &out)
                out.append(0x3A)
                out.append(0x20)
                SIPHeaderValueScanner.appendDecimal(bodyLength, to: &out)
            } else {
                appendClean(fields[index].name, to: &out)
                out.append(0x3A)
                out.append(0x20)
                fields[index].withValueBytes { appendClean($0, to: &out) }
            }
            out.append(contentsOf: crlf)
        }
        if !wroteContentLength {
            appendClean("Content-Length: ", to: &out)
            SIPHeaderValueScanner.appendDecimal(bodyLength, to: &out)
            out.append(contentsOf: crlf)
        }
        out.append(contentsOf: crlf)
    }

    /// True when the bytes hold no CR, LF or NUL: 16 bytes at a time while none of them is a
    /// control byte up to CR (a tab among them sends the rest through the byte loop).
    private static func isClean(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = bytes.baseAddress else { return true }
        let raw = UnsafeRawPointer(base)
        let belowCR = SIMD16<UInt8>(repeating: 0x0E)
        var i = 0
        while i + 16 <= bytes.count {
            if any(raw.loadUnaligned(fromByteOffset: i, as: SIMD16<UInt8>.self) .< belowCR) { break }
            i += 16
        }
        while i < bytes.count {
            let byte = bytes[i]
            if byte == 0x0D || byte == 0x0A || byte == 0x00 { return false }
            i += 1
        }
        return true
    }

    /// Appends text with CR, LF and NUL replaced by spaces; a NUL escaped as a quoted-pair (`\`
    /// then NUL, RFC 3261 §25.1) is kept, so a display name that carries one is forwarded intact.
    private static func appendClean(_ text: String, to out: inout [UInt8]) {
        text.withSIPBytes { appendClean($0, to: &out) }
    }

    private static func appendClean(_ bytes: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        if isClean(bytes) {
            out.append(contentsOf: bytes)
            return
        }
        var escaping = false
        for byte in bytes {
            if byte == 0x0D || byte == 0x0A || (byte == 0x00 && !escaping) {
                out.append(0x20)
                escaping = false
                continue
            }
            out.append(byte)
            escaping = !escaping && byte == UInt8(ascii: "\\")
        }
    }
}

extension SIPRequest: CustomStringConvertible {
    public var description: String { String(decoding: SIPSerializer.serialize(self), as: UTF8.self) }
}

extension SIPResponse: CustomStringConvertible {
    public var description: String { String(decoding: SIPSerializer.serialize(self), as: UTF8.self) }
}
