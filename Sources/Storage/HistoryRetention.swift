import Dispatch
public import Foundation

/// Keeps push records, calls (with their journeys) and the records of tokens no longer known for
/// `history_retention` (issue 20 item 1), then deletes them: in batches of `batchSize` rows, each
/// batch its own statement and so its own short transaction, so a delete never holds many row
/// locks or a table lock for long, and the pages and calls writing meanwhile never wait on it.
/// Exactly one instance deletes at a time: a run starts only when it takes a session advisory
/// lock with `pg_try_advisory_lock` (the others skip that round); PostgreSQL drops the lock if the
/// connection dies.
///
/// Threading: `run` blocks its caller on PostgreSQL; `HistoryRetentionJob` calls it from its own
/// queue.
public enum HistoryRetention {
    /// The advisory lock a run holds (the migrator's is 491496760421, the replica's 491496760422).
    public static let lockID = "491496760423"
    public static let defaultBatchSize = 1000
    /// How long everything is kept by default (`history_retention`).
    public static let defaultRetention: TimeInterval = 90 * 24 * 3600

    /// What one run deleted, table by table; nil from `run` when another instance holds the lock.
    public struct Deleted: Sendable, Equatable {
        public var pushRecords = 0
        public var calls = 0
        /// Liveness records of tokens no binding or posted token holds any more.
        public var tokenRecords = 0
        /// Delete statements made (batches).
        public var batches = 0

        public init() {}
    }

    /// Each table's old rows: a delete of at most `$2` rows older than `$1` seconds.
    static var batchSQL: [(table: WritableKeyPath<Deleted, Int>, sql: String)] {
        [
        (\.pushRecords, """
            DELETE FROM push_records WHERE ctid IN (
                SELECT ctid FROM push_records WHERE created_at < now() - make_interval(secs => $1::double precision) LIMIT $2::integer)
            """),
        (\.calls, """
            DELETE FROM calls WHERE ctid IN (
                SELECT ctid FROM calls WHERE started_at < now() - make_interval(secs => $1::double precision) LIMIT $2::integer)
            """),
        (\.tokenRecords, """
            DELETE FROM push_token_liveness WHERE ctid IN (
                SELECT l.ctid FROM push_token_liveness l
                WHERE l.last_sign_of_life < now() - make_interval(secs => $1::double precision)
                AND NOT EXISTS (SELECT 1 FROM binding_push_channels c WHERE c.family = l.family AND c.token = l.token)
                AND NOT EXISTS (SELECT 1 FROM posted_push_tokens p WHERE p.family = l.family AND p.token = l.token)
                LIMIT $2::integer)
            """),
        ]
    }

    /// Deletes what is older than `retention` seconds, `batchSize` rows per statement, until
    /// nothing is left; nil when another instance is at it. Blocking.
    public static func run(on connection: PostgresConnection, retention: TimeInterval, batchSize: Int = defaultBatchSize) throws -> Deleted? {
        let locked = try connection.query("SELECT pg_try_advisory_lock($1::bigint)::text", [lockID]).rows.first?[0] == "true"
        guard locked else { return nil }
        defer { _ = try? connection.query("SELECT pg_advisory_unlock($1::bigint)", [lockID]) }
        var deleted = Deleted()
        for (column, sql) in batchSQL {
            while true {
                let count = try connection.query(sql, [String(retention), String(max(1, batchSize))]).affectedRows
                deleted.batches += 1
                deleted[keyPath: column] += count
                if count < batchSize { break }
            }
        }
        return deleted
    }
}

/// Runs `HistoryRetention` every `interval` on a connection of its own (one run at a time on this
/// instance; the advisory lock keeps it to one instance).
///
/// Threading: its timer and runs live on a private serial queue; `start` and `stop` return at once.
public final class HistoryRetentionJob: @unchecked Sendable {
    // @unchecked: `timer` and `connection` are only touched on `queue`.
    private let settings: PostgresSettings
    private let retention: TimeInterval
    private let interval: TimeInterval
    private let report: @Sendable (Result<HistoryRetention.Deleted?, any Error>) -> Void
    private let queue = DispatchQueue(label: "rouse.retention")
    private var timer: DispatchSourceTimer?
    private var connection: PostgresConnection?

    /// - Parameter report: hears each run's result (deleted counts; nil: another instance ran).
    public init(
        settings: PostgresSettings, retention: TimeInterval, interval: TimeInterval = 600,
        report: @escaping @Sendable (Result<HistoryRetention.Deleted?, any Error>) -> Void = { _ in }
    ) {
        self.settings = settings
        self.retention = retention
        self.interval = interval
        self.report = report
    }

    /// The first run comes a minute after start (not during it), then one every `interval`.
    public func start(firstAfter delay: TimeInterval = 60) {
        queue.async { [self] in
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.schedule(deadline: .now() + delay, repeating: interval)
            timer.setEventHandler { [weak self] in self?.runOnce() }
            timer.resume()
            self.timer = timer
        }
    }

    public func stop() {
        queue.sync {
            timer?.cancel()
            timer = nil
            connection = nil
        }
    }

    /// On `queue`.
    private func runOnce() {
        do {
            let connection = try self.connection.flatMap { $0.isHealthy ? $0 : nil } ?? settings.connect()
            self.connection = connection
            report(.success(try HistoryRetention.run(on: connection, retention: retention)))
        } catch {
            if connection?.isHealthy == false { connection = nil }
            report(.failure(error))
        }
    }
}
