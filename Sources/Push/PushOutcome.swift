import Foundation
public import RouseVocabulary

/// What became of one push (product.md "What admins see"): accepted by the provider, refused by it
/// (with its status, reason and a sentence for a person), or failed before the provider could
/// answer (connect, TLS, timeout, no app). A value; thread-safe. Never holds a token or key.
public struct PushOutcome: Sendable, Equatable, CustomStringConvertible {
    /// Why a push could not be asked of the provider.
    public enum FailureKind: String, Sendable, Equatable {
        case noApp = "no app"
        case connect
        case tls
        case timeout
        case connectionLost = "connection lost"
        case credentials
        case other
        /// The provider failed again and again: its circuit breaker holds pushes back for a while.
        case backedOff = "backed off"
    }

    /// The three outcomes.
    public enum Result: Sendable, Equatable {
        /// The provider took the push; its id (`apns-id`, or FCM's message name).
        case accepted(providerID: String?)
        /// The provider answered with an error.
        case refused(status: Int, reason: String, explanation: String)
        /// No answer from the provider.
        case failed(FailureKind, message: String)
    }

    public let result: Result
    /// From "push this" to the provider's answer (or the failure).
    public let latency: Duration
    /// True when the provider said the token is dead (protocol.md's dead-token rules): it must not
    /// be pushed again until the device registers or posts it again.
    public let isDeadToken: Bool

    public init(result: Result, latency: Duration, isDeadToken: Bool = false) {
        self.result = result
        self.latency = latency
        self.isDeadToken = isDeadToken
    }

    /// "no push app for apns / com.example.voip".
    public static func noApp(provider: PushProvider, param: String?) -> PushOutcome {
        PushOutcome(result: .failed(.noApp, message: "no push app for \(provider.rawValue) / \(param?.isEmpty == false ? param! : "(no param)")"), latency: .zero)
    }

    /// The three outcomes by name, without their details: the word stored and counted.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        case accepted, refused, failed
    }

    public var kind: Kind {
        switch result {
        case .accepted: return .accepted
        case .refused: return .refused
        case .failed: return .failed
        }
    }

    /// `accepted`, `refused` or `failed`: the word stored and counted.
    public var word: String { kind.rawValue }

    public var isAccepted: Bool {
        if case .accepted = result { return true }
        return false
    }

    /// The HTTP status, when the provider answered.
    public var status: Int? {
        switch result {
        case .accepted: return 200
        case .refused(let status, _, _): return status
        case .failed: return nil
        }
    }

    /// The provider's reason (`Unregistered`, `UNREGISTERED`), or the failure kind.
    public var reason: String? {
        switch result {
        case .accepted: return nil
        case .refused(_, let reason, _): return reason
        case .failed(let kind, _): return kind.rawValue
        }
    }

    /// The sentence for a person.
    public var explanation: String {
        switch result {
        case .accepted(let id): return id.map { "the provider accepted the push (id \($0))" } ?? "the provider accepted the push"
        case .refused(_, _, let explanation): return explanation
        case .failed(_, let message): return message
        }
    }

    public var latencyMilliseconds: Int { latency.wholeMilliseconds }

    /// One line in words: "accepted in 12 ms (id …)", "refused: 410 Unregistered: the app was
    /// uninstalled …", "failed: no push app for apns / com.example.voip".
    public var description: String {
        switch result {
        case .accepted(let id):
            return "accepted in \(latencyMilliseconds) ms" + (id.map { " (id \($0))" } ?? "")
        case .refused(let status, let reason, let explanation):
            return "refused: \(status) \(reason): \(explanation) (\(latencyMilliseconds) ms)" + (isDeadToken ? "; token marked dead" : "")
        case .failed(.noApp, let message), .failed(.backedOff, let message):
            return "failed: \(message)"
        case .failed(let kind, let message):
            return "failed (\(kind.rawValue)) after \(latencyMilliseconds) ms: \(message)"
        }
    }

    /// A failed outcome for an HTTP/2 error.
    static func failure(_ error: HTTP2Error) -> PushOutcome {
        let kind: FailureKind
        switch error.kind {
        case .connect: kind = .connect
        case .tls: kind = .tls
        case .timeout: kind = .timeout
        case .connectionLost: kind = .connectionLost
        case .stopped, .other: kind = .other
        }
        let message = kind == .timeout ? "no answer within the deadline (\(error.message))" : error.message
        return PushOutcome(result: .failed(kind, message: message), latency: error.latency)
    }
}

/// APNs reasons in words and the dead-token rules (protocol.md "APNs provider API").
public enum APNsReason {
    /// A sentence for a person about an APNs error reason.
    public static func explanation(status: Int, reason: String, environment: APNsEnvironment, appRestricted: Bool) -> String {
        switch reason {
        case "BadDeviceToken":
            switch environment {
            case .production:
                return appRestricted
                    ? "the token belongs to a development build; this app is set to production"
                    : "the token belongs to a development build (sandbox), but the device registered it for production (apns, not apns.dev)"
            case .sandbox:
                return appRestricted
                    ? "the token belongs to a production (App Store or TestFlight) build; this app is set to sandbox"
                    : "the token belongs to a production (App Store or TestFlight) build, but the device registered it for the sandbox (apns.dev)"
            }
        case "Unregistered": return "the app was uninstalled or its token replaced: the token is dead"
        case "DeviceTokenNotForTopic": return "the token belongs to another app than this app's topic: dead for this app"
        case "TopicDisallowed": return "this key may not push to this topic: check the app's topic and team"
        case "BadTopic", "MissingTopic": return "the topic is wrong: check the app's bundle id"
        case "ExpiredProviderToken": return "Apple says the provider token (JWT) expired, even after a fresh one"
        case "InvalidProviderToken": return "Apple refused the provider token: check the team id, key id and .p8 key"
        case "MissingProviderToken": return "Apple wants a provider token"
        case "TooManyProviderTokenUpdates": return "Apple saw new provider tokens too often; back off"
        case "TooManyRequests": return "Apple says too many pushes to this device; back off"
        case "PayloadTooLarge": return "the payload is too large (Rouse's bug)"
        case "BadPriority", "InvalidPushType", "PayloadEmpty", "BadExpirationDate", "BadCollapseId", "BadMessageId":
            return "Apple refused the request (\(reason)): Rouse's bug or configuration"
        case "InternalServerError", "ServiceUnavailable", "Shutdown": return "Apple's service is unavailable for now"
        default: return "Apple refused the push (\(status) \(reason))"
        }
    }

    /// Dead for this app whatever the environment: 410 `Unregistered`, 400 `DeviceTokenNotForTopic`.
    /// (`BadDeviceToken` is dead only when the other environment refuses it too: PushService.)
    public static func isDead(status: Int, reason: String) -> Bool {
        (status == 410 && reason == "Unregistered") || (status == 400 && reason == "DeviceTokenNotForTopic")
    }
}

/// What an FCM v1 refusal says (its `error` object): the code, the message, and the fields a
/// `google.rpc.BadRequest` detail names. A value; thread-safe.
public struct FCMError: Sendable, Equatable {
    /// The `FcmError` detail's `errorCode`, else `error.status`, else `HTTP <status>`.
    public var code: String
    public var status: Int
    public var message: String
    /// The `field` of each `fieldViolations` entry (`message.token`, `message.data[0].value`).
    public var fields: [String]

    public init(status: Int, code: String, message: String = "", fields: [String] = []) {
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields
    }

    /// Reads a refusal's body; a body that is not FCM's JSON gives `HTTP <status>`.
    init(_ response: HTTP2Response) {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any],
            let error = object["error"] as? [String: Any]
        else {
            self.init(status: response.status, code: "HTTP \(response.status)")
            return
        }
        let details = error["details"] as? [[String: Any]] ?? []
        let fcmCode = details.lazy.compactMap { $0["errorCode"] as? String }.first
        let fields = details.flatMap { ($0["fieldViolations"] as? [[String: Any]] ?? []).compactMap { $0["field"] as? String } }
        self.init(
            status: response.status, code: fcmCode ?? error["status"] as? String ?? "HTTP \(response.status)",
            message: error["message"] as? String ?? "", fields: fields)
    }

    /// An `INVALID_ARGUMENT` about the registration token itself: a field violation on
    /// `message.token`, or (Google's documented answer for a bad token) no field violation and a
    /// message naming the registration token. One about any other field is Rouse's message at fault.
    public var namesToken: Bool {
        guard code == "INVALID_ARGUMENT" else { return false }
        if !fields.isEmpty { return fields.contains("message.token") }
        return message.lowercased().contains("registration token")
    }
}

/// FCM error codes in words and the dead-token rules (protocol.md "FCM HTTP v1"; Google's "FCM
/// error codes": `UNREGISTERED`, and `INVALID_ARGUMENT` when it is about the token, mean the token
/// should be deleted).
public enum FCMReason {
    public static func explanation(_ error: FCMError) -> String {
        switch error.code {
        case "UNREGISTERED": return "the app was uninstalled or its token replaced: the token is dead"
        case "SENDER_ID_MISMATCH": return "the token belongs to another Firebase project: dead for this app"
        case "INVALID_ARGUMENT":
            if error.namesToken { return "FCM says the registration token is not valid: the token is dead" }
            let field = error.fields.first.map { " at \($0)" } ?? ""
            return "FCM refused the message\(field) (Rouse's bug): \(error.message)"
        case "THIRD_PARTY_AUTH_ERROR", "UNAUTHENTICATED": return "FCM refused the credentials, even with a fresh access token: check the service account"
        case "QUOTA_EXCEEDED": return "FCM's sending quota is used up; back off"
        case "INTERNAL", "UNAVAILABLE": return "FCM is unavailable for now"
        case "PERMISSION_DENIED": return "the service account may not send for this project"
        default: return "FCM refused the push (\(error.status) \(error.code))"
        }
    }

    /// Dead for this app: `UNREGISTERED`, `SENDER_ID_MISMATCH`, an `INVALID_ARGUMENT` naming the token.
    public static func isDead(_ error: FCMError) -> Bool {
        error.code == "UNREGISTERED" || error.code == "SENDER_ID_MISMATCH" || error.namesToken
    }
}
