import COpenSSL

/// Slow salted password hashing for administrators: PBKDF2-HMAC-SHA256 (OpenSSL's
/// `PKCS5_PBKDF2_HMAC`), stored as `pbkdf2-sha256$<iterations>$<salt hex>$<hash hex>`.
/// Pure functions, thread-safe; each hash or verification costs `iterations` HMACs (tens of
/// milliseconds at the default), so keep it off latency-sensitive threads or cache its result.
public enum Password {
    /// Iterations for new hashes.
    public static let defaultIterations = 210_000
    /// Salt length in bytes.
    public static let saltLength = 16
    /// Derived key length in bytes.
    public static let hashLength = 32
    /// The stored form's prefix.
    static let scheme = "pbkdf2-sha256"

    /// A new stored hash of `password` with a random salt.
    public static func hash(_ password: String, iterations: Int = defaultIterations) -> String {
        let salt = SecureRandom.bytes(saltLength)
        let derived = pbkdf2SHA256(password: Array(password.utf8), salt: salt, iterations: iterations, length: hashLength)
        return "\(scheme)$\(iterations)$\(Hex.encode(salt))$\(Hex.encode(derived))"
    }

    /// True when `password` matches `stored`. A malformed stored hash is checked against a dummy
    /// one of the default cost, so the time spent does not tell the two apart; the comparison is
    /// constant-time.
    public static func verify(_ password: String, against stored: String) -> Bool {
        let parts = stored.split(separator: "$", omittingEmptySubsequences: false)
        var iterations = defaultIterations
        var salt = [UInt8](repeating: 0, count: saltLength)
        var expected: [UInt8] = []
        var wellFormed = false
        if parts.count == 4, parts[0] == scheme, let count = Int(parts[1]), count > 0, count <= 10_000_000,
            let storedSalt = Hex.decode(String(parts[2])), !storedSalt.isEmpty,
            let storedHash = Hex.decode(String(parts[3])), !storedHash.isEmpty, storedHash.count <= 64
        {
            iterations = count
            salt = storedSalt
            expected = storedHash
            wellFormed = true
        }
        let length = wellFormed ? expected.count : hashLength
        let derived = pbkdf2SHA256(password: Array(password.utf8), salt: salt, iterations: iterations, length: length)
        let equal = Digest.constantTimeEquals(derived, wellFormed ? expected : [UInt8](repeating: 0, count: length))
        return wellFormed && equal
    }

    /// Raw PBKDF2-HMAC-SHA256 (RFC 8018 §5.2) of `length` bytes.
    public static func pbkdf2SHA256(password: [UInt8], salt: [UInt8], iterations: Int, length: Int) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: length)
        let ok = password.withUnsafeBufferPointer { passwordBytes in
            salt.withUnsafeBufferPointer { saltBytes in
                output.withUnsafeMutableBufferPointer { out in
                    passwordBytes.withMemoryRebound(to: CChar.self) { passwordChars in
                        PKCS5_PBKDF2_HMAC(
                            passwordChars.baseAddress, Int32(passwordChars.count), saltBytes.baseAddress, Int32(saltBytes.count),
                            Int32(iterations), EVP_sha256(), Int32(length), out.baseAddress)
                    }
                }
            }
        }
        precondition(ok == 1, "PKCS5_PBKDF2_HMAC failed")
        return output
    }
}
