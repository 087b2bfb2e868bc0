/// Parsers for header values that SIP shares across headers: lists, quoted strings, URIs,
/// name-addr, Via and CSeq. Pure functions over the value's UTF-8 bytes.
public enum SIPHeaderValueScanner {
    /// Splits a list header value at commas outside quoted strings and `<...>`; trims each element
    /// and drops empty ones.
    public static func splitList(_ value: String) -> [String] {
        let bytes = Array(value.utf8)
        var result: [String] = []
        var start = 0
        var inQuotes = false
        var angle = 0
        var i = 0
        while i < bytes.count {
            let c = bytes[i]
            if inQuotes {
                if c == UInt8(ascii: "\\") { i += 2; continue }
                if c == UInt8(ascii: "\"") { inQuotes = false }
            } else {
                switch c {
                case UInt8(ascii: "\""): inQuotes = true
                case UInt8(ascii: "<"): angle += 1
                case UInt8(ascii: ">"): if angle > 0 { angle -= 1 }
                case UInt8(ascii: ","):
                    if angle == 0 {
                        appendTrimmed(bytes[start..<i], to: &result)
                        start = i + 1
                    }
                default: break
                }
            }
            i += 1
        }
        if start <= bytes.count { appendTrimmed(bytes[start..<min(bytes.count, max(start, bytes.count))], to: &result) }
        return result
    }

    private static func appendTrimmed(_ slice: ArraySlice<UInt8>, to result: inout [String]) {
        let trimmed = trim(slice)
        if !trimmed.isEmpty { result.append(String(decoding: trimmed, as: UTF8.self)) }
    }

    static func isWhitespace(_ c: UInt8) -> Bool {
        c == 0x20 || c == 0x09 || c == 0x0D || c == 0x0A
    }

    static func trim(_ slice: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var lower = slice.startIndex, upper = slice.endIndex
        while lower < upper, isWhitespace(slice[lower]) { lower += 1 }
        while upper > lower, isWhitespace(slice[upper - 1]) { upper -= 1 }
        return slice[lower..<upper]
    }

    /// Writes `text` as a quoted-string, escaping `"` and `\` (RFC 3261 §25.1). CR, LF and NUL
    /// are dropped so that no value can inject a header line.
    public static func quote(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"", "\\": out += "\\" + String(scalar)
            case "\r", "\n", "\0": continue
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// Removes the quotes and escapes of a quoted-string; returns other text unchanged.
    public static func unquote(_ text: String) -> String {
        let bytes = Array(text.utf8)
        guard bytes.count >= 2, bytes.first == UInt8(ascii: "\""), bytes.last == UInt8(ascii: "\"") else {
            return text
        }
        var out: [UInt8] = []
        var i = 1
        while i < bytes.count - 1 {
            if bytes[i] == UInt8(ascii: "\\"), i + 1 < bytes.count - 1 {
                out.append(bytes[i + 1])
                i += 2
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses `;name=value;name` parameters from the bytes (the leading `;` optional). Values may be
    /// quoted strings, kept with their quotes. Stops at `stop` bytes outside quotes.
    static func parseParameters(_ bytes: ArraySlice<UInt8>, separator: UInt8 = UInt8(ascii: ";"))
        throws(SIPValueError) -> SIPParameters
    {
        var items: [SIPParameter] = []
        var i = bytes.startIndex
        let end = bytes.endIndex
        while i < end {
            while i < end, isWhitespace(bytes[i]) || bytes[i] == separator { i += 1 }
            if i >= end { break }
            let nameStart = i
            while i < end, bytes[i] != UInt8(ascii: "="), bytes[i] != separator { i += 1 }
            let name = trim(bytes[nameStart..<i])
            guard !name.isEmpty else { throw SIPValueError("empty parameter name") }
            guard name.allSatisfy(isTokenByte) else { throw SIPValueError("bad parameter name") }
            var value: String? = nil
            if i < end, bytes[i] == UInt8(ascii: "=") {
                i += 1
                while i < end, isWhitespace(bytes[i]) { i += 1 }
                let valueStart = i
                if i < end, bytes[i] == UInt8(ascii: "\"") {
                    i += 1
                    var closed = false
                    while i < end {
                        if bytes[i] == UInt8(ascii: "\\") { i += 2; continue }
                        if bytes[i] == UInt8(ascii: "\"") { closed = true; i += 1; break }
                        i += 1
                    }
                    guard closed else { throw SIPValueError("unterminated quoted parameter value") }
                    i = min(i, end)
                    value = String(decoding: bytes[valueStart..<i], as: UTF8.self)
                    while i < end, bytes[i] != separator {
                        guard isWhitespace(bytes[i]) else { throw SIPValueError("text after quoted value") }
                        i += 1
                    }
                } else {
                    while i < end, bytes[i] != separator { i += 1 }
                    value = String(decoding: trim(bytes[valueStart..<i]), as: UTF8.self)
                }
            }
            items.append(SIPParameter(String(decoding: name, as: UTF8.self), value))
        }
        return SIPParameters(items)
    }

    /// RFC 3261 token characters, plus the bytes SIP parameters use in practice (`+`, `.`, `!`...).
    static func isTokenByte(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "!"), UInt8(ascii: "%"),
            UInt8(ascii: "*"), UInt8(ascii: "_"), UInt8(ascii: "+"), UInt8(ascii: "`"),
            UInt8(ascii: "'"), UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }
}

/// Why a header value could not be parsed; the text names the problem for a 400 reason phrase.
public struct SIPValueError: Error, Hashable, Sendable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
