public import RouseVocabulary

/// Chooses the push app for a device (decisions.md "Push apps"): by provider family, then by the
/// device parameter: a Linphone `.remote`/`.voip`/`&…` service suffix is dropped; a leading team id
/// is dropped when the rest names an app; then an exact match; then the platform's default app
/// (empty parameter). A value; thread-safe.
public struct PushAppSelector: Sendable {
    public let apps: [PushApp]

    public init(apps: [PushApp]) {
        self.apps = apps
    }

    /// The app that pushes to `channel`, or nil (the caller says "no push app for apns / X").
    public func app(for channel: PushChannel) -> PushApp? {
        app(provider: channel.provider, param: channel.param)
    }

    /// The app for a provider and device parameter.
    public func app(provider: PushProvider, param: String?) -> PushApp? {
        let candidates = apps.filter { $0.family == provider.family }
        guard !candidates.isEmpty else { return nil }
        let given = param ?? ""
        if !given.isEmpty, let exact = candidates.first(where: { $0.param == given }) { return exact }
        for form in Self.forms(of: given, family: provider.family) {
            if let match = candidates.first(where: { !$0.param.isEmpty && $0.param == form }) { return match }
            if provider.family == .apns, let match = candidates.first(where: { app in
                if case .apns(let apns) = app.credentials { return apns.bundleID == form || apns.voipTopic == form }
                return false
            }) {
                return match
            }
            if provider.family == .fcm, let match = candidates.first(where: { app in
                if case .fcm(let fcm) = app.credentials { return fcm.projectID == form }
                return false
            }) {
                return match
            }
        }
        return candidates.first { $0.param.isEmpty }
    }

    /// The forms of a device parameter to try, most specific first: without the Linphone service
    /// suffix, then (APNs) without a leading team id.
    static func forms(of param: String, family: PushProviderFamily) -> [String] {
        guard !param.isEmpty else { return [] }
        var whole = param
        if let ampersand = whole.firstIndex(of: "&") { whole = String(whole[..<ampersand]) }
        var stripped = whole
        for suffix in [".remote", ".voip"] where stripped.hasSuffix(suffix) {
            stripped = String(stripped.dropLast(suffix.count))
        }
        var forms = [whole, stripped]
        if family == .apns {
            for form in [whole, stripped] {
                if let dot = form.firstIndex(of: "."), form[..<dot].allSatisfy({ $0.isASCII && ($0.isUppercase || $0.isNumber) }) {
                    forms.append(String(form[form.index(after: dot)...]))
                }
            }
        }
        var seen = Set<String>()
        return forms.filter { !$0.isEmpty && seen.insert($0).inserted }
    }
}
