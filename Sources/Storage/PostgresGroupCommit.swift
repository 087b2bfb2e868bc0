import Foundation

/// Group commit for small durable writes that many callers make at once (a posted push token per
/// HTTP request), as the location store does for REGISTERs: a free lane (a writer thread with its
/// own connection) takes every queued job (up to `maxBatchJobs`) and sends BEGIN, each job's
/// statements and COMMIT as one pipeline (one round trip, one WAL flush for the burst). Several
/// lanes run at once (8 by default), so a post that arrives while batches wait for their flush
/// finds a free lane instead of waiting a whole commit for one; PostgreSQL flushes the lanes'
/// concurrent commits together (make bench, 8 connections: 2 lanes p50 ~10 ms, 8 lanes ~5 ms).
/// Each caller resumes only once its transaction committed.
///
/// A job that fails does not spoil the others: PostgreSQL skips what follows it, the transaction
/// is rolled back, that job gets its error, and the others are sent again in a new transaction
/// (they had no effect yet). When BEGIN or COMMIT itself fails (a deferred check), each job is
/// sent again alone, so the failure lands on its own. A job whose caller stopped waiting (its
/// deadline passed) before its batch began is never sent.
///
/// Threading: every method may be called from any thread; `perform` suspends its task and never
/// blocks a thread. Jobs run on the lanes' threads. `shutdown()` blocks until what is queued is
/// written.
public final class PostgresGroupCommit: @unchecked Sendable {
    // @unchecked: `transactions` is only touched under `queue.locked`; each lane's connection only
    // on that lane's thread (its `Lane` object never leaves it).
    struct Member {
        let statements: [PostgresStatement]
        /// Hands the caller its statements' rows (success) or error, once its transaction ended.
        let finish: (Result<[PostgresRows], any Error>) -> Void
        let start: StartClaim
    }

    /// A lane's connection, opened on first use and replaced when found broken.
    private final class Lane: @unchecked Sendable {
        var connection: PostgresConnection?
    }

    public let settings: PostgresSettings
    /// Most jobs one transaction takes.
    public let maxBatchJobs: Int
    /// Writer threads (each with its connection) taking batches from the one queue.
    public let laneCount: Int
    private let queue: BatchQueue<Member>
    /// Only under `queue.locked`.
    private var transactions = 0

    /// Starts `lanes` writer threads (named `name-<n>`); no connection opens until there is a job.
    public init(settings: PostgresSettings, lanes: Int = 8, maxBatchJobs: Int = 128, name: String = "rouse-group-commit") {
        self.settings = settings
        self.maxBatchJobs = max(1, maxBatchJobs)
        laneCount = max(1, lanes)
        queue = BatchQueue(limit: self.maxBatchJobs)
        for index in 0..<laneCount {
            let lane = Lane()
            queue.start(name: "\(name)-\(index)") { [self] batch in
                var members: [Member] = []
                members.reserveCapacity(batch.count)
                for member in batch {
                    if member.start.claim() { members.append(member) } else { member.finish(.failure(PostgresError.deadlinePassed(0))) }
                }
                commit(members, on: lane)
            }
        }
    }

    /// Transactions committed so far (each carries one or more jobs).
    public var transactionCount: Int { queue.locked { transactions } }

    /// Jobs queued and not yet taken by a lane.
    public var waitingJobCount: Int { queue.count }

    /// Runs `statements` in a shared transaction and resumes with their rows once that committed,
    /// waiting at most `seconds` (queueing, connecting and the transaction together); past that it
    /// throws `PostgresError.deadlinePassed`, and the statements are never sent if their batch had
    /// not begun. The statements must not begin or end a transaction themselves.
    func perform(_ statements: [PostgresStatement], within seconds: Double) async throws -> [PostgresRows] {
        let start = StartClaim()
        let once = ResumeOnce<[PostgresRows]>()
        let member = Member(statements: statements, finish: { once.resume(with: $0) }, start: start)
        return try await withCheckedThrowingContinuation { continuation in
            once.set(continuation)
            if !queue.enqueue(member) { member.finish(.failure(PostgresError.poolStopped)) }
            DispatchQueue.global().asyncAfter(deadline: .now() + max(0, seconds)) {
                start.abandon()
                once.resume(with: .failure(PostgresError.deadlinePassed(seconds)))
            }
        }
    }

    /// Stops taking jobs, writes what is queued and waits for the lanes to end.
    public func shutdown() {
        queue.shutdown()
    }

    /// Commits `members` in one transaction, setting aside each one that fails, until the rest commit.
    private func commit(_ members: [Member], on lane: Lane) {
        var remaining = members
        while !remaining.isEmpty {
            let current: PostgresConnection
            do {
                if let open = lane.connection, !open.probe() { lane.connection = nil }
                if lane.connection == nil { lane.connection = try settings.connect() }
                current = lane.connection!
            } catch {
                for member in remaining { member.finish(.failure(error)) }
                return
            }
            var statements: [PostgresStatement] = [.begin]
            var owners: [Int?] = [nil]
            for (index, member) in remaining.enumerated() {
                statements.append(contentsOf: member.statements)
                owners.append(contentsOf: repeatElement(Optional(index), count: member.statements.count))
            }
            statements.append(.commit)
            owners.append(nil)
            let results: PipelineResults
            do {
                results = try current.pipeline(statements)
            } catch {
                lane.connection = nil
                for member in remaining { member.finish(.failure(error)) }
                return
            }
            guard let failure = results.failure else {
                queue.locked { transactions += 1 }
                var next = 1
                for member in remaining {
                    let count = member.statements.count
                    member.finish(.success(Array(results.rows[next..<next + count])))
                    next += count
                }
                return
            }
            if failure.index < statements.count - 1 { _ = try? current.query("ROLLBACK") }
            if !current.isHealthy { lane.connection = nil }
            if let owner = owners[failure.index] {
                remaining[owner].finish(.failure(failure.error))
                remaining.remove(at: owner)
            } else if remaining.count > 1 && lane.connection != nil {
                // BEGIN or COMMIT failed with no job to blame: each alone, so it lands on its own.
                for member in remaining { commit([member], on: lane) }
                return
            } else {
                for member in remaining { member.finish(.failure(failure.error)) }
                return
            }
        }
    }
}
