import CallRouting
import Crypto
import Dispatch
import Foundation
import Push
import Registrar
import RouseVocabulary
import Storage

/// The admin JSON API under `/api/v1/admin/` (issue 5, item 4): organisations, extensions (with
/// an extension's bindings, posted tokens, recent pushes and recent calls), push apps (keys
/// write-only), the test push, and calls with their journeys. Every route requires an
/// administrator's HTTP Basic credentials (`rouse admin add`); otherwise 401 with
/// `WWW-Authenticate: Basic realm="rouse-admin"`.
///
/// Threading: the handlers run on the HTTP server's threads and never block: each request's work
/// (the PBKDF2 check when not cached, the directory and storage calls, which wait for the worker
/// pool) runs on a queue of its own and answers through the responder; a test push awaits the
/// push service in a task. Answers never hold a password, hash or push app key.
public struct AdminAPI: Sendable {
    public static let base = "/api/v1/admin"
    /// Every route as `(method, path)`, `{…}` marking a path parameter (for the OpenAPI document
    /// and the tests).
    public static let routes: [(String, String)] = [
        ("GET", "/organisations"), ("POST", "/organisations"), ("DELETE", "/organisations/{domain}"),
        ("GET", "/extensions"), ("POST", "/extensions"), ("GET", "/extensions/{address}"),
        ("PUT", "/extensions/{address}/password"), ("DELETE", "/extensions/{address}"),
        ("GET", "/push-apps"), ("POST", "/push-apps"), ("PUT", "/push-apps/{id}"), ("DELETE", "/push-apps/{id}"),
        ("POST", "/push-apps/{id}/test"), ("POST", "/extensions/{address}/devices/{id}/test"),
        ("GET", "/calls"), ("GET", "/calls/{id}"),
    ].map { ($0.0, base + $0.1) }

    let pool: PostgresWorkerPool
    let directory: PostgresDirectory
    let reads: AdminReads
    let sessions: AdminSessionCache
    /// Counts wrong admin credentials per client address, with SIP and the other HTTP routes; a
    /// blocked address gets 429 before its credentials are checked (issue 9).
    let throttle: AuthFailureThrottle?
    let log: @Sendable (HTTPAPIEvent) -> Void
    let queue = DispatchQueue(label: "rouse.http.admin", attributes: .concurrent)

    /// - Parameter pusher: the instance's push service, which a device's test push goes through.
    /// - Parameter testPushInterval: seconds between two test pushes to one device token.
    /// - Parameter log: gets the test pushes and the tokens shown, by whom (never a whole token).
    /// - Parameter databaseDeadline: seconds a request waits for one database job (the worker
    ///   queue, connecting and its statements) before it answers 503 with `Retry-After`.
    public init(
        pool: PostgresWorkerPool, pushSettings: PushSettings = PushSettings(), sessions: AdminSessionCache = AdminSessionCache(),
        throttle: AuthFailureThrottle? = nil, pusher: PushService? = nil, testPushInterval: TimeInterval = 30,
        databaseDeadline: Double = AdminAPI.defaultDatabaseDeadline, log: @escaping @Sendable (HTTPAPIEvent) -> Void = { _ in }
    ) {
        self.throttle = throttle
        self.log = log
        self.pool = pool
        self.reads = AdminReads(
            pool: pool, pushSettings: pushSettings, pusher: pusher, testPushInterval: testPushInterval, databaseDeadline: databaseDeadline)
        self.directory = reads.directory
        self.sessions = sessions
    }

    /// Adds every admin route to `router`.
    public func register(on router: inout HTTPRouter) {
        let b = Self.base
        router.add("GET", b + "/organisations") { request, respond in guarded(request, respond) { try listOrganisations() } }
        router.add("POST", b + "/organisations") { request, respond in guarded(request, respond) { try addOrganisation(request) } }
        router.add("DELETE", prefix: b + "/organisations/") { request, rest, respond in
            guarded(request, respond) {
                try directory.removeDomain(rest)
                return .json(200, ["status": "removed"])
            }
        }
        router.add("GET", b + "/extensions") { request, respond in guarded(request, respond) { try listExtensions(request) } }
        router.add("POST", b + "/extensions") { request, respond in guarded(request, respond) { try addExtension(request) } }
        router.add("GET", prefix: b + "/extensions/") { request, rest, respond in
            guarded(request, respond) { try extensionDetail(try DirectoryError.parseAddress(rest), request) }
        }
        router.add("POST", prefix: b + "/extensions/") { request, rest, respond in
            authorized(request, respond) { testDevice(request, rest, respond) }
        }
        router.add("PUT", prefix: b + "/extensions/") { request, rest, respond in
            guarded(request, respond) {
                guard rest.hasSuffix("/password") else { return Self.notFound }
                let aor = try DirectoryError.parseAddress(String(rest.dropLast("/password".count)))
                try directory.changePassword(aor, password: try Self.parsePasswordBody(request.body))
                return .json(200, ["status": "changed"])
            }
        }
        router.add("DELETE", prefix: b + "/extensions/") { request, rest, respond in
            guarded(request, respond) {
                try directory.removeExtension(try DirectoryError.parseAddress(rest))
                return .json(200, ["status": "removed"])
            }
        }
        router.add("GET", b + "/push-apps") { request, respond in guarded(request, respond) { try listPushApps() } }
        router.add("POST", b + "/push-apps") { request, respond in guarded(request, respond) { try addPushApp(request) } }
        router.add("DELETE", prefix: b + "/push-apps/") { request, rest, respond in
            guarded(request, respond) {
                guard let id = Int64(rest) else { return Self.notFound }
                guard try reads.run({ try PostgresPushApps(connection: $0).remove(id: id) }) else {
                    return .error(404, code: "not_found", message: "there is no push app #\(id)")
                }
                return .json(200, ["status": "removed"])
            }
        }
        router.add("POST", prefix: b + "/push-apps/") { request, rest, respond in
            authorized(request, respond) { testPush(request, rest, respond) }
        }
        router.add("PUT", prefix: b + "/push-apps/") { request, rest, respond in
            guarded(request, respond) {
                guard let id = Int64(rest) else { return Self.notFound }
                return try updatePushApp(id: id, request)
            }
        }
        router.add("GET", b + "/calls") { request, respond in guarded(request, respond) { try listCalls(request) } }
        router.add("GET", prefix: b + "/calls/") { request, rest, respond in guarded(request, respond) { try callDetail(rest) } }
    }

    // MARK: - Authentication

    /// The one 401 of the admin API.
    static let unauthorized = HTTPResponse.error(
        401, code: "unauthorized", message: "admin credentials are required",
        headers: [("WWW-Authenticate", "Basic realm=\"rouse-admin\"")])

    static let notFound = HTTPResponse.error(404, code: "not_found", message: "no such path")

    /// Seconds an admin request (API or pages) waits for the database unless told otherwise.
    public static let defaultDatabaseDeadline: Double = 8

    /// The `Retry-After` of a 503 for a database failure (API and pages).
    static let retryAfterSeconds = 5

    /// Runs `then` on the admin queue once the request's credentials are an administrator's.
    func authorized(_ request: HTTPRequest, _ respond: HTTPResponder, then: @escaping @Sendable () -> Void) {
        if let throttle, let address = request.remoteAddress, let left = throttle.isBlocked(address) {
            let seconds = max(1, Int(left.rounded(.up)))
            respond(.error(
                429, code: "too_many_failures", message: "too many failed credentials from this address; try again in \(seconds) s",
                headers: [("Retry-After", String(seconds))]))
            return
        }
        guard let (name, password) = Self.basicCredentials(request) else {
            respond(Self.unauthorized)
            return
        }
        let key = AdminSessionCache.key(name: name, password: password)
        queue.async {
            if sessions.contains(key) {
                then()
                return
            }
            // A database failure is not a wrong password: 503, and nothing counted against the
            // address (phones behind the same NAT share it).
            let valid: Bool
            do {
                valid = try reads.run { try PostgresAdmins.verify(name: name, password: password, on: $0) }
            } catch {
                respond(Self.response(for: error))
                return
            }
            guard valid else {
                if let address = request.remoteAddress { throttle?.recordFailure(address) }
                respond(Self.unauthorized)
                return
            }
            sessions.insert(key)
            then()
        }
    }

    /// Authorizes, then runs `job` on the admin queue and answers with its response or its error.
    func guarded(_ request: HTTPRequest, _ respond: HTTPResponder, _ job: @escaping @Sendable () throws -> HTTPResponse) {
        authorized(request, respond) {
            do {
                respond(try job())
            } catch {
                respond(Self.response(for: error))
            }
        }
    }

    static func basicCredentials(_ request: HTTPRequest) -> (String, String)? {
        guard let header = request.header("Authorization"), header.count > 6, header.prefix(6).lowercased() == "basic ",
            let decoded = Data(base64Encoded: String(header.dropFirst(6)).trimmingCharacters(in: .whitespaces)),
            let text = String(data: decoded, encoding: .utf8), let colon = text.firstIndex(of: ":")
        else { return nil }
        return (String(text[..<colon]), String(text[text.index(after: colon)...]))
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
        case let refusal as DirectoryError:
            switch refusal {
            case .invalidDomain: return .error(400, code: "invalid_field", message: refusal.description, field: "domain")
            case .invalidNumber, .invalidAddress: return .error(400, code: "invalid_field", message: refusal.description, field: "address")
            case .invalidPassword: return .error(400, code: "invalid_field", message: refusal.description, field: "password")
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

    static func object(_ request: HTTPRequest) throws -> [String: Any] {
        try object(body: request.body)
    }

    static func object(body: Data) throws -> [String: Any] {
        guard let parsed = try? JSONSerialization.jsonObject(with: body), let object = parsed as? [String: Any] else {
            throw FieldProblem(field: nil, message: "the body must be a JSON object")
        }
        return object
    }

    static func string(_ object: [String: Any], _ field: String, optional: Bool = false) throws -> String {
        guard let value = object[field], !(value is NSNull) else {
            if optional { return "" }
            throw FieldProblem(field: field, message: "\(field) is required")
        }
        guard let text = value as? String else { throw FieldProblem(field: field, message: "\(field) must be a string") }
        return text
    }

    static func iso(_ date: Date) -> String {
        ISO8601DateFormatter().string(from: date)
    }

    // MARK: - Organisations and extensions

    func listOrganisations() throws -> HTTPResponse {
        let items = try directory.listDomains().map(Self.item)
        return .json(200, ["items": items, "total": items.count])
    }

    // MARK: - Items, as the API and `rouse … --json` show them

    /// An organisation in a list.
    public static func item(_ domain: DirectoryDomain) -> [String: Any] {
        ["domain": domain.domain, "extensionCount": domain.extensionCount, "createdAt": iso(domain.createdAt)]
    }

    /// An extension in a list.
    public static func item(_ item: DirectoryExtension) -> [String: Any] {
        ["address": item.aor.description, "liveBindings": item.liveBindingCount, "createdAt": iso(item.createdAt), "updatedAt": iso(item.updatedAt)]
    }

    /// A push app in a list: what it is, never its key.
    public static func item(_ app: PostgresPushApps.Summary) -> [String: Any] {
        ["id": app.id, "kind": app.kind, "param": app.param, "environment": app.environment ?? NSNull(), "details": app.details, "createdAt": app.createdAt]
    }

    /// A registered binding with its device id and push channels; tokens shortened unless `wholeTokens`.
    public static func item(_ binding: Binding, now: Date, isDead: (PushChannel) -> Bool, wholeTokens: Bool) -> [String: Any] {
        let device = AdminReads.Device(binding)
        return [
            "id": device.id, "testable": device.ringChannel != nil,
            "contact": binding.contactForDisplay, "userAgent": binding.userAgent ?? NSNull(),
            "flow": ["transport": binding.flow.transport.rawValue, "source": binding.flow.sourceText],
            "expiresIn": binding.remainingSeconds(at: now),
            "pushChannels": binding.pushChannels.map { channel -> [String: Any] in
                [
                    "provider": channel.provider.rawValue, "token": wholeTokens ? channel.token : Binding.shortenedToken(channel.token),
                    "param": channel.param ?? NSNull(), "kind": channel.kind.rawValue, "dead": isDead(channel),
                ]
            },
        ]
    }

    /// The device id of a posted token, as the extension's detail lists it: a hash of its family
    /// and token, never the token.
    public static func deviceID(of posted: PushChannel) -> String {
        AdminReads.Device.postedID(posted)
    }

    /// A posted token with its device id; shortened unless `wholeTokens`.
    public static func item(_ posted: PostedPushToken, isDead: (PushChannel) -> Bool, wholeTokens: Bool) -> [String: Any] {
        let device = AdminReads.Device(posted)
        return [
            "id": device.id, "testable": device.ringChannel != nil,
            "platform": platform(posted.channel.provider), "token": wholeTokens ? posted.channel.token : Binding.shortenedToken(posted.channel.token),
            "param": posted.channel.param ?? NSNull(), "kind": posted.channel.kind.rawValue, "deviceId": posted.deviceID ?? NSNull(),
            "postedAt": iso(posted.postedAt), "dead": isDead(posted.channel),
        ]
    }

    func addOrganisation(_ request: HTTPRequest) throws -> HTTPResponse {
        let domain = try directory.addDomain(try Self.parseOrganisationBody(request.body))
        return .json(201, ["domain": domain])
    }

    func listExtensions(_ request: HTTPRequest) throws -> HTTPResponse {
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
        let all = try reads.extensions(domain: domain, search: search)
        let page = all.dropFirst(offset).prefix(limit).map(Self.item)
        return .json(200, ["items": page, "total": all.count, "limit": limit, "offset": offset])
    }

    func addExtension(_ request: HTTPRequest) throws -> HTTPResponse {
        let (aor, password) = try Self.parseExtensionBody(request.body)
        try directory.addExtension(aor, password: password)
        return .json(201, ["address": aor.description])
    }

    /// `GET /extensions/{address}`: tokens shortened; with `tokens=true`, whole (answered
    /// `Cache-Control: no-store`, and logged as shown, never the token itself).
    func extensionDetail(_ aor: AddressOfRecord, _ request: HTTPRequest) throws -> HTTPResponse {
        let whole: Bool
        switch request.query["tokens"] ?? "" {
        case "", "false": whole = false
        case "true": whole = true
        default: throw FieldProblem(field: "tokens", message: "tokens must be true or false")
        }
        let detail = try reads.extensionDetail(aor)
        let now = detail.now
        let isDead = detail.isDead
        let bindingItems = detail.bindings.map { Self.item($0, now: now, isDead: isDead, wholeTokens: whole) }
        let postedItems = detail.postedTokens.map { Self.item($0, isDead: isDead, wholeTokens: whole) }
        let pushItems: [[String: Any]] = detail.recentPushes.map { record in
            [
                "time": Self.iso(record.createdAt), "provider": record.provider.rawValue, "outcome": record.outcome,
                "status": record.status ?? NSNull(), "reason": record.reason ?? NSNull(), "explanation": record.explanation,
                "latencyMs": record.latencyMilliseconds, "device": record.device ?? NSNull(),
                "wake": record.wake.map(Self.wake) ?? NSNull(),
            ]
        }
        if whole, !detail.bindings.allSatisfy({ $0.pushChannels.isEmpty }) || !detail.postedTokens.isEmpty {
            log(.tokensShown(admin: Self.basicCredentials(request)?.0 ?? "", target: "\(aor) (every device, admin API)"))
        }
        return .json(
            200,
            [
                "address": aor.description, "bindings": bindingItems, "postedTokens": postedItems, "recentPushes": pushItems,
                "recentCalls": detail.recentCalls.map(Self.callSummary),
            ],
            headers: whole ? [("Cache-Control", "no-store")] : [])
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
    func listCalls(_ request: HTTPRequest) throws -> HTTPResponse {
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
        let (page, next) = try reads.calls(of: aor, limit: limit, before: before, missed: missed)
        return .json(200, ["calls": page.map(Self.callSummary), "next": next.map(MillisecondTime.string) ?? NSNull()])
    }

    /// `GET /calls/{id}`: one call's journey; 404 for an unknown or malformed id.
    func callDetail(_ rest: String) throws -> HTTPResponse {
        guard let id = UUID(uuidString: rest), let journey = try reads.journey(id: id) else {
            return .error(404, code: "not_found", message: "there is no call \(rest)")
        }
        var detail = Self.callSummary(journey)
        detail["source"] = journey.source
        detail["instanceId"] = journey.instanceID
        detail["pushes"] = journey.pushes.map { push -> [String: Any] in
            [
                "id": push.id.uuidString.lowercased(), "device": push.device, "provider": push.provider.rawValue,
                "appId": push.appID ?? NSNull(), "token": push.tokenShort, "outcome": push.outcome, "status": push.status ?? NSNull(),
                "reason": push.reason ?? NSNull(), "explanation": push.explanation, "latencyMs": push.latencyMilliseconds,
                "sentAt": MillisecondTime.string(push.sentAt), "wake": Self.wake(push.wake), "line": push.line,
            ]
        }
        detail["branches"] = journey.branches.map { branch -> [String: Any] in
            [
                "bindingId": branch.bindingID.uuidString.lowercased(), "target": branch.target, "device": branch.device,
                "transport": branch.transport, "startedAt": MillisecondTime.string(branch.startedAt), "lateFork": branch.isLateFork,
                "responses": branch.responses.map { ["status": $0.status, "reason": $0.reason, "at": MillisecondTime.string($0.at)] },
                "canceledBecause": branch.canceledBecause ?? NSNull(),
                "endedAt": branch.endedAt.map(MillisecondTime.string) ?? NSNull(),
            ]
        }
        detail["events"] = journey.events.map { ["at": MillisecondTime.string($0.at), "text": $0.text] }
        return .json(200, detail)
    }

    /// A call as the call list and an extension's detail show it.
    static func callSummary(_ journey: CallJourney) -> [String: Any] {
        [
            "id": journey.id.uuidString.lowercased(), "callId": journey.callID, "uuid": journey.uuid,
            "callee": journey.callee.description, "caller": journey.caller, "callerName": journey.callerName ?? NSNull(),
            "transport": journey.transport, "startedAt": MillisecondTime.string(journey.startedAt),
            "answeredAt": journey.answeredAt.map(MillisecondTime.string) ?? NSNull(),
            "endedAt": journey.endedAt.map(MillisecondTime.string) ?? NSNull(), "outcome": journey.outcome.rawValue,
            "missed": journey.missed,
            "finalStatus": journey.finalStatus ?? NSNull(), "reason": journey.reason ?? NSNull(),
            "answeredBy": journey.answeredBy ?? NSNull(), "ringMs": journey.ringMilliseconds ?? NSNull(),
        ]
    }

    /// A ring push's wake result: its word, the milliseconds to the fresh REGISTER, and in words.
    static func wake(_ result: WakeResult) -> [String: Any] {
        ["result": result.word, "afterMs": result.milliseconds ?? NSNull(), "words": result.words]
    }

    // MARK: - Push apps

    func listPushApps() throws -> HTTPResponse {
        let items = try reads.pushApps().map(Self.item)
        return .json(200, ["items": items, "total": items.count])
    }

    func addPushApp(_ request: HTTPRequest) throws -> HTTPResponse {
        let app = try Self.parsePushAppBody(request.body)
        let (id, notes) = try reads.run { try PostgresPushApps(connection: $0).add(app) }
        return .json(201, ["id": id, "kind": app.kind, "param": app.param, "notes": notes])
    }

    /// Reads a `POST /push-apps` body into an app (not yet validated: storing it validates).
    /// Pure (no credentials, no storage); the fuzz harness calls it. Throws what `response(for:)`
    /// turns into a 400.
    public static func parsePushAppBody(_ data: Data) throws -> PushApp {
        let body = try object(body: data)
        let param = try string(body, "param", optional: true)
        let app: PushApp
        switch try string(body, "kind") {
        case "apns":
            var environment: APNsEnvironment? = nil
            let given = try string(body, "environment", optional: true)
            if !given.isEmpty {
                guard let parsed = APNsEnvironment(rawValue: given) else {
                    throw FieldProblem(field: "environment", message: "environment must be production or sandbox")
                }
                environment = parsed
            }
            app = PushApp(
                credentials: .apns(APNsCredentials(
                    teamID: try string(body, "teamId"), keyID: try string(body, "keyId"),
                    topic: try string(body, "topic"), privateKeyPEM: try string(body, "key"), environment: environment)),
                param: param)
        case "fcm":
            guard let account = body["serviceAccount"] as? [String: Any],
                let data = try? JSONSerialization.data(withJSONObject: account)
            else { throw FieldProblem(field: "serviceAccount", message: "serviceAccount must be the service account JSON object") }
            app = PushApp(credentials: .fcm(try FCMServiceAccount(json: Array(data))), param: param)
        default:
            throw FieldProblem(field: "kind", message: "kind must be apns or fcm")
        }
        return app
    }

    /// Reads a `POST /push-apps/{id}/test` body: the token and the provider if named. Pure; the
    /// fuzz harness calls it. Throws what `response(for:)` turns into a 400.
    public static func parseTestPushBody(_ data: Data) throws -> (token: String, provider: PushProvider?) {
        let body = try object(body: data)
        let token = try string(body, "token")
        guard !token.isEmpty, token.utf8.count <= 4096 else { throw FieldProblem(field: "token", message: "token must not be empty") }
        var provider: PushProvider? = nil
        let given = try string(body, "provider", optional: true)
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
        try string(try object(body: data), "domain")
    }

    /// Reads a `POST /extensions` body: the address, checked, and the password as given (the
    /// directory checks it). Pure.
    public static func parseExtensionBody(_ data: Data) throws -> (AddressOfRecord, String) {
        let body = try object(body: data)
        let aor = try DirectoryError.parseAddress(try string(body, "address"))
        return (aor, try string(body, "password"))
    }

    /// Reads a `PUT /extensions/{address}/password` body: the new password as given. Pure.
    public static func parsePasswordBody(_ data: Data) throws -> String {
        try string(try object(body: data), "password")
    }

    /// `PUT /push-apps/{id}`: changes an app in place. Every field is optional and keeps its stored
    /// value when absent; the key (`key`, `serviceAccount`) too, so an operator can change a topic
    /// or parameter without pasting the secret again. The kind cannot change.
    func updatePushApp(id: Int64, _ request: HTTPRequest) throws -> HTTPResponse {
        let body = try Self.object(request)
        guard let stored = try reads.run({ try PostgresPushApps(connection: $0).app(id: id) }) else {
            return .error(404, code: "not_found", message: "there is no push app #\(id)")
        }
        let kind = try Self.string(body, "kind", optional: true)
        if !kind.isEmpty, kind != stored.kind {
            throw FieldProblem(field: "kind", message: "app #\(id) is an \(stored.kind) app; its kind cannot change (add a new app instead)")
        }
        func given(_ field: String, else current: String) throws -> String {
            body[field] == nil ? current : try Self.string(body, field)
        }
        let param = try given("param", else: stored.param)
        let app: PushApp
        switch stored.credentials {
        case .apns(let current):
            var environment = current.environment
            if body["environment"] != nil {
                let text = try Self.string(body, "environment", optional: true)
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
                    teamID: try given("teamId", else: current.teamID), keyID: try given("keyId", else: current.keyID),
                    topic: try given("topic", else: current.topic), privateKeyPEM: try given("key", else: current.privateKeyPEM),
                    environment: environment)),
                param: param)
        case .fcm(let current):
            var account = current
            if let value = body["serviceAccount"] {
                guard let object = value as? [String: Any], let data = try? JSONSerialization.data(withJSONObject: object) else {
                    throw FieldProblem(field: "serviceAccount", message: "serviceAccount must be the service account JSON object")
                }
                account = try FCMServiceAccount(json: Array(data))
            }
            app = PushApp(id: id, credentials: .fcm(account), param: param)
        }
        guard let notes = try reads.run({ try PostgresPushApps(connection: $0).update(app) }) else {
            return .error(404, code: "not_found", message: "there is no push app #\(id)")
        }
        return .json(200, ["id": id, "kind": app.kind, "param": app.param, "notes": notes])
    }

    /// `POST /push-apps/{id}/test`: one test push, recorded like `rouse push test`.
    func testPush(_ request: HTTPRequest, _ rest: String, _ respond: HTTPResponder) {
        guard rest.hasSuffix("/test"), let id = Int64(rest.dropLast("/test".count)) else {
            respond(Self.notFound)
            return
        }
        do {
            let (token, chosen) = try Self.parseTestPushBody(request.body)
            let reads = reads
            Task {
                do {
                    guard let answer = try await reads.sendTestPush(appID: id, token: token, provider: chosen) else {
                        respond(.error(404, code: "not_found", message: "there is no push app #\(id)"))
                        return
                    }
                    log(.testPush(admin: Self.basicCredentials(request)?.0 ?? "", target: "push app #\(id)", token: PushRecord.shorten(token), outcome: answer.word))
                    respond(Self.testAnswer(answer, interval: reads.testPushInterval))
                } catch {
                    respond(Self.response(for: error))
                }
            }
        } catch {
            respond(Self.response(for: error))
        }
    }

    /// `POST /extensions/{address}/devices/{id}/test`: one test push to a device of the extension
    /// (a binding's id, or a posted token's), exactly as a call rings it; no body.
    func testDevice(_ request: HTTPRequest, _ rest: String, _ respond: HTTPResponder) {
        let parts = rest.components(separatedBy: "/devices/")
        guard parts.count == 2, parts[1].hasSuffix("/test") else {
            respond(Self.notFound)
            return
        }
        let id = String(parts[1].dropLast("/test".count))
        let found: (AddressOfRecord, AdminReads.Device)
        do {
            let aor = try DirectoryError.parseAddress(parts[0])
            guard let device = try reads.extensionDetail(aor).device(id: id) else {
                respond(.error(404, code: "not_found", message: "\(aor) has no device \(id) now (it may have unregistered or expired)"))
                return
            }
            found = (aor, device)
        } catch {
            respond(Self.response(for: error))
            return
        }
        let (aor, device) = found
        guard let channel = device.ringChannel else {
            respond(.error(409, code: "conflict", message: "no test push for this device: \(device.untestableReason ?? "")"))
            return
        }
        let reads = reads
        Task {
            do {
                let answer = try await reads.sendTestPush(to: device, of: aor)
                log(.testPush(
                    admin: Self.basicCredentials(request)?.0 ?? "", target: "\(aor) device \(device.id) (\(device.name))",
                    token: PushRecord.shorten(channel.token), outcome: answer.word))
                var appID: Any = NSNull()
                if case .sent(_, let id?) = answer { appID = id }
                respond(Self.testAnswer(
                    answer, interval: reads.testPushInterval,
                    also: ["device": device.name, "provider": channel.provider.rawValue, "token": Binding.shortenedToken(channel.token), "appId": appID]))
            } catch {
                respond(Self.response(for: error))
            }
        }
    }

    /// A test push's answer: 200 with the outcome in words (and `also`), or 429 with `Retry-After`.
    static func testAnswer(_ answer: AdminReads.TestPushAnswer, interval: TimeInterval, also: [String: Any] = [:]) -> HTTPResponse {
        switch answer {
        case .sent(let outcome, _):
            let words: [String: Any] = ["outcome": outcome.word, "description": outcome.description, "latencyMs": outcome.latencyMilliseconds]
            return .json(200, words.merging(also) { first, _ in first })
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
