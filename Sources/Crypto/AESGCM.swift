import COpenSSL

/// AES-GCM through OpenSSL's EVP interface, with a 12-byte nonce and a 16-byte tag appended to
/// the ciphertext (the layout of an RFC 8188 record), for the key sizes Rouse uses: AES-128 for web
/// push (`AES128GCM`), AES-256 for secrets sealed at rest (`AES256GCM`). Each call makes and frees
/// its own cipher context; thread-safe.
enum AESGCM {
    static let nonceBytes = 12
    static let tagBytes = 16

    /// `ciphertext ‖ tag` of `plaintext`, with `additionalData` authenticated but not encrypted.
    static func seal(
        _ plaintext: [UInt8], key: [UInt8], nonce: [UInt8], additionalData: [UInt8], cipher: Cipher
    ) throws(KeyAgreementError) -> [UInt8] {
        try cipher.check(key: key, nonce: nonce)
        guard let context = EVP_CIPHER_CTX_new() else { throw KeyAgreementError("OpenSSL could not make a cipher context") }
        defer { EVP_CIPHER_CTX_free(context) }
        var output = [UInt8](repeating: 0, count: plaintext.count + tagBytes)
        var written: Int32 = 0
        var finalWritten: Int32 = 0
        var aadWritten: Int32 = 0
        let ok = output.withUnsafeMutableBufferPointer { out -> Bool in
            guard EVP_EncryptInit_ex(context, cipher.evp, nil, key, nonce) == 1,
                additionalData.isEmpty
                    || EVP_EncryptUpdate(context, nil, &aadWritten, additionalData, Int32(additionalData.count)) == 1,
                plaintext.withUnsafeBufferPointer({
                    EVP_EncryptUpdate(context, out.baseAddress, &written, $0.baseAddress, Int32($0.count))
                }) == 1,
                EVP_EncryptFinal_ex(context, out.baseAddress! + Int(written), &finalWritten) == 1
            else { return false }
            let tag = out.baseAddress! + Int(written + finalWritten)
            return EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(tagBytes), tag) == 1
        }
        guard ok, Int(written + finalWritten) == plaintext.count else { throw KeyAgreementError("OpenSSL could not encrypt with \(cipher.name)") }
        return output
    }

    /// The plaintext of `ciphertext ‖ tag`; throws when the tag does not verify (wrong key,
    /// altered ciphertext, or other `additionalData`).
    static func open(
        _ sealed: [UInt8], key: [UInt8], nonce: [UInt8], additionalData: [UInt8], cipher: Cipher
    ) throws(KeyAgreementError) -> [UInt8] {
        try cipher.check(key: key, nonce: nonce)
        guard sealed.count >= tagBytes else { throw KeyAgreementError("an \(cipher.name) ciphertext ends with a 16-byte tag") }
        guard let context = EVP_CIPHER_CTX_new() else { throw KeyAgreementError("OpenSSL could not make a cipher context") }
        defer { EVP_CIPHER_CTX_free(context) }
        let body = Array(sealed.dropLast(tagBytes))
        var tag = Array(sealed.suffix(tagBytes))
        var output = [UInt8](repeating: 0, count: body.count + tagBytes)
        var written: Int32 = 0
        var finalWritten: Int32 = 0
        var aadWritten: Int32 = 0
        let ok = output.withUnsafeMutableBufferPointer { out -> Bool in
            guard EVP_DecryptInit_ex(context, cipher.evp, nil, key, nonce) == 1,
                additionalData.isEmpty
                    || EVP_DecryptUpdate(context, nil, &aadWritten, additionalData, Int32(additionalData.count)) == 1,
                body.withUnsafeBufferPointer({ EVP_DecryptUpdate(context, out.baseAddress, &written, $0.baseAddress, Int32($0.count)) }) == 1,
                EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(tagBytes), &tag) == 1
            else { return false }
            return EVP_DecryptFinal_ex(context, out.baseAddress! + Int(written), &finalWritten) == 1
        }
        guard ok else { throw KeyAgreementError("the \(cipher.name) tag does not verify: wrong key, or altered ciphertext") }
        return Array(output.prefix(Int(written + finalWritten)))
    }

    /// The key size: which EVP cipher, and how long its key is.
    enum Cipher {
        case aes128, aes256

        var keyBytes: Int { self == .aes128 ? 16 : 32 }
        var name: String { self == .aes128 ? "AES-128-GCM" : "AES-256-GCM" }
        var evp: OpaquePointer? { self == .aes128 ? EVP_aes_128_gcm() : EVP_aes_256_gcm() }

        func check(key: [UInt8], nonce: [UInt8]) throws(KeyAgreementError) {
            guard key.count == keyBytes else { throw KeyAgreementError("an \(name) key is \(keyBytes) bytes, not \(key.count)") }
            guard nonce.count == AESGCM.nonceBytes else { throw KeyAgreementError("an AES-GCM nonce here is 12 bytes, not \(nonce.count)") }
        }
    }
}

/// AES-128-GCM (web push's aes128gcm content coding, RFC 8188), no additional data. Thread-safe.
public enum AES128GCM {
    public static let keyBytes = 16
    public static let nonceBytes = AESGCM.nonceBytes
    public static let tagBytes = AESGCM.tagBytes

    /// `ciphertext ‖ tag` of `plaintext`.
    public static func seal(_ plaintext: [UInt8], key: [UInt8], nonce: [UInt8]) throws(KeyAgreementError) -> [UInt8] {
        try AESGCM.seal(plaintext, key: key, nonce: nonce, additionalData: [], cipher: .aes128)
    }

    /// The plaintext of `ciphertext ‖ tag`; throws when the tag does not verify.
    public static func open(_ sealed: [UInt8], key: [UInt8], nonce: [UInt8]) throws(KeyAgreementError) -> [UInt8] {
        try AESGCM.open(sealed, key: key, nonce: nonce, additionalData: [], cipher: .aes128)
    }
}

/// AES-256-GCM with additional authenticated data (secrets sealed at rest, `SecretSeal`). Thread-safe.
public enum AES256GCM {
    public static let keyBytes = 32
    public static let nonceBytes = AESGCM.nonceBytes
    public static let tagBytes = AESGCM.tagBytes

    /// `ciphertext ‖ tag` of `plaintext`, `additionalData` authenticated with it.
    public static func seal(_ plaintext: [UInt8], key: [UInt8], nonce: [UInt8], additionalData: [UInt8]) throws(KeyAgreementError) -> [UInt8] {
        try AESGCM.seal(plaintext, key: key, nonce: nonce, additionalData: additionalData, cipher: .aes256)
    }

    /// The plaintext of `ciphertext ‖ tag`; throws when the tag does not verify for this key and
    /// `additionalData`.
    public static func open(_ sealed: [UInt8], key: [UInt8], nonce: [UInt8], additionalData: [UInt8]) throws(KeyAgreementError) -> [UInt8] {
        try AESGCM.open(sealed, key: key, nonce: nonce, additionalData: additionalData, cipher: .aes256)
    }
}

/// Opens AES-256-GCM values (`nonce ‖ ciphertext ‖ tag`) sealed under one key, the key's schedule
/// made once for them all rather than once a value as `AES256GCM.open` does (the start-up's
/// directory load opens two million). Not thread-safe: one per thread.
final class AES256GCMKeyedOpener {
    private let context: OpaquePointer

    init?(key: [UInt8]) {
        guard key.count == AES256GCM.keyBytes, let context = EVP_CIPHER_CTX_new() else { return nil }
        guard EVP_DecryptInit_ex(context, EVP_aes_256_gcm(), nil, key, nil) == 1 else {
            EVP_CIPHER_CTX_free(context)
            return nil
        }
        self.context = context
    }

    deinit { EVP_CIPHER_CTX_free(context) }

    /// The plaintext of `sealed` (`nonce ‖ ciphertext ‖ tag`); nil when it is too short or its tag
    /// does not verify for this key and `additionalData`.
    func open(_ sealed: UnsafeBufferPointer<UInt8>, additionalData: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        let bodyCount = sealed.count - AESGCM.nonceBytes - AESGCM.tagBytes
        guard bodyCount >= 0, let start = sealed.baseAddress else { return nil }
        var ok = false
        let plaintext = [UInt8](unsafeUninitializedCapacity: max(1, bodyCount)) { out, initialized in
            var written: Int32 = 0
            var finalWritten: Int32 = 0
            var aadWritten: Int32 = 0
            let tag = UnsafeMutableRawPointer(mutating: start + AESGCM.nonceBytes + bodyCount)
            ok = EVP_DecryptInit_ex(context, nil, nil, nil, start) == 1
                && (additionalData.isEmpty
                    || EVP_DecryptUpdate(context, nil, &aadWritten, additionalData.baseAddress, Int32(additionalData.count)) == 1)
                && EVP_DecryptUpdate(context, out.baseAddress, &written, start + AESGCM.nonceBytes, Int32(bodyCount)) == 1
                && EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(AESGCM.tagBytes), tag) == 1
                && EVP_DecryptFinal_ex(context, out.baseAddress! + Int(written), &finalWritten) == 1
            initialized = ok ? Int(written + finalWritten) : 0
        }
        return ok ? plaintext : nil
    }
}
