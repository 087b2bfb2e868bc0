import CallRouting
import Foundation
import Push
import Registrar
import Storage

/// What the admin JSON API and the admin pages read and do alike: an extension's detail, the
/// extension list with its search, a page of calls, a journey, the push apps, and the test push.
/// Both answer from these, so a page and the API never disagree.
///
/// Threading: a value, safe to share. The read functions block the calling thread on the worker
/// pool (call them on the admin queue, never on a server thread); `sendTestPush` suspends.
struct AdminReads: Sendable {
    let pool: PostgresWorkerPool
    let directory: PostgresDirectory
    let pushSettings: PushSettings

    init(pool: PostgresWorkerPool, pushSettings: PushSettings) {
        self.pool = pool
        self.directory = PostgresDirectory(pool: pool)
        self.pushSettings = pushSettings
    }

    /// An extension as its page shows it: bindings, posted tokens, which tokens are dead, the last
    /// 20 pushes and the last 20 calls, read at `now`.
    struct ExtensionDetail: Sendable {
        let aor: AddressOfRecord
        let now: Date
        let bindings: [Binding]
        let postedTokens: [PostedPushToken]
        let recentPushes: [PushRecord]
        let recentCalls: [CallJourney]
        let deadTokens: Set<String>

        /// Whether a provider called this channel's token dead.
        func isDead(_ channel: PushChannel) -> Bool { deadTokens.contains("\(channel.family.rawValue) \(channel.token)") }
    }

    /// One extension's detail; `DirectoryError.noSuchExtension` when there is none.
    func extensionDetail(_ aor: AddressOfRecord) throws -> ExtensionDetail {
        guard try directory.hasExtension(aor) else { throw DirectoryError.noSuchExtension(aor) }
        let now = Date()
        return try pool.run { connection in
            let bindings = try PostgresLocationStore.loadBindings(on: connection, for: aor, now: now)
            let posted = try PostedPushTokens.list(for: aor, on: connection)
            let channels = bindings.flatMap(\.pushChannels) + posted.map(\.channel)
            let dead = try PostgresLocationStore.deadTokens(on: connection, among: channels)
            let pushes = try PostgresPushStores.recent(on: connection, aor: aor.description, limit: 20)
            let calls = try PostgresCalls.recent(on: connection, aor: aor, limit: 20)
            return ExtensionDetail(
                aor: aor, now: now, bindings: bindings, postedTokens: posted, recentPushes: pushes, recentCalls: calls,
                deadTokens: Set(dead.map { "\($0.family.rawValue) \($0.token)" }))
        }
    }

    /// The extensions of one organisation (or all) whose `number@domain` contains `search`, in
    /// any case.
    func extensions(domain: String?, search: String) throws -> [DirectoryExtension] {
        let wanted = search.lowercased()
        return try directory.listExtensions(domain: domain).filter { wanted.isEmpty || $0.aor.description.lowercased().contains(wanted) }
    }

    /// Up to `limit` calls, newest first, of one extension when given, started before `before`
    /// when given; `next` is the cursor of the following page (nil on the last one).
    func calls(of aor: AddressOfRecord?, limit: Int, before: Date?, missed: Bool? = nil) throws -> (calls: [CallJourney], next: Date?) {
        let fetched = limit + 1
        let calls = try pool.run { try PostgresCalls.recent(on: $0, aor: aor, limit: fetched, before: before, missed: missed) }
        let page = Array(calls.prefix(limit))
        return (page, calls.count > limit ? page.last?.startedAt : nil)
    }

    /// One call's journey, or nil.
    func journey(id: UUID) throws -> CallJourney? {
        try pool.run { try PostgresCalls.journey(id: id, on: $0) }
    }

    /// Every push app, without its key.
    func pushApps() throws -> [PostgresPushApps.Summary] {
        try pool.run { try PostgresPushApps(connection: $0).summaries() }
    }

    /// Sends one test push of app `id` to `token`, exactly as a call's ring push goes out, and
    /// records it like any push (a token the provider calls dead is marked so). Nil when there is
    /// no such app.
    func sendTestPush(appID id: Int64, token: String, provider: PushProvider?) async throws -> PushOutcome? {
        guard let app = try await pool.perform({ try PostgresPushApps(connection: $0).app(id: id) }) else { return nil }
        let outcome = await PushService(settings: pushSettings, apps: [app]).sendTest(app: app, token: token, provider: provider)
        let family = app.family
        let channelToken = family == .apns ? token.lowercased() : token
        let record = PushRecord(
            createdAt: Date(), aor: nil, callID: nil, provider: provider ?? (family == .fcm ? .fcm : .apns),
            tokenShort: PushRecord.shorten(channelToken), appID: id, outcome: outcome.word, status: outcome.status,
            reason: outcome.reason, explanation: outcome.explanation, latencyMilliseconds: outcome.latencyMilliseconds)
        _ = try? await pool.perform { connection in
            if outcome.isDeadToken {
                try PostgresPushStores.markDead(on: connection, family: family, token: channelToken, reason: outcome.reason ?? "dead")
            }
            try PostgresPushStores.insert(record, on: connection)
        }
        return outcome
    }
}
