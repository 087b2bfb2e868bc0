public import RouseVocabulary
public import SIPMessage

/// The push parameters of one Contact (RFC 8599 §4.1, and the Linphone dialect of protocol.md),
/// turned into push channels.
public struct PushParameters: Hashable, Sendable {
    /// Why a Contact's push parameters cannot be used; `description` suits a 400 reason phrase.
    public enum Problem: Error, Hashable, Sendable, CustomStringConvertible {
        case unknownProvider(String)
        case tokenCountMismatch
        case emptyToken

        public var description: String {
            switch self {
            case .unknownProvider(let name): return "Unknown pn-provider \(name)"
            case .tokenCountMismatch: return "pn-prid tokens do not match pn-param services"
            case .emptyToken: return "Empty pn-prid"
            }
        }
    }

    /// The provider named (normalised).
    public var provider: PushProvider
    /// The device's channels; empty for a capability query.
    public var channels: [PushChannel]
    /// A REGISTER naming a provider but no token asks only whether it is supported (RFC 8599 §5.2).
    public var isCapabilityQuery: Bool { channels.isEmpty }

    /// Reads the parameters from a Contact: URI parameters, or header parameters after `>` (both
    /// occur in the field). Nil when the Contact carries none.
    public static func parse(_ contact: SIPNameAddress) throws(Problem) -> PushParameters? {
        func value(_ name: String) -> String? {
            (contact.uri.parameters.value(name) ?? contact.parameters.value(name)).map(unescape)
        }
        var providerName = value("pn-provider")
        var token = value("pn-prid")
        var param = value("pn-param")
        // The legacy Linphone form: pn-type, app-id, pn-tok.
        if providerName == nil, let type = value("pn-type") {
            let appID = value("app-id")
            if type.lowercased() == "apple" {
                let legacy = appID.map(legacyAppleAppID)
                providerName = legacy?.sandbox == true ? "apns.dev" : "apns"
                param = param ?? legacy?.topic
            } else {
                providerName = type
                param = param ?? appID
            }
            token = token ?? value("pn-tok")
        }
        guard let providerName else { return nil }
        guard let provider = normalisedProvider(providerName) else { throw .unknownProvider(providerName) }
        guard let token else { return PushParameters(provider: provider, channels: []) }
        guard !token.isEmpty else { throw .emptyToken }
        return PushParameters(provider: provider, channels: try channels(provider: provider, token: token, param: param))
    }

    /// `apns`, `apns.dev`, `fcm`, `webpush`; Linphone's `apple`, `firebase`, `google`, `android`.
    static func normalisedProvider(_ name: String) -> PushProvider? {
        switch name.lowercased() {
        case "apns", "apple": return .apns
        case "apns.dev": return .apnsSandbox
        case "fcm", "firebase", "google", "android": return .fcm
        case "webpush": return .webpush
        default: return nil
        }
    }

    /// One channel per token. Linphone's `TOKA:remote&TOKB:voip` with
    /// `pn-param=TEAM.bundle.remote&voip` gives a regular channel (topic `TEAM.bundle`) and a VoIP
    /// one (topic `TEAM.bundle.voip`); the counts must agree (protocol.md).
    static func channels(provider: PushProvider, token: String, param: String?) throws(Problem) -> [PushChannel] {
        let tokens = token.split(separator: "&", omittingEmptySubsequences: false).map(String.init)
        guard provider.family == .apns, tokens.count > 1 || token.utf8.contains(UInt8(ascii: ":")) else {
            let kind: PushChannelKind = provider.family == .apns ? (isVoIPTopic(param) ? .voip : .remote) : .standard
            return [PushChannel(provider: provider, token: token, param: param, kind: kind)]
        }
        // Split the services off the parameter: everything after the last "." before the first "&".
        var base = param
        var services: [String] = []
        if let param {
            let parts = param.split(separator: "&", omittingEmptySubsequences: false).map(String.init)
            if let dot = parts[0].lastIndex(of: ".") {
                base = String(parts[0][..<dot])
                services = [String(parts[0][parts[0].index(after: dot)...])] + parts.dropFirst()
            }
        }
        var result: [PushChannel] = []
        for (index, item) in tokens.enumerated() {
            let pieces = item.split(separator: ":", maxSplits: 1).map(String.init)
            guard let value = pieces.first, !value.isEmpty else { throw .emptyToken }
            let service = pieces.count > 1 ? pieces[1] : (index < services.count ? services[index] : "")
            if !services.isEmpty, tokens.count != services.count { throw .tokenCountMismatch }
            let kind: PushChannelKind = service.lowercased() == "voip" ? .voip : .remote
            let topic = base.map { kind == .voip ? $0 + ".voip" : $0 }
            result.append(PushChannel(provider: provider, token: value, param: topic, kind: kind))
        }
        return result
    }

    /// Linphone's legacy iOS `app-id`: the bundle id, `.voip` for a PushKit token, then the build's
    /// environment, `.prod` (production host) or `.dev` (sandbox host):
    /// `org.example.app.voip.prod`, `org.example.app.voip.dev`, `org.example.app.prod`,
    /// `org.example.app.dev`. Returns the topic without the environment suffix and whether the
    /// device named the sandbox; an `app-id` without a suffix is the topic as it stands (production).
    static func legacyAppleAppID(_ appID: String) -> (topic: String, sandbox: Bool) {
        let lowered = appID.lowercased()
        for (suffix, sandbox) in [(".dev", true), (".prod", false)] where lowered.hasSuffix(suffix) && appID.count > suffix.count {
            return (String(appID.dropLast(suffix.count)), sandbox)
        }
        return (appID, false)
    }

    static func isVoIPTopic(_ param: String?) -> Bool {
        guard let param else { return true }  // the default iPhone app is a VoIP app (decisions.md)
        let service = param.split(separator: "&").first.map(String.init) ?? param
        return service.lowercased().hasSuffix(".voip")
    }

    /// Undoes %XX escapes (RFC 3261 §19.1.2); text that is not a valid escape stays as it is.
    static func unescape(_ text: String) -> String {
        SIPHeaderValueScanner.decodingEscapes(text)
    }
}
