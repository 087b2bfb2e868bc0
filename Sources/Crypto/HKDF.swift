/// HKDF with SHA-256 (RFC 5869), on OpenSSL's HMAC (`Digest.hmacSHA256`): what RFC 8291 and
/// RFC 8188 derive their keys with. Pure functions; thread-safe.
public enum HKDF {
    /// HKDF-Extract: `PRK = HMAC-SHA-256(salt, IKM)` (32 bytes).
    public static func extract(salt: [UInt8], inputKeyMaterial: [UInt8]) -> [UInt8] {
        Digest.hmacSHA256(key: salt, message: inputKeyMaterial)
    }

    /// HKDF-Expand: `T(1) ‖ T(2) ‖ …` cut to `length` bytes, where
    /// `T(n) = HMAC-SHA-256(PRK, T(n-1) ‖ info ‖ n)`; at most 255 × 32 bytes.
    public static func expand(pseudoRandomKey: [UInt8], info: [UInt8], length: Int) -> [UInt8] {
        precondition(length >= 0 && length <= 255 * 32, "HKDF-SHA256 gives at most 8160 bytes")
        var output: [UInt8] = []
        var previous: [UInt8] = []
        var counter: UInt8 = 1
        while output.count < length {
            previous = Digest.hmacSHA256(key: pseudoRandomKey, message: previous + info + [counter])
            output += previous
            counter &+= 1
        }
        return Array(output.prefix(length))
    }

    /// Extract then expand.
    public static func deriveKey(salt: [UInt8], inputKeyMaterial: [UInt8], info: [UInt8], length: Int) -> [UInt8] {
        expand(pseudoRandomKey: extract(salt: salt, inputKeyMaterial: inputKeyMaterial), info: info, length: length)
    }
}
