import Crypto
import Dispatch
import Foundation
import Push
import Registrar
import RouseVocabulary
import Storage

/// `POST` and `DELETE /api/v1/push/register` (product.md, "By posting its token"): an app posts
/// its device's push token with its extension's SIP credentials (HTTP Basic, `number@domain`),
/// and deletes it at log-out. A browser posts its web push subscription the same way
/// (`platform: web`, `subscription` as `PushSubscription.toJSON()` gives it): the endpoint is the
/// token, and the keys are kept beside it for encrypting its pushes (RFC 8291).
///
/// Order of checks: credentials (the same 401 for a wrong password and an unknown extension),
/// then the body (400 naming the field), then that `sipUser` is the credentials' extension (403).
///
/// Threading: the handlers run on the HTTP server's threads and never block: the password is
/// checked against the in-memory `CredentialCache`, writes go to the `PostgresWorkerPool`, and the
/// answer comes from the worker (or from a timer when the write outlasts `writeDeadline`: 503).
public struct PushRegistrationAPI: Sendable {
    public static let path = "/api/v1/push/register"

    let credentials: any ExtensionDirectory
    let pool: PostgresWorkerPool
    let writeDeadline: Double
    /// Counts 401s per client address; a blocked address gets 429 before its credentials are checked.
    let throttle: AuthFailureThrottle?

    public init(credentials: any ExtensionDirectory, pool: PostgresWorkerPool, writeDeadline: Double = 5, throttle: AuthFailureThrottle? = nil) {
        self.credentials = credentials
        self.pool = pool
        self.writeDeadline = writeDeadline
        self.throttle = throttle
    }

    /// Adds the two routes to `router`.
    public func register(on router: inout HTTPRouter) {
        router.add("POST", Self.path) { request, respond in post(request, respond) }
        router.add("DELETE", Self.path) { request, respond in delete(request, respond) }
    }

    /// The one 401: the same status, headers and body whatever was wrong.
    static let unauthorized = HTTPResponse.error(
        401, code: "unauthorized", message: "the credentials are not those of an extension",
        headers: [("WWW-Authenticate", "Basic realm=\"rouse\"")])

    /// A field problem: 400 naming the field.
    struct FieldProblem: Error {
        let field: String
        let message: String
    }

    /// A posted token, checked (what a `POST` body holds).
    public struct Posting: Sendable {
        public let sipUser: AddressOfRecord
        public let channel: PushChannel
        public let deviceID: String?
        /// A web push subscription's keys (`platform: web`); nil for the other platforms.
        public let webPushKeys: WebPushSubscriptionKeys?
    }

    /// What a `DELETE` body holds, checked: the token, the platform's family if named, and the
    /// `sipUser` if given (the handler then requires it to be the credentials' extension).
    public struct Removal: Sendable {
        public let token: String
        public let family: PushProviderFamily?
        public let sipUser: AddressOfRecord?
    }

    /// Reads a `POST` body as the endpoint does after the credentials: the checked posting, or the
    /// 400 answer it would send. Pure (no credentials, no storage); the fuzz harness calls it.
    public static func parsePostBody(_ body: Data) -> Result<Posting, ResponseFailure> {
        jsonObject(body).flatMap { object in
            do throws(FieldProblem) {
                return .success(try posting(from: object))
            } catch {
                return .failure(ResponseFailure(response: refusal(error)))
            }
        }
    }

    /// Reads a `DELETE` body as the endpoint does after the credentials: the checked removal, or
    /// the 400 answer it would send. Pure (no credentials, no storage); the fuzz harness calls it.
    public static func parseDeleteBody(_ body: Data) -> Result<Removal, ResponseFailure> {
        jsonObject(body).flatMap { object in
            do throws(FieldProblem) {
                return .success(try removal(from: object))
            } catch {
                return .failure(ResponseFailure(response: refusal(error)))
            }
        }
    }

    /// The 400 for a field problem.
    static func refusal(_ problem: FieldProblem) -> HTTPResponse {
        .error(400, code: "invalid_field", message: problem.message, field: problem.field)
    }

    /// What both methods do first: refuse a throttled source (429), check the credentials (the one
    /// 401, counted as a failure), and read the JSON body (400). Nil once an answer was sent.
    private func authenticatedBody(_ request: HTTPRequest, _ respond: HTTPResponder) -> (AddressOfRecord, [String: Any])? {
        if let refusal = throttled(request) {
            respond(refusal)
            return nil
        }
        guard let authenticated = authenticate(request) else {
            if let address = request.remoteAddress { throttle?.recordFailure(address) }
            respond(Self.unauthorized)
            return nil
        }
        let object: [String: Any]
        switch Self.jsonObject(request.body) {
        case .success(let parsed): object = parsed
        case .failure(let failure):
            respond(failure.response)
            return nil
        }
        return (authenticated, object)
    }

    func post(_ request: HTTPRequest, _ respond: HTTPResponder) {
        guard let (authenticated, object) = authenticatedBody(request, respond) else { return }
        let posting: Posting
        do {
            posting = try Self.posting(from: object)
        } catch {
            respond(Self.refusal(error))
            return
        }
        guard posting.sipUser == authenticated else {
            respond(.error(403, code: "forbidden", message: "the credentials do not belong to sipUser", field: "sipUser"))
            return
        }
        write(respond) { connection in
            guard let keys = posting.webPushKeys else {
                guard try PostedPushTokens.store(posting.channel, deviceID: posting.deviceID, for: posting.sipUser, on: connection) != nil
                else { return Self.unauthorized }
                return .json(200, ["status": "stored"])
            }
            // A subscription: its token and its keys commit together.
            return try connection.transaction { connection -> HTTPResponse in
                guard try PostedPushTokens.store(posting.channel, deviceID: posting.deviceID, for: posting.sipUser, on: connection) != nil
                else { return Self.unauthorized }
                try PostgresWebPushSubscriptions.store(endpoint: posting.channel.token, keys: keys, on: connection)
                return .json(200, ["status": "stored"])
            }
        }
    }

    func delete(_ request: HTTPRequest, _ respond: HTTPResponder) {
        guard let (authenticated, object) = authenticatedBody(request, respond) else { return }
        let removal: Removal
        do {
            removal = try Self.removal(from: object)
        } catch {
            respond(Self.refusal(error))
            return
        }
        if let sipUser = removal.sipUser, sipUser != authenticated {
            respond(.error(403, code: "forbidden", message: "the credentials do not belong to sipUser", field: "sipUser"))
            return
        }
        write(respond) { connection in
            guard try PostedPushTokens.remove(token: removal.token, family: removal.family, from: authenticated, on: connection) else {
                return .error(404, code: "not_found", message: "this extension holds no such token", field: "token")
            }
            return .json(200, ["status": "removed"])
        }
    }

    /// 429 with Retry-After when the client's address is blocked for failed credentials (issue 5).
    func throttled(_ request: HTTPRequest) -> HTTPResponse? {
        guard let throttle, let address = request.remoteAddress, let left = throttle.isBlocked(address) else { return nil }
        let seconds = max(1, Int(left.rounded(.up)))
        return .error(
            429, code: "too_many_failures", message: "too many failed credentials from this address; try again in \(seconds) s",
            headers: [("Retry-After", String(seconds))])
    }

    /// The extension the Basic credentials belong to, or nil (no header, malformed, wrong).
    func authenticate(_ request: HTTPRequest) -> AddressOfRecord? {
        var user = ""
        var password = ""
        if let header = request.header("Authorization"), header.count > 6, header.prefix(6).lowercased() == "basic ",
            let decoded = Data(base64Encoded: String(header.dropFirst(6)).trimmingCharacters(in: .whitespaces)),
            let text = String(data: decoded, encoding: .utf8), let colon = text.firstIndex(of: ":")
        {
            user = String(text[..<colon])
            password = String(text[text.index(after: colon)...])
        }
        // The hash work runs whatever the header held, so every refusal costs the same.
        return credentials.verify(user: user, password: password)
    }

    /// Runs `job` on a worker; answers with its response, or 503 when it fails or outlasts the
    /// deadline (whichever comes first; the responder keeps only the first answer).
    private func write(_ respond: HTTPResponder, _ job: @escaping @Sendable (PostgresConnection) throws -> HTTPResponse) {
        pool.submit(job) { result in
            switch result {
            case .success(let response): respond(response)
            case .failure: respond(.error(503, code: "storage_unavailable", message: "the token could not be stored now; try again"))
            }
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + writeDeadline) {
            respond(.error(503, code: "storage_unavailable", message: "the token could not be stored in time; try again"))
        }
    }

    static func jsonObject(_ body: Data) -> Result<[String: Any], ResponseFailure> {
        guard let parsed = try? JSONSerialization.jsonObject(with: body), let object = parsed as? [String: Any] else {
            return .failure(ResponseFailure(response: .error(400, code: "invalid_json", message: "the body must be a JSON object")))
        }
        return .success(object)
    }

    /// A refused body: the answer the endpoint sends for it.
    public struct ResponseFailure: Error {
        public let response: HTTPResponse
    }

    /// Checks a `DELETE` body's fields (http-api.md): `token` required, `platform` and `sipUser`
    /// optional.
    static func removal(from object: [String: Any]) throws(FieldProblem) -> Removal {
        guard let token = object["token"] as? String, !token.isEmpty, token.utf8.count <= 4096 else {
            throw FieldProblem(field: "token", message: "token is required: the push token to remove")
        }
        var family: PushProviderFamily? = nil
        if let platform = object["platform"] {
            guard let text = platform as? String, let known = Self.provider(forPlatform: text) else {
                throw FieldProblem(field: "platform", message: "platform must be android, ios, ios.dev or web")
            }
            family = known.family
        }
        var sipUser: AddressOfRecord? = nil
        if let value = object["sipUser"] {
            guard let text = value as? String, let aor = AddressOfRecord(parsing: text) else {
                throw FieldProblem(field: "sipUser", message: "sipUser must be number@domain")
            }
            sipUser = aor
        }
        return Removal(token: token, family: family, sipUser: sipUser)
    }

    static func provider(forPlatform platform: String) -> PushProvider? {
        switch platform {
        case "android": return .fcm
        case "ios": return .apns
        case "ios.dev": return .apnsSandbox
        case "web": return .webpush
        default: return nil
        }
    }

    /// Checks the posted fields (product.md's table, decisions.md's "Posted iOS tokens").
    static func posting(from object: [String: Any]) throws(FieldProblem) -> Posting {
        if object["platform"] as? String == "web" { return try webPosting(from: object) }
        guard object["subscription"] == nil else {
            throw FieldProblem(field: "platform", message: "a subscription is posted with platform web")
        }
        guard let token = object["token"] as? String, !token.isEmpty else {
            throw FieldProblem(field: "token", message: "token is required: the device's push token")
        }
        guard token.utf8.count <= 4096, token.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw FieldProblem(field: "token", message: "token must be at most 4096 printable characters without spaces")
        }
        guard let sipUserText = object["sipUser"] as? String, let sipUser = AddressOfRecord(parsing: sipUserText) else {
            throw FieldProblem(field: "sipUser", message: "sipUser is required: the extension's address, number@domain")
        }
        var provider = PushProvider.fcm
        if let platform = object["platform"] {
            guard let text = platform as? String, let known = Self.provider(forPlatform: text) else {
                throw FieldProblem(field: "platform", message: "platform must be android, ios, ios.dev or web")
            }
            provider = known
        }
        var param: String? = nil
        if let value = object["param"], !(value is NSNull) {
            guard let text = value as? String, !text.isEmpty, text.utf8.count <= 255 else {
                throw FieldProblem(field: "param", message: "param must be a non-empty string of at most 255 bytes")
            }
            param = text
        }
        var deviceID: String? = nil
        if let value = object["deviceId"], !(value is NSNull) {
            guard let text = value as? String, !text.isEmpty, text.utf8.count <= 255 else {
                throw FieldProblem(field: "deviceId", message: "deviceId must be a non-empty string of at most 255 bytes")
            }
            deviceID = text
        }
        let kind: PushChannelKind
        if provider.family == .apns {
            guard Hex.decode(token) != nil else {
                throw FieldProblem(field: "token", message: "an iOS token must be the PushKit or APNs token as hex")
            }
            kind = param.map { $0.hasSuffix(".voip") } ?? true ? .voip : .remote
        } else {
            kind = .standard
        }
        return Posting(
            sipUser: sipUser, channel: PushChannel(provider: provider, token: token, param: param, kind: kind), deviceID: deviceID,
            webPushKeys: nil)
    }

    /// Checks a browser's posting (`platform: web`): `sipUser`, and `subscription` as
    /// `PushSubscription.toJSON()` gives it, `{endpoint, expirationTime, keys: {p256dh, auth}}`. The
    /// endpoint becomes the token (the same value a SIP REGISTER carries in `pn-prid`); `token`, when
    /// given, must equal it. No `param`: web push needs no push app (RFC 8599 gives `webpush` no `pn-param`).
    static func webPosting(from object: [String: Any]) throws(FieldProblem) -> Posting {
        guard let sipUserText = object["sipUser"] as? String, let sipUser = AddressOfRecord(parsing: sipUserText) else {
            throw FieldProblem(field: "sipUser", message: "sipUser is required: the extension's address, number@domain")
        }
        guard let subscription = object["subscription"] as? [String: Any] else {
            throw FieldProblem(
                field: "subscription", message: "subscription is required with platform web: the browser's PushSubscription.toJSON()")
        }
        guard let endpoint = subscription["endpoint"] as? String, WebPushEndpoint.origin(of: endpoint) != nil else {
            throw FieldProblem(
                field: "subscription.endpoint",
                message: "subscription.endpoint must be the push service's https URL (at most \(WebPushEndpoint.maxLength) characters)")
        }
        guard let keys = subscription["keys"] as? [String: Any] else {
            throw FieldProblem(field: "subscription.keys", message: "subscription.keys must hold p256dh and auth")
        }
        let checked: WebPushSubscriptionKeys
        do {
            checked = try WebPushSubscriptionKeys(p256dh: keys["p256dh"] as? String ?? "", auth: keys["auth"] as? String ?? "")
        } catch {
            throw FieldProblem(field: "subscription.keys.\(error.key)", message: error.message)
        }
        if let token = object["token"], !(token is NSNull), token as? String != endpoint {
            throw FieldProblem(field: "token", message: "token may be left out with platform web; when given, it must be subscription.endpoint")
        }
        if let param = object["param"], !(param is NSNull) {
            throw FieldProblem(field: "param", message: "param is not used with platform web (no push app: Rouse's VAPID key identifies it)")
        }
        var deviceID: String? = nil
        if let value = object["deviceId"], !(value is NSNull) {
            guard let text = value as? String, !text.isEmpty, text.utf8.count <= 255 else {
                throw FieldProblem(field: "deviceId", message: "deviceId must be a non-empty string of at most 255 bytes")
            }
            deviceID = text
        }
        return Posting(
            sipUser: sipUser, channel: PushChannel(provider: .webpush, token: endpoint, param: nil, kind: .standard), deviceID: deviceID,
            webPushKeys: checked)
    }
}
