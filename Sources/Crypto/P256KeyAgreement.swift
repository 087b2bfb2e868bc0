import COpenSSL

/// Why a P-256 key could not be made, read or used for key agreement. The description names the
/// problem and never contains key material.
public struct KeyAgreementError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String

    init(_ description: String) {
        self.description = description
        ERR_clear_error()
    }
}

/// A P-256 private key for ECDH (RFC 8291's application-server key, a VAPID key pair): it owns its
/// OpenSSL `EVP_PKEY` and frees it in `deinit`.
///
/// Threading: immutable after init; `sharedSecret` makes its own OpenSSL context, so one key may be
/// used from several threads at once. `description` never shows the private key.
public final class P256KeyPair: @unchecked Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    private let key: OpaquePointer
    /// n, the order of P-256's base point (SEC 2 §2.4.2), big-endian.
    static let groupOrder: [UInt8] = [
        0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
        0xBC, 0xE6, 0xFA, 0xAD, 0xA7, 0x17, 0x9E, 0x84, 0xF3, 0xB9, 0xCA, 0xC2, 0xFC, 0x63, 0x25, 0x51,
    ]
    /// The public key as an uncompressed point (`0x04 ‖ X ‖ Y`, 65 bytes; X9.62), as web push
    /// carries it (`p256dh`, the VAPID `k`, the aes128gcm `keyid`).
    public let publicKey: [UInt8]

    private init(key: OpaquePointer) throws(KeyAgreementError) {
        guard let point = P256PublicKey.encodedPoint(of: key) else {
            EVP_PKEY_free(key)
            throw KeyAgreementError("OpenSSL could not export the P-256 public key")
        }
        self.key = key
        publicKey = point
    }

    deinit {
        EVP_PKEY_free(key)
    }

    public var description: String { "P-256 key pair (public \(Base64URL.encode(publicKey.prefix(8)))…)" }
    public var debugDescription: String { description }

    /// A new random key pair (a fresh RFC 8291 sender key per message, or a VAPID key).
    public static func generate() -> P256KeyPair {
        let context = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nil)
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer? = nil
        guard EVP_PKEY_keygen_init(context) == 1,
            EVP_PKEY_CTX_set_ec_paramgen_curve_nid(context, NID_X9_62_prime256v1) == 1,
            EVP_PKEY_keygen(context, &key) == 1, let key, let pair = try? P256KeyPair(key: key)
        else { preconditionFailure("OpenSSL could not generate a P-256 key") }
        return pair
    }

    /// The key whose private scalar is `rawPrivateKey` (32 bytes, big-endian), as RFC 8291's
    /// Appendix A and JWK `d` give it; the public point is computed from it.
    public convenience init(rawPrivateKey: [UInt8]) throws(KeyAgreementError) {
        guard rawPrivateKey.count == 32 else {
            throw KeyAgreementError("a P-256 private key is 32 bytes, not \(rawPrivateKey.count)")
        }
        // SEC1 §3.2.1: 0 < d < n (big-endian byte strings of equal length compare as numbers).
        guard rawPrivateKey.contains(where: { $0 != 0 }), rawPrivateKey.lexicographicallyPrecedes(Self.groupOrder) else {
            throw KeyAgreementError("a P-256 private key lies between 1 and the group order")
        }
        // SEC1 ECPrivateKey (RFC 5915) without the optional public key: OpenSSL computes it.
        let der: [UInt8] = [0x30, 0x31, 0x02, 0x01, 0x01, 0x04, 0x20] + rawPrivateKey
            + [0xA0, 0x0A, 0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07]
        let key: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_PrivateKey(EVP_PKEY_EC, nil, &cursor, buffer.count)
        }
        guard let key else { throw KeyAgreementError("OpenSSL could not read the P-256 private key") }
        try self.init(key: key)
    }

    /// Loads a P-256 private key from PEM (PKCS#8 `BEGIN PRIVATE KEY`, or SEC1 `BEGIN EC PRIVATE KEY`).
    public convenience init(pem: String) throws(KeyAgreementError) {
        let bytes = Array(pem.utf8)
        guard let bio = bytes.withUnsafeBufferPointer({ BIO_new_mem_buf($0.baseAddress, Int32($0.count)) }) else {
            throw KeyAgreementError("OpenSSL could not read the key (out of memory)")
        }
        // BIO_new_mem_buf does not copy: keep `bytes` alive until the key has been read. An empty
        // passphrase, so that an encrypted key fails instead of prompting on a terminal.
        let key: OpaquePointer? = withExtendedLifetime(bytes) {
            "".withCString { empty in PEM_read_bio_PrivateKey(bio, nil, nil, UnsafeMutableRawPointer(mutating: empty)) }
        }
        BIO_free(bio)
        guard let key else { throw KeyAgreementError("the PEM text is not an unencrypted private key") }
        guard P256PublicKey.isP256(key) else {
            EVP_PKEY_free(key)
            throw KeyAgreementError("the key is not a P-256 (prime256v1) key")
        }
        try self.init(key: key)
    }

    /// The private key as unencrypted PKCS#8 PEM, to be stored where only Rouse reads it. Never
    /// log it or show it.
    public func privateKeyPEM() -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { preconditionFailure("OpenSSL could not make a memory BIO") }
        defer { BIO_free(bio) }
        precondition(PEM_write_bio_PrivateKey(bio, key, nil, nil, 0, nil, nil) == 1, "OpenSSL could not write a PEM key")
        var data: UnsafeMutablePointer<CChar>? = nil
        let length = rouse_BIO_get_mem_data(bio, &data)
        guard let data, length > 0 else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
    }

    /// ECDH (SEC1 §3.3.1): the X coordinate of this key's scalar times `peer`'s point, 32 bytes.
    public func sharedSecret(with peer: P256PublicKey) throws(KeyAgreementError) -> [UInt8] {
        guard let context = EVP_PKEY_CTX_new(key, nil) else { throw KeyAgreementError("OpenSSL could not make an ECDH context") }
        defer { EVP_PKEY_CTX_free(context) }
        var length = 0
        guard EVP_PKEY_derive_init(context) == 1, peer.withKey({ EVP_PKEY_derive_set_peer(context, $0) }) == 1,
            EVP_PKEY_derive(context, nil, &length) == 1
        else { throw KeyAgreementError("OpenSSL refused ECDH with this peer key") }
        var secret = [UInt8](repeating: 0, count: length)
        guard secret.withUnsafeMutableBufferPointer({ EVP_PKEY_derive(context, $0.baseAddress, &length) }) == 1 else {
            throw KeyAgreementError("OpenSSL could not derive the ECDH secret")
        }
        return Array(secret.prefix(length))
    }
}

/// A P-256 public key read from an uncompressed point (a subscription's `p256dh`, a VAPID `k`, the
/// sender key of an aes128gcm header); reading checks the point is on the curve. Owns its
/// `EVP_PKEY`. Immutable; thread-safe.
public final class P256PublicKey: @unchecked Sendable {
    private let key: OpaquePointer
    /// The uncompressed point it was read from (65 bytes).
    public let bytes: [UInt8]

    /// The DER SubjectPublicKeyInfo prefix of an id-ecPublicKey on prime256v1 (RFC 5480) whose
    /// BIT STRING holds a 65-byte uncompressed point.
    private static let subjectPublicKeyInfoPrefix: [UInt8] = [
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01,
        0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ]

    public init(uncompressedPoint point: [UInt8]) throws(KeyAgreementError) {
        guard point.count == 65, point[0] == 0x04 else {
            throw KeyAgreementError("a P-256 public key is an uncompressed point: 65 bytes starting with 0x04 (got \(point.count) bytes)")
        }
        let der = Self.subjectPublicKeyInfoPrefix + point
        let key: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_PUBKEY(nil, &cursor, buffer.count)
        }
        guard let key else { throw KeyAgreementError("the point is not on the P-256 curve") }
        self.key = key
        bytes = point
        ERR_clear_error()
    }

    deinit {
        EVP_PKEY_free(key)
    }

    func withKey<Result>(_ body: (OpaquePointer) -> Result) -> Result {
        body(key)
    }

    /// An EVP_PKEY's public key as an uncompressed point, or nil.
    static func encodedPoint(of key: OpaquePointer) -> [UInt8]? {
        var output: UnsafeMutablePointer<UInt8>? = nil
        let length = EVP_PKEY_get1_encoded_public_key(key, &output)
        guard length == 65, let output else {
            if let output { CRYPTO_free(output, #fileID, #line) }
            return nil
        }
        defer { CRYPTO_free(output, #fileID, #line) }
        return Array(UnsafeBufferPointer(start: output, count: length))
    }

    /// Whether an EVP_PKEY is an EC key on prime256v1.
    static func isP256(_ key: OpaquePointer) -> Bool {
        guard EVP_PKEY_get_base_id(key) == EVP_PKEY_EC else { return false }
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_group_name(key, &name, name.count, &length) == 1 else { return false }
        let curve = String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return curve == "prime256v1" || curve == "P-256"
    }
}
