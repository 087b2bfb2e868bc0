import Crypto
public import Foundation

/// Rouse's VAPID key pair (RFC 8292): a P-256 key that signs the JWT sent with every web push, and
/// its public key, which browsers subscribe with (`applicationServerKey`) and which Rouse serves at
/// `/api/v1/push/vapid-public-key` and in `Feature-Caps` as `+sip.vapid`. Made once and kept in
/// PostgreSQL so every instance signs with the same key.
///
/// The private key is a secret: `description` never shows it. Immutable; thread-safe.
public final class VAPIDKeys: Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    let signingKey: SigningKey
    /// The public key, an uncompressed P-256 point (65 bytes).
    public let publicKey: [UInt8]

    /// Loads the key pair from its PKCS#8 PEM.
    public init(privateKeyPEM: String) throws(WebPushError) {
        do {
            let pair = try P256KeyPair(pem: privateKeyPEM)
            signingKey = try SigningKey.p256(pem: privateKeyPEM)
            publicKey = pair.publicKey
        } catch {
            throw WebPushError("the VAPID key cannot be used: \(error)")
        }
    }

    /// A new key pair and its PEM, to be stored.
    public static func generate() -> (keys: VAPIDKeys, privateKeyPEM: String) {
        let pem = P256KeyPair.generate().privateKeyPEM()
        guard let keys = try? VAPIDKeys(privateKeyPEM: pem) else { preconditionFailure("a new P-256 key could not be read back") }
        return (keys, pem)
    }

    /// The public key in base64url (no padding): the `k` of the Authorization header, the
    /// `applicationServerKey` browsers subscribe with, the value of `+sip.vapid`.
    public var publicKeyBase64URL: String { Base64URL.encode(publicKey) }

    public var description: String { "VAPID key \(publicKeyBase64URL.prefix(12))…" }
    public var debugDescription: String { description }

    /// The signed JWT for one push service (RFC 8292 §2): `aud` the endpoint's origin, `exp` (at
    /// most 24 hours ahead), `sub` the operator's contact (`mailto:` or `https:`).
    public func token(audience: String, expiresAt: Date, subject: String) throws(WebPushError) -> String {
        do {
            return try JSONWebToken.make(
                header: [("typ", .string("JWT"))],
                claims: [
                    ("aud", .string(audience)), ("exp", .integer(Int64(expiresAt.timeIntervalSince1970.rounded(.down)))),
                    ("sub", .string(subject)),
                ],
                key: signingKey)
        } catch {
            throw WebPushError("the VAPID JWT could not be signed: \(error)")
        }
    }

    /// `vapid t=<JWT>, k=<public key>` (RFC 8292 §3).
    public func authorization(token: String) -> String {
        "vapid t=\(token), k=\(publicKeyBase64URL)"
    }
}

/// Signed VAPID JWTs kept per push-service origin, so a busy server signs once every few hours per
/// push service, not once per push. A lock guards the cache; thread-safe.
final class VAPIDTokenCache: @unchecked Sendable {
    /// How long a JWT is made for (RFC 8292 §2: `exp` at most 24 hours ahead).
    static let lifetime: TimeInterval = 12 * 3600
    /// A cached JWT is replaced once it has less than this left.
    static let renewBefore: TimeInterval = 3600

    private let lock = NSLock()
    private var tokens: [String: (token: String, expiresAt: Date)] = [:]

    /// A JWT for `audience` valid for at least `renewBefore`, signed now if needed.
    func token(for audience: String, keys: VAPIDKeys, subject: String, now: Date) throws(WebPushError) -> String {
        lock.lock()
        let cached = tokens[audience]
        lock.unlock()
        if let cached, cached.expiresAt.timeIntervalSince(now) > Self.renewBefore { return cached.token }
        let expiresAt = now.addingTimeInterval(Self.lifetime)
        let token = try keys.token(audience: audience, expiresAt: expiresAt, subject: subject)
        lock.lock()
        // Bounded: one entry per push service; a runaway set of origins only re-signs.
        if tokens.count >= 1024 { tokens.removeAll() }
        tokens[audience] = (token, expiresAt)
        lock.unlock()
        return token
    }
}
