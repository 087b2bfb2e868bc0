import Crypto
public import Foundation
public import RouseVocabulary

/// An APNs host: Apple's production or sandbox environment (protocol.md).
public enum APNsEnvironment: String, Sendable, Hashable, CaseIterable {
    case production, sandbox

    /// The other host (where a `BadDeviceToken` is checked).
    public var other: APNsEnvironment { self == .production ? .sandbox : .production }
}

/// What an operator gives for an APNs app: token-auth credentials (team id, key id, `.p8` key) and
/// the app's topic. The key is write-only: `description` and `debugDescription` never show it.
/// A value; thread-safe.
public struct APNsCredentials: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    public var teamID: String
    public var keyID: String
    /// The bundle id, or the VoIP topic (`<bundle>.voip`), as the operator gave it.
    public var topic: String
    /// The `.p8` key text (PKCS#8 PEM of a P-256 key).
    public var privateKeyPEM: String
    /// Restricts the app to one host; nil = the device's provider (`apns`/`apns.dev`) decides.
    public var environment: APNsEnvironment?

    public init(teamID: String, keyID: String, topic: String, privateKeyPEM: String, environment: APNsEnvironment? = nil) {
        self.teamID = teamID
        self.keyID = keyID
        self.topic = topic
        self.privateKeyPEM = privateKeyPEM
        self.environment = environment
    }

    /// The bundle id: the topic without a `.voip` suffix (the regular, non-VoIP topic).
    public var bundleID: String { topic.hasSuffix(".voip") ? String(topic.dropLast(5)) : topic }
    /// The PushKit topic ring pushes go to.
    public var voipTopic: String { bundleID + ".voip" }

    public var description: String {
        "APNs team \(teamID) key \(keyID) topic \(voipTopic)" + (environment.map { " (\($0.rawValue) only)" } ?? "")
    }

    public var debugDescription: String { description }
}

/// What an operator gives for an FCM app: the Google service account's fields. The private key is
/// write-only: `description` and `debugDescription` never show it. A value; thread-safe.
public struct FCMServiceAccount: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    public var projectID: String
    public var clientEmail: String
    public var privateKeyPEM: String
    /// Where access tokens come from (`https://oauth2.googleapis.com/token` for real accounts).
    public var tokenURI: String

    public init(projectID: String, clientEmail: String, privateKeyPEM: String, tokenURI: String) {
        self.projectID = projectID
        self.clientEmail = clientEmail
        self.privateKeyPEM = privateKeyPEM
        self.tokenURI = tokenURI
    }

    /// Reads a service account JSON file's text (`project_id`, `client_email`, `private_key`,
    /// `token_uri`). Errors name the missing field, never a value.
    public init(json: [UInt8]) throws(PushAppError) {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(json))) as? [String: Any] else {
            throw PushAppError(field: "service_account", problem: "is not a JSON object (give the service account JSON file Google made)")
        }
        func field(_ name: String) throws(PushAppError) -> String {
            guard let value = object[name] as? String, !value.isEmpty else {
                throw PushAppError(field: name, problem: "is missing from the service account JSON")
            }
            return value
        }
        if let type = object["type"] as? String, type != "service_account" {
            throw PushAppError(field: "type", problem: "is \"\(type)\"; a service account file says \"service_account\"")
        }
        self.init(
            projectID: try field("project_id"), clientEmail: try field("client_email"),
            privateKeyPEM: try field("private_key"), tokenURI: try field("token_uri"))
    }

    public var description: String { "FCM project \(projectID) as \(clientEmail)" }
    public var debugDescription: String { description }
}

/// A field of a push app that failed validation: the field's name and what is wrong with it, never
/// the value of a key.
public struct PushAppError: Error, Sendable, Equatable, CustomStringConvertible {
    public let field: String
    public let problem: String

    public init(field: String, problem: String) {
        self.field = field
        self.problem = problem
    }

    public var description: String { "\(field): \(problem)" }
}

/// An operator's push app (decisions.md "Push apps"): one app serves every organisation; it answers
/// to the devices whose `pn-param` (or posted `param`) names its device parameter, and an empty
/// parameter makes it the platform's default app. Keys are write-only. A value; thread-safe.
public struct PushApp: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    /// Which provider an app pushes through, and its credentials.
    public enum Credentials: Sendable, Equatable {
        case apns(APNsCredentials)
        case fcm(FCMServiceAccount)
    }

    /// The stored id (nil before it is saved).
    public var id: Int64?
    public var credentials: Credentials
    /// What the app puts in `pn-param`; empty = the default app of its platform.
    public var param: String
    /// FCM only: ring and cancel pushes carry `android.direct_boot_ok`, so a phone that restarted
    /// and is not unlocked yet still rings (the app must be direct-boot aware). On by default.
    public var directBootOK: Bool

    public init(id: Int64? = nil, credentials: Credentials, param: String = "", directBootOK: Bool = true) {
        self.id = id
        self.credentials = credentials
        self.param = param
        self.directBootOK = directBootOK
    }

    /// The provider family the app pushes through.
    public var family: PushProviderFamily {
        switch credentials {
        case .apns: return .apns
        case .fcm: return .fcm
        }
    }

    /// `apns` or `fcm`.
    public var kind: String { family.rawValue }

    public var description: String {
        let number = id.map { "#\($0) " } ?? ""
        let answers = param.isEmpty ? "default \(family == .apns ? "iPhone" : "Android") app" : "param \(param)"
        switch credentials {
        case .apns(let apns): return "\(number)\(apns) (\(answers))"
        case .fcm(let fcm): return "\(number)\(fcm) (\(answers))"
        }
    }

    public var debugDescription: String { description }

    /// Checks every field and that the key parses and signs; returns notes worth telling the
    /// operator (such as a VoIP topic derived from a bundle id). Errors name the field, never a
    /// key's text; the first problem found is thrown (`problems()` lists them all).
    @discardableResult
    public func validate() throws(PushAppError) -> [String] {
        if let first = problems().first { throw first }
        guard case .apns(let apns) = credentials else { return [] }
        if apns.topic.hasSuffix(".voip") {
            return ["ring pushes go to topic \(apns.voipTopic); cancel pushes to \(apns.bundleID)"]
        }
        return ["VoIP topic \(apns.voipTopic) derived from bundle id \(apns.bundleID) (ring pushes go there; cancel pushes to \(apns.bundleID))"]
    }

    /// Everything wrong with the app that can be found without a push, one error per field: the
    /// team and key ids well formed and the `.p8` key a P-256 key that signs a provider token
    /// (APNs); the service account's project, e-mail and token URL present and its key an RSA key
    /// that signs the OAuth assertion (FCM). Empty when the app looks able to push. Never shows a
    /// key's text. Signs once per call (well under a millisecond for P-256, a few for RSA).
    public func problems(now: Date = Date()) -> [PushAppError] {
        var problems: [PushAppError] = []
        func check(_ body: () throws(PushAppError) -> Void) {
            do { try body() } catch { problems.append(error) }
        }
        if param.count > 255 || param.contains(where: { $0.isWhitespace }) {
            problems.append(PushAppError(field: "param", problem: "must be at most 255 characters without spaces"))
        }
        switch credentials {
        case .apns(let apns):
            check { () throws(PushAppError) in try Self.checkAppleID(apns.teamID, field: "team_id") }
            check { () throws(PushAppError) in try Self.checkAppleID(apns.keyID, field: "key_id") }
            check { () throws(PushAppError) in try Self.checkTopic(apns.topic) }
            problems += Self.keyProblem(
                field: "key", kind: "an APNs .p8 key is a P-256 key", signs: "a provider token",
                parse: { () throws(SigningError) in try SigningKey.p256(pem: apns.privateKeyPEM) },
                sign: { (key) throws(SigningError) in _ = try APNsClient.providerToken(credentials: apns, key: key, issuedAt: now) })
        case .fcm(let fcm):
            if fcm.projectID.isEmpty {
                problems.append(PushAppError(field: "project_id", problem: "is missing: the service account names no Firebase project"))
            } else if !fcm.projectID.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" }) {
                problems.append(PushAppError(field: "project_id", problem: "must be a Firebase project id (letters, digits, dashes)"))
            }
            if !fcm.clientEmail.contains("@") {
                problems.append(PushAppError(field: "client_email", problem: "is not an e-mail address"))
            }
            if URLComponents(string: fcm.tokenURI).map({ $0.scheme != "https" || $0.host?.isEmpty != false }) ?? true {
                problems.append(PushAppError(field: "token_uri", problem: "must be an https URL"))
            }
            problems += Self.keyProblem(
                field: "private_key", kind: "a service account key is an RSA key", signs: "the OAuth assertion",
                parse: { () throws(SigningError) in try SigningKey.rsa(pem: fcm.privateKeyPEM) },
                sign: { (key) throws(SigningError) in _ = try FCMClient.assertion(account: fcm, key: key, issuedAt: now) })
        }
        return problems
    }

    /// Why a key cannot serve, if it cannot: it does not parse (as `kind` says it should), or it
    /// cannot sign what `signs` names. Empty when it parses and signs.
    static func keyProblem(
        field: String, kind: String, signs: String, parse: () throws(SigningError) -> SigningKey,
        sign: (SigningKey) throws(SigningError) -> Void
    ) -> [PushAppError] {
        let key: SigningKey
        do {
            key = try parse()
        } catch {
            return [PushAppError(field: field, problem: "\(error) (\(kind))")]
        }
        do {
            try sign(key)
            return []
        } catch {
            return [PushAppError(field: field, problem: "cannot sign \(signs): \(error)")]
        }
    }

    /// Apple's team and key ids: 10 characters, A–Z and 0–9.
    static func checkAppleID(_ value: String, field: String) throws(PushAppError) {
        guard value.utf8.count == 10, value.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) }) else {
            throw PushAppError(field: field, problem: "must be 10 characters, capital letters A-Z and digits (as in Apple's developer account)")
        }
    }

    /// A bundle id: reverse-DNS, at least two dot-separated parts of letters, digits and dashes.
    static func checkTopic(_ topic: String) throws(PushAppError) {
        let parts = topic.split(separator: ".", omittingEmptySubsequences: false)
        guard topic.utf8.count <= 255, parts.count >= 2,
            parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") } })
        else {
            throw PushAppError(field: "topic", problem: "must be a bundle id such as com.example.app (or com.example.app.voip)")
        }
    }
}
