public import CallRouting
public import Foundation
public import Registrar
public import RouseVocabulary

/// The posted push tokens, dead-token marks and stale-device marks of every extension, held in
/// memory and kept up to date by `PostgresReplica`: what a call reads when it arrives (CallRouting's
/// `WakeTokenSource`, and the stale marks for `PostgresDeviceLiveness`), answered without a round
/// trip to PostgreSQL.
///
/// Threading: thread-safe behind a lock; every method is short and never blocks on I/O.
public final class WakeTokenReplica: WakeTokenSource, @unchecked Sendable {
    // @unchecked: `posted`, `postedByAOR` and `dead` are only touched under `lock`.
    private let lock = NSLock()
    private var posted: [PushTokenID: PostedPushToken] = [:]
    private var postedByAOR: [AddressOfRecord: Set<PushTokenID>] = [:]
    private var dead: Set<PushTokenID> = []
    /// Stale marks: the time from which each device is stale (perhaps still ahead).
    private var staleFrom: [PushTokenID: Date] = [:]
    /// Told of each stale mark lifted that was in force (the device showed life again).
    private let revived: @Sendable (PushTokenID) -> Void
    private let clock: @Sendable () -> Date

    public init(clock: @escaping @Sendable () -> Date = { Date() }, revived: @escaping @Sendable (PushTokenID) -> Void = { _ in }) {
        self.clock = clock
        self.revived = revived
    }

    /// Replaces everything (a full read).
    public func replaceAll(posted tokens: [PostedPushToken], dead marks: Set<PushTokenID>, stale: [PushTokenID: Date] = [:]) {
        lock.lock()
        posted = [:]
        postedByAOR = [:]
        for token in tokens { insert(token) }
        dead = marks
        let lifted = liftedMarks(staleFrom.keys.filter { stale[$0] == nil })
        staleFrom = stale
        lock.unlock()
        lifted.forEach(revived)
    }

    /// Applies what a read found for the tokens that changed: `posted[id]` nil means that token is
    /// posted no more; `dead[id]` says whether it is marked dead now; `stale[id]` its stale mark
    /// now (nil: none).
    public func update(posted tokens: [PushTokenID: PostedPushToken?], dead marks: [PushTokenID: Bool], stale: [PushTokenID: Date?] = [:]) {
        lock.lock()
        for (key, token) in tokens {
            remove(key)
            if let token { insert(token) }
        }
        for (key, isDead) in marks {
            if isDead { dead.insert(key) } else { dead.remove(key) }
        }
        let lifted = liftedMarks(stale.filter { $0.value == nil }.map(\.key))
        for (key, from) in stale { staleFrom[key] = from }
        lock.unlock()
        lifted.forEach(revived)
    }

    /// Under `lock`: which of `keys` carry a stale mark in force now.
    private func liftedMarks(_ keys: [PushTokenID]) -> [PushTokenID] {
        let now = clock()
        return keys.filter { staleFrom[$0].map { $0 <= now } ?? false }
    }

    /// The tokens among `tokens` that are stale at `now`.
    public func staleTokens(among tokens: [PushTokenID], now: Date) -> Set<PushTokenID> {
        lock.lock()
        defer { lock.unlock() }
        return Set(tokens.filter { staleFrom[$0].map { $0 <= now } ?? false })
    }

    /// How many devices are stale at `now`.
    public func staleCount(now: Date) -> Int {
        lock.lock()
        defer { lock.unlock() }
        return staleFrom.values.filter { $0 <= now }.count
    }

    /// The posted tokens of `aor`, oldest posting first.
    public func postedTokens(of aor: AddressOfRecord) -> [PostedPushToken] {
        lock.lock()
        defer { lock.unlock() }
        return (postedByAOR[aor] ?? []).compactMap { posted[$0] }
            .sorted { ($0.postedAt, $0.channel.tokenID) < ($1.postedAt, $1.channel.tokenID) }
    }

    /// How many tokens are posted and how many marked dead.
    public var counts: (posted: Int, dead: Int) {
        lock.lock()
        defer { lock.unlock() }
        return (posted.count, dead.count)
    }

    public func wakeTokens(for aor: AddressOfRecord, checking tokens: [PushChannel]) async throws -> (posted: [PostedToken], dead: Set<PushTokenID>) {
        let mine = postedTokens(of: aor)
        return (mine.map { PostedToken(channel: $0.channel, deviceID: $0.deviceID) }, deadKeys(among: tokens + mine.map(\.channel)))
    }

    /// The tokens of `channels` marked dead.
    public func deadKeys(among channels: [PushChannel]) -> Set<PushTokenID> {
        lock.lock()
        defer { lock.unlock() }
        return Set(channels.map(\.tokenID).filter { dead.contains($0) })
    }

    private func insert(_ token: PostedPushToken) {
        let key = token.channel.tokenID
        posted[key] = token
        postedByAOR[token.aor, default: []].insert(key)
    }

    private func remove(_ key: PushTokenID) {
        guard let old = posted.removeValue(forKey: key) else { return }
        postedByAOR[old.aor]?.remove(key)
        if postedByAOR[old.aor]?.isEmpty == true { postedByAOR[old.aor] = nil }
    }
}
