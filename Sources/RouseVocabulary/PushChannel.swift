/// A push service a device can be woken through (RFC 8599 `pn-provider`), normalised: Linphone's
/// `apple` is `apns`, its `firebase`/`google`/`android` are `fcm` (protocol.md).
public enum PushProvider: String, Hashable, Sendable, CaseIterable {
    /// Apple's production host.
    case apns
    /// Apple's sandbox host (a development build's token).
    case apnsSandbox = "apns.dev"
    case fcm
    case webpush

    /// Which token namespace a token belongs to: APNs tokens are the same whichever host.
    public var family: PushProviderFamily {
        switch self {
        case .apns, .apnsSandbox: return .apns
        case .fcm: return .fcm
        case .webpush: return .webpush
        }
    }
}

/// A push service's token namespace (decisions.md: token identity is family + token).
public enum PushProviderFamily: String, Hashable, Sendable, CaseIterable {
    case apns, fcm, webpush
}

/// What a push channel is for (protocol.md, the Linphone dialect): the PushKit token that rings
/// (`voip`), the regular APNs token for background and alert pushes (`remote`), or a provider with
/// one kind of token (FCM, web push: `standard`).
public enum PushChannelKind: String, Hashable, Sendable, CaseIterable {
    case voip, remote, standard
}

/// One way to wake a device: provider, token (`pn-prid`; APNs hex in lower case) and parameter
/// (`pn-param`, e.g. `TEAMID.com.example.app.voip` or a Firebase project).
public struct PushChannel: Hashable, Sendable {
    public var provider: PushProvider
    public var token: String
    public var param: String?
    public var kind: PushChannelKind

    public init(provider: PushProvider, token: String, param: String?, kind: PushChannelKind) {
        self.provider = provider
        self.token = provider.family == .apns ? token.lowercased() : token
        self.param = param
        self.kind = kind
    }

    public var family: PushProviderFamily { provider.family }
}
