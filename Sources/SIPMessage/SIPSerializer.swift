/// Writes messages to wire bytes. Content-Length always states the body's real length; header
/// values are written without CR, LF or NUL so nothing stored can inject a header line.
public enum SIPSerializer {
    /// The exact length is counted first and the bytes written once into one array.
    public static func serialize(_ request: SIPRequest) -> [UInt8] {
        let method = request.method.rawValue
        let uri = request.uri.description
        let count =
            method.utf8.count + 1 + uri.utf8.count + 1 + request.version.utf8.count + 2
            + headersLength(request.headers, bodyLength: request.body.count) + request.body.count
        return [UInt8](sipBytes: count) { out in
            writeClean(method, to: &out)
            out.write(0x20)
            writeClean(uri, to: &out)
            out.write(0x20)
            writeClean(request.version, to: &out)
            out.writeLiteral("\r\n")
            writeHeaders(request.headers, bodyLength: request.body.count, to: &out)
            request.body.withUnsafeBufferPointer { out.write($0) }
        }
    }

    public static func serialize(_ response: SIPResponse) -> [UInt8] {
        let count =
            response.version.utf8.count + 1 + SIPByteWriter.decimalLength(response.statusCode) + 1
            + response.reasonPhrase.utf8.count + 2 + headersLength(response.headers, bodyLength: response.body.count)
            + response.body.count
        return [UInt8](sipBytes: count) { out in
            writeClean(response.version, to: &out)
            out.write(0x20)
            out.writeDecimal(response.statusCode)
            out.write(0x20)
            writeClean(response.reasonPhrase, to: &out)
            out.writeLiteral("\r\n")
            writeHeaders(response.headers, bodyLength: response.body.count, to: &out)
            response.body.withUnsafeBufferPointer { out.write($0) }
        }
    }

    public static func serialize(_ message: SIPMessage) -> [UInt8] {
        switch message {
        case .request(let request): return serialize(request)
        case .response(let response): return serialize(response)
        }
    }

    /// How many bytes `writeHeaders` writes (cleaning replaces bytes one for one).
    private static func headersLength(_ headers: SIPHeaders, bodyLength: Int) -> Int {
        var count = 2
        var wroteContentLength = false
        let fields = headers.fields
        for index in fields.indices {
            if fields[index].key == .contentLength {
                if wroteContentLength { continue }
                wroteContentLength = true
                count += fields[index].name.utf8.count + 4 + SIPByteWriter.decimalLength(bodyLength)
            } else {
                count += fields[index].name.utf8.count + 4 + fields[index].valueByteCount
            }
        }
        if !wroteContentLength { count += 18 + SIPByteWriter.decimalLength(bodyLength) }
        return count
    }

    /// Writes the header lines. Content-Length is written once, where the first one stood (as it was
    /// spelled) or last, with the body's real length (RFC 3261 §20.14), so a parsed message
    /// serializes back to a message that parses equal.
    private static func writeHeaders(_ headers: SIPHeaders, bodyLength: Int, to out: inout SIPByteWriter) {
        var wroteContentLength = false
        // Through the buffer: a for-in, or indexing the array, copies (retains and releases) every line.
        headers.fields.withUnsafeBufferPointer { fields in
            for index in fields.indices {
                if fields[index].key == .contentLength {
                    if wroteContentLength { continue }
                    wroteContentLength = true
                    writeClean(fields[index].name, to: &out)
                    out.writeLiteral(": ")
                    out.writeDecimal(bodyLength)
                } else {
                    writeClean(fields[index].name, to: &out)
                    out.writeLiteral(": ")
                    fields[index].storage.withBytes { writeClean($0, to: &out) }
                }
                out.writeLiteral("\r\n")
            }
        }
        if !wroteContentLength {
            out.writeLiteral("Content-Length: ")
            out.writeDecimal(bodyLength)
            out.writeLiteral("\r\n")
        }
        out.writeLiteral("\r\n")
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

    /// Writes text with CR, LF and NUL replaced by spaces (one byte for one); a NUL escaped as a
    /// quoted-pair (`\` then NUL, RFC 3261 §25.1) is kept, so a display name that carries one is
    /// forwarded intact.
    private static func writeClean(_ text: String, to out: inout SIPByteWriter) {
        text.withSIPBytes { writeClean($0, to: &out) }
    }

    private static func writeClean(_ bytes: UnsafeBufferPointer<UInt8>, to out: inout SIPByteWriter) {
        if isClean(bytes) {
            out.write(bytes)
            return
        }
        var escaping = false
        for byte in bytes {
            if byte == 0x0D || byte == 0x0A || (byte == 0x00 && !escaping) {
                out.write(0x20)
                escaping = false
                continue
            }
            out.write(byte)
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
