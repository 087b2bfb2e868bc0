/// Reads the JSON PostgreSQL gives back for a binding's lists — `array_to_json(text[])` and
/// `json_agg(json_build_array(text, …))` — straight from UTF-8 bytes: arrays whose elements are
/// strings, `null` or arrays of the same, nothing else. Loading a million bindings at start-up
/// costs no `JSONSerialization` (no Foundation objects, no boxing per element).
///
/// Threading: pure functions.
enum JSONArrayReader {
    /// One element of such an array.
    enum Element: Equatable {
        case string(String)
        case null
        case array([Element])

        /// The string, or nil for anything else.
        var text: String? {
            if case .string(let value) = self { return value }
            return nil
        }
    }

    /// The elements of the array `text` spells; nil when it is not such an array (an object, a
    /// number, bad escapes, text after the array).
    static func elements(_ text: String) -> [Element]? {
        var text = text
        return text.withUTF8 { elements(utf8: $0) }
    }

    /// The same from UTF-8 bytes (a value read in place from a PostgreSQL result).
    static func elements(utf8: UnsafeBufferPointer<UInt8>) -> [Element]? {
        var cursor = Cursor(bytes: utf8)
        guard case .array(let items)? = cursor.value(depth: 0) else { return nil }
        cursor.skipSpace()
        return cursor.position == utf8.count ? items : nil
    }

    /// The strings of a flat array (a `null` element is dropped); nil when `text` is not one.
    static func strings(_ text: String) -> [String]? {
        var text = text
        return text.withUTF8 { strings(utf8: $0) }
    }

    /// The same from UTF-8 bytes.
    static func strings(utf8: UnsafeBufferPointer<UInt8>) -> [String]? {
        guard let items = elements(utf8: utf8) else { return nil }
        var strings: [String] = []
        strings.reserveCapacity(items.count)
        for item in items {
            switch item {
            case .string(let value): strings.append(value)
            case .null: continue
            case .array: return nil
            }
        }
        return strings
    }

    /// Deepest nesting read; deeper input is refused rather than recursed into.
    private static let maxDepth = 8

    private struct Cursor {
        let bytes: UnsafeBufferPointer<UInt8>
        var position = 0

        mutating func skipSpace() {
            while position < bytes.count {
                switch bytes[position] {
                case 0x20, 0x09, 0x0a, 0x0d: position += 1
                default: return
                }
            }
        }

        mutating func value(depth: Int) -> Element? {
            skipSpace()
            guard position < bytes.count else { return nil }
            switch bytes[position] {
            case UInt8(ascii: "\""): return string().map(Element.string)
            case UInt8(ascii: "["): return depth < maxDepth ? array(depth: depth) : nil
            case UInt8(ascii: "n"):
                guard position + 4 <= bytes.count, bytes[position + 1] == UInt8(ascii: "u"), bytes[position + 2] == UInt8(ascii: "l"),
                    bytes[position + 3] == UInt8(ascii: "l")
                else { return nil }
                position += 4
                return .null
            default: return nil
            }
        }

        private mutating func array(depth: Int) -> Element? {
            position += 1
            var items: [Element] = []
            skipSpace()
            if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
                position += 1
                return .array(items)
            }
            while true {
                guard let item = value(depth: depth + 1) else { return nil }
                items.append(item)
                skipSpace()
                guard position < bytes.count else { return nil }
                let byte = bytes[position]
                position += 1
                if byte == UInt8(ascii: "]") { return .array(items) }
                guard byte == UInt8(ascii: ",") else { return nil }
            }
        }

        /// A quoted string at `position`; runs without escapes are copied at once.
        private mutating func string() -> String? {
            position += 1
            var out: [UInt8] = []
            var runStart = position
            while position < bytes.count {
                let byte = bytes[position]
                if byte == UInt8(ascii: "\"") {
                    let text: String
                    if out.isEmpty {
                        text = String(decoding: UnsafeBufferPointer(rebasing: bytes[runStart..<position]), as: UTF8.self)
                    } else {
                        out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<position]))
                        text = String(decoding: out, as: UTF8.self)
                    }
                    position += 1
                    return text
                }
                if byte < 0x20 { return nil }
                guard byte == UInt8(ascii: "\\") else {
                    position += 1
                    continue
                }
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<position]))
                position += 1
                guard position < bytes.count, unescape(into: &out) else { return nil }
                runStart = position
            }
            return nil
        }

        /// The escape after a backslash, appended as UTF-8.
        private mutating func unescape(into out: inout [UInt8]) -> Bool {
            let byte = bytes[position]
            position += 1
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(byte)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0c)
            case UInt8(ascii: "n"): out.append(0x0a)
            case UInt8(ascii: "r"): out.append(0x0d)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                guard var scalar = hex4() else { return false }
                if (0xD800..<0xDC00).contains(scalar) {
                    guard position + 2 <= bytes.count, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u")
                    else { return false }
                    position += 2
                    guard let low = hex4(), (0xDC00..<0xE000).contains(low) else { return false }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                guard let unicode = Unicode.Scalar(scalar) else { return false }
                out.append(contentsOf: UTF8.encode(unicode)!)
            default: return false
            }
            return true
        }

        private mutating func hex4() -> UInt32? {
            guard position + 4 <= bytes.count else { return nil }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[position]
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: return nil
                }
                value = value << 4 | UInt32(digit)
                position += 1
            }
            return value
        }
    }
}
