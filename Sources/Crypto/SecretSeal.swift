import Foundation

/// One key that seals secrets at rest: 32 random bytes and the short id envelopes name it by. A
/// value; thread-safe. Never printed: its description is its id.
public struct SecretSealKey: Sendable, CustomStringConvertible {
    let bytes: [UInt8]
    /// 8 hex digits of SHA-256 over a label and the key: names the key in envelopes and messages
    /// without saying anything about it.
    public let id: String

    /// A key of exactly 32 bytes.
    public init(bytes: [UInt8]) throws(SecretSealError) {
        guard bytes.count == AES256GCM.keyBytes else {
            throw SecretSealError("a secrets key is 32 random bytes, not \(bytes.count)")
        }
        self.bytes = bytes
        id = Hex.encode(Digest.hash(.sha256, Array("rouse secrets key id ".utf8) + bytes).prefix(4))
    }

    /// A key written as 64 hex digits or as base64/base64url (`openssl rand -hex 32`,
    /// `openssl rand -base64 32`); surrounding white space is ignored.
    public init(text: String) throws(SecretSealError) {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard let bytes = (trimmed.utf8.count == 64 ? Hex.decode(trimmed) : nil) ?? Base64URL.decode(trimmed) else {
            throw SecretSealError("a secrets key is 32 random bytes written as 64 hex digits or in base64 (openssl rand -hex 32)")
        }
        try self.init(bytes: bytes)
    }

    /// A new random key.
    public static func generate() -> SecretSealKey {
        // 32 bytes always make a key.
        try! SecretSealKey(bytes: SecureRandom.bytes(AES256GCM.keyBytes))
    }

    /// The key as 64 hex digits, for writing a key file.
    public var hexText: String { Hex.encode(bytes) }

    public var description: String { "secrets key \(id)" }
}

/// Seals secrets for storage (AES-256-GCM) and opens them again: the keyring Rouse's storage layer
/// uses for every secret column (docs/operators.md, "Secrets at rest").
///
/// A sealed value is the text `v1:<key id>:<base64url(nonce ‖ ciphertext ‖ tag)>`, with a fresh
/// random 12-byte nonce each time. The caller's `context` (the table, column and row a value belongs
/// to, e.g. `extensions.ha1_md5:1001@example.com`) is authenticated with it, so a sealed value copied
/// to another row or column does not open. The first key seals; every key opens what it sealed, so
/// a key can be replaced without a moment in which stored values cannot be read.
///
/// A value; thread-safe.
public struct SecretSeal: Sendable, CustomStringConvertible {
    /// The key new values are sealed with.
    public let current: SecretSealKey
    /// Older keys that still open what they sealed (during a rotation).
    public let older: [SecretSealKey]

    /// The envelope's version prefix.
    static let version = "v1"

    public init(current: SecretSealKey, older: [SecretSealKey] = []) {
        self.current = current
        self.older = older.filter { $0.id != current.id }
    }

    /// Keys written one a line (blank lines and `#` comments ignored): the first is the current key.
    public init(keyText text: String) throws(SecretSealError) {
        var keys: [SecretSealKey] = []
        for line in text.split(whereSeparator: { $0 == "\n" || $0 == "\r" }) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty, !trimmed.hasPrefix("#") else { continue }
            keys.append(try SecretSealKey(text: trimmed))
        }
        guard let first = keys.first else { throw SecretSealError("the secrets key text holds no key") }
        self.init(current: first, older: Array(keys.dropFirst()))
    }

    /// True for text in the sealed form (of any key).
    public static func isSealed(_ text: String) -> Bool { text.hasPrefix(version + ":") }

    /// The id of the key `envelope` was sealed with, or nil when it is not a sealed value.
    public static func keyID(of envelope: String) -> String? {
        let parts = envelope.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == version else { return nil }
        return String(parts[1])
    }

    /// `plaintext` sealed with the current key, bound to `context`.
    public func seal(_ plaintext: String, context: String) throws(SecretSealError) -> String {
        let nonce = SecureRandom.bytes(AES256GCM.nonceBytes)
        let body: [UInt8]
        do {
            body = try AES256GCM.seal(Array(plaintext.utf8), key: current.bytes, nonce: nonce, additionalData: Array(context.utf8))
        } catch {
            throw SecretSealError("cannot seal \(context): \(error)")
        }
        return "\(Self.version):\(current.id):\(Base64URL.encode(nonce + body))"
    }

    /// The plaintext of `envelope`, which must have been sealed for `context` by one of the keys.
    /// Throws, naming the context and key ids but never the value, when it is not a sealed value,
    /// was sealed by a key not given, was altered, or belongs to another row or column.
    public func open(_ envelope: String, context: String) throws(SecretSealError) -> String {
        try Opener(self).open(envelope, context: context)
    }

    /// What opens many values on one thread (see `Opener`).
    public func opener() -> Opener { Opener(self) }

    /// Opens sealed values as `SecretSeal.open` does, each key's cipher set up once for every value
    /// it opens and each envelope read as bytes: the start-up's directory load opens two million.
    /// Not thread-safe: one per thread.
    public final class Opener {
        private let seal: SecretSeal
        /// Every key, current first, and its cipher once made.
        private let keys: [SecretSealKey]
        private var ciphers: [AES256GCMKeyedOpener?]

        init(_ seal: SecretSeal) {
            self.seal = seal
            keys = [seal.current] + seal.older
            ciphers = Array(repeating: nil, count: keys.count)
        }

        /// The plaintext of `envelope`, sealed for `context` (see `SecretSeal.open`).
        public func open(_ envelope: String, context: String) throws(SecretSealError) -> String {
            var envelope = envelope
            var context = context
            let outcome = envelope.withUTF8 { text in context.withUTF8 { additionalData in open(text, additionalData: additionalData) } }
            switch outcome {
            case .opened(let plaintext):
                guard let text = String(validating: plaintext, as: UTF8.self) else {
                    throw SecretSealError("\(context) opened to bytes that are not text")
                }
                return text
            case .notSealed:
                throw SecretSealError("\(context) is not a sealed value (it should start with \(SecretSeal.version):)")
            case .unknownKey(let keyID):
                throw SecretSealError(
                    "\(context) is sealed with secrets key \(keyID), but the key given is \(seal.keyIDs): "
                        + "set secrets_key_file (or ROUSE_SECRETS_KEY) to the key the database was sealed with")
            case .damaged:
                throw SecretSealError("\(context) is a damaged sealed value")
            case .altered(let keyID):
                throw SecretSealError(
                    "\(context) does not open with secrets key \(keyID): it was altered, or copied from another row or column")
            }
        }

        private enum Outcome {
            case opened([UInt8]), notSealed, unknownKey(String), damaged, altered(String)
        }

        /// `v1:<key id>:<base64url(nonce ‖ ciphertext ‖ tag)>` opened.
        private func open(_ text: UnsafeBufferPointer<UInt8>, additionalData: UnsafeBufferPointer<UInt8>) -> Outcome {
            let prefix = 3
            guard text.count >= prefix, text[0] == UInt8(ascii: "v"), text[1] == UInt8(ascii: "1"), text[2] == UInt8(ascii: ":"),
                let colon = text[prefix...].firstIndex(of: UInt8(ascii: ":"))
            else { return .notSealed }
            let keyID = UnsafeBufferPointer(rebasing: text[prefix..<colon])
            guard let index = keys.firstIndex(where: { $0.id.utf8.elementsEqual(keyID) }) else {
                return .unknownKey(String(decoding: keyID, as: UTF8.self))
            }
            guard let sealed = Base64URL.decode(utf8: UnsafeBufferPointer(rebasing: text[(colon + 1)...])),
                sealed.count >= AES256GCM.nonceBytes + AES256GCM.tagBytes
            else { return .damaged }
            if ciphers[index] == nil { ciphers[index] = AES256GCMKeyedOpener(key: keys[index].bytes) }
            guard let plaintext = sealed.withUnsafeBufferPointer({ ciphers[index]?.open($0, additionalData: additionalData) }) else {
                return .altered(keys[index].id)
            }
            return .opened(plaintext)
        }
    }

    /// The ids of every key, current first, for messages.
    public var keyIDs: String { ([current] + older).map(\.id).joined(separator: ", ") }

    public var description: String { "secrets keys \(keyIDs)" }
}

/// Why a secret could not be sealed or opened, or a key not read; never holds a secret. A value.
public struct SecretSealError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String

    public init(_ description: String) {
        self.description = description
    }
}
