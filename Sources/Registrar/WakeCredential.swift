public import Crypto
public import Foundation
public import RouseVocabulary
public import SIPMessage

/// What a wake credential names (docs/app-builders.md "Wake in one round trip"): one call, the
/// extension called, the device pushed (by digests of its ring token and `+sip.instance`, never
/// the values), the Rouse instance that holds the call, and the end of the call's wake wait. A
/// value; thread-safe.
public struct WakeCredentialClaims: Sendable, Equatable {
    /// Random, once per credential: what "used once" remembers.
    public var id: String
    /// The call (its journey id).
    public var callID: UUID
    public var aor: AddressOfRecord
    /// `tag` of the ring channel's token: the REGISTER's Contact must carry that token.
    public var device: String
    /// `tag` of the device's `+sip.instance`, when its bindings carry one: the Contact must carry it too.
    public var instance: String?
    /// The Rouse instance that pushed (and holds the call): only it accepts the credential.
    public var holder: String
    /// When the call's wake wait ends.
    public var expiresAt: Date

    public init(
        id: String = SecureRandom.hex(16), callID: UUID, aor: AddressOfRecord, device: String, instance: String?, holder: String, expiresAt: Date
    ) {
        self.id = id
        self.callID = callID
        self.aor = aor
        self.device = device
        self.instance = instance
        self.holder = holder
        self.expiresAt = expiresAt
    }

    /// The device part of a credential (and of a call token): a digest of a push identity or an
    /// instance id, 96 bits of SHA-256 in hex.
    public static func tag(_ text: String) -> String {
        String(Hex.encode(Digest.hash(.sha256, Array(text.utf8))).prefix(24))
    }

    /// Whether a binding is the device named: it carries the ring token, and the instance id
    /// when one is named.
    public func names(_ binding: Binding) -> Bool {
        binding.aor == aor && binding.pushChannels.contains { Self.tag($0.tokenID.key) == device }
            && (instance == nil || binding.instance.map(Self.tag) == instance)
    }

    /// Whether a binding is a registration of that device: the named instance, or the ring token
    /// (an older binding of a device without an instance id, which the fresh one replaces).
    public func isSameDevice(_ binding: Binding) -> Bool {
        guard binding.aor == aor else { return false }
        if let instance, binding.instance.map(Self.tag) == instance { return true }
        return binding.pushChannels.contains { Self.tag($0.tokenID.key) == device }
    }

    /// Whether a REGISTER's changes stay within what the credential admits: at least one binding
    /// of the named device saved, and nothing else changed (no other device's binding removed to
    /// make room or stripped of a token, no binding of another extension). `before`: the
    /// extension's bindings before the REGISTER. A saved binding of the named instance replaces
    /// that instance's flow, never adds one beside it (RFC 5626 reg-ids): a copy of the credential
    /// can then leave no flow behind that the device's own next REGISTER would not replace.
    public func admits(_ changes: [BindingChange], before: [Binding]) -> Bool {
        var saved = false
        for change in changes {
            switch change {
            case .save(let binding), .refresh(let binding):
                guard names(binding) else { return false }
                if instance != nil, before.contains(where: { $0.instance == binding.instance && $0.regID != binding.regID }) { return false }
                saved = true
            case .delete(let binding, _):
                guard isSameDevice(binding) else { return false }
            }
        }
        return saved
    }
}

/// Issues and checks wake credentials: a JWT (HS256) with audience `rouse:wake`, under a key
/// derived from the shared `call_token_secret` for this purpose alone, so a call token is never a
/// wake credential nor a wake credential a call token. A value; thread-safe.
public struct WakeCredentialSigner: Sendable {
    public static let audience = "rouse:wake"
    private let key: HS256TokenKey

    public init(secret: [UInt8]) {
        key = HS256TokenKey(secret: secret, purpose: "rouse wake credential v1", audience: Self.audience)
    }

    public func issue(_ claims: WakeCredentialClaims, now: Date) -> String {
        var members: [(name: String, json: String)] = [
            ("jti", JSONString.quoted(claims.id)), ("sub", JSONString.quoted(claims.aor.description)),
            ("call", JSONString.quoted(claims.callID.uuidString.lowercased())), ("dev", JSONString.quoted(claims.device)),
        ]
        if let instance = claims.instance { members.append(("sin", JSONString.quoted(instance))) }
        members += [
            ("ins", JSONString.quoted(claims.holder)), ("iat", String(Int64(now.timeIntervalSince1970))),
            // Milliseconds (RFC 7519 NumericDate allows a fraction): the wait ends on time, not at the next second.
            ("exp", String(format: "%.3f", (claims.expiresAt.timeIntervalSince1970 * 1000).rounded(.down) / 1000)),
        ]
        return key.sign(members)
    }

    /// The claims of a credential this key signed, still valid at `now`; nil for anything else.
    public func verify(_ credential: String, now: Date) -> WakeCredentialClaims? {
        guard case .success(let object) = key.verify(credential, now: now),
            let id = object["jti"] as? String, let subject = object["sub"] as? String, let aor = AddressOfRecord(parsing: subject),
            let callText = object["call"] as? String, let callID = UUID(uuidString: callText), let device = object["dev"] as? String,
            let holder = object["ins"] as? String, let expiry = object["exp"] as? Double
        else { return nil }
        return WakeCredentialClaims(
            id: id, callID: callID, aor: aor, device: device, instance: object["sin"] as? String, holder: holder,
            expiresAt: Date(timeIntervalSince1970: expiry))
    }
}

/// The registrar's side of wake credentials: which REGISTER one admits without a challenge, and
/// which were used. Only the instance that pushed accepts a credential (it holds the call), each
/// once: the ids used are kept in memory until their credentials expire. A value kept in
/// `RegistrarCore`; not thread-safe: one owner.
public struct WakeCredentialGate: Sendable {
    /// The header a woken app puts its credential in.
    public static let header = SIPHeaderName("X-Rouse-Wake")
    public let signer: WakeCredentialSigner
    /// This Rouse instance.
    public let instanceID: String
    /// Credentials used (or retired because their call ended), by id, with when they expire.
    public private(set) var spent: [String: Date] = [:]
    private var lastPrune = Date.distantPast

    public init(signer: WakeCredentialSigner, instanceID: String) {
        self.signer = signer
        self.instanceID = instanceID
    }

    /// The claims of the credential `request` carries for `aor`, spending it: nil (and the
    /// ordinary challenge) when there is none, or it is malformed, forged, expired, used, for
    /// another extension or held by another instance.
    public mutating func spend(_ request: SIPRequest, for aor: AddressOfRecord, now: Date) -> WakeCredentialClaims? {
        guard let text = request.headers[Self.header]?.trimmingSIPWhitespace, !text.isEmpty else { return nil }
        prune(now: now)
        guard let claims = signer.verify(text, now: now), claims.holder == instanceID, claims.aor == aor, spent[claims.id] == nil
        else { return nil }
        spent[claims.id] = claims.expiresAt
        return claims
    }

    /// Credentials that must no longer be accepted (their call ended before its wait did).
    public mutating func retire(_ ids: [String], until: Date) {
        for id in ids { spent[id] = until }
    }

    /// Forgets ids whose credentials have expired (they are refused as expired anyway); at most
    /// every 10 s.
    mutating func prune(now: Date) {
        guard now.timeIntervalSince(lastPrune) > 10 else { return }
        lastPrune = now
        spent = spent.filter { $0.value > now }
    }
}

extension PushTokenID {
    /// The digest that names this token in call tokens and wake credentials.
    public var tag: String { WakeCredentialClaims.tag(key) }
}
