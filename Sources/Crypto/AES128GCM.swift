import COpenSSL

/// AES-128-GCM through OpenSSL's EVP interface, with a 12-byte nonce and a 16-byte tag appended to
/// the ciphertext (the layout of an RFC 8188 record). Each call makes and frees its own cipher
/// context; thread-safe.
public enum AES128GCM {
    public static let keyBytes = 16
    public static let nonceBytes = 12
    public static let tagBytes = 16

    /// `ciphertext ‖ tag` of `plaintext` (no additional data).
    public static func seal(_ plaintext: [UInt8], key: [UInt8], nonce: [UInt8]) throws(KeyAgreementError) -> [UInt8] {
        try check(key: key, nonce: nonce)
        guard let context = EVP_CIPHER_CTX_new() else { throw KeyAgreementError("OpenSSL could not make a cipher context") }
        defer { EVP_CIPHER_CTX_free(context) }
        var output = [UInt8](repeating: 0, count: plaintext.count + tagBytes)
        var written: Int32 = 0
        var finalWritten: Int32 = 0
        let ok = output.withUnsafeMutableBufferPointer { out -> Bool in
            guard EVP_EncryptInit_ex(context, EVP_aes_128_gcm(), nil, key, nonce) == 1,
                plaintext.withUnsafeBufferPointer({
                    EVP_EncryptUpdate(context, out.baseAddress, &written, $0.baseAddress, Int32($0.count))
                }) == 1,
                EVP_EncryptFinal_ex(context, out.baseAddress! + Int(written), &finalWritten) == 1
            else { return false }
            let tag = out.baseAddress! + Int(written + finalWritten)
            return EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(tagBytes), tag) == 1
        }
        guard ok, Int(written + finalWritten) == plaintext.count else { throw KeyAgreementError("OpenSSL could not encrypt with AES-128-GCM") }
        return output
    }

    /// The plaintext of `ciphertext ‖ tag`; throws when the tag does not verify.
    public static func open(_ sealed: [UInt8], key: [UInt8], nonce: [UInt8]) throws(KeyAgreementError) -> [UInt8] {
        try check(key: key, nonce: nonce)
        guard sealed.count >= tagBytes else { throw KeyAgreementError("an AES-128-GCM ciphertext ends with a 16-byte tag") }
        guard let context = EVP_CIPHER_CTX_new() else { throw KeyAgreementError("OpenSSL could not make a cipher context") }
        defer { EVP_CIPHER_CTX_free(context) }
        let body = Array(sealed.dropLast(tagBytes))
        var tag = Array(sealed.suffix(tagBytes))
        var output = [UInt8](repeating: 0, count: body.count + tagBytes)
        var written: Int32 = 0
        var finalWritten: Int32 = 0
        let ok = output.withUnsafeMutableBufferPointer { out -> Bool in
            guard EVP_DecryptInit_ex(context, EVP_aes_128_gcm(), nil, key, nonce) == 1,
                body.withUnsafeBufferPointer({ EVP_DecryptUpdate(context, out.baseAddress, &written, $0.baseAddress, Int32($0.count)) }) == 1,
                EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(tagBytes), &tag) == 1
            else { return false }
            return EVP_DecryptFinal_ex(context, out.baseAddress! + Int(written), &finalWritten) == 1
        }
        guard ok else { throw KeyAgreementError("the AES-128-GCM tag does not verify: wrong key, or altered ciphertext") }
        return Array(output.prefix(Int(written + finalWritten)))
    }

    private static func check(key: [UInt8], nonce: [UInt8]) throws(KeyAgreementError) {
        guard key.count == keyBytes else { throw KeyAgreementError("an AES-128 key is 16 bytes, not \(key.count)") }
        guard nonce.count == nonceBytes else { throw KeyAgreementError("an AES-GCM nonce here is 12 bytes, not \(nonce.count)") }
    }
}
