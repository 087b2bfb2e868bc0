public import Foundation

/// Group commit for small durable writes that many callers make at once (a posted push token per
/// HTTP request): one writer thread takes every queued job (up to `maxBatchJobs`) and runs them in
/// one transaction on its own connection, so a burst costs one commit (one WAL flush) instead of
/// one each, as the location store does for REGISTERs. Each caller resumes only once its
/// transaction committed.
///
/// A job that throws does not spoil the others: the transaction is rolled back, that job gets its
/// error, and the others run again in a new transaction (they had no effect yet, so each job must
/// only write to PostgreSQL, and must not begin or end a transaction itself). When the COMMIT
/// itself fails (a deferred check), each job runs again alone, so the failure lands on its own.
/// A job whose caller stopped waiting (its deadline passed) before the batch began never runs.
///
/// Threading: every method may be called from any thread; `perform` suspends its task and never
/// blocks a thread. Jobs run on the writer thread, one at a time. `shutdown()` blocks until what
/// is queued is written.
public final class PostgresGroupCommit: @unchecked Sendable {
    // @unchecked: `transactions` is only touched under `queue.locked`; `connection` only on the
    // writer thread (and after it ended, in `shutdown`).
    private struct Member {
        /// Runs the job on the connection, keeping its value for `finish`.
        let run: (PostgresConnection) throws -> Void
        /// Hands the caller its value (success) or error, once the transaction ended.
        let finish: (Result<Void, any Error>) -> Void
        let start: StartClaim
    }

    public let settings: PostgresSettings
    /// Most jobs one transaction takes.
    public let maxBatchJobs: Int
    private let queue: BatchQueue<Member>
    /// Only under `queue.locked`.
    private var transactions = 0
    /// Only on the writer thread.
    private var connection: PostgresConnection?

    /// Starts the writer thread (named `name`); no connection opens until there is a job.
    public init(settings: PostgresSettings, maxBatchJobs: Int = 256, name: String = "rouse-group-commit") {
        self.settings = settings
        self.maxBatchJobs = max(1, maxBatchJobs)
        queue = BatchQueue(limit: self.maxBatchJobs)
        queue.start(name: name) { [self] batch in
            var members: [Member] = []
            for member in batch {
                if member.start.claim() { members.append(member) } else { member.finish(.failure(PostgresError.deadlinePassed(0))) }
            }
            commit(members)
        }
    }

    /// Transactions committed so far (each carries one or more jobs).
    public var transactionCount: Int { queue.locked { transactions } }

    /// Jobs queued and not yet taken by the writer.
    public var waitingJobCount: Int { queue.count }

    /// Runs `job` in a shared transaction and resumes with its value once that committed, waiting
    /// at most `seconds` (queueing, connecting and the transaction together); past that it throws
    /// `PostgresError.deadlinePassed`, and the job never runs if its batch had not begun.
    public func perform<T: Sendable>(within seconds: Double, _ job: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        let start = StartClaim()
        let once = ResumeOnce<T>()
        let value = ResultBox<T>()
        let member = Member(
            run: { connection in value.set(.success(try job(connection))) },
            finish: { result in once.resume(with: result.flatMap { Result { try value.get() } }) },
            start: start)
        return try await withCheckedThrowingContinuation { continuation in
            once.set(continuation)
            enqueue(member)
            DispatchQueue.global().asyncAfter(deadline: .now() + max(0, seconds)) {
                start.abandon()
                once.resume(with: .failure(PostgresError.deadlinePassed(seconds)))
            }
        }
    }

    /// Stops taking jobs, writes what is queued and waits for the writer to end.
    public func shutdown() {
        queue.shutdown()
        connection = nil
    }

    private func enqueue(_ member: Member) {
        if !queue.enqueue(member) { member.finish(.failure(PostgresError.poolStopped)) }
    }

    /// Runs `members` in one transaction, setting aside each one that fails, until the rest commit.
    private func commit(_ members: [Member]) {
        var remaining = members
        while !remaining.isEmpty {
            let current: PostgresConnection
            do {
                if let open = connection, !open.probe() { connection = nil }
                if connection == nil { connection = try settings.connect() }
                current = connection!
            } catch {
                for member in remaining { member.finish(.failure(error)) }
                return
            }
            var failed: Int? = nil
            do {
                try current.query("BEGIN")
                for (index, member) in remaining.enumerated() {
                    failed = index
                    try member.run(current)
                }
                failed = nil
                try current.query("COMMIT")
                queue.locked { transactions += 1 }
                for member in remaining { member.finish(.success(())) }
                return
            } catch {
                _ = try? current.query("ROLLBACK")
                if !current.isHealthy { connection = nil }
                if let failed {
                    remaining[failed].finish(.failure(error))
                    remaining.remove(at: failed)
                } else if remaining.count > 1 && connection != nil {
                    // BEGIN or COMMIT failed with no job to blame: each alone, so it lands on its own.
                    for member in remaining { commit([member]) }
                    return
                } else {
                    for member in remaining { member.finish(.failure(error)) }
                    return
                }
            }
        }
    }
}
