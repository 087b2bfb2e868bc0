import Foundation
import RouseTestSupport
@testable import Storage
import XCTest

/// Group commit on a real PostgreSQL: jobs queued together share one transaction, a failing job
/// does not take the others down, a job past its deadline never runs; and prepared statements.
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

    func insert(_ n: Int) -> @Sendable (PostgresConnection) throws -> Int {
        { connection in
            try connection.query("INSERT INTO grouped (n) VALUES ($1::integer)", [String(n)])
            return n
        }
    }

    func stored() throws -> [Int] {
        try connection.query("SELECT n FROM grouped ORDER BY n").rows.compactMap { $0[0].flatMap { Int($0) } }
    }

    /// Holds the table locked so the lane's first job waits inside its transaction, while the
    /// test queues more behind it; `release` commits the lock.
    func blockWriter(of lane: PostgresGroupCommit, first: Int) async throws -> Task<Int, any Error> {
        try connection.query("BEGIN")
        try connection.query("LOCK TABLE grouped IN ACCESS EXCLUSIVE MODE")
        let job = insert(first)
        let blocked = Task { try await lane.perform(within: 60, job) }
        let probe = try database.settings().connect()
        try waitUntil("the first job waits for the lock") { try sessionsWaitingForALock(on: "grouped", probe) == 1 }
        return blocked
    }

    func testJobsQueuedTogetherCommitInOneTransaction() async throws {
        let lane = PostgresGroupCommit(settings: database.settings())
        defer { lane.shutdown() }
        let first = try await blockWriter(of: lane, first: 0)
        var tasks: [Task<Int, any Error>] = []
        for n in 1...40 {
            let job = insert(n)
            tasks.append(Task { try await lane.perform(within: 60, job) })
        }
        try waitUntil("40 jobs wait") { lane.waitingJobCount == 40 }
        try connection.query("COMMIT")
        let firstValue = try await first.value
        XCTAssertEqual(firstValue, 0)
        var values: [Int] = []
        for task in tasks { values.append(try await task.value) }
        XCTAssertEqual(values, Array(1...40))
        XCTAssertEqual(try stored(), Array(0...40))
        XCTAssertEqual(lane.transactionCount, 2, "the first job alone, then the 40 queued behind it together")
    }

    func testAFailingJobGetsItsErrorAndTheOthersStillCommit() async throws {
        let lane = PostgresGroupCommit(settings: database.settings())
        defer { lane.shutdown() }
        let first = try await blockWriter(of: lane, first: 0)
        var tasks: [Task<Int, any Error>] = []
        for n in [1, 2, 0, 3, 4] {  // 0 is taken by the first job: a unique violation
            let job = insert(n)
            tasks.append(Task { try await lane.perform(within: 60, job) })
        }
        try waitUntil("5 jobs wait") { lane.waitingJobCount == 5 }
        try connection.query("COMMIT")
        _ = try await first.value
        var outcomes: [String] = []
        for task in tasks {
            do { outcomes.append(String(try await task.value)) } catch { outcomes.append((error as? PostgresError)?.sqlState ?? "\(error)") }
        }
        XCTAssertEqual(outcomes, ["1", "2", "23505", "3", "4"])
        XCTAssertEqual(try stored(), [0, 1, 2, 3, 4])
    }

    func testAJobPastItsDeadlineBeforeItsBatchBeganNeverRuns() async throws {
        let lane = PostgresGroupCommit(settings: database.settings())
        defer { lane.shutdown() }
        let first = try await blockWriter(of: lane, first: 0)
        let late = insert(99)
        do {
            _ = try await lane.perform(within: 0.2, late)
            XCTFail("the job answered although its writer was blocked past its deadline")
        } catch {
            XCTAssertTrue("\(error)".contains("did not answer within"), "\(error)")
        }
        try connection.query("COMMIT")
        _ = try await first.value
        let after = insert(1)
        _ = try await lane.perform(within: 60, after)
        XCTAssertEqual(try stored(), [0, 1])
    }

    func testAPreparedStatementRunsAgainAndSurvivesADiscard() throws {
        let sql = "SELECT $1::integer + 1"
        let before = PostgresConnection.statementCount
        XCTAssertEqual(try connection.query(prepared: "test_plus_one", sql, PostgresParameters(["1"])).rows, [["2"]])
        XCTAssertEqual(try connection.query(prepared: "test_plus_one", sql, PostgresParameters(["41"])).rows, [["42"]])
        XCTAssertEqual(PostgresConnection.statementCount - before, 3, "prepared once, run twice")
        XCTAssertEqual(try connection.query("SELECT count(*) FROM pg_prepared_statements WHERE name = 'test_plus_one'").rows, [["1"]])
        try connection.query("DISCARD ALL")
        XCTAssertEqual(try connection.query(prepared: "test_plus_one", sql, PostgresParameters(["9"])).rows, [["10"]])
    }
}
