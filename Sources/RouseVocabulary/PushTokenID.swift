/// The identity of a push token across posted tokens, bindings, dead marks and test-push claims
/// (decisions.md: token identity is family + token): an APNs token is the same token on Apple's
/// production and sandbox hosts, and APNs hex is compared in lower case. Holds the whole token:
/// never log it (`PushRecord.shorten` gives the form for people). A value, safe to share.
public struct PushTokenID: Hashable, Sendable, Comparable {
    public let family: PushProviderFamily
    public let token: String

    public init(family: PushProviderFamily, token: String) {
        self.family = family
        self.token = family == .apns ? token.lowercased() : token
    }

    /// `apns:abcd…`: the text form kept in the replica's change log (migration 500).
    public var key: String { "\(family.rawValue):\(token)" }

    /// Reads `key` back; nil when the family is unknown.
    public init?(key: String) {
        guard let colon = key.firstIndex(of: ":"), let family = PushProviderFamily(rawValue: String(key[..<colon])) else { return nil }
        self.init(family: family, token: String(key[key.index(after: colon)...]))
    }

    public static func < (lhs: PushTokenID, rhs: PushTokenID) -> Bool { lhs.key < rhs.key }
}

extension PushChannel {
    /// The token's identity, whatever the channel's kind or parameter.
    public var tokenID: PushTokenID { PushTokenID(family: family, token: token) }
}
