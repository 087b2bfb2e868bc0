extension Base64URL {
    /// Decodes base64url (RFC 4648 §5), with or without `=` padding; plain base64's `+` and `/`
    /// are accepted too, since browsers and libraries hand out both. Nil for anything else
    /// (whitespace, bad length, stray characters).
    public static func decode(_ text: String) -> [UInt8]? {
        var values: [UInt8] = []
        values.reserveCapacity(text.utf8.count)
        var padding = 0
        for character in text.utf8 {
            if character == UInt8(ascii: "=") {
                padding += 1
                continue
            }
            guard padding == 0, let value = sextet(character) else { return nil }
            values.append(value)
        }
        guard values.count % 4 != 1, padding <= 2, padding == 0 || (values.count + padding) % 4 == 0 else { return nil }
        var output: [UInt8] = []
        output.reserveCapacity(values.count * 3 / 4)
        var index = 0
        while index + 3 < values.count {
            let n = UInt32(values[index]) << 18 | UInt32(values[index + 1]) << 12 | UInt32(values[index + 2]) << 6 | UInt32(values[index + 3])
            output.append(UInt8(n >> 16 & 0xFF))
            output.append(UInt8(n >> 8 & 0xFF))
            output.append(UInt8(n & 0xFF))
            index += 4
        }
        switch values.count - index {
        case 2:
            let n = UInt32(values[index]) << 18 | UInt32(values[index + 1]) << 12
            guard n & 0xFFFF == 0 else { return nil }
            output.append(UInt8(n >> 16 & 0xFF))
        case 3:
            let n = UInt32(values[index]) << 18 | UInt32(values[index + 1]) << 12 | UInt32(values[index + 2]) << 6
            guard n & 0xFF == 0 else { return nil }
            output.append(UInt8(n >> 16 & 0xFF))
            output.append(UInt8(n >> 8 & 0xFF))
        default: break
        }
        return output
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
