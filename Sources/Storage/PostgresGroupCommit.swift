import Foundation

/// Group commit for small durable writes that many callers make at once (a posted push token per
/// HTTP request), as the location store does for REGISTERs: a free lane (a writer thread with its
/// own connection) takes every queued job (up to `maxBatchJobs`) and sends BEGIN, each job's
/// statements and COMMIT as one pipeline (one round trip, one WAL flush for the burst). Several
/// lanes run at once (8 by default), so a post that arrives while batches wait for their flush
/// finds a free lane instead of waiting a whole commit for one; PostgreSQL flushes the lanes'
/// concurrent commits together (make bench, 8 connections: 2 lanes p50 ~10 ms, 8 lanes ~5 ms).
/// Jobs of one kind (posted tokens) share one statement, a row each (`PostgresSharedStatement`,
/// laid out by `GroupCommitPlan`), so PostgreSQL runs one statement and its triggers per batch.
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
        /// The job's row of a statement it shares with the batch's other jobs, run before `statements`.
        let shared: PostgresSharedRow?
        let statements: [PostgresStatement]
        /// Hands the caller its rows (success) or error, once its transaction ended.
        let finish: (Result<PostgresGroupResult, any Error>) -> Void
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
        try await perform(sharing: nil, then: statements, within: seconds).rows
    }

    /// As `perform(_:within:)`, with `shared` first: the job's row of the statement that every job
    /// of the batch with a row of it shares (one statement for the batch, not one per job).
    func perform(sharing shared: PostgresSharedRow?, then statements: [PostgresStatement], within seconds: Double) async throws
        -> PostgresGroupResult
    {
        let start = StartClaim()
        let once = ResumeOnce<PostgresGroupResult>()
        let member = Member(shared: shared, statements: statements, finish: { once.resume(with: $0) }, start: start)
        return try await withCheckedThrowingContinuation { continuation in
            once.set(continuation)
            if !queue.enqueue(member) { member.finish(.failure(PostgresError.poolStopped)) }
            DispatchQueue.global().asyncAfter(deadline: .now() + max(0, seconds)) {
                start.abandon()
                once.resume(with: .failure(PostgresError.deadlinePassed(seconds)))
            }
        }
    }

    /// A lane's connection. Its statements (prepared once) are planned once, for any arguments:
    /// left to choose, PostgreSQL plans a shared statement again on every run, since a plan for a
    /// known number of rows looks cheaper than the general one, and planning a post's statement
    /// costs more than running it.
    private static func connect(_ settings: PostgresSettings) throws -> PostgresConnection {
        let connection = try settings.connect()
        try connection.query("SET plan_cache_mode = force_generic_plan")
        return connection
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
                if lane.connection == nil { lane.connection = try Self.connect(settings) }
                current = lane.connection!
            } catch {
                for member in remaining { member.finish(.failure(error)) }
                return
            }
            let plan = GroupCommitPlan(shared: remaining.map(\.shared), statements: remaining.map(\.statements))
            let results: PipelineResults
            do {
                results = try current.pipeline(plan.statements)
            } catch {
                lane.connection = nil
                for member in remaining { member.finish(.failure(error)) }
                return
            }
            guard let failure = results.failure else {
                queue.locked { transactions += 1 }
                for (index, result) in plan.results(from: results.rows).enumerated() { remaining[index].finish(.success(result)) }
                return
            }
            if failure.index < plan.statements.count - 1 { _ = try? current.query("ROLLBACK") }
            if !current.isHealthy { lane.connection = nil }
            let owners = plan.owners[failure.index]
            if owners.count == 1, let owner = owners.first {
                remaining[owner].finish(.failure(failure.error))
                remaining.remove(at: owner)
            } else if remaining.count > 1 && lane.connection != nil {
                // BEGIN, COMMIT or a shared statement failed with no one job to blame: each alone,
                // so it lands on its own.
                for member in remaining { commit([member], on: lane) }
                return
            } else {
                for member in remaining { member.finish(.failure(failure.error)) }
                return
            }
        }
    }
}

/// A statement the jobs of one group commit batch share, each adding a row to it, so that a burst
/// of like writes (posted tokens) costs PostgreSQL one statement, not one per job. Its rows are the
/// CTE `input` (`columns`, all text, and `n`, the row's ordinal from 1); `afterInput` is the rest of
/// the statement (its other CTEs, each after a comma, and its query), whose first output column is
/// the ordinal of the job the output row belongs to, the other columns being that job's; its other
/// parameters (`constants`) follow the columns'. Several rows come as one text array per column
/// (`unnest`); one row (a batch of one, the usual case under light load) as plain parameters in a
/// statement of its own (`singleName`), which PostgreSQL runs faster (its one plan knows there is
/// one row). Prepared once per connection. A value.
struct PostgresSharedStatement: Sendable {
    let name: StaticString
    let singleName: StaticString
    let columns: Int
    let constants: [String?]
    /// The statement for several rows, and for one.
    let sql: String
    let singleSQL: String

    init(name: StaticString, singleName: StaticString, columns: [String], afterInput: String, constants: [String?]) {
        self.name = name
        self.singleName = singleName
        self.columns = columns.count
        self.constants = constants
        let arrays = columns.indices.map { "$\($0 + 1)::text[]" }.joined(separator: ", ")
        sql = "WITH input AS (SELECT * FROM unnest(\(arrays)) WITH ORDINALITY AS i(\(columns.joined(separator: ", ")), n))\(afterInput)"
        let values = columns.enumerated().map { "$\($0.offset + 1)::text AS \($0.element)" }.joined(separator: ", ")
        singleSQL = "WITH input AS (SELECT \(values), 1::bigint AS n)\(afterInput)"
    }

    /// The statement for `rows` (each `columns` values), in order.
    func statement(for rows: [[String?]]) -> PostgresStatement {
        var parameters = PostgresParameters(capacity: rows.count * columns * 24 + 128)
        if rows.count == 1, let row = rows.first {
            for value in row { parameters.append(value) }
            for constant in constants { parameters.append(constant) }
            return PostgresStatement(prepared: singleName, singleSQL, parameters)
        }
        for column in 0..<columns {
            parameters.appendArray(rows) { parameters, row in parameters.write(arrayElement: row[column]) }
        }
        for constant in constants { parameters.append(constant) }
        return PostgresStatement(prepared: name, sql, parameters)
    }

    /// `rows` (the statement's output) by job: the i-th holds the rows of ordinal i + 1, without
    /// the ordinal.
    static func rowsByJob(_ rows: PostgresRows, jobs: Int) -> [[[String?]]] {
        var byJob = [[[String?]]](repeating: [], count: jobs)
        for row in rows.rows {
            guard let ordinal = row.first.flatMap({ $0.flatMap { Int($0) } }), ordinal >= 1, ordinal <= jobs else { continue }
            byJob[ordinal - 1].append(Array(row.dropFirst()))
        }
        return byJob
    }
}

/// One job's row of a `PostgresSharedStatement`, and the keys that keep it apart from others: two
/// jobs with a key in common never share a statement (the later one's row goes into a statement
/// of its own after the earlier one's, in the same transaction), so a statement's rows never touch
/// each other's. A statement's rows go in the order of their first keys (name the rows the
/// statement locks by it). A value.
struct PostgresSharedRow: Sendable {
    let statement: PostgresSharedStatement
    /// One value per column of the statement.
    let values: [String?]
    let keys: [String]
}

/// What a group commit job got back: its shared row's output rows (without the ordinal) and its
/// own statements' rows, in order. A value.
struct PostgresGroupResult: Sendable {
    let shared: [[String?]]
    let rows: [PostgresRows]
}

/// One group commit transaction's statements for its jobs, and which jobs each belongs to: BEGIN,
/// then by rounds the shared statements (one per statement name and round; a job joins the round
/// after the last one holding a job it shares a key with, so jobs that touch the same things keep
/// their order; within a statement, jobs by their first key), each followed by its jobs' own
/// statements, then the statements of the jobs without a shared row, and COMMIT. A value, pure.
struct GroupCommitPlan {
    private(set) var statements: [PostgresStatement] = [.begin]
    /// For each statement, the jobs it belongs to (none for BEGIN and COMMIT).
    private(set) var owners: [[Int]] = [[]]
    /// For each shared statement (by its index in `statements`), how many jobs it carries.
    private var sharedJobs: [Int: Int] = [:]
    /// For each job: its shared statement's index and its ordinal there, if it has a row.
    private var sharedAt: [(statement: Int, ordinal: Int)?]
    /// For each job: the index of its first own statement.
    private var ownAt: [Int]
    private let ownCounts: [Int]

    init(shared: [PostgresSharedRow?], statements own: [[PostgresStatement]]) {
        sharedAt = Array(repeating: nil, count: own.count)
        ownAt = Array(repeating: 0, count: own.count)
        ownCounts = own.map(\.count)
        var roundOfKey: [String: Int] = [:]
        var rounds: [[(name: String, statement: PostgresSharedStatement, jobs: [Int])]] = []
        for (job, row) in shared.enumerated() {
            guard let row else { continue }
            let round = row.keys.reduce(0) { max($0, roundOfKey[$1].map { $0 + 1 } ?? 0) }
            for key in row.keys { roundOfKey[key] = round }
            while rounds.count <= round { rounds.append([]) }
            let name = row.statement.name.description
            if let group = rounds[round].firstIndex(where: { $0.name == name }) {
                rounds[round][group].jobs.append(job)
            } else {
                rounds[round].append((name, row.statement, [job]))
            }
        }
        for round in rounds {
            for var group in round {
                // In one order of their first keys, whichever lane sends them: two batches that
                // lock the same rows lock them in the same order, so they never deadlock.
                group.jobs.sort { (shared[$0]?.keys.first ?? "", $0) < (shared[$1]?.keys.first ?? "", $1) }
                sharedJobs[statements.count] = group.jobs.count
                for (ordinal, job) in group.jobs.enumerated() { sharedAt[job] = (statements.count, ordinal) }
                append(group.statement.statement(for: group.jobs.map { shared[$0]?.values ?? [] }), owners: group.jobs)
                for job in group.jobs { appendOwn(own[job], of: job) }
            }
        }
        for (job, row) in shared.enumerated() where row == nil { appendOwn(own[job], of: job) }
        append(.commit, owners: [])
    }

    private mutating func append(_ statement: PostgresStatement, owners jobs: [Int]) {
        statements.append(statement)
        owners.append(jobs)
    }

    private mutating func appendOwn(_ own: [PostgresStatement], of job: Int) {
        ownAt[job] = statements.count
        for statement in own { append(statement, owners: [job]) }
    }

    /// Each job's result, from the rows of every statement (the transaction committed).
    func results(from rows: [PostgresRows]) -> [PostgresGroupResult] {
        var byStatement: [Int: [[[String?]]]] = [:]
        for (index, jobs) in sharedJobs { byStatement[index] = PostgresSharedStatement.rowsByJob(rows[index], jobs: jobs) }
        return ownAt.indices.map { job in
            let shared = sharedAt[job].map { byStatement[$0.statement]?[$0.ordinal] ?? [] } ?? []
            return PostgresGroupResult(shared: shared, rows: Array(rows[ownAt[job]..<ownAt[job] + ownCounts[job]]))
        }
    }
}

extension PostgresParameters {
    /// Appends `value` as an element of an array literal being written: double-quoted, with `"`
    /// and `\` escaped, or `NULL`.
    mutating func write(arrayElement value: String?) {
        guard let value else {
            write("NULL" as StaticString)
            return
        }
        write(UInt8(ascii: "\""))
        for byte in value.utf8 {
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { write(UInt8(ascii: "\\")) }
            write(byte)
        }
        write(UInt8(ascii: "\""))
    }
}
