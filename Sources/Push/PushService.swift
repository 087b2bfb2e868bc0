import Crypto
public import Foundation
public import RouseVocabulary

/// Marks a token dead (protocol.md's dead-token rules) so that it is not pushed again until the
/// device registers or posts it again. Storage implements it; tests use an in-memory one.
/// Implementations are thread-safe and must not block the caller's thread.
public protocol DeadTokenRecorder: Sendable {
    func markDead(_ token: PushTokenID, reason: String) async throws
}

/// One push as the admin pages show it ("Recent pushes"). Holds a shortened token only.
public struct PushRecord: Sendable, Equatable {
    public var createdAt: Date
    public var aor: String?
    public var callID: String?
    public var provider: PushProvider
    /// The first 8 characters of the token and an ellipsis.
    public var tokenShort: String
    public var appID: Int64?
    /// `accepted`, `refused` or `failed` (`PushOutcome.Kind`), as stored.
    public var outcome: String
    public var status: Int?
    public var reason: String?
    public var explanation: String
    public var latencyMilliseconds: Int
    /// The record's own id, when a call recorded it (so its wake result can be added later).
    public var id: UUID?
    /// The device as people know it (a call's push names it).
    public var device: String?
    /// What became of the woken device; nil for a push outside a call.
    public var wake: WakeResult?

    public init(
        createdAt: Date, aor: String?, callID: String?, provider: PushProvider, tokenShort: String, appID: Int64?,
        outcome: String, status: Int?, reason: String?, explanation: String, latencyMilliseconds: Int,
        id: UUID? = nil, device: String? = nil, wake: WakeResult? = nil
    ) {
        self.id = id
        self.device = device
        self.wake = wake
        self.createdAt = createdAt
        self.aor = aor
        self.callID = callID
        self.provider = provider
        self.tokenShort = tokenShort
        self.appID = appID
        self.outcome = outcome
        self.status = status
        self.reason = reason
        self.explanation = explanation
        self.latencyMilliseconds = latencyMilliseconds
    }

    /// Milliseconds from push to the device's fresh REGISTER, when it came back.
    public var wokeAfterMilliseconds: Int? { wake?.milliseconds }

    /// Which of the three outcomes the stored word names; nil for a word that is none of them.
    public var outcomeKind: PushOutcome.Kind? { PushOutcome.Kind(rawValue: outcome) }

    /// A token as records and logs show it (a web push endpoint: its push service's host only).
    public static func shorten(_ token: String) -> String {
        if token.hasPrefix("https://"), let host = URLComponents(string: token)?.host { return "https://\(host)/…" }
        return token.count <= 8 ? token : String(token.prefix(8)) + "…"
    }
}

/// Keeps every push's outcome. Storage implements it. Thread-safe; must not block the caller.
public protocol PushRecordStore: Sendable {
    func record(_ record: PushRecord) async throws
}

/// Where the providers are and how long a push may take (settings `apns_production_url`,
/// `apns_sandbox_url`, `fcm_url`, `push_ca_file`, `push_timeout`, `push_proxy`), how often a
/// transient failure is tried again (`push_attempts`) and when a failing provider is backed off
/// (`push_breaker_*`).
public struct PushSettings: Sendable, Equatable {
    public var apns: APNsEndpoints
    public var fcmURL: String
    /// Extra PEM CA file to trust; nil = the system's CAs only.
    public var caFile: String?
    /// Deadline of every push request.
    public var timeout: Duration
    /// Transient failures sent again, within the push's deadline.
    public var retry: PushRetryPolicy
    /// Each provider host's circuit breaker, per push app (web push: per push service).
    public var breaker: ProviderCircuitBreaker.Settings
    /// The proxy every push goes through (`push_proxy`); nil: none.
    public var proxy: PushProxy?

    public init(
        apns: APNsEndpoints = APNsEndpoints(), fcmURL: String = "https://fcm.googleapis.com", caFile: String? = nil, timeout: Duration = .seconds(5),
        retry: PushRetryPolicy = PushRetryPolicy(), breaker: ProviderCircuitBreaker.Settings = ProviderCircuitBreaker.Settings(),
        proxy: PushProxy? = nil
    ) {
        self.apns = apns
        self.fcmURL = fcmURL
        self.caFile = caFile
        self.timeout = timeout
        self.retry = retry
        self.breaker = breaker
        self.proxy = proxy
    }
}

/// Sends ring, cancel and test pushes (Flexisip's shape: service → one client per app → request):
/// chooses the app for a channel, builds the request, classifies the answer, marks dead tokens and
/// records every outcome. Timing policy (when to push, when to give up) belongs to the caller.
///
/// Threading: thread-safe; call from any task. A lock guards the app list and the client cache;
/// each client has its own HTTP/2 thread.
public final class PushService: @unchecked Sendable {
    public let settings: PushSettings
    private let deadTokens: (any DeadTokenRecorder)?
    private let records: (any PushRecordStore)?
    private let lock = NSLock()
    private var selector: PushAppSelector
    private var apnsClients: [String: APNsClient] = [:]
    private var fcmClients: [String: FCMClient] = [:]
    private var broken: [BrokenPushApp]
    /// Web push (RFC 8030 with VAPID): no push app, Rouse's own VAPID key; nil when not set up.
    public let webPush: WebPushClient?

    public init(
        settings: PushSettings, apps: [PushApp], deadTokens: (any DeadTokenRecorder)? = nil, records: (any PushRecordStore)? = nil,
        webPush: WebPushClient? = nil
    ) {
        self.settings = settings
        self.webPush = webPush
        self.deadTokens = deadTokens
        self.records = records
        selector = PushAppSelector(apps: apps)
        broken = Self.check(apps)
    }

    /// The apps that cannot push, as found when they were loaded (`PushApp.problems`): one entry
    /// per problem, in app order. Thread-safe.
    public var brokenApps: [BrokenPushApp] {
        lock.lock()
        defer { lock.unlock() }
        return broken
    }

    /// Replaces the apps (after an operator added or removed one); clients of removed apps go.
    public func replaceApps(_ apps: [PushApp]) {
        let found = Self.check(apps)
        lock.lock()
        defer { lock.unlock() }
        selector = PushAppSelector(apps: apps)
        broken = found
        let keys = Set(apps.map(Self.cacheKey))
        apnsClients = apnsClients.filter { keys.contains($0.key) }
        fcmClients = fcmClients.filter { keys.contains($0.key) }
    }

    /// The app that would push to `channel`.
    public func app(for channel: PushChannel) -> PushApp? {
        lock.lock()
        defer { lock.unlock() }
        return selector.app(for: channel)
    }

    /// The ring push of a call to one channel. `expiresAt` is the last moment the call could still
    /// reach this device (decisions.md "Ring push expiry"). `recordOutcome: false` leaves the push
    /// record to the caller (a call records it with its journey). Transient failures are sent
    /// again until `deadline` at most (the call's wake window; by default, and never later than,
    /// `expiresAt`).
    /// `test` marks the operator's test push (`"test": "true"`).
    public func sendRing(
        _ call: CallPushContent, to channel: PushChannel, expiresAt: Date, aor: String? = nil, recordOutcome: Bool = true,
        deadline: Date? = nil, test: Bool = false
    ) async -> PushOutcome {
        if channel.family == .webpush {
            let outcome = await sendWebPush(.ring(call, test: test), to: channel, expiresAt: expiresAt, deadline: deadline)
            return await finish(outcome, channel: channel, app: nil, aor: aor, callID: call.callID, record: recordOutcome)
        }
        guard let app = app(for: channel) else {
            return await finish(
                .noApp(provider: channel.provider, param: channel.param), channel: channel, app: nil, aor: aor, callID: call.callID,
                record: recordOutcome)
        }
        return await send(
            .ring(call, test: test), kind: .ring, channel: channel, app: app, expiresAt: expiresAt, aor: aor, callID: call.callID,
            record: recordOutcome, deadline: deadline)
    }

    /// The operator's test push to one device exactly as a call rings it: the push app the
    /// selector picks for `channel`, the APNs host its provider names (`apns`, `apns.dev`), a web
    /// push through Rouse's VAPID key, and the ring payload marked `test`. A dead token the
    /// provider names is marked dead (when this service has a recorder).
    public func sendTest(
        to channel: PushChannel, calleeNumber: String = "test", aor: String? = nil, recordOutcome: Bool = true, ringTimeoutSeconds: Int = 30
    ) async -> PushOutcome {
        let call = Self.testCall(calleeNumber: calleeNumber, ringTimeoutSeconds: ringTimeoutSeconds)
        return await sendRing(
            call, to: channel, expiresAt: call.timestamp.addingTimeInterval(TimeInterval(ringTimeoutSeconds)), aor: aor,
            recordOutcome: recordOutcome, test: true)
    }

    /// The call a test push announces: caller "Rouse test push", a Call-ID of its own.
    static func testCall(calleeNumber: String, ringTimeoutSeconds: Int) -> CallPushContent {
        CallPushContent(
            callID: "test-" + UUID().uuidString.lowercased(), callerNumber: "test", callerName: "Rouse test push",
            calleeNumber: calleeNumber, ringTimeoutSeconds: ringTimeoutSeconds, timestamp: Date())
    }

    /// The cancel push (`call.canceled`/`call.ended`): FCM data with the ring's collapse key; APNs a
    /// background push to the regular (non-VoIP) token, never a VoIP push.
    public func sendCancel(
        _ call: CallPushContent, event: PushEvent = .canceled, reason: String, to channel: PushChannel, expiresAt: Date, aor: String? = nil,
        deadline: Date? = nil
    ) async -> PushOutcome {
        if channel.family == .webpush {
            let outcome = await sendWebPush(.cancel(call, event: event, reason: reason), to: channel, expiresAt: expiresAt, deadline: deadline)
            return await finish(outcome, channel: channel, app: nil, aor: aor, callID: call.callID)
        }
        guard let app = app(for: channel) else {
            return await finish(.noApp(provider: channel.provider, param: channel.param), channel: channel, app: nil, aor: aor, callID: call.callID)
        }
        return await send(
            .cancel(call, event: event, reason: reason), kind: .cancel, channel: channel, app: app, expiresAt: expiresAt, aor: aor,
            callID: call.callID, deadline: deadline)
    }

    /// The operator's test push: one ring push exactly as a call sends it, marked `test`, to `token`
    /// through `app`. `provider` picks the APNs host (`apns`/`apns.dev`); by default the app's
    /// environment, else production.
    public func sendTest(app: PushApp, token: String, provider: PushProvider? = nil, ringTimeoutSeconds: Int = 30) async -> PushOutcome {
        let chosen: PushProvider
        switch app.credentials {
        case .apns(let apns): chosen = provider ?? (apns.environment == .sandbox ? .apnsSandbox : .apns)
        case .fcm: chosen = .fcm
        }
        let channel = PushChannel(provider: chosen, token: token, param: app.param.isEmpty ? nil : app.param, kind: app.family == .apns ? .voip : .standard)
        guard chosen.family == app.family else {
            return PushOutcome(result: .failed(.noApp, message: "app #\(app.id ?? 0) is an \(app.kind) app, not \(chosen.rawValue)"), latency: .zero)
        }
        let call = Self.testCall(calleeNumber: "test", ringTimeoutSeconds: ringTimeoutSeconds)
        return await send(.ring(call, test: true), kind: .ring, channel: channel, app: app,
                          expiresAt: call.timestamp.addingTimeInterval(TimeInterval(ringTimeoutSeconds)), aor: nil, callID: nil)
    }

    /// The missed-call notice (`call.missed`) to a channel that can show one: FCM data the app
    /// draws, or an APNs alert to the regular token. Never a VoIP push.
    public func sendMissed(_ call: CallPushContent, reason: String, to channel: PushChannel, aor: String? = nil) async -> PushOutcome {
        if channel.family == .webpush {
            let outcome = await sendWebPush(
                .missed(call, reason: reason), to: channel, expiresAt: Date().addingTimeInterval(Self.missedNoticeLifetime), urgency: .normal)
            return await finish(outcome, channel: channel, app: nil, aor: aor, callID: call.callID)
        }
        guard let app = app(for: channel) else {
            return await finish(.noApp(provider: channel.provider, param: channel.param), channel: channel, app: nil, aor: aor, callID: call.callID)
        }
        return await send(.missed(call, reason: reason), kind: .missed, channel: channel, app: app,
                          expiresAt: Date().addingTimeInterval(Self.missedNoticeLifetime), aor: aor, callID: call.callID)
    }

    /// How long a provider keeps trying to deliver a missed-call notice.
    public static let missedNoticeLifetime: TimeInterval = 24 * 3600

    /// The binding-refresh push (RFC 8599 §5.5): FCM data, or an APNs background push to the
    /// regular token, asking the app to REGISTER before its binding expires at `expiresAt`.
    public func sendBindingRefresh(aor: String, expiresAt: Date, to channel: PushChannel) async -> PushOutcome {
        let payload = PushPayload.bindingRefresh(aor: aor, expiresInSeconds: Int(expiresAt.timeIntervalSinceNow.rounded(.down)))
        if channel.family == .webpush {
            let outcome = await sendWebPush(payload, to: channel, expiresAt: expiresAt, urgency: .normal)
            return await finish(outcome, channel: channel, app: nil, aor: aor, callID: nil)
        }
        guard let app = app(for: channel) else {
            return await finish(.noApp(provider: channel.provider, param: channel.param), channel: channel, app: nil, aor: aor, callID: nil)
        }
        return await send(payload, kind: .refresh, channel: channel, app: app, expiresAt: expiresAt, aor: aor, callID: nil)
    }

    private enum Kind { case ring, cancel, missed, refresh }

    private func send(
        _ payload: PushPayload, kind: Kind, channel: PushChannel, app: PushApp, expiresAt: Date, aor: String?, callID: String?,
        record: Bool = true, deadline: Date? = nil
    ) async -> PushOutcome {
        let outcome: PushOutcome
        let retryUntil = min(deadline ?? expiresAt, expiresAt)
        switch app.credentials {
        case .apns(let credentials):
            outcome = await sendAPNs(
                payload, kind: kind, channel: channel, app: app, credentials: credentials, expiresAt: expiresAt, deadline: retryUntil)
        case .fcm:
            do {
                let client = try fcmClient(app)
                let ttl = max(0, Int(expiresAt.timeIntervalSinceNow.rounded(.up)))
                // docs/push.md "Delivery policy": a ring and the cancel that stops it are urgent
                // (and may reach a phone not unlocked since it restarted); a missed-call notice and a
                // binding refresh show no call, so they go at normal priority (FCM deprioritises an
                // app whose high-priority messages show nothing).
                let urgent = kind == .ring || kind == .cancel
                let body = payload.fcmBody(
                    token: channel.token, ttlSeconds: ttl, collapseKey: payload.value("uuid") ?? "refresh " + (payload.value("aor") ?? ""),
                    highPriority: urgent, directBootOK: urgent && app.directBootOK)
                outcome = await client.send(body, deadline: retryUntil)
            } catch {
                outcome = PushOutcome(result: .failed(.credentials, message: "app #\(app.id ?? 0): \(error)"), latency: .zero)
            }
        }
        return await finish(outcome, channel: channel, app: app, aor: aor, callID: callID, record: record)
    }

    private func sendAPNs(
        _ payload: PushPayload, kind: Kind, channel: PushChannel, app: PushApp, credentials: APNsCredentials, expiresAt: Date,
        deadline: Date
    ) async -> PushOutcome {
        let request: APNsRequest
        switch kind {
        case .ring:
            guard channel.kind != .remote else {
                return PushOutcome(result: .failed(.other, message: "a ring push goes only to a VoIP (PushKit) token, not a regular one"), latency: .zero)
            }
            request = .ring(token: channel.token, credentials: credentials, payload: payload, expiresAt: expiresAt)
        case .cancel, .refresh:
            guard channel.kind == .remote else {
                return PushOutcome(result: .failed(.other, message: "an APNs background push goes only to the regular (non-VoIP) token"), latency: .zero)
            }
            request = .cancel(token: channel.token, credentials: credentials, payload: payload, expiresAt: expiresAt)
        case .missed:
            guard channel.kind == .remote else {
                return PushOutcome(result: .failed(.other, message: "a missed-call alert goes only to the regular (non-VoIP) token"), latency: .zero)
            }
            request = .alert(token: channel.token, credentials: credentials, payload: payload, expiresAt: expiresAt)
        }
        let client: APNsClient
        do {
            client = try apnsClient(app)
        } catch {
            return PushOutcome(result: .failed(.credentials, message: "app #\(app.id ?? 0): \(error)"), latency: .zero)
        }
        let environment = credentials.environment ?? (channel.provider == .apnsSandbox ? .sandbox : .production)
        let outcome = await client.send(request, environment: environment, deadline: deadline)
        guard case .refused(400, "BadDeviceToken", let explanation) = outcome.result else { return outcome }
        // Usually a sandbox/production mix-up: dead only when the other host refuses it too.
        let other = await client.send(request, environment: environment.other, deadline: deadline)
        let latency = outcome.latency + other.latency
        switch other.result {
        case .refused(400, "BadDeviceToken", _):
            return PushOutcome(
                result: .refused(status: 400, reason: "BadDeviceToken", explanation: "neither production nor sandbox knows the token: it is dead"),
                latency: latency, isDeadToken: true)
        case .accepted:
            return PushOutcome(
                result: .refused(status: 400, reason: "BadDeviceToken", explanation: explanation + " (the \(environment.other.rawValue) host accepted it)"),
                latency: latency)
        default:
            return PushOutcome(result: outcome.result, latency: latency)
        }
    }

    private func finish(
        _ outcome: PushOutcome, channel: PushChannel, app: PushApp?, aor: String?, callID: String?, record: Bool = true
    ) async -> PushOutcome {
        if outcome.isDeadToken, let deadTokens {
            try? await deadTokens.markDead(channel.tokenID, reason: outcome.reason ?? "dead")
        }
        if record, let records {
            try? await records.record(PushRecord(
                createdAt: Date(), aor: aor, callID: callID, provider: channel.provider, tokenShort: PushRecord.shorten(channel.token),
                appID: app?.id, outcome: outcome.word, status: outcome.status, reason: outcome.reason,
                explanation: outcome.explanation, latencyMilliseconds: outcome.latencyMilliseconds))
        }
        return outcome
    }

    private func apnsClient(_ app: PushApp) throws -> APNsClient {
        guard case .apns(let credentials) = app.credentials else { preconditionFailure("not an APNs app") }
        let key = Self.cacheKey(app)
        lock.lock()
        defer { lock.unlock() }
        if let client = apnsClients[key] { return client }
        let client = try APNsClient(
            credentials: credentials, endpoints: settings.apns, caFile: settings.caFile, timeout: settings.timeout, retry: settings.retry,
            breaker: settings.breaker, proxy: settings.proxy)
        apnsClients[key] = client
        return client
    }

    private func fcmClient(_ app: PushApp) throws -> FCMClient {
        guard case .fcm(let account) = app.credentials else { preconditionFailure("not an FCM app") }
        let key = Self.cacheKey(app)
        lock.lock()
        defer { lock.unlock() }
        if let client = fcmClients[key] { return client }
        let client = try FCMClient(
            account: account, baseURL: settings.fcmURL, caFile: settings.caFile, timeout: settings.timeout, retry: settings.retry,
            breaker: settings.breaker, proxy: settings.proxy)
        fcmClients[key] = client
        return client
    }

    /// The circuit breakers of every provider host this service has pushed to (`/health`, `/metrics`).
    public var circuits: [ProviderCircuit] {
        lock.lock()
        defer { lock.unlock() }
        return apnsClients.values.flatMap { $0.circuits.values } + fcmClients.values.map(\.circuit) + (webPush?.circuits ?? [])
    }

    /// Clients are kept per app and credentials (an edited app gets a new client).
    private static func cacheKey(_ app: PushApp) -> String {
        let secretDigest: String
        switch app.credentials {
        case .apns(let apns): secretDigest = "apns|\(apns.teamID)|\(apns.keyID)|\(apns.topic)|\(apns.environment?.rawValue ?? "")|" + Digest.hex(.sha256, apns.privateKeyPEM)
        case .fcm(let fcm): secretDigest = "fcm|\(fcm.projectID)|\(fcm.clientEmail)|\(fcm.tokenURI)|" + Digest.hex(.sha256, fcm.privateKeyPEM)
        }
        return "\(app.id ?? 0)|\(app.param)|" + secretDigest
    }
}
