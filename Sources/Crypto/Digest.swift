import COpenSSL

/// The hash functions Rouse uses (OpenSSL's EVP): MD5 and SHA-256 for SIP digest authentication
/// (RFC 7616/8760), SHA-256 elsewhere. Pure functions, thread-safe.
public enum Digest {
    /// A digest algorithm as SIP names it.
    public enum Algorithm: String, Sendable, CaseIterable {
        case md5 = "MD5"
        case sha256 = "SHA-256"

        /// The implementation, fetched from OpenSSL's default provider once: a legacy `EVP_md5()`
        /// handle is fetched again on every `EVP_DigestInit_ex`, most of the cost of a short hash.
        var evp: OpaquePointer? {
            switch self {
            case .md5: return Digest.fetchedMD5
            case .sha256: return Digest.fetchedSHA256
            }
        }

        /// The length of the digest in bytes.
        public var byteCount: Int { self == .md5 ? 16 : 32 }
    }

    nonisolated(unsafe) static let fetchedMD5: OpaquePointer? = EVP_MD_fetch(nil, "MD5", nil) ?? EVP_md5()
    nonisolated(unsafe) static let fetchedSHA256: OpaquePointer? = EVP_MD_fetch(nil, "SHA256", nil) ?? EVP_sha256()

    /// The raw digest of `bytes`.
    public static func hash<Bytes: Collection>(_ algorithm: Algorithm, _ bytes: Bytes) -> [UInt8] where Bytes.Element == UInt8 {
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let input = Array(bytes)
        let ok = input.withUnsafeBytes { raw in
            output.withUnsafeMutableBufferPointer { out in
                EVP_Digest(raw.baseAddress, raw.count, out.baseAddress, &length, algorithm.evp, nil)
            }
        }
        precondition(ok == 1, "EVP_Digest failed for \(algorithm.rawValue)")
        return Array(output.prefix(Int(length)))
    }

    /// The digest of a string's UTF-8 bytes, as lower-case hex (what SIP digest exchanges).
    public static func hex(_ algorithm: Algorithm, _ text: String) -> String {
        var stream = DigestStream(algorithm)
        stream.update(text)
        return stream.finish().hex
    }

    /// HMAC-SHA256 of `message` under `key`.
    public static func hmacSHA256(key: [UInt8], message: [UInt8]) -> [UInt8] {
        HMACSHA256Key(key).mac(message).bytes
    }

    /// Compares two byte strings in time that depends only on their lengths.
    public static func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }
}

/// Cryptographically secure random bytes (OpenSSL's RAND_bytes).
public enum SecureRandom {
    public static func bytes(_ count: Int) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: count)
        let ok = output.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32(count)) }
        precondition(ok == 1, "RAND_bytes failed")
        return output
    }

    /// `count` random bytes as lower-case hex.
    public static func hex(_ count: Int) -> String { Hex.encode(bytes(count)) }
}

/// Hex and base64url text forms of bytes.
public enum Hex {
    public static func encode<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes hex (either case); nil when the text is not whole bytes of hex.
    public static func decode(_ text: String) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = value(utf8[index]), let low = value(utf8[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        return out
    }

    /// The value of one hex digit (either case); nil for any other byte. Inlinable: a nonce's 64
    /// digits are read in other modules, where a call per digit cost more than the digit.
    @inlinable
    public static func value(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: return c - 0x30
        case 0x41...0x46: return c - 0x41 + 10
        case 0x61...0x66: return c - 0x61 + 10
        default: return nil
        }
    }
}

/// Base64url without padding (RFC 4648 §5), as JWTs use.
public enum Base64URL {
    public static func encode<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        let input = Array(bytes)
        var out: [UInt8] = []
        out.reserveCapacity((input.count + 2) / 3 * 4)
        var index = 0
        while index + 2 < input.count {
            let n = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
            out.append(alphabet[Int(n >> 6 & 63)])
            out.append(alphabet[Int(n & 63)])
            index += 3
        }
        let rest = input.count - index
        if rest == 1 {
            let n = UInt32(input[index]) << 16
            out += [alphabet[Int(n >> 18 & 63)], alphabet[Int(n >> 12 & 63)]]
        } else if rest == 2 {
            let n = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
            out += [alphabet[Int(n >> 18 & 63)], alphabet[Int(n >> 12 & 63)], alphabet[Int(n >> 6 & 63)]]
        }
        return String(decoding: out, as: UTF8.self)
    }
}
