/// Parses one SIP message from bytes: a UDP datagram, or one message cut from a stream by
/// `SIPStreamFramer`. Scans the bytes in place; the header values of the message it returns are
/// ranges of those bytes (kept alive by the message), made Strings only when read as such, except
/// Call-ID, which most handlers read as text. Pure and thread-safe (no state).
///
/// What it enforces, and the answer each failure calls for, is in `SIPParseError`. A parsed
/// message always holds exactly one Content-Length line stating the body's length, so that
/// `SIPSerializer.serialize` gives bytes that parse to an equal message.
public enum SIPParser {
    /// Parses a whole message (for a datagram: body by Content-Length, or the rest of the datagram
    /// when there is none, RFC 3261 §18.3).
    /// The bytes are copied once, for the message's header values to refer to.
    public static func parse(
        _ bytes: UnsafeRawBufferPointer, limits: SIPParserLimits = .default
    ) throws(SIPParseError) -> SIPMessage {
        try parse(Array(bytes), limits: limits)
    }

    /// The message's header values refer to `bytes` itself (no copy).
    public static func parse(_ bytes: [UInt8], limits: SIPParserLimits = .default) throws(SIPParseError) -> SIPMessage {
        try bytes.withUnsafeBufferPointerTyped { buffer throws(SIPParseError) -> SIPMessage in
            var scanner = MessageScanner(bytes: buffer, owner: bytes, limits: limits)
            return try scanner.parse()
        }
    }

    public static func parse(
        _ bytes: ArraySlice<UInt8>, limits: SIPParserLimits = .default
    ) throws(SIPParseError) -> SIPMessage {
        try parse(Array(bytes), limits: limits)
    }

    /// True when the datagram holds only line ends: an RFC 5626 §3.5.1 keep-alive, not a message.
    public static func isKeepAlive(_ bytes: UnsafeRawBufferPointer) -> Bool {
        !bytes.isEmpty && bytes.allSatisfy { $0 == 0x0D || $0 == 0x0A }
    }
}

/// One parse: the bytes, the limits, and the first problem found.
private struct MessageScanner {
    private typealias Scanner = SIPHeaderValueScanner
    private static let cr: UInt8 = 0x0D
    private static let lf: UInt8 = 0x0A

    let bytes: UnsafeBufferPointer<UInt8>
    /// The array `bytes` points into, which the parsed header values keep.
    let owner: [UInt8]
    let limits: SIPParserLimits

    /// The first problem found; scanning goes on when it can, to find the lines an answer needs.
    private var problem: (status: Int, reason: String)?

    init(bytes: UnsafeBufferPointer<UInt8>, owner: [UInt8], limits: SIPParserLimits) {
        self.bytes = bytes
        self.owner = owner
        self.limits = limits
    }

    private mutating func note(_ status: Int, _ reason: String) {
        if problem == nil { problem = (status, reason) }
    }

    /// Where a line ends: the index of its CR, or why it has no proper CRLF end.
    private enum LineEnd {
        case crlf(Int)
        /// The bytes end before a CRLF.
        case unterminated
        /// A CR without LF or an LF without CR (RFC 3261 §7: lines end with CRLF).
        case bare
    }

    /// Scans the line that starts at `start`; `hasNUL` tells whether it holds a NUL byte. Skips
    /// 16 bytes at a time while none of them is a control byte up to CR.
    private func scanLine(from start: Int, hasNUL: inout Bool) -> LineEnd {
        var i = start
        let n = bytes.count
        guard let base = bytes.baseAddress else { return .unterminated }
        let raw = UnsafeRawPointer(base)
        let aboveCR = SIMD16<UInt8>(repeating: MessageScanner.cr + 1)
        while true {
            while i + 16 <= n {
                let chunk = raw.loadUnaligned(fromByteOffset: i, as: SIMD16<UInt8>.self)
                if any(chunk .< aboveCR) { break }
                i += 16
            }
            while i < n, bytes[i] > MessageScanner.cr { i += 1 }
            guard i < n else { return .unterminated }
            switch bytes[i] {
            case MessageScanner.cr:
                guard i + 1 < n else { return .unterminated }
                return bytes[i + 1] == MessageScanner.lf ? .crlf(i) : .bare
            case MessageScanner.lf:
                return .bare
            case 0:
                hasNUL = true
            default:
                break
            }
            i += 1
        }
    }

    mutating func parse() throws(SIPParseError) -> SIPMessage {
        let n = bytes.count
        var pos = 0
        // RFC 3261 §7.5: CRLFs before the start line are ignored.
        while pos + 1 < n, bytes[pos] == MessageScanner.cr, bytes[pos + 1] == MessageScanner.lf { pos += 2 }
        guard pos < n, !(n - pos == 1 && (bytes[pos] == MessageScanner.cr || bytes[pos] == MessageScanner.lf)) else {
            throw SIPParseError(reason: "Empty message", kind: .empty)
        }
        if n > limits.maxMessageBytes { note(513, "Message Too Large") }

        // The start line.
        let isResponse = n - pos >= 4 && Scanner.equalsLowercased(bytes, pos..<(pos + 4), "sip/")
        let kind: SIPParseError.Kind = isResponse ? .response : .request
        var startNUL = false
        guard case .crlf(let startEnd) = scanLine(from: pos, hasNUL: &startNUL) else {
            throw SIPParseError(reason: "Malformed start line", kind: kind)
        }
        let startLine = pos..<startEnd
        pos = startEnd + 2

        var response: (code: Int, reason: String, version: String)? = nil
        var request: (method: Range<Int>, uri: Range<Int>, version: String)? = nil
        if isResponse {
            guard !startNUL, startLine.count <= limits.maxLineBytes, let status = parseStatusLine(startLine) else {
                throw SIPParseError(reason: "Malformed Status-Line", kind: .response)
            }
            response = status
        } else if startNUL {
            note(400, "Malformed Request-Line")
        } else if startLine.count > limits.maxLineBytes {
            note(414, "Request-URI Too Long")
        } else {
            request = parseRequestLine(startLine)
        }

        // Header lines (RFC 3261 §7.3), folded continuation lines joined by one space (§7.3.1).
        var fields: [SIPHeader] = []
        fields.reserveCapacity(16)
        var index = KeyIndex()
        var headerCount = 0
        var bodyStart = -1
        while pos < n {
            var hasNUL = false
            guard case .crlf(let lineEnd) = scanLine(from: pos, hasNUL: &hasNUL) else {
                note(400, "Malformed header line ending")
                break
            }
            if lineEnd == pos {
                bodyStart = lineEnd + 2
                break
            }
            let lineStart = pos
            pos = lineEnd + 2
            guard let (nameRange, colon) = Scanner.headerName(bytes, lineStart..<lineEnd) else {
                note(400, "Malformed header line")
                break
            }
            var tooLong = lineEnd - lineStart > limits.maxLineBytes
            let firstValue = Scanner.trim(bytes, (colon + 1)..<lineEnd)
            var folded: [UInt8]? = nil
            var foldingFailed = false
            while pos < n, bytes[pos] == 0x20 || bytes[pos] == 0x09 {
                guard case .crlf(let continuationEnd) = scanLine(from: pos, hasNUL: &hasNUL) else {
                    foldingFailed = true
                    break
                }
                if continuationEnd - pos > limits.maxLineBytes { tooLong = true }
                let part = Scanner.trim(bytes, pos..<continuationEnd)
                if !part.isEmpty {
                    if folded == nil { folded = Array(UnsafeBufferPointer(rebasing: bytes[firstValue])) }
                    if folded?.isEmpty == false { folded?.append(0x20) }
                    folded?.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[part]))
                }
                pos = continuationEnd + 2
            }
            if foldingFailed {
                note(400, "Malformed header line ending")
                break
            }
            // A NUL is allowed only as a quoted-pair's octet (RFC 3261 §25.1, RFC 4475 §3.1.1.2).
            if hasNUL, !Scanner.nulBytesAreQuotedPairs(bytes, lineStart..<(pos - 2)) {
                note(400, "NUL byte in header")
                continue
            }
            let valueLength = folded?.count ?? firstValue.count
            if tooLong || nameRange.count + 2 + valueLength > limits.maxLineBytes {
                note(513, "Header line too long")
                continue
            }
            let (key, checked, spelled) = SIPHeaderName.recognise(bytes, nameRange)
            if checked != .contentLength {
                headerCount += 1
                if headerCount > limits.maxHeaderCount {
                    note(513, "Too many header lines")
                    break
                }
            }
            let storage: SIPHeader.Storage
            if let folded {
                storage = .text(String(decoding: folded, as: UTF8.self))
            } else if checked == .callID {
                storage = .text(Scanner.text(bytes, firstValue))
            } else {
                storage = .received(owner, UInt32(firstValue.lowerBound), UInt32(firstValue.upperBound))
            }
            index.record(checked, at: fields.count)
            fields.append(SIPHeader(key, storage: storage, spelled: spelled))
        }
        if bodyStart < 0 { note(400, "Missing blank line after headers") }

        if problem == nil {
            if let response {
                let kept: SIPKeptLines
                switch checkCommonHeaders(fields, index) {
                case .failure(let reason): throw SIPParseError(reason: reason.text, kind: .response)
                case .success(let lines): kept = lines
                }
                let body = try takeBody(&fields, index, from: bodyStart, kind: .response)
                return .response(
                    SIPResponse(
                        statusCode: response.code, reasonPhrase: response.reason, version: response.version,
                        headers: SIPHeaders(fields, kept: kept), body: body))
            }
            if let request {
                if let (uri, kept) = validateRequest(request, fields, index) {
                    let body = try takeBody(&fields, index, from: bodyStart, kind: .request)
                    return .request(
                        SIPRequest(
                            method: SIPMethod.recognise(bytes, request.method), uri: uri,
                            version: request.version, headers: SIPHeaders(fields, kept: kept), body: body))
                }
            }
        }
        guard let problem else { throw SIPParseError(reason: "Malformed Request-Line") }
        if isResponse { throw SIPParseError(reason: problem.reason, statusCode: problem.status, kind: .response) }
        let method = request.map { Scanner.text(bytes, $0.method) } ?? Scanner.firstIndex(of: 0x20, in: bytes, startLine).map {
            Scanner.text(bytes, startLine.lowerBound..<$0)
        }
        throw SIPParseError(
            reason: problem.reason, statusCode: problem.status, kind: .request,
            replyHeaders: MessageScanner.replyHeaders(fields, index, method: method))
    }

    /// `SIP-Version SP Status-Code SP Reason-Phrase` (RFC 3261 §7.2); codes 100 to 699.
    private func parseStatusLine(_ line: Range<Int>) -> (code: Int, reason: String, version: String)? {
        guard let space = Scanner.firstIndex(of: 0x20, in: bytes, line),
            Scanner.equalsLowercased(bytes, line.lowerBound..<space, "sip/2.0"),
            line.upperBound - space >= 4
        else { return nil }
        var code = 0
        for k in (space + 1)..<(space + 4) {
            let c = bytes[k]
            guard c >= 0x30, c <= 0x39 else { return nil }
            code = code * 10 + Int(c - 0x30)
        }
        guard code >= 100, code <= 699 else { return nil }
        let afterCode = space + 4
        var reason = ""
        if afterCode < line.upperBound {
            guard bytes[afterCode] == 0x20 else { return nil }
            reason = Scanner.text(bytes, (afterCode + 1)..<line.upperBound)
        }
        return (code, reason, Scanner.text(bytes, line.lowerBound..<space))
    }

    /// `Method SP Request-URI SP SIP-Version` (RFC 3261 §7.1), single spaces. Notes 505 for a
    /// version other than 2.0 (§8.2.6.1 via §21.5.6) and 400 for anything malformed.
    private mutating func parseRequestLine(
        _ line: Range<Int>
    ) -> (method: Range<Int>, uri: Range<Int>, version: String)? {
        guard let space1 = Scanner.firstIndex(of: 0x20, in: bytes, line),
            let space2 = Scanner.firstIndex(of: 0x20, in: bytes, (space1 + 1)..<line.upperBound)
        else {
            note(400, "Malformed Request-Line")
            return nil
        }
        let method = line.lowerBound..<space1
        let uri = (space1 + 1)..<space2
        let version = (space2 + 1)..<line.upperBound
        var wellFormed = !method.isEmpty && !uri.isEmpty && !version.isEmpty
        for k in method where !Scanner.isTokenByte(bytes[k]) { wellFormed = false }
        for k in uri where bytes[k] <= 0x20 { wellFormed = false }
        guard wellFormed else {
            note(400, "Malformed Request-Line")
            return nil
        }
        if !Scanner.equalsLowercased(bytes, version, "sip/2.0") {
            if isVersionSyntax(version) {
                note(505, "SIP Version Not Supported")
            } else {
                note(400, "Malformed Request-Line")
            }
            return nil
        }
        let spelled = Scanner.equalsLiteral(bytes, version, "SIP/2.0") ? "SIP/2.0" : Scanner.text(bytes, version)
        return (method, uri, spelled)
    }

    /// `"SIP" "/" 1*DIGIT "." 1*DIGIT` (RFC 3261 §25.1).
    private func isVersionSyntax(_ range: Range<Int>) -> Bool {
        guard range.count >= 7, Scanner.equalsLowercased(bytes, range.lowerBound..<(range.lowerBound + 4), "sip/")
        else { return false }
        var dots = 0
        var digitsSinceDot = 0
        for k in (range.lowerBound + 4)..<range.upperBound {
            let c = bytes[k]
            if c == UInt8(ascii: ".") {
                guard digitsSinceDot > 0 else { return false }
                dots += 1
                digitsSinceDot = 0
            } else if c >= 0x30, c <= 0x39 {
                digitsSinceDot += 1
            } else {
                return false
            }
        }
        return dots == 1 && digitsSinceDot > 0
    }

    /// Checks a request beyond the lines every message needs: Max-Forwards, Expires, the
    /// Request-URI and the CSeq method (RFC 3261 §8.1.1, §8.2.2.1, §16.3). Returns the
    /// Request-URI and the lines kept, or nil after noting the problem. Contact is left to whoever uses it (a proxy
    /// forwards it untouched, §16.6; the registrar answers 400 when `contacts` is nil, §10.3).
    private mutating func validateRequest(
        _ request: (method: Range<Int>, uri: Range<Int>, version: String), _ fields: [SIPHeader], _ index: KeyIndex
    ) -> (SIPURI, SIPKeptLines)? {
        let kept: SIPKeptLines
        switch checkCommonHeaders(fields, index) {
        case .failure(let reason):
            note(400, reason.text)
            return nil
        case .success(let lines):
            kept = lines
        }
        let cseq = kept.cseq
        if index.maxForwardsCount > 1 {
            note(400, "Multiple Max-Forwards headers")
            return nil
        }
        if let at = index.maxForwards, !fields[at].storage.withBytes(MessageScanner.isDecimal) {
            note(400, "Malformed Max-Forwards header")
            return nil
        }
        if let at = index.expires, !fields[at].storage.withBytes(MessageScanner.isDecimal) {
            note(400, "Malformed Expires header")
            return nil
        }
        let uri: SIPURI
        do throws(SIPValueError) {
            uri = try SIPURI(bytes, request.uri)
            // RFC 3261 §19.1.1: a Request-URI carries no headers (RFC 4475 §3.1.2.11).
            guard uri.headers.isEmpty else { throw SIPValueError("headers in the Request-URI") }
        } catch {
            // RFC 3261 §8.2.2.1: a scheme the server does not understand is answered with 416.
            if error.isUnsupportedScheme {
                note(416, "Unsupported URI Scheme")
            } else {
                note(400, "Malformed Request-URI")
            }
            return nil
        }
        // RFC 3261 §8.1.1.5: the CSeq method MUST match the request's.
        guard Scanner.equals(bytes, request.method, cseq.method.rawValue) else {
            note(400, "CSeq method does not match")
            return nil
        }
        return (uri, kept)
    }

    /// The checks requests and responses share: Via, From, To, Call-ID and CSeq present once
    /// (Via at least once) and well formed (RFC 3261 §8.1.1, §20). Gives the lines as kept (the top
    /// Via element, To and CSeq parsed on the way), or the reason.
    private func checkCommonHeaders(_ fields: [SIPHeader], _ index: KeyIndex) -> Result<SIPKeptLines, Reason> {
        guard let topVia = index.topVia else { return .failure("Missing Via header") }
        guard let from = index.from else { return .failure("Missing From header") }
        guard let to = index.to else { return .failure("Missing To header") }
        guard let callID = index.callID else { return .failure("Missing Call-ID header") }
        guard let cseqAt = index.cseq else { return .failure("Missing CSeq header") }
        if index.fromCount > 1 { return .failure("Multiple From headers") }
        if index.toCount > 1 { return .failure("Multiple To headers") }
        if index.callIDCount > 1 { return .failure("Multiple Call-ID headers") }
        if index.cseqCount > 1 { return .failure("Multiple CSeq headers") }
        if index.contentLengthCount > 1 { return .failure("Multiple Content-Length headers") }
        // Every Via a response will travel back through, the top one first (RFC 4475 §3.1.2.1).
        guard let top = fields[topVia].storage.withBytes(MessageScanner.topViaOfList) else { return .failure("Malformed Via header") }
        for index in (topVia + 1)..<fields.count where fields[index].key == .via {
            if !fields[index].storage.withBytes(MessageScanner.isViaList) { return .failure("Malformed Via header") }
        }
        if !fields[from].storage.withBytes(MessageScanner.isAddress) { return .failure("Malformed From header") }
        guard let toAddress = fields[to].storage.withBytes({ try? SIPNameAddress($0, 0..<$0.count) }) else {
            return .failure("Malformed To header")
        }
        if !fields[callID].storage.withBytes(MessageScanner.isCallID) { return .failure("Malformed Call-ID header") }
        guard let cseq = fields[cseqAt].storage.withBytes({ try? SIPCSeq($0, 0..<$0.count) }) else {
            return .failure("Malformed CSeq header")
        }
        return .success(
            SIPKeptLines(
                topViaLine: topVia, fromLine: from, toLine: to, callIDLine: callID, cseqLine: cseqAt,
                topViaElement: top.element, topViaElementEnd: top.end, topVia: top.via, to: toAddress, cseq: cseq))
    }

    /// A reason phrase, as the failure of a check.
    private struct Reason: Error, ExpressibleByStringLiteral {
        let text: String
        init(stringLiteral text: String) { self.text = text }
    }

    /// The body: Content-Length bytes after the blank line (more are cut off, fewer are an error,
    /// RFC 3261 §18.3), or the rest of the bytes when there is no Content-Length. Rewrites (or
    /// adds) the Content-Length line to state the body's length.
    private func takeBody(
        _ fields: inout [SIPHeader], _ index: KeyIndex, from start: Int, kind: SIPParseError.Kind
    ) throws(SIPParseError) -> [UInt8] {
        var end = bytes.count
        if let at = index.contentLength {
            guard let length = fields[at].storage.withBytes({ Scanner.contentLength($0, 0..<$0.count) }) else {
                throw error("Malformed Content-Length header", fields, index, kind)
            }
            guard length <= bytes.count - start else {
                throw error("Content-Length exceeds body", fields, index, kind)
            }
            end = start + length
            if !fields[at].storage.withBytes({ MessageScanner.isDecimal($0, of: length) }) {
                // Leading zeros: state the length as the serializer will write it.
                fields[at] = SIPHeader(.contentLength, String(length), spelled: fields[at].name)
            }
        } else {
            fields.append(SIPHeader(.contentLength, String(end - start)))
        }
        return Array(UnsafeBufferPointer(rebasing: bytes[start..<end]))
    }

    private func error(
        _ reason: String, _ fields: [SIPHeader], _ index: KeyIndex, _ kind: SIPParseError.Kind
    ) -> SIPParseError {
        guard kind == .request else { return SIPParseError(reason: reason, kind: kind) }
        return SIPParseError(
            reason: reason, kind: kind, replyHeaders: MessageScanner.replyHeaders(fields, index, method: nil))
    }

    /// The lines an error response copies (RFC 3261 §8.2.6.2): every Via, and the first From, To,
    /// Call-ID and CSeq as received, whichever are there (a request missing From, To or Call-ID
    /// still gets its 400, RFC 4475 §3.3.1). Nil when the response cannot be routed back to the
    /// client transaction: no usable top Via, or no CSeq (the client matches a response by its
    /// branch and CSeq method, RFC 3261 §17.1.3); and nil for an ACK, which is never answered.
    private static func replyHeaders(_ fields: [SIPHeader], _ index: KeyIndex, method: String?) -> SIPHeaders? {
        guard let topVia = index.topVia, fields[topVia].storage.withBytes(isTopViaUsable), method != "ACK", let cseqAt = index.cseq,
            !fields[cseqAt].storage.withBytes({ $0.isEmpty }), !fields[cseqAt].storage.withBytes(isACK(cseqMethodOf:))
        else { return nil }
        var headers = SIPHeaders()
        for field in fields where field.key == .via { headers.add(field) }
        for position in [index.from, index.to, index.callID, index.cseq] {
            if let position { headers.add(fields[position]) }
        }
        return headers
    }

    /// True when the last word of a CSeq value is `ACK`, however malformed its number.
    private static func isACK(cseqMethodOf bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        let range = Scanner.trim(bytes, 0..<bytes.count)
        var start = range.upperBound
        while start > range.lowerBound, !Scanner.isWhitespace(bytes[start - 1]) { start -= 1 }
        return Scanner.equalsLiteral(bytes, start..<range.upperBound, "ACK")
    }

    /// Every element of a Via line is a well-formed via-parm, with no empty elements.
    private static func isViaList(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var start = 0
        while start <= bytes.count {
            let end = Scanner.listElementEnd(bytes, start..<bytes.count)
            do throws(SIPValueError) {
                _ = try SIPVia.scan(bytes, start..<end, build: false)
            } catch {
                return false
            }
            start = end + 1
        }
        return true
    }

    /// `isViaList` for the top Via line, giving its first element parsed, where that element lies
    /// (trimmed) and the index of the comma ending it (or the value's length); nil when malformed.
    private static func topViaOfList(_ bytes: UnsafeBufferPointer<UInt8>) -> (via: SIPVia, element: Range<Int>, end: Int)? {
        let end = Scanner.listElementEnd(bytes, 0..<bytes.count)
        guard let via = try? SIPVia(bytes, 0..<end) else { return nil }
        if end < bytes.count, !isViaList(UnsafeBufferPointer(rebasing: bytes[(end + 1)...])) { return nil }
        return (via, Scanner.trim(bytes, 0..<end), end)
    }

    private static func isTopViaUsable(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        let end = Scanner.listElementEnd(bytes, 0..<bytes.count)
        do throws(SIPValueError) {
            _ = try SIPVia.scan(bytes, 0..<end, build: false)
            return true
        } catch {
            return false
        }
    }

    private static func isAddress(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        do throws(SIPValueError) {
            _ = try SIPNameAddress.scan(bytes, 0..<bytes.count, build: false)
            return true
        } catch {
            return false
        }
    }

    /// True when the bytes are `number` written as the serializer writes it: its digits, no
    /// leading zero (no String made of it to compare).
    private static func isDecimal(_ bytes: UnsafeBufferPointer<UInt8>, of number: Int) -> Bool {
        guard bytes.count == SIPByteWriter.decimalLength(number) else { return false }
        var rest = number
        for k in bytes.indices.reversed() {
            guard bytes[k] == 0x30 + UInt8(rest % 10) else { return false }
            rest /= 10
        }
        return true
    }

    /// `Call-ID = word [ "@" word ]` (RFC 3261 §20.8): not empty, no white space.
    private static func isCallID(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard !bytes.isEmpty else { return false }
        for c in bytes where c <= 0x20 || c == 0x7F { return false }
        return true
    }

    /// `Max-Forwards = 1*DIGIT` (RFC 3261 §20.22), leading zeros allowed (RFC 4475 §3.1.1.1; a
    /// value above 255 is taken as absent, §3.1.2.4: `maxForwards` reads nil), and
    /// `delta-seconds = 1*DIGIT` (RFC 3261 §20.19; an overlarge value is read as the largest).
    private static func isDecimal(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        Scanner.decimal(bytes, 0..<bytes.count) != nil
    }

}

/// Where the headers the parser checks stand among the fields, and how often each occurs.
private struct KeyIndex {
    var topVia: Int?
    var from: Int?
    var fromCount = 0
    var to: Int?
    var toCount = 0
    var callID: Int?
    var callIDCount = 0
    var cseq: Int?
    var cseqCount = 0
    var maxForwards: Int?
    var maxForwardsCount = 0
    var contentLength: Int?
    var contentLengthCount = 0
    var expires: Int?

    mutating func record(_ key: SIPCheckedHeader, at position: Int) {
        switch key {
        case .via: if topVia == nil { topVia = position }
        case .from: KeyIndex.note(&from, &fromCount, position)
        case .to: KeyIndex.note(&to, &toCount, position)
        case .callID: KeyIndex.note(&callID, &callIDCount, position)
        case .cseq: KeyIndex.note(&cseq, &cseqCount, position)
        case .maxForwards: KeyIndex.note(&maxForwards, &maxForwardsCount, position)
        case .contentLength: KeyIndex.note(&contentLength, &contentLengthCount, position)
        case .expires: if expires == nil { expires = position }
        case .other: break
        }
    }

    private static func note(_ first: inout Int?, _ count: inout Int, _ position: Int) {
        if first == nil { first = position }
        count += 1
    }
}
