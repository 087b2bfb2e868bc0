import CallRouting
import Crypto
public import Foundation
public import HTTPServer
public import Push
public import Registrar
import RouseLog
public import RouseVocabulary
public import Storage

/// The admin JSON API under `/api/v1/admin/` (issue 5, item 4): organisations, extensions (with
/// an extension's bindings, posted tokens, recent pushes and recent calls), push apps (keys
/// write-only), the test push, and calls with their journeys. Every route runs behind
/// `AdminAuthentication` (an administrator's HTTP Basic credentials, `rouse admin add`; otherwise
/// 401 with `WWW-Authenticate: Basic realm="rouse-admin"`) inside a `DatabaseDeadline` whose
/// answer for an error is `response(for:)`.
///
/// Threading: the handlers are async and never block: storage is awaited through the request's
/// `Store`, a test push awaits the push service. Answers never hold a password, hash or push app key.
public struct AdminAPI: Sendable {
    public static let base = "/api/v1/admin"

    let reads: AdminReads
    let logger: Logger

    static let notFound = HTTPResponse.error(404, code: "not_found", message: "no such path")

    /// Seconds an admin request (API or pages) waits for the database unless told otherwise.
    public static let defaultDatabaseDeadline: Double = 8

    /// The `Retry-After` of a 503 for a database failure (API and pages).
    static let retryAfterSeconds = 5

    /// The administrator `AdminAuthentication` let in.
    static func admin(_ context: APIContext) -> String { context.adminName ?? "" }

    // MARK: - Organisations and extensions

    @Sendable func removeOrganisation(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let domain = context.parameter("domain")
        try await context.store().directory { try $0.removeDomain(domain) }
        return .json(200, ["status": "removed"])
    }

    @Sendable func changePassword(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let aor = try DirectoryError.parseAddress(context.parameter("address"))
        let password = try Self.parsePasswordBody(request.body)
        try await context.store().directory { try $0.changePassword(aor, password: password) }
        return .json(200, ["status": "changed"])
    }

    @Sendable func removeExtension(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let aor = try DirectoryError.parseAddress(context.parameter("address"))
        try await context.store().directory { try $0.removeExtension(aor) }
        return .json(200, ["status": "removed"])
    }

    @Sendable func removePushApp(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        guard let id = Int64(context.parameter("id")) else { return Self.notFound }
        guard try await context.store().perform({ try PostgresPushApps(connection: $0).remove(id: id) }) else {
            return .error(404, code: "not_found", message: "there is no push app #\(id)")
        }
        return .json(200, ["status": "removed"])
    }

    // MARK: - Errors

    /// A body problem: 400 naming the field.
    struct FieldProblem: Error {
        let field: String?
        let message: String
    }

    /// The error shape for a refusal; storage failures are 503 without their details. Public so the
    /// fuzz harness can check that the body readers below only ever refuse with a 400.
    public static func response(for error: any Error) -> HTTPResponse {
        switch error {
        case let problem as FieldProblem:
            return .error(400, code: problem.field == nil ? "invalid_json" : "invalid_field", message: problem.message, field: problem.field)
        case let problem as PushAppError:
            return .error(400, code: "invalid_field", message: problem.description, field: pushAppField(problem.field))
        case let refusal as RouteError:
            return routeResponse(refusal)
        case let refusal as DirectoryError:
            switch refusal {
            case .invalidDomain: return .error(400, code: "invalid_field", message: refusal.description, field: "domain")
            case .invalidNumber, .invalidAddress: return .error(400, code: "invalid_field", message: refusal.description, field: "address")
            case .invalidPassword: return .error(400, code: "invalid_field", message: refusal.description, field: "password")
            case .invalidDisplayName: return .error(400, code: "invalid_field", message: refusal.description, field: "displayName")
            case .noSuchDomain, .noSuchExtension: return .error(404, code: "not_found", message: refusal.description)
            case .domainExists, .extensionExists, .domainHasExtensions: return .error(409, code: "conflict", message: refusal.description)
            }
        default:
            return .error(
                503, code: "storage_unavailable", message: "the database could not be reached, refused or did not answer in time; try again",
                headers: [("Retry-After", String(Self.retryAfterSeconds))])
        }
    }

    /// A push app validation field as the API's body names it.
    static func pushAppField(_ field: String) -> String {
        switch field {
        case "team_id": return "teamId"
        case "key_id": return "keyId"
        case "topic", "key", "param", "environment", "kind": return field
        case "service_account": return "serviceAccount"
        default: return "serviceAccount." + field
        }
    }

    /// A body's fields as they came; 400 (`invalid_json`) when it is not a JSON object.
    static func fields<Body: Decodable>(_ type: Body.Type, _ data: Data) throws -> Body {
        guard let body = JSONField.body(type, from: data) else { throw FieldProblem(field: nil, message: "the body must be a JSON object") }
        return body
    }

    /// A string field named `name`: absent or null is "" when `optional`, else 400; another kind of value is 400.
    static func string(_ value: JSONField, _ name: String, optional: Bool = false) throws -> String {
        guard value.hasValue else {
            if optional { return "" }
            throw FieldProblem(field: name, message: "\(name) is required")
        }
        guard let text = value.string else { throw FieldProblem(field: name, message: "\(name) must be a string") }
        return text
    }

    /// A service account field: the JSON object's bytes, or 400 naming `serviceAccount`.
    static func serviceAccount(_ value: JSONField) throws -> FCMServiceAccount {
        guard value.object != nil, let data = try? JSONEncoder().encode(value) else {
            throw FieldProblem(field: "serviceAccount", message: "serviceAccount must be the service account JSON object")
        }
        return try FCMServiceAccount(json: Array(data))
    }

    /// A `POST /organisations` body.
    struct OrganisationBody: Decodable {
        let domain: JSONField
    }

    /// A `POST /extensions` body.
    struct ExtensionBody: Decodable {
        let address: JSONField
        let password: JSONField
        let displayName: JSONField
    }

    /// A `PUT /extensions/{address}/display-name` body.
    struct DisplayNameBody: Decodable {
        let displayName: JSONField
    }

    /// A `PUT /extensions/{address}/password` body.
    struct PasswordBody: Decodable {
        let password: JSONField
    }

    /// A `POST /push-apps/{id}/test` body.
    struct TestPushBody: Decodable {
        let token: JSONField
        let provider: JSONField
    }

    /// A `POST /push-apps` or `PUT /push-apps/{id}` body (APNs fields, or FCM's service account).
    struct PushAppBody: Decodable {
        let kind: JSONField
        let param: JSONField
        let environment: JSONField
        let teamId: JSONField
        let keyId: JSONField
        let topic: JSONField
        let key: JSONField
        let serviceAccount: JSONField
    }

    static func iso(_ date: Date) -> String {
        ISO8601DateFormatter().string(from: date)
    }

    // MARK: - Organisations and extensions

    @Sendable func listOrganisations(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let items = try await context.store().directory { try $0.listDomains() }.map(AdminAnswer.Organisation.init)
        return .json(200, AdminAnswer.List(items: items, total: items.count))
    }

    // MARK: - Items, as the API and `rouse … --json` show them

    /// An organisation in a list (for `rouse domain list --json`).
    public static func item(_ domain: DirectoryDomain) -> [String: Any] {
        AdminAnswer.dictionary(AdminAnswer.Organisation(domain))
    }

    /// An extension in a list (for `rouse extension list --json`).
    public static func item(_ item: DirectoryExtension) -> [String: Any] {
        AdminAnswer.dictionary(AdminAnswer.Extension(item))
    }

    /// A push app in a list: what it is, never its key (for `rouse push-app … --json`).
    public static func item(_ app: PostgresPushApps.Summary) -> [String: Any] {
        AdminAnswer.dictionary(AdminAnswer.PushAppItem(app))
    }

    /// A registered binding with its device id and push channels; tokens shortened unless `wholeTokens`.
    public static func item(_ binding: Binding, now: Date, isDead: (PushChannel) -> Bool, wholeTokens: Bool) -> [String: Any] {
        AdminAnswer.dictionary(AdminAnswer.BindingItem(binding, now: now, isDead: isDead, wholeTokens: wholeTokens))
    }

    /// The device id of a posted token, as the extension's detail lists it: a hash of its family
    /// and token, never the token.
    public static func deviceID(of posted: PushChannel) -> String {
        AdminReads.Device.postedID(posted)
    }

    /// A posted token with its device id; shortened unless `wholeTokens`.
    public static func item(_ posted: PostedPushToken, isDead: (PushChannel) -> Bool, wholeTokens: Bool) -> [String: Any] {
        AdminAnswer.dictionary(AdminAnswer.PostedTokenItem(posted, isDead: isDead, wholeTokens: wholeTokens))
    }

    @Sendable func addOrganisation(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let given = try Self.parseOrganisationBody(request.body)
        let domain = try await context.store().directory { try $0.addDomain(given) }
        return .json(201, ["domain": domain])
    }

    @Sendable func listExtensions(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let domain = request.query["domain"].flatMap { $0.isEmpty ? nil : $0 }
        let search = request.query["search"] ?? ""
        func number(_ name: String, _ fallback: Int, _ range: ClosedRange<Int>) throws -> Int {
            guard let text = request.query[name], !text.isEmpty else { return fallback }
            guard let value = Int(text), range.contains(value) else {
                throw FieldProblem(field: name, message: "\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound)")
            }
            return value
        }
        let limit = try number("limit", 50, 1...500)
        let offset = try number("offset", 0, 0...Int(Int32.max))
        let all = try await reads.extensions(domain: domain, search: search, context.store())
        let page = all.dropFirst(offset).prefix(limit).map(AdminAnswer.Extension.init)
        return .json(200, AdminAnswer.ExtensionPage(items: Array(page), total: all.count, limit: limit, offset: offset))
    }

    @Sendable func addExtension(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let (aor, password, displayName) = try Self.parseExtensionBody(request.body)
        try await context.store().directory { try $0.addExtension(aor, password: password, displayName: displayName) }
        return .json(201, AdminAnswer.DisplayNameSet(address: aor.description, displayName: displayName))
    }

    /// `PUT /extensions/{address}/display-name`: `{"displayName": "Alice Example"}`; null or ""
    /// removes it.
    @Sendable func setDisplayName(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let aor = try DirectoryError.parseAddress(context.parameter("address"))
        let displayName = try Self.parseDisplayNameBody(request.body)
        try await context.store().directory { try $0.setDisplayName(aor, displayName) }
        return .json(200, AdminAnswer.DisplayNameSet(address: aor.description, displayName: displayName))
    }

    /// `GET /extensions/{address}`: tokens shortened; with `tokens=true`, whole (answered
    /// `Cache-Control: no-store`, and logged as shown, never the token itself).
    @Sendable func extensionDetail(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let aor = try DirectoryError.parseAddress(context.parameter("address"))
        let whole: Bool
        switch request.query["tokens"] ?? "" {
        case "", "false": whole = false
        case "true": whole = true
        default: throw FieldProblem(field: "tokens", message: "tokens must be true or false")
        }
        let detail = try await reads.extensionDetail(aor, context.store())
        let now = detail.now
        let isDead = detail.isDead
        let answer = AdminAnswer.ExtensionDetail(
            address: aor.description, displayName: detail.displayName,
            bindings: detail.bindings.map { AdminAnswer.BindingItem($0, now: now, isDead: isDead, wholeTokens: whole) },
            postedTokens: detail.postedTokens.map { AdminAnswer.PostedTokenItem($0, isDead: isDead, wholeTokens: whole) },
            recentPushes: detail.recentPushes.map(AdminAnswer.RecentPush.init), recentCalls: detail.recentCalls.map(AdminAnswer.CallSummary.init),
            classOfService: detail.classOfService?.rawValue)
        if whole, !detail.bindings.allSatisfy({ $0.pushChannels.isEmpty }) || !detail.postedTokens.isEmpty {
            logger.tokensShown(admin: Self.admin(context), target: "\(aor) (every device, admin API)")
        }
        return .json(200, answer, headers: whole ? [("Cache-Control", "no-store")] : [])
    }

    /// The posting endpoint's platform name of a provider.
    static func platform(_ provider: PushProvider) -> String {
        switch provider {
        case .apns: return "ios"
        case .apnsSandbox: return "ios.dev"
        case .fcm: return "android"
        default: return provider.rawValue
        }
    }

    // MARK: - Calls

    /// `GET /calls`: newest first, of one extension (`extension`), `limit` (1–500, default 50) at
    /// a time; `before` (a call's `startedAt`, as `next` gives it) pages back; `missed=true` (or
    /// `false`) keeps only missed (or only other) calls.
    @Sendable func listCalls(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        var aor: AddressOfRecord? = nil
        if let text = request.query["extension"], !text.isEmpty {
            guard let parsed = AddressOfRecord(parsing: text) else {
                throw FieldProblem(field: "extension", message: "extension must be an extension's address, number@domain")
            }
            aor = parsed
        }
        var limit = 50
        if let text = request.query["limit"], !text.isEmpty {
            guard let value = Int(text), (1...500).contains(value) else {
                throw FieldProblem(field: "limit", message: "limit must be a whole number from 1 to 500")
            }
            limit = value
        }
        var before: Date? = nil
        if let text = request.query["before"], !text.isEmpty {
            guard let parsed = MillisecondTime.date(text) else {
                throw FieldProblem(field: "before", message: "before must be a date and time, as a page's next gives it (2026-11-29T10:00:00.000Z)")
            }
            before = parsed
        }
        var missed: Bool? = nil
        if let text = request.query["missed"], !text.isEmpty {
            guard text == "true" || text == "false" else { throw FieldProblem(field: "missed", message: "missed must be true or false") }
            missed = text == "true"
        }
        let (page, next) = try await reads.calls(of: aor, limit: limit, before: before, missed: missed, context.store())
        return .json(200, AdminAnswer.CallPage(calls: page.map(AdminAnswer.CallSummary.init), next: next.map(MillisecondTime.string)))
    }

    /// `GET /calls/{id}`: one call's journey; 404 for an unknown or malformed id.
    @Sendable func callDetail(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let rest = context.parameter("id")
        guard let id = UUID(uuidString: rest), let journey = try await reads.journey(id: id, context.store()) else {
            return .error(404, code: "not_found", message: "there is no call \(rest)")
        }
        return .json(200, AdminAnswer.CallDetail(journey))
    }

    // MARK: - Push apps

    @Sendable func listPushApps(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let items = try await reads.pushApps(context.store()).map(AdminAnswer.PushAppItem.init)
        return .json(200, AdminAnswer.List(items: items, total: items.count))
    }

    @Sendable func addPushApp(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let app = try Self.parsePushAppBody(request.body)
        let (id, notes) = try await context.store().perform { try PostgresPushApps(connection: $0).add(app) }
        return .json(201, AdminAnswer.PushAppSaved(id: id, kind: app.kind, param: app.param, notes: notes))
    }

    /// Reads a `POST /push-apps` body into an app (not yet validated: storing it validates).
    /// Pure (no credentials, no storage); the fuzz harness calls it. Throws what `response(for:)`
    /// turns into a 400.
    public static func parsePushAppBody(_ data: Data) throws -> PushApp {
        let body = try fields(PushAppBody.self, data)
        let param = try string(body.param, "param", optional: true)
        let app: PushApp
        switch try string(body.kind, "kind") {
        case "apns":
            var environment: APNsEnvironment? = nil
            let given = try string(body.environment, "environment", optional: true)
            if !given.isEmpty {
                guard let parsed = APNsEnvironment(rawValue: given) else {
                    throw FieldProblem(field: "environment", message: "environment must be production or sandbox")
                }
                environment = parsed
            }
            app = PushApp(
                credentials: .apns(APNsCredentials(
                    teamID: try string(body.teamId, "teamId"), keyID: try string(body.keyId, "keyId"),
                    topic: try string(body.topic, "topic"), privateKeyPEM: try string(body.key, "key"), environment: environment)),
                param: param)
        case "fcm":
            app = PushApp(credentials: .fcm(try serviceAccount(body.serviceAccount)), param: param)
        default:
            throw FieldProblem(field: "kind", message: "kind must be apns or fcm")
        }
        return app
    }

    /// Reads a `POST /push-apps/{id}/test` body: the token and the provider if named. Pure; the
    /// fuzz harness calls it. Throws what `response(for:)` turns into a 400.
    public static func parseTestPushBody(_ data: Data) throws -> (token: String, provider: PushProvider?) {
        let body = try fields(TestPushBody.self, data)
        let token = try string(body.token, "token")
        guard !token.isEmpty, token.utf8.count <= 4096 else { throw FieldProblem(field: "token", message: "token must not be empty") }
        var provider: PushProvider? = nil
        let given = try string(body.provider, "provider", optional: true)
        if !given.isEmpty {
            guard let parsed = PushProvider(rawValue: given), parsed != .webpush else {
                throw FieldProblem(field: "provider", message: "provider must be apns, apns.dev or fcm")
            }
            provider = parsed
        }
        return (token, provider)
    }

    /// Reads a `POST /organisations` body: the domain as given (the directory checks it). Pure.
    public static func parseOrganisationBody(_ data: Data) throws -> String {
        try string(try fields(OrganisationBody.self, data).domain, "domain")
    }

    /// Reads a `POST /extensions` body: the address, checked, the password as given (the
    /// directory checks it) and the optional display name, checked (nil: none). Pure.
    public static func parseExtensionBody(_ data: Data) throws -> (AddressOfRecord, String, String?) {
        let body = try fields(ExtensionBody.self, data)
        let aor = try DirectoryError.parseAddress(try string(body.address, "address"))
        return (aor, try string(body.password, "password"), try displayName(body.displayName))
    }

    /// Reads a `PUT /extensions/{address}/display-name` body: the name, checked; nil (null or
    /// blank) removes it. The field is required. Pure.
    public static func parseDisplayNameBody(_ data: Data) throws -> String? {
        let body = try fields(DisplayNameBody.self, data)
        guard body.displayName.isPresent else { throw FieldProblem(field: "displayName", message: "displayName is required (null removes it)") }
        return try displayName(body.displayName)
    }

    /// A `displayName` field: a string (checked by `DirectoryError.parseDisplayName`), or
    /// absent or null for none.
    static func displayName(_ value: JSONField) throws -> String? {
        guard value.hasValue else { return nil }
        guard let text = value.string else { throw FieldProblem(field: "displayName", message: "displayName must be a string or null") }
        return try DirectoryError.parseDisplayName(text)
    }

    /// Reads a `PUT /extensions/{address}/password` body: the new password as given. Pure.
    public static func parsePasswordBody(_ data: Data) throws -> String {
        try string(try fields(PasswordBody.self, data).password, "password")
    }

    /// `PUT /push-apps/{id}`: changes an app in place. Every field is optional and keeps its stored
    /// value when absent; the key (`key`, `serviceAccount`) too, so an operator can change a topic
    /// or parameter without pasting the secret again. The kind cannot change.
    @Sendable func updatePushApp(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        guard let id = Int64(context.parameter("id")) else { return Self.notFound }
        let body = try Self.fields(PushAppBody.self, request.body)
        let store = try context.store()
        guard let stored = try await store.perform({ try PostgresPushApps(connection: $0).app(id: id) }) else {
            return .error(404, code: "not_found", message: "there is no push app #\(id)")
        }
        let kind = try Self.string(body.kind, "kind", optional: true)
        if !kind.isEmpty, kind != stored.kind {
            throw FieldProblem(field: "kind", message: "app #\(id) is an \(stored.kind) app; its kind cannot change (add a new app instead)")
        }
        func given(_ value: JSONField, _ name: String, else current: String) throws -> String {
            value.isPresent ? try Self.string(value, name) : current
        }
        let param = try given(body.param, "param", else: stored.param)
        let app: PushApp
        switch stored.credentials {
        case .apns(let current):
            var environment = current.environment
            if body.environment.isPresent {
                let text = try Self.string(body.environment, "environment", optional: true)
                if text.isEmpty {
                    environment = nil
                } else {
                    guard let parsed = APNsEnvironment(rawValue: text) else {
                        throw FieldProblem(field: "environment", message: "environment must be production or sandbox (or empty for both)")
                    }
                    environment = parsed
                }
            }
            app = PushApp(
                id: id,
                credentials: .apns(APNsCredentials(
                    teamID: try given(body.teamId, "teamId", else: current.teamID), keyID: try given(body.keyId, "keyId", else: current.keyID),
                    topic: try given(body.topic, "topic", else: current.topic), privateKeyPEM: try given(body.key, "key", else: current.privateKeyPEM),
                    environment: environment)),
                param: param)
        case .fcm(let current):
            var account = current
            if body.serviceAccount.isPresent { account = try Self.serviceAccount(body.serviceAccount) }
            app = PushApp(id: id, credentials: .fcm(account), param: param, directBootOK: stored.directBootOK)
        }
        let edited = app
        guard let notes = try await store.perform({ try PostgresPushApps(connection: $0).update(edited) }) else {
            return .error(404, code: "not_found", message: "there is no push app #\(id)")
        }
        return .json(200, AdminAnswer.PushAppSaved(id: id, kind: app.kind, param: app.param, notes: notes))
    }

    /// `POST /push-apps/{id}/test`: one test push, recorded like `rouse push test`.
    @Sendable func testPush(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        guard let id = Int64(context.parameter("id")) else { return Self.notFound }
        let (token, chosen) = try Self.parseTestPushBody(request.body)
        guard let answer = try await reads.sendTestPush(appID: id, token: token, provider: chosen, context.store()) else {
            return .error(404, code: "not_found", message: "there is no push app #\(id)")
        }
        logger.testPush(admin: Self.admin(context), target: "push app #\(id)", token: PushRecord.shorten(token), outcome: answer.word)
        return Self.testAnswer(answer, interval: reads.testPushInterval)
    }

    /// `POST /extensions/{address}/devices/{id}/test`: one test push to a device of the extension
    /// (a binding's id, or a posted token's), exactly as a call rings it; no body.
    @Sendable func testDevice(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let id = context.parameter("id")
        let aor = try DirectoryError.parseAddress(context.parameter("address"))
        let store = try context.store()
        guard let device = try await reads.extensionDetail(aor, store).device(id: id) else {
            return .error(404, code: "not_found", message: "\(aor) has no device \(id) now (it may have unregistered or expired)")
        }
        guard let channel = device.ringChannel else {
            return .error(409, code: "conflict", message: "no test push for this device: \(device.untestableReason ?? "")")
        }
        let answer = try await reads.sendTestPush(to: device, of: aor, store)
        logger.testPush(
            admin: Self.admin(context), target: "\(aor) device \(device.id) (\(device.name))",
            token: PushRecord.shorten(channel.token), outcome: answer.word)
        var appID: Int64? = nil
        if case .sent(_, let id?) = answer { appID = id }
        return Self.testAnswer(
            answer, interval: reads.testPushInterval,
            sentTo: AdminAnswer.SentTo(
                device: device.name, provider: channel.provider.rawValue, token: Binding.shortenedToken(channel.token), appId: appID))
    }

    /// A test push's answer: 200 with the outcome in words (and for a device where it went), or
    /// 429 with `Retry-After`.
    static func testAnswer(_ answer: AdminReads.TestPushAnswer, interval: TimeInterval, sentTo: AdminAnswer.SentTo? = nil) -> HTTPResponse {
        switch answer {
        case .sent(let outcome, _):
            return .json(
                200,
                AdminAnswer.TestPushResult(
                    outcome: outcome.word, description: outcome.description, latencyMs: outcome.latencyMilliseconds, sentTo: sentTo))
        case .limited(let seconds):
            return .error(
                429, code: "too_many_test_pushes",
                message: "a test push went to this device less than \(Int(interval.rounded(.up))) s ago (test_push_interval); try again in \(seconds) s",
                headers: [("Retry-After", String(seconds))])
        }
    }
}

/// Administrators' credentials verified in the last minute, so a request does not pay the
/// PBKDF2 cost each time. Keyed by SHA-256 of name and password; never holds a password.
///
/// Threading: thread-safe (an `NSLock` guards the table).
public final class AdminSessionCache: @unchecked Sendable {
    // @unchecked: `expiries` is only touched under `lock`.
    private let lock = NSLock()
    private var expiries: [String: Date] = [:]
    let lifetime: TimeInterval

    public init(lifetime: TimeInterval = 60) {
        self.lifetime = lifetime
    }

    /// The cache key of a name and password.
    static func key(name: String, password: String) -> String {
        Hex.encode(Digest.hash(.sha256, Array(name.utf8) + [0] + Array(password.utf8)))
    }

    func contains(_ key: String) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard let expiry = expiries[key] else { return false }
        return expiry > Date()
    }

    func insert(_ key: String) {
        let now = Date()
        lock.lock()
        expiries = expiries.filter { $0.value > now }
        expiries[key] = now.addingTimeInterval(lifetime)
        lock.unlock()
    }
}
