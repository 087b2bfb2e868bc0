public import Crypto

/// Why a web push message could not be encrypted or read. Never holds key material.
public struct WebPushError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String

    public init(_ description: String) {
        self.description = description
    }
}

/// RFC 8291 message encryption for web push: one aes128gcm record (RFC 8188) whose key and nonce
/// come from ECDH between a fresh sender key and the subscription's `p256dh`, mixed with its `auth`
/// secret. Pure functions; thread-safe.
///
/// The body is `salt (16) ‖ rs (4, big-endian) ‖ idlen (1) = 65 ‖ keyid = sender public key (65)`,
/// then the record: AES-128-GCM of `plaintext ‖ 0x02` (the last-record padding delimiter, no
/// padding) with its 16-byte tag.
public enum WebPushEncryption {
    /// The record size written in the header (RFC 8291 §4 suggests 4096).
    public static let recordSize: UInt32 = 4096
    /// Header bytes before the record: salt, record size, key id length, the 65-byte sender key.
    public static let headerBytes = 16 + 4 + 1 + 65
    /// The largest body push services must accept (RFC 8030 §7.2; 4096 bytes of payload).
    public static let maxBodyBytes = 4096
    /// The largest plaintext that fits `maxBodyBytes` in one record (delimiter and tag included).
    public static let maxPlaintextBytes = maxBodyBytes - headerBytes - 1 - AES128GCM.tagBytes

    /// The content-encryption key and nonce of one message (RFC 8291 §3.3–3.4, RFC 8188 §2.2–2.3).
    public struct DerivedKeys: Sendable, Equatable {
        public let contentEncryptionKey: [UInt8]
        public let nonce: [UInt8]
    }

    /// RFC 8291 §3.3–3.4: `IKM` from the ECDH secret, the auth secret and both public keys, then the
    /// aes128gcm CEK and nonce from `IKM` and the salt.
    public static func deriveKeys(
        sharedSecret: [UInt8], authSecret: [UInt8], userAgentPublicKey: [UInt8], applicationServerPublicKey: [UInt8], salt: [UInt8]
    ) -> DerivedKeys {
        let keyInfo = Array("WebPush: info".utf8) + [0] + userAgentPublicKey + applicationServerPublicKey
        let inputKeyMaterial = HKDF.deriveKey(salt: authSecret, inputKeyMaterial: sharedSecret, info: keyInfo, length: 32)
        let pseudoRandomKey = HKDF.extract(salt: salt, inputKeyMaterial: inputKeyMaterial)
        return DerivedKeys(
            contentEncryptionKey: HKDF.expand(
                pseudoRandomKey: pseudoRandomKey, info: Array("Content-Encoding: aes128gcm".utf8) + [0], length: AES128GCM.keyBytes),
            nonce: HKDF.expand(
                pseudoRandomKey: pseudoRandomKey, info: Array("Content-Encoding: nonce".utf8) + [0], length: AES128GCM.nonceBytes))
    }

    /// The aes128gcm body carrying `plaintext` to the subscription whose public key is `subscriber`
    /// and whose auth secret is `authSecret`. `senderKey` and `salt` are fresh for every message;
    /// tests pass RFC 8291 Appendix A's to get its exact bytes.
    public static func encrypt(
        _ plaintext: [UInt8], to subscriber: P256PublicKey, authSecret: [UInt8],
        senderKey: P256KeyPair = P256KeyPair.generate(), salt: [UInt8] = SecureRandom.bytes(16)
    ) throws(WebPushError) -> [UInt8] {
        guard authSecret.count == 16 else { throw WebPushError("the subscription's auth secret is \(authSecret.count) bytes, not 16") }
        guard salt.count == 16 else { throw WebPushError("the salt is \(salt.count) bytes, not 16") }
        guard plaintext.count <= maxPlaintextBytes else {
            throw WebPushError("the payload is \(plaintext.count) bytes; at most \(maxPlaintextBytes) fit one 4096-byte push")
        }
        let keys: DerivedKeys
        let record: [UInt8]
        do {
            let secret = try senderKey.sharedSecret(with: subscriber)
            keys = deriveKeys(
                sharedSecret: secret, authSecret: authSecret, userAgentPublicKey: subscriber.bytes,
                applicationServerPublicKey: senderKey.publicKey, salt: salt)
            // One record, so it is the last: the padding delimiter is 0x02 (RFC 8188 §2).
            record = try AES128GCM.seal(plaintext + [0x02], key: keys.contentEncryptionKey, nonce: keys.nonce)
        } catch {
            throw WebPushError("encryption failed: \(error)")
        }
        let size = recordSize
        let header = salt + [UInt8(size >> 24 & 0xFF), UInt8(size >> 16 & 0xFF), UInt8(size >> 8 & 0xFF), UInt8(size & 0xFF)]
            + [UInt8(senderKey.publicKey.count)] + senderKey.publicKey
        return header + record
    }

    /// The plaintext of an aes128gcm body, read with the subscription's private key and auth
    /// secret (what a browser does; tests use it to read what Rouse sent). Every record is read;
    /// padding is removed.
    public static func decrypt(_ body: [UInt8], with receiver: P256KeyPair, authSecret: [UInt8]) throws(WebPushError) -> [UInt8] {
        guard body.count >= 21 else { throw WebPushError("the body is shorter than an aes128gcm header") }
        let salt = Array(body[0..<16])
        let recordSize = Int(body[16]) << 24 | Int(body[17]) << 16 | Int(body[18]) << 8 | Int(body[19])
        let idLength = Int(body[20])
        guard recordSize >= 18, body.count >= 21 + idLength else { throw WebPushError("the aes128gcm header is malformed") }
        let senderPublicKey = Array(body[21..<(21 + idLength)])
        let records = Array(body[(21 + idLength)...])
        do {
            let sender = try P256PublicKey(uncompressedPoint: senderPublicKey)
            let keys = deriveKeys(
                sharedSecret: try receiver.sharedSecret(with: sender), authSecret: authSecret, userAgentPublicKey: receiver.publicKey,
                applicationServerPublicKey: senderPublicKey, salt: salt)
            var plaintext: [UInt8] = []
            var offset = 0
            var sequence: UInt64 = 0
            while offset < records.count {
                let end = min(records.count, offset + recordSize)
                var nonce = keys.nonce
                for index in 0..<8 { nonce[4 + index] ^= UInt8(sequence >> (56 - 8 * UInt64(index)) & 0xFF) }
                var padded = try AES128GCM.open(Array(records[offset..<end]), key: keys.contentEncryptionKey, nonce: nonce)
                while padded.last == 0 { padded.removeLast() }
                let isLast = end == records.count
                guard let delimiter = padded.popLast(), delimiter == (isLast ? 0x02 : 0x01) else {
                    throw WebPushError("record \(sequence) has no valid padding delimiter")
                }
                plaintext += padded
                offset = end
                sequence += 1
            }
            return plaintext
        } catch let error as WebPushError {
            throw error
        } catch {
            throw WebPushError("decryption failed: \(error)")
        }
    }
}
