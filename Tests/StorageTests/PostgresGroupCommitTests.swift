import Foundation
import RouseTestSupport
@testable import Storage
import XCTest

/// Pipelines and group commit on a real PostgreSQL: a pipeline's statements in one round trip,
/// what follows a failure skipped; jobs queued together share one transaction, a failing job does
/// not take the others down, a job past its deadline never runs; prepared statements.
final class PostgresGroupCommitTests: XCTestCase {
    var database: TestDatabase!
    var connection: PostgresConnection!

    override func setUpWithError() throws {
        database = try TestDatabase()
        connection = try database.settings().connect()
        try connection.query("CREATE TABLE grouped (n integer PRIMARY KEY)")
    }

    override func tearDown() {
        connection = nil
        database?.drop()
    }

    func insert(_ n: Int) -> PostgresStatement {
        PostgresStatement(prepared: "test_grouped_insert", "INSERT INTO grouped (n) VALUES ($1::integer) RETURNING n", PostgresParameters([String(n)]))
    }

    func stored() throws -> [Int] {
        try connection.query("SELECT n FROM grouped ORDER BY n").rows.compactMap { $0[0].flatMap { Int($0) } }
    }

    func value(_ rows: [PostgresRows]) -> Int? {
        rows.first?.rows.first?[0].flatMap { Int($0) }
    }

    /// Each task's inserted number, or its error's SQLSTATE.
    func outcomes(of tasks: [Task<[PostgresRows], any Error>]) async -> [String] {
        var outcomes: [String] = []
        for task in tasks {
            do { outcomes.append(value(try await task.value).map(String.init) ?? "none") } catch {
                outcomes.append((error as? PostgresError)?.sqlState ?? "\(error)")
            }
        }
        return outcomes
    }

    // MARK: - Pipelines

    func testAPipelineRunsItsStatementsInOrderAndPreparesEachNameOnce() throws {
        let before = PostgresConnection.statementCount
        let results = try connection.pipeline([.begin, insert(1), insert(2), PostgresStatement("SELECT count(*)::text FROM grouped"), .commit])
        XCTAssertNil(results.failure)
        XCTAssertEqual(results.rows.map { $0.rows.first?[0] ?? nil }, [nil, "1", "2", "2", nil])
        XCTAssertEqual(PostgresConnection.statementCount - before, 6, "five statements and one preparation")
        XCTAssertEqual(try stored(), [1, 2])
        let again = try connection.pipeline([insert(3)])
        XCTAssertEqual(again.rows.count, 1)
        XCTAssertEqual(try connection.query("SELECT count(*) FROM pg_prepared_statements WHERE name = 'test_grouped_insert'").rows, [["1"]])
    }

    func testAfterAFailedStatementThePipelineSkipsTheRestAndTheConnectionStaysUsable() throws {
        try connection.query("INSERT INTO grouped (n) VALUES (5)")
        let results = try connection.pipeline([.begin, insert(4), insert(5), insert(6), .commit])
        XCTAssertEqual(results.failure?.index, 2)
        XCTAssertEqual(results.failure?.error.sqlState, "23505")
        XCTAssertEqual(results.rows.count, 2, "BEGIN and the first insert ran; nothing after the failure")
        try connection.query("ROLLBACK")
        XCTAssertEqual(try stored(), [5], "the transaction was rolled back")
        XCTAssertEqual(try connection.query("SELECT 1").rows, [["1"]])
    }

    func testWithoutBeginAPipelineIsOneTransactionAndAFailureAtItsCommitIsItsFailure() throws {
        try connection.query("CREATE TABLE checked (n integer PRIMARY KEY, m integer UNIQUE DEFERRABLE INITIALLY DEFERRED)")
        try connection.query("INSERT INTO checked VALUES (0, 7)")
        func checked(_ n: Int, _ m: Int) -> PostgresStatement {
            PostgresStatement("INSERT INTO checked VALUES ($1::integer, $2::integer) RETURNING n", PostgresParameters([String(n), String(m)]))
        }
        let results = try connection.pipeline([insert(1), checked(1, 7), insert(2)])
        XCTAssertEqual(results.failure?.index, 3, "the implicit commit at the Sync failed")
        XCTAssertEqual(results.failure?.error.sqlState, "23505")
        XCTAssertEqual(try stored(), [], "every statement of the pipeline was rolled back")
        let failedEarly = try connection.pipeline([insert(3), PostgresStatement("SELECT 1/0"), insert(4)])
        XCTAssertEqual(failedEarly.failure?.index, 1)
        XCTAssertEqual(try stored(), [], "a failed statement rolls back the ones before it")
        XCTAssertNil(try connection.pipeline([insert(5), checked(2, 2)]).failure)
        XCTAssertEqual(try stored(), [5], "committed at the Sync")
        XCTAssertEqual(try connection.query("SELECT 1").rows, [["1"]])
    }

    func testAStatementThatCannotBePreparedFailsAsItselfAndIsPreparedAgainWhenItCan() throws {
        let broken = PostgresStatement(prepared: "test_broken", "SELECT n FROM not_yet", PostgresParameters())
        let results = try connection.pipeline([insert(1), broken])
        XCTAssertEqual(results.failure?.index, 1)
        XCTAssertEqual(results.failure?.error.sqlState, "42P01")
        try connection.query("CREATE TABLE not_yet (n integer)")
        XCTAssertNil(try connection.pipeline([broken]).failure)
    }

    func testAPreparedStatementRunsAgainAndSurvivesADiscard() throws {
        let sql = "SELECT $1::integer + 1"
        let before = PostgresConnection.statementCount
        XCTAssertEqual(try connection.query(prepared: "test_plus_one", sql, PostgresParameters(["1"])).rows, [["2"]])
        XCTAssertEqual(try connection.query(prepared: "test_plus_one", sql, PostgresParameters(["41"])).rows, [["42"]])
        XCTAssertEqual(PostgresConnection.statementCount - before, 3, "prepared once, run twice")
        try connection.query("DISCARD ALL")
        XCTAssertEqual(try connection.query(prepared: "test_plus_one", sql, PostgresParameters(["9"])).rows, [["10"]])
        try connection.query("DISCARD ALL")
        XCTAssertEqual(try connection.pipeline([PostgresStatement(prepared: "test_plus_one", sql, PostgresParameters(["1"]))]).failure?.error.sqlState, "26000")
        XCTAssertEqual(try connection.pipeline([PostgresStatement(prepared: "test_plus_one", sql, PostgresParameters(["2"]))]).rows.first?.rows, [["3"]])
    }

    // MARK: - Group commit

    /// Holds the table locked so the first job waits inside its transaction, while the test queues
    /// more behind it; the caller commits the lock to release it.
    func blockWriter(of group: PostgresGroupCommit, first: Int) async throws -> Task<[PostgresRows], any Error> {
        try connection.query("BEGIN")
        try connection.query("LOCK TABLE grouped IN ACCESS EXCLUSIVE MODE")
        let job = [insert(first)]
        let blocked = Task { try await group.perform(job, within: 60) }
        let probe = try database.settings().connect()
        try waitUntil("the first job waits for the lock") { try sessionsWaitingForALock(on: "grouped", probe) == 1 }
        return blocked
    }

    func testJobsQueuedTogetherCommitInOneTransaction() async throws {
        let group = PostgresGroupCommit(settings: database.settings(), lanes: 1)
        defer { group.shutdown() }
        let first = try await blockWriter(of: group, first: 0)
        var tasks: [Task<[PostgresRows], any Error>] = []
        for n in 1...40 {
            let job = [insert(n)]
            tasks.append(Task { try await group.perform(job, within: 60) })
        }
        try waitUntil("40 jobs wait") { group.waitingJobCount == 40 }
        try connection.query("COMMIT")
        let firstRows = try await first.value
        XCTAssertEqual(value(firstRows), 0)
        var values: [Int?] = []
        for task in tasks { values.append(value(try await task.value)) }
        XCTAssertEqual(values, Array(1...40))
        XCTAssertEqual(try stored(), Array(0...40))
        XCTAssertEqual(group.transactionCount, 2, "the first job alone, then the 40 queued behind it together")
    }

    func testWhileOneLaneWaitsAnotherCommits() async throws {
        let group = PostgresGroupCommit(settings: database.settings(), lanes: 2)
        defer { group.shutdown() }
        try connection.query("CREATE TABLE other (n integer)")
        let first = try await blockWriter(of: group, first: 0)
        let free = [PostgresStatement("INSERT INTO other (n) VALUES (1) RETURNING n")]
        let freeRows = try await group.perform(free, within: 60)
        XCTAssertEqual(value(freeRows), 1, "the second lane is not held up by the first")
        try connection.query("COMMIT")
        let firstRows = try await first.value
        XCTAssertEqual(value(firstRows), 0)
    }

    func testAFailingJobGetsItsErrorAndTheOthersStillCommit() async throws {
        let group = PostgresGroupCommit(settings: database.settings(), lanes: 1)
        defer { group.shutdown() }
        let first = try await blockWriter(of: group, first: 0)
        var tasks: [Task<[PostgresRows], any Error>] = []
        for n in [1, 2, 0, 3, 4] {  // 0 is taken by the first job: a unique violation
            let job = [insert(n)]
            tasks.append(Task { try await group.perform(job, within: 60) })
        }
        try waitUntil("5 jobs wait") { group.waitingJobCount == 5 }
        try connection.query("COMMIT")
        _ = try await first.value
        let outcomes = await self.outcomes(of: tasks)
        XCTAssertEqual(outcomes, ["1", "2", "23505", "3", "4"])
        XCTAssertEqual(try stored(), [0, 1, 2, 3, 4])
        XCTAssertEqual(group.transactionCount, 2, "the first job, then the four others once the failing one was set aside")
    }

    func testAFailingCommitIsRetriedJobByJob() async throws {
        try connection.query(
            "CREATE TABLE checked (n integer PRIMARY KEY, m integer UNIQUE DEFERRABLE INITIALLY DEFERRED)")
        try connection.query("INSERT INTO checked VALUES (0, 7)")
        let group = PostgresGroupCommit(settings: database.settings(), lanes: 1)
        defer { group.shutdown() }
        func checked(_ n: Int, _ m: Int) -> [PostgresStatement] {
            [PostgresStatement("INSERT INTO checked VALUES ($1::integer, $2::integer) RETURNING n", PostgresParameters([String(n), String(m)]))]
        }
        let first = try await blockWriter(of: group, first: 100)
        let good = checked(1, 1), bad = checked(2, 7), alsoGood = checked(3, 3)
        let tasks = [good, bad, alsoGood].map { job in Task { try await group.perform(job, within: 60) } }
        try waitUntil("3 jobs wait") { group.waitingJobCount == 3 }
        try connection.query("COMMIT")
        _ = try await first.value
        let outcomes = await self.outcomes(of: tasks)
        XCTAssertEqual(outcomes, ["1", "23505", "3"], "the deferred violation lands on its own job")
        XCTAssertEqual(try connection.query("SELECT n FROM checked ORDER BY n").rows, [["0"], ["1"], ["3"]])
    }

    func testAJobPastItsDeadlineBeforeItsBatchBeganNeverRuns() async throws {
        let group = PostgresGroupCommit(settings: database.settings(), lanes: 1)
        defer { group.shutdown() }
        let first = try await blockWriter(of: group, first: 0)
        do {
            _ = try await group.perform([insert(99)], within: 0.2)
            XCTFail("the job answered although its lane was blocked past its deadline")
        } catch {
            XCTAssertTrue("\(error)".contains("did not answer within"), "\(error)")
        }
        try connection.query("COMMIT")
        _ = try await first.value
        _ = try await group.perform([insert(1)], within: 60)
        XCTAssertEqual(try stored(), [0, 1])
    }

    // MARK: - Shared statements

    /// Inserts each job's number; each job's row says how many jobs its statement carried.
    static let sharedInsert = PostgresSharedStatement(
        name: "test_grouped_shared_insert", singleName: "test_grouped_shared_insert_one", columns: ["v"],
        afterInput: """
            , inserted AS (INSERT INTO grouped (n) SELECT v::integer FROM input RETURNING n)
            SELECT input.n, inserted.n, count(*) OVER () FROM input JOIN inserted ON inserted.n = input.v::integer
            """,
        constants: [])

    /// A job inserting `n` by its row of `sharedInsert`, its number's text and each key given.
    func sharedJob(_ group: PostgresGroupCommit, _ n: Int, keys: [String] = []) -> Task<[String], any Error> {
        let row = PostgresSharedRow(statement: Self.sharedInsert, values: [String(n)], keys: keys)
        return Task {
            do {
                let result = try await group.perform(sharing: row, then: [], within: 60)
                return result.shared.map { "\($0[0] ?? "-")/\($0[1] ?? "-")" }
            } catch {
                return [(error as? PostgresError)?.sqlState ?? "\(error)"]
            }
        }
    }

    func testJobsQueuedTogetherShareOneStatementAndEachGetsItsOwnRow() async throws {
        let group = PostgresGroupCommit(settings: database.settings(), lanes: 1)
        defer { group.shutdown() }
        let first = try await blockWriter(of: group, first: 0)
        let tasks = (1...30).map { sharedJob(group, $0) }
        try waitUntil("30 jobs wait") { group.waitingJobCount == 30 }
        try connection.query("COMMIT")
        _ = try await first.value
        var answers: [[String]] = []
        for task in tasks { answers.append(try await task.value) }
        XCTAssertEqual(answers, (1...30).map { ["\($0)/30"] }, "each job its own number, from one statement of 30 rows")
        XCTAssertEqual(try stored(), Array(0...30))
        XCTAssertEqual(group.transactionCount, 2)
    }

    func testJobsSharingAKeyRunInLaterStatementsInTheirOrder() async throws {
        let group = PostgresGroupCommit(settings: database.settings(), lanes: 1)
        defer { group.shutdown() }
        let first = try await blockWriter(of: group, first: 0)
        var tasks: [Task<[String], any Error>] = []
        for (n, keys) in [(1, ["a"]), (2, ["a", "b"]), (3, ["c"]), (4, ["b"]), (5, [])] {
            tasks.append(sharedJob(group, n, keys: keys))
            try waitUntil("job \(n) waits") { group.waitingJobCount == n }  // queued in this order
        }
        try connection.query("COMMIT")
        _ = try await first.value
        var answers: [[String]] = []
        for task in tasks { answers.append(try await task.value) }
        // Rounds: 1, 3, 5 together; 2 after 1 (a); 4 after 2 (b).
        XCTAssertEqual(answers, [["1/3"], ["2/1"], ["3/3"], ["4/1"], ["5/3"]])
        XCTAssertEqual(try stored(), Array(0...5))
        XCTAssertEqual(group.transactionCount, 2, "the rounds share the batch's one transaction")
    }

    func testASharedStatementThatFailsIsRetriedJobByJobAndOnlyTheCulpritFails() async throws {
        let group = PostgresGroupCommit(settings: database.settings(), lanes: 1)
        defer { group.shutdown() }
        let first = try await blockWriter(of: group, first: 0)
        let tasks = [1, 2, 0, 3].map { sharedJob(group, $0) }  // 0 is taken by the first job
        try waitUntil("4 jobs wait") { group.waitingJobCount == 4 }
        try connection.query("COMMIT")
        _ = try await first.value
        var answers: [[String]] = []
        for task in tasks { answers.append(try await task.value) }
        XCTAssertEqual(answers, [["1/1"], ["2/1"], ["23505"], ["3/1"]])
        XCTAssertEqual(try stored(), [0, 1, 2, 3])
    }

    func testArrayElementsKeepQuotesBackslashesCommasAndNulls() throws {
        let statement = PostgresSharedStatement(
            name: "test_grouped_array_elements", singleName: "test_grouped_array_element", columns: ["v"],
            afterInput: " SELECT n, v, v IS NULL FROM input", constants: [])
        let values: [String?] = [#"a"b"#, #"c\d"#, "e,f}{", nil, "NULL", ""]
        let rows = try connection.query(statement.statement(for: values.map { [$0] }))
        let byJob = PostgresSharedStatement.rowsByJob(rows, jobs: values.count)
        XCTAssertEqual(byJob.map(\.count), Array(repeating: 1, count: values.count), "a row for each job")
        XCTAssertEqual(byJob.map { $0.first?[0] ?? "absent" }, values.map { $0 ?? "absent" })
        XCTAssertEqual(byJob.map { $0.first?[1] }, ["f", "f", "f", "t", "f", "f"], "only the NULL element is NULL")
        for value in values {
            let alone = try connection.query(statement.statement(for: [[value]]))
            XCTAssertEqual(alone.rows, [["1", value, value == nil ? "t" : "f"]], "a row alone, as plain parameters")
        }
    }

    func testAStatementsRowsGoInTheOrderOfTheirFirstKeysWhateverOrderTheJobsCameIn() throws {
        func row(_ value: String) -> PostgresSharedRow {
            PostgresSharedRow(statement: Self.sharedInsert, values: [value], keys: ["token \(value)"])
        }
        let plan = GroupCommitPlan(shared: [row("7"), row("3"), row("5")], statements: [[], [], []])
        XCTAssertEqual(plan.statements.count, 3, "BEGIN, the one shared statement, COMMIT")
        XCTAssertEqual(plan.statements[1].parameters.value(at: 0), #"{"3","5","7"}"#, "two lanes lock the same rows in one order")
        XCTAssertEqual(plan.owners[1], [1, 2, 0])
    }
}

