public import CallRouting
import Foundation
public import Registrar
public import RouseVocabulary

/// The posted push tokens and dead-token marks of every extension, held in memory and kept up to
/// date by `PostgresReplica`: what a call reads when it arrives (CallRouting's `WakeTokenSource`),
/// answered without a round trip to PostgreSQL.
///
/// Threading: thread-safe behind a lock; every method is short and never blocks on I/O.
public final class WakeTokenReplica: WakeTokenSource, @unchecked Sendable {
    // @unchecked: `posted`, `postedByAOR` and `dead` are only touched under `lock`.
    private let lock = NSLock()
    private var posted: [PushTokenID: PostedPushToken] = [:]
    private var postedByAOR: [AddressOfRecord: Set<PushTokenID>] = [:]
    private var dead: Set<PushTokenID> = []

    public init() {}

    /// Replaces everything (a full read).
    public func replaceAll(posted tokens: [PostedPushToken], dead marks: Set<PushTokenID>) {
        lock.lock()
        defer { lock.unlock() }
        posted = [:]
        postedByAOR = [:]
        for token in tokens { insert(token) }
        dead = marks
    }

    /// Applies what a read found for the tokens that changed: `posted[id]` nil means that token is
    /// posted no more; `dead[id]` says whether it is marked dead now.
    public func update(posted tokens: [PushTokenID: PostedPushToken?], dead marks: [PushTokenID: Bool]) {
        lock.lock()
        defer { lock.unlock() }
        for (key, token) in tokens {
            remove(key)
            if let token { insert(token) }
        }
        for (key, isDead) in marks {
            if isDead { dead.insert(key) } else { dead.remove(key) }
        }
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
