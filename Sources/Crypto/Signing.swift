import Foundation
import COpenSSL

/// Why a key could not be loaded or used. The description names the problem (not PEM, wrong key
/// type, wrong curve, encrypted) and never contains key material.
public struct SigningError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String

    init(_ description: String) {
        self.description = description
        ERR_clear_error()
    }
}

/// A private key that signs JWTs: a P-256 key (ES256, APNs `.p8` keys) or an RSA key (RS256, FCM
/// service accounts). It owns its OpenSSL `EVP_PKEY` and frees it in `deinit`.
///
/// Threading: immutable after init; `sign` and `verify` make their own OpenSSL contexts, so one key
/// may sign from several threads at once (OpenSSL 3 treats a shared `EVP_PKEY` as read-only).
/// `description` never shows the key.
public final class SigningKey: @unchecked Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The JWS algorithm this key signs with.
    public enum Algorithm: String, Sendable {
        /// ECDSA P-256 with SHA-256; the signature is raw r‖s (64 bytes), as JWS wants.
        case es256 = "ES256"
        /// RSASSA-PKCS1-v1_5 with SHA-256.
        case rs256 = "RS256"
    }

    public let algorithm: Algorithm
    private let key: OpaquePointer

    private init(key: OpaquePointer, algorithm: Algorithm) {
        self.key = key
        self.algorithm = algorithm
    }

    deinit {
        EVP_PKEY_free(key)
    }

    public var description: String {
        switch algorithm {
        case .es256: return "P-256 private key"
        case .rs256: return "RSA private key (\(EVP_PKEY_get_bits(key)) bits)"
        }
    }

    public var debugDescription: String { description }

    /// Loads a P-256 private key from PEM (an APNs `.p8` file: PKCS#8 `BEGIN PRIVATE KEY`; SEC1
    /// `BEGIN EC PRIVATE KEY` is accepted too).
    public static func p256(pem: String) throws(SigningError) -> SigningKey {
        let key = try readPrivateKey(pem)
        guard EVP_PKEY_get_base_id(key) == EVP_PKEY_EC else {
            let found = kindName(key)
            EVP_PKEY_free(key)
            throw SigningError("the key is not a P-256 (EC) private key: it is \(found)")
        }
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        let ok = EVP_PKEY_get_group_name(key, &name, name.count, &length)
        let curve = ok == 1 ? String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self) : "unknown"
        guard curve == "prime256v1" || curve == "P-256" else {
            EVP_PKEY_free(key)
            throw SigningError("the key is an EC key on curve \(curve), not P-256")
        }
        return SigningKey(key: key, algorithm: .es256)
    }

    /// Loads an RSA private key from PEM (`BEGIN PRIVATE KEY` or `BEGIN RSA PRIVATE KEY`), as a
    /// Google service account's `private_key` holds it.
    public static func rsa(pem: String) throws(SigningError) -> SigningKey {
        let key = try readPrivateKey(pem)
        guard EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA else {
            let found = kindName(key)
            EVP_PKEY_free(key)
            throw SigningError("the key is not an RSA private key: it is \(found)")
        }
        guard EVP_PKEY_get_bits(key) >= 2048 else {
            let bits = EVP_PKEY_get_bits(key)
            EVP_PKEY_free(key)
            throw SigningError("the RSA key has \(bits) bits; at least 2048 are needed")
        }
        return SigningKey(key: key, algorithm: .rs256)
    }

    /// A new random P-256 key (for tests and tools).
    public static func generateP256() -> SigningKey {
        let context = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nil)
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer? = nil
        guard EVP_PKEY_keygen_init(context) == 1,
            EVP_PKEY_CTX_set_ec_paramgen_curve_nid(context, NID_X9_62_prime256v1) == 1,
            EVP_PKEY_keygen(context, &key) == 1, let key
        else { preconditionFailure("OpenSSL could not generate a P-256 key") }
        return SigningKey(key: key, algorithm: .es256)
    }

    /// A new random RSA key (for tests and tools).
    public static func generateRSA(bits: Int32 = 2048) -> SigningKey {
        let context = EVP_PKEY_CTX_new_id(EVP_PKEY_RSA, nil)
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer? = nil
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_CTX_set_rsa_keygen_bits(context, bits) == 1,
            EVP_PKEY_keygen(context, &key) == 1, let key
        else { preconditionFailure("OpenSSL could not generate an RSA key") }
        return SigningKey(key: key, algorithm: .rs256)
    }

    /// The private key as unencrypted PKCS#8 PEM (what a `.p8` file or a service account holds).
    /// Only tools and tests call this; Rouse never shows a stored key.
    public func privateKeyPEM() -> String {
        writePEM { PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) }
    }

    /// The public half as `BEGIN PUBLIC KEY` PEM.
    public func publicKeyPEM() -> String {
        writePEM { PEM_write_bio_PUBKEY($0, key) }
    }

    /// Signs `message` (SHA-256). ES256 gives raw r‖s (64 bytes), RS256 the PKCS#1 v1.5 signature.
    public func sign(_ message: [UInt8]) throws(SigningError) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw SigningError("OpenSSL could not make a signing context") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, key) == 1 else {
            throw SigningError("OpenSSL refused to sign with this \(description)")
        }
        var length = 0
        guard message.withUnsafeBufferPointer({ EVP_DigestSign(context, nil, &length, $0.baseAddress, $0.count) }) == 1 else {
            throw SigningError("OpenSSL could not size the signature")
        }
        var signature = [UInt8](repeating: 0, count: length)
        let ok = message.withUnsafeBufferPointer { input in
            signature.withUnsafeMutableBufferPointer { EVP_DigestSign(context, $0.baseAddress, &length, input.baseAddress, input.count) }
        }
        guard ok == 1 else { throw SigningError("OpenSSL could not sign with this \(description)") }
        signature.removeLast(signature.count - length)
        switch algorithm {
        case .rs256: return signature
        case .es256: return try Self.rawSignature(fromDER: signature)
        }
    }

    /// Checks a signature made by `sign` (ES256 raw r‖s, or RS256) with OpenSSL's verify.
    public func verify(signature: [UInt8], message: [UInt8]) -> Bool {
        let der: [UInt8]
        switch algorithm {
        case .rs256: der = signature
        case .es256:
            guard let converted = Self.derSignature(fromRaw: signature) else { return false }
            der = converted
        }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key) == 1 else { return false }
        let ok = der.withUnsafeBufferPointer { sig in
            message.withUnsafeBufferPointer { EVP_DigestVerify(context, sig.baseAddress, sig.count, $0.baseAddress, $0.count) }
        }
        ERR_clear_error()
        return ok == 1
    }

    /// DER `ECDSA-Sig-Value` → raw r‖s, each padded to 32 bytes (architecture.md).
    static func rawSignature(fromDER der: [UInt8]) throws(SigningError) -> [UInt8] {
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let parsed else { throw SigningError("OpenSSL gave an unreadable ECDSA signature") }
        defer { ECDSA_SIG_free(parsed) }
        var raw = [UInt8](repeating: 0, count: 64)
        let ok = raw.withUnsafeMutableBufferPointer { out in
            BN_bn2binpad(ECDSA_SIG_get0_r(parsed), out.baseAddress, 32) == 32
                && BN_bn2binpad(ECDSA_SIG_get0_s(parsed), out.baseAddress! + 32, 32) == 32
        }
        guard ok else { throw SigningError("OpenSSL gave an ECDSA signature that does not fit P-256") }
        return raw
    }

    /// Raw r‖s → DER, for OpenSSL's verify.
    static func derSignature(fromRaw raw: [UInt8]) -> [UInt8]? {
        guard raw.count == 64, let signature = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(signature) }
        let r = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, 32, nil) }
        let s = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + 32, 32, nil) }
        guard let r, let s, ECDSA_SIG_set0(signature, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        var output: UnsafeMutablePointer<UInt8>? = nil
        let length = i2d_ECDSA_SIG(signature, &output)
        guard length > 0, let output else { return nil }
        defer { CRYPTO_free(output, #fileID, #line) }
        return Array(UnsafeBufferPointer(start: output, count: Int(length)))
    }

    private static func readPrivateKey(_ pem: String) throws(SigningError) -> OpaquePointer {
        let trimmed = pem.trimmingCharacters(in: .whitespacesAndNewlines)
        guard trimmed.contains("-----BEGIN"), trimmed.contains("PRIVATE KEY-----") else {
            throw SigningError("the key is not a PEM private key (no BEGIN line)")
        }
        if trimmed.contains("ENCRYPTED") {
            throw SigningError("the key is encrypted; give the unencrypted key")
        }
        let bytes = Array(trimmed.utf8)
        let bio = bytes.withUnsafeBufferPointer { BIO_new_mem_buf($0.baseAddress, Int32($0.count)) }
        guard let bio else { throw SigningError("OpenSSL could not read the key (out of memory)") }
        // BIO_new_mem_buf does not copy: keep `bytes` alive until the key has been read.
        let key: OpaquePointer? = withExtendedLifetime(bytes) {
            // An empty passphrase, so that an encrypted key fails instead of prompting on a terminal.
            "".withCString { empty in
                PEM_read_bio_PrivateKey(bio, nil, nil, UnsafeMutableRawPointer(mutating: empty))
            }
        }
        BIO_free(bio)
        guard let key else { throw SigningError("the key's PEM text does not parse as a private key") }
        return key
    }

    private static func kindName(_ key: OpaquePointer) -> String {
        switch EVP_PKEY_get_base_id(key) {
        case EVP_PKEY_RSA: return "an RSA key"
        case EVP_PKEY_EC: return "an EC key"
        case EVP_PKEY_ED25519: return "an Ed25519 key"
        default: return "another kind of key"
        }
    }

    private func writePEM(_ write: (OpaquePointer) -> Int32) -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { preconditionFailure("OpenSSL could not make a memory BIO") }
        defer { BIO_free(bio) }
        precondition(write(bio) == 1, "OpenSSL could not write a PEM key")
        var data: UnsafeMutablePointer<CChar>? = nil
        let length = rouse_BIO_get_mem_data(bio, &data)
        guard let data, length > 0 else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
    }
}

/// A compact JWS (`header.claims.signature`, RFC 7515/7519) signed with a `SigningKey`: the APNs
/// provider token (ES256) and the Google OAuth2 assertion (RS256). Pure values; thread-safe.
public enum JSONWebToken {
    /// A JSON value in a JWT header or claim set.
    public enum Value: Sendable, Equatable {
        case string(String)
        case integer(Int64)
    }

    /// `base64url(header) . base64url(claims) . base64url(signature)`. Keys keep the given order;
    /// `alg` is added to the header first from the key's algorithm.
    public static func make(
        header: [(String, Value)] = [], claims: [(String, Value)], key: SigningKey
    ) throws(SigningError) -> String {
        let headerJSON = json([("alg", .string(key.algorithm.rawValue))] + header.filter { $0.0 != "alg" })
        let signingInput = Base64URL.encode(Array(headerJSON.utf8)) + "." + Base64URL.encode(Array(json(claims).utf8))
        let signature = try key.sign(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }

    /// A JSON object with the members in order.
    static func json(_ members: [(String, Value)]) -> String {
        var text = "{"
        for (index, (name, value)) in members.enumerated() {
            if index > 0 { text += "," }
            text += JSONString.quoted(name) + ":"
            switch value {
            case .string(let string): text += JSONString.quoted(string)
            case .integer(let number): text += String(number)
            }
        }
        return text + "}"
    }
}

extension Digest {
    /// SHA-1, only for name-based UUIDs (RFC 9562 version 5), never for security.
    public static func sha1<Bytes: Collection>(_ bytes: Bytes) -> [UInt8] where Bytes.Element == UInt8 {
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let input = Array(bytes)
        let ok = input.withUnsafeBytes { raw in
            output.withUnsafeMutableBufferPointer { EVP_Digest(raw.baseAddress, raw.count, $0.baseAddress, &length, EVP_sha1(), nil) }
        }
        precondition(ok == 1, "EVP_Digest failed for SHA-1")
        return Array(output.prefix(Int(length)))
    }
}
