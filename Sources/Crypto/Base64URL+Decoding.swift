extension Base64URL {
    /// Decodes base64url (RFC 4648 §5), with or without `=` padding; plain base64's `+` and `/`
    /// are accepted too, since browsers and libraries hand out both. Nil for anything else
    /// (whitespace, bad length, stray characters).
    public static func decode(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { decode(utf8: $0) }
    }

    /// `decode(_:)` of UTF-8 bytes, in one pass with one allocation (the start-up's directory load
    /// decodes two million sealed values).
    public static func decode(utf8 input: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        var count = input.count
        while count > 0, input[count - 1] == UInt8(ascii: "=") { count -= 1 }
        let padding = input.count - count
        guard count % 4 != 1, padding <= 2, padding == 0 || (count + padding) % 4 == 0 else { return nil }
        var valid = true
        let output = [UInt8](unsafeUninitializedCapacity: count / 4 * 3 + max(0, count % 4 - 1)) { out, written in
            var accumulator: UInt32 = 0
            var bits = 0
            for character in UnsafeBufferPointer(rebasing: input[..<count]) {
                guard let value = sextet(character) else {
                    valid = false
                    break
                }
                accumulator = accumulator << 6 | UInt32(value)
                bits += 6
                if bits >= 8 {
                    bits -= 8
                    out[written] = UInt8(truncatingIfNeeded: accumulator >> UInt32(bits))
                    written += 1
                }
            }
            // The bits past the last whole byte must be zero (one spelling per byte string).
            if accumulator & (1 << UInt32(bits) - 1) != 0 { valid = false }
        }
        return valid ? output : nil
    }

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
