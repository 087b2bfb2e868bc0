import Crypto
public import Foundation
public import HTTPServer
public import Push
public import Registrar
public import RouseVocabulary
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
/// Threading: the handlers are async and never block: the password is checked (by
/// `ExtensionAuthentication`) against the in-memory directory, and writes are awaited (a post on
/// the pool's group commit, several posts in one transaction) until the route's
/// `DatabaseDeadline` (then 503).
public enum PushRegistrationAPI {
    public static let path = "/api/v1/push/register"
    /// Seconds a posting or removal waits for PostgreSQL before it is answered 503.
    static let writeDeadline: Double = 5

    /// The route's 503: the write failed, or did not end by the deadline.
    static func unavailable(_ error: any Error) -> HTTPResponse {
        let when = error is StorageDeadlinePassed ? "in time" : "now"
        return .error(503, code: "storage_unavailable", message: "the token could not be stored \(when); try again")
    }

    /// What a posting or removal answers: `{"status": "stored"}` or `{"status": "removed"}`.
    struct Done: Encodable {
        let status: String
    }

    /// A posting's 200, encoded once (every stored post answers the same bytes).
    static let stored = HTTPResponse.json(200, Done(status: "stored"))

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

    /// A `POST` body's fields as they came (http-api.md; product.md's table).
    struct PostingBody: Decodable {
        let token: JSONField
        let sipUser: JSONField
        let platform: JSONField
        let param: JSONField
        let deviceId: JSONField
        /// `PushSubscription.toJSON()` of a browser (`platform: web`).
        let subscription: JSONField
    }

    /// A `DELETE` body's fields as they came.
    struct RemovalBody: Decodable {
        let token: JSONField
        let platform: JSONField
        let sipUser: JSONField
    }

    /// The 400 of a body that is not a JSON object.
    static let notAnObject = HTTPResponse.error(400, code: "invalid_json", message: "the body must be a JSON object")

    /// Reads a `POST` body as the endpoint does after the credentials: the checked posting, or the
    /// 400 answer it would send. Pure (no credentials, no storage); the fuzz harness calls it.
    public static func parsePostBody(_ body: Data) -> Result<Posting, ResponseFailure> {
        guard let fields = JSONField.body(PostingBody.self, from: body) else { return .failure(ResponseFailure(response: notAnObject)) }
        do throws(FieldProblem) {
            return .success(try posting(from: fields))
        } catch {
            return .failure(ResponseFailure(response: refusal(error)))
        }
    }

    /// Reads a `DELETE` body as the endpoint does after the credentials: the checked removal, or
    /// the 400 answer it would send. Pure (no credentials, no storage); the fuzz harness calls it.
    public static func parseDeleteBody(_ body: Data) -> Result<Removal, ResponseFailure> {
        guard let fields = JSONField.body(RemovalBody.self, from: body) else { return .failure(ResponseFailure(response: notAnObject)) }
        do throws(FieldProblem) {
            return .success(try removal(from: fields))
        } catch {
            return .failure(ResponseFailure(response: refusal(error)))
        }
    }

    /// The 400 for a field problem.
    static func refusal(_ problem: FieldProblem) -> HTTPResponse {
        .error(400, code: "invalid_field", message: problem.message, field: problem.field)
    }

    /// The extension `ExtensionAuthentication` let in.
    static func authenticated(_ context: APIContext) throws -> AddressOfRecord {
        guard let aor = context.extensionUser else { throw HTTPError(ExtensionAuthentication.unauthorized) }
        return aor
    }

    /// `POST`: checks the body (400), that `sipUser` is the credentials' extension (403), and stores the token.
    @Sendable static func post(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let authenticated = try authenticated(context)
        let posting: Posting
        switch parsePostBody(request.body) {
        case .success(let checked): posting = checked
        case .failure(let failure): return failure.response
        }
        guard posting.sipUser == authenticated else {
            return .error(403, code: "forbidden", message: "the credentials do not belong to sipUser", field: "sipUser")
        }
        // Group commit: the posts that arrive together share one transaction (one pipeline, one WAL
        // flush); the token, its sign of life and a subscription's keys commit together in it.
        let store = try context.store()
        let stored = try await store.bounded { seconds in
            try await PostedPushTokens.store(
                posting.channel, deviceID: posting.deviceID, webPushKeys: posting.webPushKeys, for: posting.sipUser,
                on: store.pool.groupCommit, within: seconds)
        }
        return stored != nil ? Self.stored : ExtensionAuthentication.unauthorized
    }

    /// `DELETE`: checks the body (400) and `sipUser` if given (403), and removes the token (404 if it was not there).
    @Sendable static func delete(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let authenticated = try authenticated(context)
        let removal: Removal
        switch parseDeleteBody(request.body) {
        case .success(let checked): removal = checked
        case .failure(let failure): return failure.response
        }
        if let sipUser = removal.sipUser, sipUser != authenticated {
            return .error(403, code: "forbidden", message: "the credentials do not belong to sipUser", field: "sipUser")
        }
        let removed = try await context.store().perform { connection in
            try PostedPushTokens.remove(token: removal.token, family: removal.family, from: authenticated, on: connection)
        }
        guard removed else { return .error(404, code: "not_found", message: "this extension holds no such token", field: "token") }
        return .json(200, Done(status: "removed"))
    }

    /// A refused body: the answer the endpoint sends for it.
    public struct ResponseFailure: Error {
        public let response: HTTPResponse
    }

    /// Checks a `DELETE` body's fields (http-api.md): `token` required, `platform` and `sipUser`
    /// optional.
    static func removal(from body: RemovalBody) throws(FieldProblem) -> Removal {
        guard let token = body.token.string, !token.isEmpty, token.utf8.count <= 4096 else {
            throw FieldProblem(field: "token", message: "token is required: the push token to remove")
        }
        var family: PushProviderFamily? = nil
        if body.platform.isPresent {
            guard let text = body.platform.string, let known = Self.provider(forPlatform: text) else {
                throw FieldProblem(field: "platform", message: "platform must be android, ios, ios.dev or web")
            }
            family = known.family
        }
        var sipUser: AddressOfRecord? = nil
        if body.sipUser.isPresent {
            guard let text = body.sipUser.string, let aor = AddressOfRecord(parsing: text) else {
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
    static func posting(from body: PostingBody) throws(FieldProblem) -> Posting {
        if body.platform.string == "web" { return try webPosting(from: body) }
        guard !body.subscription.isPresent else {
            throw FieldProblem(field: "platform", message: "a subscription is posted with platform web")
        }
        guard let token = body.token.string, !token.isEmpty else {
            throw FieldProblem(field: "token", message: "token is required: the device's push token")
        }
        guard token.utf8.count <= 4096, token.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw FieldProblem(field: "token", message: "token must be at most 4096 printable characters without spaces")
        }
        guard let sipUserText = body.sipUser.string, let sipUser = AddressOfRecord(parsing: sipUserText) else {
            throw FieldProblem(field: "sipUser", message: "sipUser is required: the extension's address, number@domain")
        }
        var provider = PushProvider.fcm
        if body.platform.isPresent {
            guard let text = body.platform.string, let known = Self.provider(forPlatform: text) else {
                throw FieldProblem(field: "platform", message: "platform must be android, ios, ios.dev or web")
            }
            provider = known
        }
        var param: String? = nil
        if body.param.hasValue {
            guard let text = body.param.string, !text.isEmpty, text.utf8.count <= 255 else {
                throw FieldProblem(field: "param", message: "param must be a non-empty string of at most 255 bytes")
            }
            param = text
        }
        let deviceID = try Self.deviceID(body)
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
    static func webPosting(from body: PostingBody) throws(FieldProblem) -> Posting {
        guard let sipUserText = body.sipUser.string, let sipUser = AddressOfRecord(parsing: sipUserText) else {
            throw FieldProblem(field: "sipUser", message: "sipUser is required: the extension's address, number@domain")
        }
        let subscription = body.subscription
        guard subscription.object != nil else {
            throw FieldProblem(
                field: "subscription", message: "subscription is required with platform web: the browser's PushSubscription.toJSON()")
        }
        guard let endpoint = subscription["endpoint"].string, WebPushEndpoint.origin(of: endpoint) != nil else {
            throw FieldProblem(
                field: "subscription.endpoint",
                message: "subscription.endpoint must be the push service's https URL (at most \(WebPushEndpoint.maxLength) characters)")
        }
        let keys = subscription["keys"]
        guard keys.object != nil else {
            throw FieldProblem(field: "subscription.keys", message: "subscription.keys must hold p256dh and auth")
        }
        let checked: WebPushSubscriptionKeys
        do {
            checked = try WebPushSubscriptionKeys(p256dh: keys["p256dh"].string ?? "", auth: keys["auth"].string ?? "")
        } catch {
            throw FieldProblem(field: "subscription.keys.\(error.key)", message: error.message)
        }
        if body.token.hasValue, body.token.string != endpoint {
            throw FieldProblem(field: "token", message: "token may be left out with platform web; when given, it must be subscription.endpoint")
        }
        if body.param.hasValue {
            throw FieldProblem(field: "param", message: "param is not used with platform web (no push app: Rouse's VAPID key identifies it)")
        }
        let deviceID = try Self.deviceID(body)
        return Posting(
            sipUser: sipUser, channel: PushChannel(provider: .webpush, token: endpoint, param: nil, kind: .standard), deviceID: deviceID,
            webPushKeys: checked)
    }

    /// The optional `deviceId`: absent or null for none, else a non-empty string of at most 255 bytes.
    static func deviceID(_ body: PostingBody) throws(FieldProblem) -> String? {
        guard body.deviceId.hasValue else { return nil }
        guard let text = body.deviceId.string, !text.isEmpty, text.utf8.count <= 255 else {
            throw FieldProblem(field: "deviceId", message: "deviceId must be a non-empty string of at most 255 bytes")
        }
        return text
    }
}
