import Dispatch
public import Foundation
public import Registrar
public import RouseVocabulary
import Synchronization

/// Where the replica puts the bindings it reads: the registrar's in-memory index. `mark` is taken
/// on the reader thread just before each read, and handed back with its result to `apply`, so the
/// registrar can tell which of its own writes the read may predate (`Registrar.applyStored`).
/// A value of two thread-safe closures.
public struct ReplicaBindingTarget: Sendable {
    public var mark: @Sendable () -> UInt64
    /// The extensions read (with their live bindings, possibly none); `everything` when the read
    /// covered every extension (any extension not in it has no bindings).
    public var apply: @Sendable (_ bindings: [AddressOfRecord: [Binding]], _ everything: Bool, _ mark: UInt64) -> Void

    public init(
        mark: @escaping @Sendable () -> UInt64,
        apply: @escaping @Sendable (_ bindings: [AddressOfRecord: [Binding]], _ everything: Bool, _ mark: UInt64) -> Void
    ) {
        self.mark = mark
        self.apply = apply
    }
}

/// What one replica read found, in one snapshot: every change numbered up to `through` is in it.
/// A value.
public struct ReplicaRead: Sendable, Equatable {
    /// The highest change number the snapshot holds.
    public var through: Int64
    /// Whether everything was read (at start, or because the changes needed were pruned).
    public var everything: Bool
    /// The extensions whose bindings changed (all, when `everything`), with their live bindings.
    public var bindings: [AddressOfRecord: [Binding]]
    /// The posted tokens that changed; nil when no longer posted.
    public var posted: [PushTokenID: PostedPushToken?]
    /// The dead marks that changed: whether the token is marked dead now.
    public var dead: [PushTokenID: Bool]
    /// The stale marks that changed: the time from which the device is stale, nil when not.
    public var stale: [PushTokenID: Date?] = [:]
}

/// This instance's replica of what every instance shares through PostgreSQL: bindings (into the
/// registrar), posted tokens and dead marks (into a `WakeTokenReplica`, which calls read), kept
/// up to date by following the numbered change log of migration 500 (`ReplicaFollower` decides
/// what to read; see docs/architecture.md, "The replica").
///
/// Threading: `start` and `prune` block the caller (start-up, a timer); every other method returns
/// at once. The follower lives on `queue`; reads run one at a time on `readQueue`, on a connection
/// of their own, and call the binding target and the token replica from there.
public final class PostgresReplica: @unchecked Sendable {
    // @unchecked: `follower`, `wakeAt` and `stopped` are only touched on `queue`; `connection` only
    // on `readQueue`.
    /// The channel change numbers are announced on, once per transaction:
    /// `<first seq> <last seq> <kinds, comma-separated> <origin>`.
    public static let notificationChannel = "rouse_replica"
    /// How long a change (and a delete's tombstone) stays in the log by default: an instance away
    /// longer reloads everything.
    public static let defaultRetention: TimeInterval = 6 * 3600

    public let settings: PostgresSettings
    public let origin: String
    public let tokens: WakeTokenReplica
    public let retention: TimeInterval
    private let target: ReplicaBindingTarget
    private let clock: @Sendable () -> Date
    private let queue = DispatchQueue(label: "rouse.replica")
    private let readQueue = DispatchQueue(label: "rouse.replica.read")
    private var follower = ReplicaFollower()
    private var wakeAt: Date?
    private var stopped = false
    private var connection: PostgresConnection?
    private var pruneTimer: DispatchSourceTimer?
    /// Notifications not yet handed to the follower, and whether a hop to `queue` is on its way.
    private let inbox = Mutex<(events: [ReplicaFollower.Event], scheduled: Bool)>(([], false))

    /// - Parameter origin: the origin this instance's location store writes with (its changes are
    ///   not read back).
    public init(
        settings: PostgresSettings, origin: String, bindings: ReplicaBindingTarget, tokens: WakeTokenReplica = WakeTokenReplica(),
        retention: TimeInterval = PostgresReplica.defaultRetention, clock: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.settings = settings
        self.origin = origin
        self.target = bindings
        self.tokens = tokens
        self.retention = retention
        self.clock = clock
    }

    /// Reads everything and applies it (blocking; at start, before serving).
    public func start() throws {
        let actions = queue.sync { follower.handle(.listening, now: clock()) }
        guard case .read(let after, _)? = actions.first else { return }
        do {
            let read = try readQueue.sync { try runRead(after: after) }
            queue.sync { _ = follower.handle(.readDone(through: read.through, full: read.everything), now: clock()) }
        } catch {
            queue.sync { _ = follower.handle(.readFailed, now: clock()) }
            throw error
        }
    }

    /// The listener's `LISTEN` is (again) in place: catch up on what was missed meanwhile.
    public func listening() {
        handle(.listening)
    }

    /// A `rouse_replica` notification's payload. Read as bytes, without splitting it into
    /// strings; notifications that arrive together reach the follower in one hop to its queue,
    /// this instance's own consecutive ones merged into one range.
    public func notified(payload: String) {
        guard let notice = Self.notice(payload, origin: origin) else { return }
        let schedule = inbox.withLock { inbox -> Bool in
            if notice.own, case .notified(let last, true)? = inbox.events.last, last.upperBound + 1 == notice.seqs.lowerBound {
                inbox.events[inbox.events.count - 1] = .notified(seqs: last.lowerBound...notice.seqs.upperBound, own: true)
            } else {
                inbox.events.append(.notified(seqs: notice.seqs, own: notice.own))
            }
            defer { inbox.scheduled = true }
            return !inbox.scheduled
        }
        guard schedule else { return }
        queue.async { [self] in
            let events = inbox.withLock { inbox in
                defer {
                    inbox.events.removeAll(keepingCapacity: true)
                    inbox.scheduled = false
                }
                return inbox.events
            }
            guard !stopped else { return }
            for event in events { perform(follower.handle(event, now: clock())) }
        }
    }

    /// The numbers a `rouse_replica` payload (`<first> <last> <kinds> <origin>`) announces, and
    /// whether they are all `origin`'s binding changes; nil when it is not such a payload.
    static func notice(_ payload: String, origin: String) -> (seqs: ClosedRange<Int64>, own: Bool)? {
        var payload = payload
        var origin = origin
        return payload.withUTF8 { text -> (seqs: ClosedRange<Int64>, own: Bool)? in
            var position = 0
            func number() -> Int64? {
                var value: Int64 = 0
                let start = position
                while position < text.count, text[position] != UInt8(ascii: " ") {
                    let digit = text[position] &- UInt8(ascii: "0")
                    guard digit < 10, position - start < 18 else { return nil }
                    value = value * 10 + Int64(digit)
                    position += 1
                }
                guard position > start, position < text.count else { return nil }
                position += 1
                return value
            }
            guard let first = number(), let last = number(), first <= last else { return nil }
            let kindsStart = position
            while position < text.count, text[position] != UInt8(ascii: " ") { position += 1 }
            guard position < text.count else { return nil }
            let kinds = UnsafeBufferPointer(rebasing: text[kindsStart..<position])
            let sender = UnsafeBufferPointer(rebasing: text[(position + 1)...])
            guard !sender.contains(UInt8(ascii: " ")) else { return nil }
            let own = !sender.isEmpty && kinds.elementsEqual("binding".utf8) && origin.withUTF8 { sender.elementsEqual($0) }
            return (first...last, own)
        }
    }

    /// Catch-up reads done (after a reconnect, or a gap in the announced numbers).
    public var catchUpCount: Int { queue.sync { follower.catchUps } }
    /// Reads that found the changes they needed pruned, and read everything.
    public var fullReloadCount: Int { queue.sync { follower.fullReloads } }
    /// The highest change number applied (0 before any).
    public var lastSeen: Int64 { queue.sync { follower.lastSeen ?? 0 } }

    /// Deletes the log's changes older than `retention` (every instance may; blocking).
    @discardableResult
    public func prune() throws -> Int {
        try readQueue.sync {
            let connection = try openConnection()
            do {
                return try Self.prune(on: connection, olderThan: retention)
            } catch {
                if !connection.isHealthy { self.connection = nil }
                throw error
            }
        }
    }

    /// Prunes every `interval` from now on (errors are left for the next round).
    public func startPruning(every interval: TimeInterval = 600) {
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue.global())
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { [weak self] in _ = try? self?.prune() }
        timer.resume()
        queue.sync { pruneTimer = timer }
    }

    /// Stops following: no read starts after this returns, and the one running ends first.
    public func stop() {
        queue.sync {
            stopped = true
            pruneTimer?.cancel()
            pruneTimer = nil
        }
        readQueue.sync { connection = nil }
    }

    // MARK: - Following

    private func handle(_ event: ReplicaFollower.Event) {
        queue.async { [self] in
            guard !stopped else { return }
            perform(follower.handle(event, now: clock()))
        }
    }

    /// On `queue`.
    private func perform(_ actions: [ReplicaFollower.Action]) {
        for action in actions {
            switch action {
            case .read(let after, _):
                readQueue.async { [self] in
                    do {
                        let read = try runRead(after: after)
                        handle(.readDone(through: read.through, full: read.everything))
                    } catch {
                        handle(.readFailed)
                    }
                }
            case .wake(let at):
                guard wakeAt == nil || at < wakeAt! else { continue }
                wakeAt = at
                let delay = max(0, at.timeIntervalSince(clock()))
                queue.asyncAfter(deadline: .now() + delay) { [self] in
                    wakeAt = nil
                    guard !stopped else { return }
                    perform(follower.handle(.tick, now: clock()))
                }
            }
        }
    }

    /// On `readQueue`: one read, applied.
    private func runRead(after: Int64?) throws -> ReplicaRead {
        let connection = try openConnection()
        let mark = target.mark()
        let read: ReplicaRead
        do {
            read = try Self.read(on: connection, after: after, skippingOrigin: origin, now: clock())
        } catch {
            if !connection.isHealthy { self.connection = nil }
            throw error
        }
        target.apply(read.bindings, read.everything, mark)
        if read.everything {
            tokens.replaceAll(
                posted: read.posted.values.compactMap { $0 }, dead: Set(read.dead.filter(\.value).keys), stale: read.stale.compactMapValues { $0 })
        } else {
            tokens.update(posted: read.posted, dead: read.dead, stale: read.stale)
        }
        return read
    }

    /// On `readQueue`.
    private func openConnection() throws -> PostgresConnection {
        if let current = connection, current.isHealthy { return current }
        let opened = try settings.connect()
        connection = opened
        return opened
    }

    // MARK: - The SQL

    /// Reads, in one snapshot, what changed after `after` (everything when nil, or when changes
    /// after it were pruned). Binding changes written with `skippingOrigin` (this instance's own)
    /// are not read back. Blocking.
    public static func read(on connection: PostgresConnection, after: Int64?, skippingOrigin origin: String, now: Date) throws -> ReplicaRead {
        try connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        do {
            let read = try readInSnapshot(connection, after: after, skippingOrigin: origin, now: now)
            try connection.query("COMMIT")
            return read
        } catch {
            _ = try? connection.query("ROLLBACK")
            throw error
        }
    }

    private static func readInSnapshot(_ connection: PostgresConnection, after: Int64?, skippingOrigin origin: String, now: Date) throws -> ReplicaRead {
        let state = try connection.query(
            "SELECT pruned_through, (SELECT coalesce(max(seq), 0) FROM replica_changes) FROM replica_state WHERE id = 1")
        let pruned = state.rows.first?[0].flatMap { Int64($0) } ?? 0
        let newest = state.rows.first?[1].flatMap { Int64($0) } ?? 0
        let through = max(newest, pruned, after ?? 0)
        guard let after, after >= pruned else {
            let bindings = try BindingRecords.loadByExtension(connection, now: now)
            let posted = try PostedPushTokens.list(for: nil, on: connection)
            let dead = try deadKeys(connection, among: nil)
            return ReplicaRead(
                through: through, everything: true, bindings: bindings,
                posted: Dictionary(posted.map { ($0.channel.tokenID, Optional($0)) }) { _, last in last },
                dead: Dictionary(dead.compactMap(PushTokenID.init(key:)).map { ($0, true) }) { _, last in last },
                stale: try PushTokenLiveness.staleMarks(among: nil, on: connection).mapValues { Optional($0.staleFrom) })
        }
        let changes = try connection.query(
            "SELECT kind, key, origin FROM replica_changes WHERE seq > $1 ORDER BY seq", [String(after)])
        var aors: Set<String> = []
        var postedKeys: Set<String> = []
        var deadKeys: Set<String> = []
        var staleKeys: Set<PushTokenID> = []
        for row in changes.rows {
            guard let kind = row[0], let key = row[1] else { continue }
            switch kind {
            case "binding" where origin.isEmpty || row[2] != origin: aors.insert(key)
            case "posted": postedKeys.insert(key)
            case "dead": deadKeys.insert(key)
            case "stale": if let id = PushTokenID(key: key) { staleKeys.insert(id) }
            default: break
            }
        }
        var posted: [PushTokenID: PostedPushToken?] = Dictionary(postedKeys.compactMap(PushTokenID.init(key:)).map { ($0, nil) }) { _, last in last }
        for token in try PostedPushTokens.list(keys: Array(postedKeys), on: connection) {
            posted[token.channel.tokenID] = token
        }
        var dead: [PushTokenID: Bool] = Dictionary(deadKeys.compactMap(PushTokenID.init(key:)).map { ($0, false) }) { _, last in last }
        if !deadKeys.isEmpty {
            for key in try Self.deadKeys(connection, among: Array(deadKeys)).compactMap(PushTokenID.init(key:)) { dead[key] = true }
        }
        var stale: [PushTokenID: Date?] = Dictionary(uniqueKeysWithValues: staleKeys.map { ($0, nil) })
        for (key, mark) in try PushTokenLiveness.staleMarks(among: Array(staleKeys), on: connection) { stale[key] = mark.staleFrom }
        return ReplicaRead(
            through: through, everything: false, bindings: try BindingRecords.load(connection, aors: aors, now: now), posted: posted,
            dead: dead, stale: stale)
    }

    /// The `family:token` of every dead mark (among `keys`, when given).
    private static func deadKeys(_ connection: PostgresConnection, among keys: [String]?) throws -> [String] {
        try connection.query(
            """
            SELECT family || ':' || token FROM push_dead_tokens
            WHERE $1::jsonb IS NULL OR family || ':' || token IN (SELECT jsonb_array_elements_text($1::jsonb))
            """,
            [keys.map(JSONText.array(of:))]
        ).rows.compactMap { $0[0] }
    }

    /// Deletes the changes older than `seconds` and raises `pruned_through` past them; returns how
    /// many went. Blocking.
    @discardableResult
    public static func prune(on connection: PostgresConnection, olderThan seconds: TimeInterval) throws -> Int {
        let rows = try connection.query(
            """
            WITH gone AS (
                DELETE FROM replica_changes WHERE changed_at < clock_timestamp() - make_interval(secs => $1::double precision)
                RETURNING seq
            ), raised AS (
                UPDATE replica_state SET pruned_through = greatest(pruned_through, (SELECT max(seq) FROM gone))
                WHERE id = 1 AND EXISTS (SELECT 1 FROM gone) RETURNING 1
            )
            SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM raised)
            """,
            [String(seconds)])
        return Int(rows.rows.first?[0] ?? "0") ?? 0
    }
}
