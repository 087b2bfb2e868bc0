public import Crypto
public import Foundation
import Push
public import Registrar
public import RouseVocabulary

/// What a call token says: which call, which extension, which device of it, and until when. A
/// value; thread-safe.
public struct CallTokenClaims: Sendable, Equatable {
    /// The call as Rouse knows it (its journey id).
    public var callID: UUID
    /// The UUID apps see in the push (`uuid`, UUID v5 of the SIP Call-ID).
    public var callUUID: String
    public var aor: AddressOfRecord
    /// The device the token was pushed to (a digest of its push identity, never the token).
    public var device: String
    /// The instance that holds the call.
    public var instanceID: String
    public var expiresAt: Date

    public init(callID: UUID, callUUID: String, aor: AddressOfRecord, device: String, instanceID: String, expiresAt: Date) {
        self.callID = callID
        self.callUUID = callUUID
        self.aor = aor
        self.device = device
        self.instanceID = instanceID
        self.expiresAt = expiresAt
    }

    /// Whether `pathID`, the `{call_id}` of a request, names this call: the SIP Call-ID from the
    /// push's `call_id`, or the push's `uuid`.
    public func names(_ pathID: String) -> Bool {
        pathID.lowercased() == callUUID || PushPayload.uuid(forCallID: pathID) == callUUID
    }
}

/// Issues and checks call tokens (issue 11): a JWT (HS256) that a ring push carries as
/// `call_token`, good for declining and reading the state of that one call, for that one device,
/// until the call can no longer ring plus a margin. The key is shared by every instance through
/// PostgreSQL and used for nothing else; the audience claim (`rouse:call`) keeps the token from
/// meaning anything elsewhere. A value; thread-safe.
public struct CallTokenSigner: Sendable {
    public static let audience = "rouse:call"
    private let key: HS256TokenKey

    /// `secret` is the shared `call_token_secret`; the signing key is derived from it so the same
    /// bytes never sign two kinds of thing.
    public init(secret: [UInt8]) {
        key = HS256TokenKey(secret: secret, purpose: "rouse call token v1", audience: Self.audience)
    }

    /// The device part of a token: a digest of the device's push identity.
    public static func deviceTag(_ device: PushTokenID) -> String {
        device.tag
    }

    public func issue(_ claims: CallTokenClaims, now: Date = Date()) -> String {
        key.sign([
            ("sub", JSONString.quoted(claims.aor.description)),
            ("call", JSONString.quoted(claims.callID.uuidString.lowercased())),
            ("uuid", JSONString.quoted(claims.callUUID)),
            ("dev", JSONString.quoted(claims.device)),
            ("ins", JSONString.quoted(claims.instanceID)),
            ("iat", String(Int64(now.timeIntervalSince1970))),
            ("exp", String(Int64(claims.expiresAt.timeIntervalSince1970.rounded(.up)))),
        ])
    }

    /// Why a token is refused (the HTTP answer is the same 401 for each; the log may say which).
    public typealias Refusal = HS256TokenKey.Refusal

    /// The claims of a token this key signed, still valid at `now`.
    public func verify(_ token: String, now: Date = Date()) -> Result<CallTokenClaims, Refusal> {
        key.verify(token, now: now).flatMap { object in
            guard let subject = object["sub"] as? String, let aor = AddressOfRecord(parsing: subject),
                let callText = object["call"] as? String, let callID = UUID(uuidString: callText),
                let uuid = object["uuid"] as? String, let device = object["dev"] as? String, let instance = object["ins"] as? String,
                let expiry = object["exp"] as? Double
            else { return .failure(.malformed) }
            let expiresAt = Date(timeIntervalSince1970: TimeInterval(expiry))
            return .success(CallTokenClaims(callID: callID, callUUID: uuid, aor: aor, device: device, instanceID: instance, expiresAt: expiresAt))
        }
    }
}
