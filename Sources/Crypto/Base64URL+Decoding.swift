extension Base64URL {
    /// Decodes base64url (RFC 4648 §5), with or without `=` padding; plain base64's `+` and `/`
    /// are accepted too, since browsers and libraries hand out both. Nil for anything else
    /// (whitespace, bad length, stray characters).
    public static func decode(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { decode(utf8: $0) }
    }

    /// `decode(_:)` of UTF-8 bytes: four characters at a time through a table, one allocation
    /// (the start-up's directory load decodes two million sealed values).
    public static func decode(utf8 input: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        var count = input.count
        while count > 0, input[count - 1] == UInt8(ascii: "=") { count -= 1 }
        let padding = input.count - count
        guard count % 4 != 1, padding <= 2, padding == 0 || (count + padding) % 4 == 0 else { return nil }
        let whole = count / 4 * 4
        var valid = true
        let decodedCount = whole / 4 * 3 + max(0, count % 4 - 1)
        let output = [UInt8](unsafeUninitializedCapacity: decodedCount) { out, written in
            sextets.withUnsafeBufferPointer { table in
                var position = 0
                var end = 0
                // A table entry is 0xFF for a byte that is no base64 digit: any of the four sets bits 6-7.
                while position < whole {
                    let a = UInt32(table[Int(input[position])]), b = UInt32(table[Int(input[position + 1])])
                    let c = UInt32(table[Int(input[position + 2])]), d = UInt32(table[Int(input[position + 3])])
                    guard (a | b | c | d) & 0xC0 == 0 else { return }
                    let n = a &<< 18 | b &<< 12 | c &<< 6 | d
                    out[end] = UInt8(truncatingIfNeeded: n &>> 16)
                    out[end + 1] = UInt8(truncatingIfNeeded: n &>> 8)
                    out[end + 2] = UInt8(truncatingIfNeeded: n)
                    position += 4
                    end += 3
                }
                var n: UInt32 = 0
                for index in whole..<count {
                    let value = UInt32(table[Int(input[index])])
                    guard value & 0xC0 == 0 else { return }
                    n |= value &<< (18 - 6 * UInt32(index - whole))
                }
                // The bits past the last whole byte must be zero (one spelling per byte string).
                switch count - whole {
                case 2 where n & 0xFFFF == 0:
                    out[end] = UInt8(truncatingIfNeeded: n &>> 16)
                    end += 1
                case 3 where n & 0xFF == 0:
                    out[end] = UInt8(truncatingIfNeeded: n &>> 16)
                    out[end + 1] = UInt8(truncatingIfNeeded: n &>> 8)
                    end += 2
                case 0: break
                default: return
                }
                written = end
            }
            valid = written == decodedCount
        }
        return valid ? output : nil
    }

    /// Each byte's value as a base64 or base64url digit, 0xFF for a byte that is none.
    private static let sextets: [UInt8] = (0...255).map { sextet(UInt8($0)) ?? 0xFF }

    private static func sextet(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): return character - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): return character - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return character - UInt8(ascii: "0") + 52
        case UInt8(ascii: "-"), UInt8(ascii: "+"): return 62
        case UInt8(ascii: "_"), UInt8(ascii: "/"): return 63
        default: return nil
        }
    }
}
