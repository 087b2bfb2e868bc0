public import Foundation
public import Registrar
public import RouseVocabulary

/// Why the location store refused a change. Its description is one line for a person and names
/// no token, Contact or other stored value beyond the extension's address. A value, safe to share.
public enum LocationStoreError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The binding's extension is not in the directory (it was removed meanwhile).
    case noSuchExtension(AddressOfRecord)
    /// A stored text held a NUL character, which PostgreSQL text cannot hold.
    case unstorableText(field: String, aor: AddressOfRecord)
    /// The store was shut down.
    case stopped

    public var description: String {
        switch self {
        case .noSuchExtension(let aor): return "no such extension \(aor)"
        case .unstorableText(let field, let aor): return "binding of \(aor): \(field) holds a NUL character"
        case .stopped: return "the location store is shut down"
        }
    }
}

/// The durable location service on PostgreSQL, with group commit.
///
/// Threading: every method may be called from any thread. `apply` never blocks: it queues the
/// changes for the store's one writer thread, which takes every queued batch at once (up to
/// `maxBatchChanges` changes), applies them in one transaction on its own connection (the writes,
/// announcing themselves with `NOTIFY rouse_bindings`, sent as one pipeline whose Sync commits
/// them: one round trip), and only once it committed calls the completions, on the writer
/// thread, in submission order (so they must be short; hop to your own queue for real work). If
/// the transaction fails, every batch in it gets the error. `loadBindings`, `deleteExpired` and the
/// dead-token helpers block the caller while a reader pool thread runs them: call them off the
/// SIP path, and never from a completion.
///
/// The writer's connection carries the store's `origin` (`rouse.origin`), which the replica change
/// log (migration 500) records with each change, so an instance need not read its own back.
///
/// Within one transaction, changes to the same binding id collapse to the last one, so each
/// binding is announced once per transaction: `added` when its row is new, `refreshed` when it
/// replaced one, or the kind its delete named (deletes of rows already gone are not announced).
public final class PostgresLocationStore: LocationStore, @unchecked Sendable {
    // @unchecked: the counters are only touched under `queue.locked`; `connection` only on the
    // writer thread (and after it ended, in `shutdown`).
    /// The channel binding changes are announced on; payload `<kind> <aor> <binding id>`.
    public static let notificationChannel = "rouse_bindings"

    public let settings: PostgresSettings
    /// This instance's id, carried in announcements.
    let origin: String
    /// Most changes one transaction takes (a single larger batch still goes alone).
    public let maxBatchChanges: Int
    private let readers: PostgresWorkerPool
    private let ownsReaders: Bool
    private let queue: BatchQueue<PendingBatch>
    /// Only under `queue.locked`.
    private var transactions = 0
    private var changesCommitted = 0
    /// Only on the writer thread.
    private var connection: PostgresConnection?

    private struct PendingBatch {
        let changes: [BindingChange]
        let completion: @Sendable (Result<Void, any Error>) -> Void
    }

    /// - Parameters:
    ///   - readers: the pool that runs the blocking reads; by default the store makes its own
    ///     one-thread pool (and shuts it down with the store).
    /// - Parameter origin: this instance's id, put in every announcement it makes.
    public init(settings: PostgresSettings, maxBatchChanges: Int = 1000, readers: PostgresWorkerPool? = nil, origin: String = "") {
        self.settings = settings
        self.origin = origin
        self.maxBatchChanges = max(1, maxBatchChanges)
        if let readers {
            self.readers = readers
            ownsReaders = false
        } else {
            self.readers = PostgresWorkerPool(settings: settings, threads: 1, name: "rouse-location-read")
            ownsReaders = true
        }
        queue = BatchQueue(limit: self.maxBatchChanges) { $0.changes.count }
        queue.start(name: "rouse-location-write") { [self] batch in
            let results = commit(batch)
            for (member, result) in zip(batch, results) { member.completion(result) }
        }
    }

    /// Transactions committed so far (each carries one or more batches).
    public var transactionCount: Int { queue.locked { transactions } }

    /// Changes committed so far.
    public var committedChangeCount: Int { queue.locked { changesCommitted } }

    public func apply(_ changes: [BindingChange], completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        guard queue.enqueue(PendingBatch(changes: changes, completion: completion)) else {
            DispatchQueue.global().async { completion(.failure(LocationStoreError.stopped)) }
            return
        }
    }

    public func loadBindings(now: Date) throws -> [Binding] {
        try readers.run { connection in
            try BindingRecords.load(connection, aor: nil, now: now)
        }
    }

    public func loadBindings(for aor: AddressOfRecord, now: Date) throws -> [Binding] {
        try readers.run { connection in
            try BindingRecords.load(connection, aor: aor, now: now)
        }
    }

    /// Deletes every binding that expired before `date`, announces each as `expired`, and returns
    /// them (with their push channels). Blocking; for the expiry sweeper.
    @discardableResult
    public func deleteExpired(before date: Date) throws -> [Binding] {
        try readers.run { connection in
            try connection.transaction { connection in
                try BindingRecords.deleteExpired(connection, before: date)
            }
        }
    }

    /// Marks a push token dead (the provider said it is unregistered). A later save of a binding
    /// with that token clears the mark. Blocking.
    public func markTokenDead(family: PushProviderFamily, token: String, reason: String, at date: Date = Date()) throws {
        try readers.run { connection in
            try PostgresPushStores.markDead(on: connection, family: family, token: token, reason: reason, at: date)
        }
    }

    /// The dead marks among `channels`' tokens. Blocking.
    public func deadTokens(among channels: [PushChannel]) throws -> [DeadPushToken] {
        guard !channels.isEmpty else { return [] }
        return try readers.run { connection in
            try BindingRecords.deadTokens(connection, among: channels)
        }
    }

    /// The live bindings (of one extension, or all) read on a connection the caller owns, for a
    /// one-shot reader such as the command line. Blocking.
    public static func loadBindings(on connection: PostgresConnection, for aor: AddressOfRecord?, now: Date) throws -> [Binding] {
        try BindingRecords.load(connection, aor: aor, now: now)
    }

    /// The dead marks among `channels`' tokens, read on a connection the caller owns. Blocking.
    public static func deadTokens(on connection: PostgresConnection, among channels: [PushChannel]) throws -> [DeadPushToken] {
        guard !channels.isEmpty else { return [] }
        return try BindingRecords.deadTokens(connection, among: channels)
    }

    /// Stops taking changes, commits what is queued, and waits for the writer (and the store's own
    /// reader pool) to end. Must not be called from a completion.
    public func shutdown() {
        queue.shutdown()
        connection = nil
        if ownsReaders { readers.shutdown() }
    }

    // MARK: - The writer

    /// One transaction for the whole batch; one result per member.
    private func commit(_ batch: [PendingBatch]) -> [Result<Void, any Error>] {
        var results = [Result<Void, any Error>](repeating: .success(()), count: batch.count)
        var plan = BindingRecords.WritePlan()
        for (index, member) in batch.enumerated() {
            if let problem = BindingRecords.unstorable(member.changes) {
                results[index] = .failure(problem)
            } else {
                plan.add(member.changes, member: index)
            }
        }
        guard !plan.isEmpty else { return results }
        do {
            if let current = connection, !current.probe() { connection = nil }
            if connection == nil {
                let opened = try settings.connect()
                // The replica's change log records who wrote (so an instance skips its own changes).
                try opened.query("SELECT set_config('rouse.origin', $1, false)", [origin])
                connection = opened
            }
            guard let current = connection else { return results }
            let outcome: BindingRecords.WriteOutcome
            do {
                outcome = try BindingRecords.commit(plan, origin: origin, on: current)
            } catch {
                if !current.isHealthy { connection = nil }
                throw error
            }
            for (member, error) in outcome.failedMembers { results[member] = .failure(error) }
            queue.locked {
                transactions += 1
                changesCommitted += plan.changeCount
            }
        } catch {
            for index in plan.members { results[index] = .failure(error) }
        }
        return results
    }
}

/// A push token a provider reported as no longer valid. A value, safe to share.
public struct DeadPushToken: Hashable, Sendable {
    public let family: PushProviderFamily
    public let token: String
    public let reason: String
    public let markedAt: Date

    /// The token's identity.
    public var id: PushTokenID { PushTokenID(family: family, token: token) }

    public init(family: PushProviderFamily, token: String, reason: String, markedAt: Date) {
        self.family = family
        self.token = token
        self.reason = reason
        self.markedAt = markedAt
    }
}

/// A `rouse_bindings` notification, parsed: `<kind> <aor> <binding id>`. A value, safe to share.
public struct BindingNotification: Hashable, Sendable {
    public let kind: BindingEvent.Kind
    public let aor: AddressOfRecord
    public let bindingID: UUID
    /// The instance that wrote the change (empty when unknown, e.g. an expiry sweep), so an
    /// instance can skip its own announcements.
    public let origin: String

    public init(kind: BindingEvent.Kind, aor: AddressOfRecord, bindingID: UUID, origin: String = "") {
        self.kind = kind
        self.aor = aor
        self.bindingID = bindingID
        self.origin = origin
    }

    /// Parses a payload; nil when it is not one the store sends.
    public init?(payload: String) {
        let parts = payload.split(separator: " ")
        guard parts.count == 3 || parts.count == 4, let kind = BindingEvent.Kind(rawValue: String(parts[0])),
            let aor = AddressOfRecord(parsing: String(parts[1])), let id = UUIDText.parse(String(parts[2]))
        else { return nil }
        self.init(kind: kind, aor: aor, bindingID: id, origin: parts.count == 4 ? String(parts[3]) : "")
    }

    /// The payload text: `<kind> <aor> <binding id> [<origin>]`, the id in lower case as
    /// PostgreSQL prints uuids.
    public var payload: String {
        let base = "\(kind.rawValue) \(aor) \(UUIDText.string(bindingID))"
        return origin.isEmpty ? base : base + " " + origin
    }
}
