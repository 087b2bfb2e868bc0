import CallRouting
import Foundation
import HTTPServer
import Push
import Registrar
import RouseVocabulary
import Storage

/// What the admin JSON API and the admin pages read and do alike: an extension's detail, the
/// extension list with its search, a page of calls, a journey, the push apps, and the test push.
/// Both answer from these, so a page and the API never disagree.
///
/// Threading: a value, safe to share. Every function is async and reaches PostgreSQL through the
/// request's `Store` (bounded by its deadline), so none blocks a thread.
struct AdminReads: Sendable {
    let pushSettings: PushSettings
    /// The instance's push service, which calls push through: a device's test push goes through
    /// it (its apps, clients and circuit breakers). Nil: one is made from the stored apps for each
    /// test (no web push then).
    let pusher: PushService?
    /// Seconds between two test pushes to one device token (`test_push_interval`).
    let testPushInterval: TimeInterval
    /// Extensions whose outside calls jumped, as this instance's toll-fraud guard counts them
    /// (`outside_call_surge_factor`), with their calls in the last hour; quick.
    var outsideCallSurges: @Sendable () -> [(caller: AddressOfRecord, lastHour: Int)] = { [] }
    /// How long push records and calls are kept (`history_retention`), as the pages say.
    var historyRetention: TimeInterval = HistoryRetention.defaultRetention

    /// One device of an extension as the pages and the API list it: a registered binding or a
    /// posted token, with the id its Test push and Show token actions name it by.
    struct Device: Sendable {
        /// A binding's id (a UUID), or for a posted token the first 16 hex digits of the SHA-256
        /// of its family and token (never the token itself).
        let id: String
        let binding: Binding?
        let posted: PostedPushToken?
        /// Where a call's ring push goes (CallTargets' choice), nil when a call never ring-pushes
        /// it: a desk phone, or an iPhone's regular (non-VoIP) token.
        let ringChannel: PushChannel?
        /// As a call's journey names it (the user agent, or "iPhone (posted token)").
        let name: String

        /// Every push channel it holds (a binding may hold a VoIP and a regular token).
        var channels: [PushChannel] { binding?.pushChannels ?? posted.map { [$0.channel] } ?? [] }

        init(_ binding: Binding) {
            let wake = CallTargets(bindings: [binding], posted: [], deadTokens: [], reach: { _ in .gone }).devices.first
            self.id = binding.id.uuidString.lowercased()
            self.binding = binding
            self.posted = nil
            self.ringChannel = wake?.ringChannel
            self.name = wake?.name ?? binding.userAgent ?? "device"
        }

        init(_ token: PostedPushToken) {
            let posted = PostedToken(channel: token.channel, deviceID: token.deviceID)
            let wake = CallTargets(bindings: [], posted: [posted], deadTokens: [], reach: { _ in .gone }).devices.first
            self.id = Self.postedID(token.channel)
            self.binding = nil
            self.posted = token
            self.ringChannel = wake?.ringChannel
            self.name = wake?.name ?? "iPhone (posted regular token)"
        }

        static func postedID(_ channel: PushChannel) -> String {
            String(TestPushClaims.key(family: channel.family, token: channel.token).prefix(16))
        }

        /// Why it has no Test push, in words (nil when it has one).
        var untestableReason: String? {
            guard ringChannel == nil else { return nil }
            if channels.isEmpty { return "no push parameters: a call rings it over SIP, so there is nothing to push" }
            return "only a regular (non-VoIP) iPhone token: a call sends it cancel and missed-call notices, never a ring push"
        }
    }

    /// What a test push came to.
    enum TestPushAnswer: Sendable {
        /// It went out; the provider's answer, and the push app it went through (nil for web push).
        case sent(PushOutcome, appID: Int64?)
        /// One went to this token less than `test_push_interval` ago.
        case limited(retryAfterSeconds: Int)

        /// The outcome's word (`accepted`, `refused`, `failed`), or `limited`.
        var word: String {
            switch self {
            case .sent(let outcome, _): return outcome.word
            case .limited: return "limited"
            }
        }
    }

    /// An extension as its page shows it: bindings, posted tokens, which tokens are dead, the last
    /// 20 pushes and the last 20 calls, read at `now`.
    struct ExtensionDetail: Sendable {
        let aor: AddressOfRecord
        /// What ring pushes call it; nil when it has none.
        let displayName: String?
        let now: Date
        let bindings: [Binding]
        let postedTokens: [PostedPushToken]
        let recentPushes: [PushRecord]
        let recentCalls: [CallJourney]
        let deadTokens: Set<PushTokenID>
        /// Its own class of service for outside calls; nil: the instance's default.
        let classOfService: ClassOfService?
        /// The stale marks of its tokens (the stale-device rule).
        var staleMarks: [PushTokenID: PushTokenLiveness.StaleMark] = [:]

        /// Whether a provider called this channel's token dead.
        func isDead(_ channel: PushChannel) -> Bool { deadTokens.contains(channel.tokenID) }

        /// The bindings, then the posted tokens, as devices.
        var devices: [Device] { bindings.map(Device.init) + postedTokens.map(Device.init) }

        /// The device with this id, or nil.
        func device(id: String) -> Device? { devices.first { $0.id == id.lowercased() } }
    }

    /// One extension's detail; `DirectoryError.noSuchExtension` when there is none.
    func extensionDetail(_ aor: AddressOfRecord, _ store: Store) async throws -> ExtensionDetail {
        guard try await store.directory({ try $0.hasExtension(aor) }) else { throw DirectoryError.noSuchExtension(aor) }
        let now = Date()
        return try await store.perform { connection in
            let bindings = try PostgresLocationStore.loadBindings(on: connection, for: aor, now: now)
            let posted = try PostedPushTokens.list(for: aor, on: connection)
            let channels = bindings.flatMap(\.pushChannels) + posted.map(\.channel)
            let dead = try PostgresLocationStore.deadTokens(on: connection, among: channels)
            let pushes = try PostgresPushStores.recent(on: connection, aor: aor.description, limit: 20)
            let calls = try PostgresCalls.recent(on: connection, aor: aor, limit: 20)
            let callClass = try PostgresCallClasses(connection: connection).callClass(number: aor.number, organisation: aor.domain)
            return ExtensionDetail(
                aor: aor, displayName: try PostgresDirectory.displayName(of: aor, on: connection), now: now, bindings: bindings,
                postedTokens: posted, recentPushes: pushes, recentCalls: calls, deadTokens: Set(dead.map(\.id)), classOfService: callClass,
                staleMarks: try PushTokenLiveness.staleMarks(among: channels.map(\.tokenID), on: connection))
        }
    }

    /// The extensions of one organisation (or all) whose `number@domain` contains `search`, in
    /// any case.
    func extensions(domain: String?, search: String, _ store: Store) async throws -> [DirectoryExtension] {
        let wanted = search.lowercased()
        return try await store.directory { try $0.listExtensions(domain: domain) }.filter { wanted.isEmpty || $0.aor.description.lowercased().contains(wanted) }
    }

    /// Up to `limit` calls, newest first, of one extension when given, started before `before`
    /// when given; `next` is the cursor of the following page (nil on the last one).
    func calls(
        of aor: AddressOfRecord?, limit: Int, before: Date?, missed: Bool? = nil, _ store: Store
    ) async throws -> (calls: [CallJourney], next: Date?) {
        let fetched = limit + 1
        let calls = try await store.perform { try PostgresCalls.recent(on: $0, aor: aor, limit: fetched, before: before, missed: missed) }
        let page = Array(calls.prefix(limit))
        return (page, calls.count > limit ? page.last?.startedAt : nil)
    }

    /// One call's journey, or nil.
    func journey(id: UUID, _ store: Store) async throws -> CallJourney? {
        try await store.perform { try PostgresCalls.journey(id: id, on: $0) }
    }

    /// Every push app, without its key.
    func pushApps(_ store: Store) async throws -> [PostgresPushApps.Summary] {
        try await store.perform { try PostgresPushApps(connection: $0).summaries() }
    }

    /// Sends one test push of app `id` to `token`, exactly as a call's ring push goes out, and
    /// records it like any push (a token the provider calls dead is marked so). Nil when there is
    /// no such app.
    func sendTestPush(appID id: Int64, token: String, provider: PushProvider?, _ store: Store) async throws -> TestPushAnswer? {
        guard let app = try await store.perform({ try PostgresPushApps(connection: $0).app(id: id) }) else { return nil }
        let channel = PushChannel(
            provider: provider ?? (app.family == .fcm ? .fcm : .apns), token: token, param: nil, kind: app.family == .apns ? .voip : .standard)
        return try await limitedTestPush(to: channel, aor: nil, device: nil, store) {
            (await PushService(settings: pushSettings, apps: [app]).sendTest(app: app, token: token, provider: provider), id)
        }
    }

    /// Sends `device` of `aor` one test push exactly as a call rings it (`PushService.sendTest(to:)`
    /// through the instance's push service), and records it with the extension's pushes. The
    /// device must have a ring channel.
    func sendTestPush(to device: Device, of aor: AddressOfRecord, _ store: Store) async throws -> TestPushAnswer {
        guard let channel = device.ringChannel else { preconditionFailure("a device without a ring channel has no test push") }
        let settings = pushSettings
        let service: PushService
        if let pusher {
            service = pusher
        } else {
            service = try await store.perform { PushService(settings: settings, apps: try PostgresPushApps(connection: $0).all()) }
        }
        return try await limitedTestPush(to: channel, aor: aor, device: device.name + " (test push)", store) {
            let appID = channel.family == .webpush ? nil : service.app(for: channel)?.id
            return (await service.sendTest(to: channel, calleeNumber: aor.number, aor: aor.description, recordOutcome: false), appID)
        }
    }

    /// Claims the token's test push (`TestPushClaims`), sends it, gives the claim back when the
    /// push did not reach the phone, and records it like any push (a dead token marked so).
    private func limitedTestPush(
        to channel: PushChannel, aor: AddressOfRecord?, device: String?, _ store: Store, send: @Sendable () async -> (PushOutcome, Int64?)
    ) async throws -> TestPushAnswer {
        let interval = testPushInterval
        let claim = try await store.perform {
            try TestPushClaims.claim(family: channel.family, token: channel.token, interval: interval, on: $0)
        }
        if case .limited(let seconds) = claim { return .limited(retryAfterSeconds: seconds) }
        let (outcome, appID) = await send()
        let record = PushRecord(
            createdAt: Date(), aor: aor?.description, callID: nil, provider: channel.provider, tokenShort: PushRecord.shorten(channel.token),
            appID: appID, outcome: outcome.word, status: outcome.status, reason: outcome.reason, explanation: outcome.explanation,
            latencyMilliseconds: outcome.latencyMilliseconds, device: device)
        _ = try? await store.renewed().perform { connection in
            if outcome.isDeadToken {
                try PostgresPushStores.markDead(on: connection, family: channel.family, token: channel.token, reason: outcome.reason ?? "dead")
            }
            try PostgresPushStores.insert(record, on: connection)
            if !outcome.isAccepted { try TestPushClaims.release(claim, on: connection) }
        }
        return .sent(outcome, appID: appID)
    }
}
