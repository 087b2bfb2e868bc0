/// Parsers for header values that SIP shares across headers: lists, quoted strings and parameters.
/// Pure functions over UTF-8 bytes (`UnsafeBufferPointer<UInt8>` and index ranges); the value
/// types' `init(parsing:)` run them over a string's contiguous storage without copying it.
public enum SIPHeaderValueScanner {
    typealias Bytes = UnsafeBufferPointer<UInt8>

    /// Splits a list header value at commas outside quoted strings and `<...>` (RFC 3261 §7.3.1);
    /// trims each element and drops empty ones.
    public static func splitList(_ value: String) -> [String] {
        value.withSIPBytes(splitList)
    }

    static func splitList(_ bytes: Bytes) -> [String] {
        var result: [String] = []
        forEachListElement(bytes) { element in
            result.append(text(bytes, element))
            return true
        }
        return result
    }

    /// The first non-empty element of a list header value, as `splitList(value).first` would give
    /// it, without building the other elements.
    public static func firstListElement(_ value: String) -> String? {
        value.withSIPBytes(firstListElement)
    }

    static func firstListElement(_ bytes: Bytes) -> String? {
        var first: String?
        forEachListElement(bytes) { element in
            first = text(bytes, element)
            return false
        }
        return first
    }

    /// Calls `body` with each non-empty element of a list value (trimmed), in order, while it
    /// returns true.
    @inline(__always)
    static func forEachListElement(_ bytes: Bytes, _ body: (Range<Int>) -> Bool) {
        var start = 0
        while start <= bytes.count {
            let end = listElementEnd(bytes, start..<bytes.count)
            let element = trim(bytes, start..<end)
            if !element.isEmpty, !body(element) { return }
            start = end + 1
        }
    }

    /// The index of the comma ending the list element that begins at `range.lowerBound` (commas
    /// inside quoted strings and `<...>` do not count), or `range.upperBound`.
    public static func listElementEnd(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Int {
        var inQuotes = false
        var angle = 0
        var i = range.lowerBound
        while i < range.upperBound {
            let c = bytes[i]
            if inQuotes {
                if c == UInt8(ascii: "\\") {
                    i += 2
                    continue
                }
                if c == UInt8(ascii: "\"") { inQuotes = false }
            } else {
                switch c {
                case UInt8(ascii: "\""): inQuotes = true
                case UInt8(ascii: "<"): angle += 1
                case UInt8(ascii: ">"): if angle > 0 { angle -= 1 }
                case UInt8(ascii: ","): if angle == 0 { return i }
                default: break
                }
            }
            i += 1
        }
        return range.upperBound
    }

    @inline(__always)
    static func isWhitespace(_ c: UInt8) -> Bool {
        c == 0x20 || c == 0x09 || c == 0x0D || c == 0x0A
    }

    /// The range without leading and trailing white space.
    @inline(__always)
    public static func trim(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Range<Int> {
        var lower = range.lowerBound, upper = range.upperBound
        while lower < upper, isWhitespace(bytes[lower]) { lower += 1 }
        while upper > lower, isWhitespace(bytes[upper - 1]) { upper -= 1 }
        return lower..<upper
    }

    /// The bytes as a String (invalid UTF-8 becomes U+FFFD).
    @inline(__always)
    static func text(_ bytes: Bytes, _ range: Range<Int>) -> String {
        String(decoding: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self)
    }

    /// Appends a non-negative number's decimal digits (status codes, lengths, ports) without
    /// making a String.
    public static func appendDecimal(_ number: Int, to out: inout [UInt8]) {
        let value = max(0, number)
        var divisor = 1
        while divisor <= value / 10 { divisor *= 10 }
        while divisor > 0 {
            out.append(0x30 + UInt8(truncatingIfNeeded: value / divisor % 10))
            divisor /= 10
        }
    }

    /// The first index of `byte` in the range, or nil.
    @inline(__always)
    static func firstIndex(of byte: UInt8, in bytes: Bytes, _ range: Range<Int>) -> Int? {
        var i = range.lowerBound
        while i < range.upperBound {
            if bytes[i] == byte { return i }
            i += 1
        }
        return nil
    }

    /// ASCII case-insensitive comparison of the bytes with a lower-case literal.
    static func equalsLowercased(_ bytes: Bytes, _ range: Range<Int>, _ lower: StaticString) -> Bool {
        guard range.count == lower.utf8CodeUnitCount else { return false }
        let literal = lower.utf8Start
        for k in 0..<range.count {
            let c = bytes[range.lowerBound + k]
            let folded = c >= 0x41 && c <= 0x5A ? c | 0x20 : c
            if folded != literal[k] { return false }
        }
        return true
    }

    /// Given the index of an opening `"`, the index just after the closing one. Backslash escapes
    /// one byte (quoted-pair, RFC 3261 §25.1).
    static func quotedStringEnd(_ bytes: Bytes, from open: Int, _ end: Int) throws(SIPValueError) -> Int {
        var i = open + 1
        while i < end {
            switch bytes[i] {
            case UInt8(ascii: "\\"):
                guard i + 1 < end else { throw SIPValueError("unterminated quoted string") }
                i += 2
            case UInt8(ascii: "\""):
                return i + 1
            default:
                i += 1
            }
        }
        throw SIPValueError("unterminated quoted string")
    }

    /// Writes `text` as a quoted-string (RFC 3261 §25.1): `"`, `\` and the control characters
    /// qdtext cannot hold (NUL included) become quoted-pairs; CR and LF, which no quoted-pair may
    /// carry, are dropped so that no value can inject a header line.
    public static func quote(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\r", "\n": continue
            case "\"", "\\": out += "\\" + String(scalar)
            case "\t": out.unicodeScalars.append(scalar)
            case "\u{0}"..."\u{1F}", "\u{7F}": out += "\\" + String(scalar)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// True when every NUL byte in the range is the second byte of a quoted-pair inside a
    /// quoted-string or a comment (RFC 3261 §25.1: quoted-pair = "\" %x00-09 / %x0B-0C / %x0E-7F),
    /// the only place SIP lets a header carry one.
    static func nulBytesAreQuotedPairs(_ bytes: Bytes, _ range: Range<Int>) -> Bool {
        var inQuotes = false
        var commentDepth = 0
        var i = range.lowerBound
        while i < range.upperBound {
            let c = bytes[i]
            if c == 0 { return false }
            if inQuotes || commentDepth > 0 {
                if c == UInt8(ascii: "\\") {
                    i += 2
                    continue
                }
                if inQuotes {
                    if c == UInt8(ascii: "\"") { inQuotes = false }
                } else if c == UInt8(ascii: "(") {
                    commentDepth += 1
                } else if c == UInt8(ascii: ")") {
                    commentDepth -= 1
                }
            } else if c == UInt8(ascii: "\"") {
                inQuotes = true
            } else if c == UInt8(ascii: "(") {
                commentDepth = 1
            }
            i += 1
        }
        return true
    }

    /// A SIP integer (`1*DIGIT`, RFC 3261 §25.1) in the range, white space around it ignored:
    /// leading zeros do not count (`000070` is 70), and a value too large for 64 bits is
    /// `UInt64.max`, never a wrap. Nil when the range holds anything but digits, or none.
    static func decimal(_ bytes: Bytes, _ range: Range<Int>) -> UInt64? {
        let digits = trim(bytes, range)
        guard !digits.isEmpty else { return nil }
        var value: UInt64 = 0
        var overflow = false
        for k in digits {
            let c = bytes[k]
            guard c >= 0x30, c <= 0x39 else { return nil }
            if overflow { continue }
            let (times10, o1) = value.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times10.addingReportingOverflow(UInt64(c - 0x30))
            if o1 || o2 { overflow = true } else { value = sum }
        }
        return overflow ? UInt64.max : value
    }

    /// `decimal` over a header value or parameter text.
    public static func decimal(_ text: String) -> UInt64? {
        text.withSIPBytes { bytes in decimal(bytes, 0..<bytes.count) }
    }

    /// A Content-Length value (RFC 3261 §20.14: `1*DIGIT`, leading zeros allowed), read the same way
    /// by the stream framer and the parser so that they agree on every length: white space (a
    /// folded line's CRLF included) only around the digits. Overlarge values saturate.
    static func contentLength(_ bytes: Bytes, _ range: Range<Int>) -> Int? {
        decimal(bytes, range).map { Int(clamping: $0) }
    }

    /// The header name a line starts with when it is `token *(SP / HTAB) ":"` (RFC 3261 §7.3.1),
    /// with the index of the colon; nil for a line that is no header line. The parser and the
    /// stream framer both recognise header lines with it.
    static func headerName(_ bytes: Bytes, _ line: Range<Int>) -> (name: Range<Int>, colon: Int)? {
        var nameEnd = line.lowerBound
        while nameEnd < line.upperBound, isTokenByte(bytes[nameEnd]) { nameEnd += 1 }
        var colon = nameEnd
        while colon < line.upperBound, bytes[colon] == 0x20 || bytes[colon] == 0x09 { colon += 1 }
        guard nameEnd > line.lowerBound, colon < line.upperBound, bytes[colon] == UInt8(ascii: ":") else { return nil }
        return (line.lowerBound..<nameEnd, colon)
    }

    /// `unreserved` (RFC 3261 §25.1): alphanumerics and `-_.!~*'()`, the characters a `%HH`
    /// escape stands for interchangeably with itself anywhere in a SIP URI (§19.1.4).
    @inline(__always)
    static func isUnreserved(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"):
            return true
        case UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "!"), UInt8(ascii: "~"),
            UInt8(ascii: "*"), UInt8(ascii: "'"), UInt8(ascii: "("), UInt8(ascii: ")"):
            return true
        default:
            return false
        }
    }

    @inline(__always)
    static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        default: return nil
        }
    }

    /// The range as text with every `%HH` escape of an unreserved character replaced by the
    /// character (RFC 3986 §6.2.2.2 normalisation: `%55DP` is `UDP`, `%6C%72` is `lr`). Escapes of
    /// other octets (`%40`, `%00`, `%25`) stay as written, so nothing changes meaning.
    /// With `tokenOnly`, only characters that are also token characters are decoded.
    static func decodingUnreserved(_ bytes: Bytes, _ range: Range<Int>, tokenOnly: Bool = false) -> String {
        decodingEscapes(bytes, range) { isUnreserved($0) && (!tokenOnly || isTokenByte($0)) }
    }

    /// `text` with every `%HH` escape (two hex digits exactly) replaced by its octet (RFC 3261
    /// §19.1.2); what is not a valid escape stays as it is.
    public static func decodingEscapes(_ text: String) -> String {
        text.withSIPBytes { bytes in decodingEscapes(bytes, 0..<bytes.count) { _ in true } }
    }

    /// The range as text with the `%HH` escapes of the octets `decodes` accepts replaced by them.
    private static func decodingEscapes(_ bytes: Bytes, _ range: Range<Int>, where decodes: (UInt8) -> Bool) -> String {
        guard firstIndex(of: UInt8(ascii: "%"), in: bytes, range) != nil else { return text(bytes, range) }
        var out: [UInt8] = []
        out.reserveCapacity(range.count)
        var i = range.lowerBound
        while i < range.upperBound {
            if bytes[i] == UInt8(ascii: "%"), i + 2 < range.upperBound, let high = hexValue(bytes[i + 1]),
                let low = hexValue(bytes[i + 2]), decodes(high << 4 | low)
            {
                out.append(high << 4 | low)
                i += 3
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Removes the quotes and escapes of a quoted-string; returns other text unchanged.
    public static func unquote(_ text: String) -> String {
        text.withSIPBytes { bytes in
            guard bytes.count >= 2, bytes[0] == UInt8(ascii: "\""), bytes[bytes.count - 1] == UInt8(ascii: "\"")
            else { return text }
            return unquote(bytes, 0..<bytes.count)
        }
    }

    /// The content of the quoted string spanning `range` (quotes included), escapes removed.
    static func unquote(_ bytes: Bytes, _ range: Range<Int>) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(range.count)
        var i = range.lowerBound + 1
        let end = range.upperBound - 1
        while i < end {
            if bytes[i] == UInt8(ascii: "\\"), i + 1 < end {
                out.append(bytes[i + 1])
                i += 2
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses `;name=value;name` parameters (the leading separator optional). Names are tokens;
    /// values are kept verbatim, quoted strings with their quotes (RFC 3261 §19.1.4, §7.3.1), so
    /// that `pn-prid=TOKA:remote&TOKB:voip` or `+sip.instance="<urn:uuid:...>"` come back unchanged.
    /// With `build` false it only checks the syntax and returns no parameters (the parser's
    /// validation path, which keeps no Strings).
    static func parseParameters(
        _ bytes: Bytes, _ range: Range<Int>, separator: UInt8 = UInt8(ascii: ";"), build: Bool = true
    ) throws(SIPValueError) -> SIPParameters {
        var items: [SIPParameter] = []
        var i = range.lowerBound
        let end = range.upperBound
        if build, i < end {
            // Room for every parameter at once: growing the array one by one was a third of the cost.
            var separators = 1
            for k in range where bytes[k] == separator { separators += 1 }
            items.reserveCapacity(separators)
        }
        while i < end {
            while i < end, isWhitespace(bytes[i]) { i += 1 }
            if i >= end { break }
            if bytes[i] == separator {
                i += 1
                continue
            }
            let nameStart = i
            while i < end, bytes[i] != UInt8(ascii: "="), bytes[i] != separator { i += 1 }
            let name = trim(bytes, nameStart..<i)
            guard !name.isEmpty else { throw SIPValueError("empty parameter name") }
            for k in name where !isTokenByte(bytes[k]) { throw SIPValueError("bad parameter name") }
            var value: String? = nil
            if i < end, bytes[i] == UInt8(ascii: "=") {
                i += 1
                while i < end, isWhitespace(bytes[i]) { i += 1 }
                let valueStart = i
                if i < end, bytes[i] == UInt8(ascii: "\"") {
                    i = try quotedStringEnd(bytes, from: i, end)
                    if build { value = text(bytes, valueStart..<i) }
                    while i < end, bytes[i] != separator {
                        guard isWhitespace(bytes[i]) else { throw SIPValueError("text after quoted value") }
                        i += 1
                    }
                } else {
                    while i < end, bytes[i] != separator { i += 1 }
                    if build { value = text(bytes, trim(bytes, valueStart..<i)) }
                }
            }
            if build { items.append(SIPParameter(text(bytes, name), value)) }
        }
        return SIPParameters(items)
    }

    /// RFC 3261 §25.1 token characters: alphanumerics and `-.!%*_+`'~`, tested as bits of two
    /// 64-bit masks (bytes 0-63 and 64-127) rather than with a branch per character class.
    @inline(__always)
    static func isTokenByte(_ c: UInt8) -> Bool {
        let low: UInt64 = 0x03FF_6CA2_0000_0000
        let high: UInt64 = 0x47FF_FFFF_87FF_FFFE
        if c < 64 { return (low >> UInt64(c)) & 1 == 1 }
        if c < 128 { return (high >> UInt64(c - 64)) & 1 == 1 }
        return false
    }
}

/// Why a header value could not be parsed; the text names the problem for a 400 reason phrase.
public struct SIPValueError: Error, Hashable, Sendable, CustomStringConvertible {
    public let message: String
    /// True when a URI was well formed but its scheme is not `sip`, `sips` or `tel` (answer 416).
    public let isUnsupportedScheme: Bool

    public init(_ message: String) {
        self.message = message
        self.isUnsupportedScheme = false
    }

    init(unsupportedScheme message: String) {
        self.message = message
        self.isUnsupportedScheme = true
    }

    public var description: String { message }
}

extension String {
    /// Runs `body` over the string's contiguous UTF-8 bytes (no copy for native strings).
    @inline(__always)
    func withSIPBytes<T>(_ body: (UnsafeBufferPointer<UInt8>) -> T) -> T {
        var text = self
        return text.withUTF8(body)
    }

    /// Runs a throwing parser over the string's contiguous UTF-8 bytes.
    @inline(__always)
    func parsingSIPBytes<T>(
        _ body: (UnsafeBufferPointer<UInt8>) throws(SIPValueError) -> T
    ) throws(SIPValueError) -> T {
        var text = self
        let result = text.withUTF8 { bytes in
            Result<T, SIPValueError>(catching: { () throws(SIPValueError) -> T in try body(bytes) })
        }
        return try result.get()
    }
}

extension SIPHeaderValueScanner {
    /// Byte-for-byte comparison of the range with a string.
    static func equals(_ bytes: Bytes, _ range: Range<Int>, _ text: String) -> Bool {
        text.withSIPBytes { other in
            guard other.count == range.count else { return false }
            for k in 0..<other.count where other[k] != bytes[range.lowerBound + k] { return false }
            return true
        }
    }

    /// Byte-for-byte comparison of the range with a literal.
    @inline(__always)
    static func equalsLiteral(_ bytes: Bytes, _ range: Range<Int>, _ literal: StaticString) -> Bool {
        guard range.count == literal.utf8CodeUnitCount else { return false }
        let start = literal.utf8Start
        for k in 0..<range.count where start[k] != bytes[range.lowerBound + k] { return false }
        return true
    }

    /// Compares a header-name token with a lower-case literal: OR-ing 0x20 folds A-Z and leaves
    /// the other token bytes that can match (`-`, digits) alone (RFC 3261 §7.3.1).
    @inline(__always)
    static func equalsFolded(_ bytes: Bytes, _ range: Range<Int>, _ lower: StaticString) -> Bool {
        let start = lower.utf8Start
        for k in 0..<range.count where bytes[range.lowerBound + k] | 0x20 != start[k] { return false }
        return true
    }
}
