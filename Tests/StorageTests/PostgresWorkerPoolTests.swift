import Glibc
import Foundation
import RouseTestSupport
import Storage
import XCTest

/// The blocking-work pool: jobs, deadlines, broken connections, shutdown.
final class PostgresWorkerPoolTests: XCTestCase {
    var database: TestDatabase!

    override func setUpWithError() throws {
        database = try TestDatabase()
    }

    override func tearDown() {
        database?.drop()
    }

    func testJobsRunOnWorkersAndReturnTheirValues() throws {
        let pool = PostgresWorkerPool(settings: database.settings(), threads: 2)
        defer { pool.shutdown() }
        let results = Collector<Int>()
        for index in 0..<50 {
            pool.submit({ connection in
                Int(try connection.query("SELECT $1::int * 2 AS v", [String(index)]).value(0, "v") ?? "") ?? -1
            }) { result in
                if case .success(let value) = result { results.append(value) }
            }
        }
        XCTAssertEqual(Set(results.wait(for: 50)), Set((0..<50).map { $0 * 2 }))
        XCTAssertEqual(try pool.run { try $0.query("SELECT 'ok' AS v").value(0, "v") }, "ok")
    }

    func testAsyncCallersAreResumedWithTheValue() async throws {
        let pool = PostgresWorkerPool(settings: database.settings(), threads: 1)
        let value = try await pool.perform { try $0.query("SELECT 41 + 1 AS v").value(0, "v") }
        XCTAssertEqual(value, "42")
        pool.shutdown()
    }

    func testAStatementPastItsDeadlineIsCancelled() throws {
        let pool = PostgresWorkerPool(
            settings: database.settings(statementTimeout: 0.2), threads: 1)
        defer { pool.shutdown() }
        XCTAssertThrowsError(try pool.run { try $0.query("SELECT pg_sleep(5)") }) { error in
            XCTAssertEqual((error as? PostgresError)?.sqlState, "57014", "\(error)")
        }
        XCTAssertEqual(try pool.run { try $0.query("SELECT 1 AS v").value(0, "v") }, "1")
    }

    func testABoundedWaitGivesUpAtItsDeadlineAndAJobNotStartedThenNeverRuns() throws {
        let (pool, busy) = try poolWithItsOneWorkerBusy()
        defer { pool.shutdown() }
        let ran = Collector<Int>()
        XCTAssertThrowsError(try pool.run(within: 0.2) { _ in ran.append(1) }) { error in
            XCTAssertTrue("\(error)".contains("did not answer within"), "\(error)")
        }
        busy.signal()
        // Jobs run in submission order: once a later one has run, the abandoned one had its turn.
        XCTAssertEqual(try pool.run(within: 30) { try $0.query("SELECT 1 AS v").value(0, "v") }, "1")
        XCTAssertTrue(ran.all.isEmpty)
    }

    func testAnAsyncBoundedWaitGivesUpAtItsDeadlineWithoutRunningTheJob() async throws {
        let (pool, busy) = try poolWithItsOneWorkerBusy()
        defer { pool.shutdown() }
        let ran = Collector<Int>()
        do {
            _ = try await pool.perform(within: 0.2) { _ in ran.append(1) }
            XCTFail("the busy pool answered")
        } catch {
            XCTAssertTrue("\(error)".contains("did not answer within 0.2 s"), "\(error)")
        }
        busy.signal()
        let answer = try await pool.perform(within: 30) { try $0.query("SELECT 1 AS v").value(0, "v") }
        XCTAssertEqual(answer, "1")
        XCTAssertTrue(ran.all.isEmpty)
    }

    /// A pool of one worker, busy until the test signals the semaphore.
    func poolWithItsOneWorkerBusy() throws -> (PostgresWorkerPool, DispatchSemaphore) {
        let pool = PostgresWorkerPool(settings: database.settings(), threads: 1)
        let busy = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        pool.submit({ _ in
            started.signal()
            busy.wait()
        }) { _ in }
        XCTAssertEqual(started.wait(timeout: .now() + 30), .success, "the worker took the job")
        return (pool, busy)
    }

    func testABrokenConnectionIsReplacedBeforeTheNextJob() throws {
        let pool = PostgresWorkerPool(settings: database.settings(), threads: 1)
        defer { pool.shutdown() }
        let firstPID = try pool.run { try $0.query("SELECT pg_backend_pid() AS pid").value(0, "pid") }
        let admin = try database.connect()
        try admin.query("SELECT pg_terminate_backend($1::int)", [firstPID])
        // Its process is gone (the postmaster reaped it), so its end of the socket is closed.
        let pid = try XCTUnwrap(firstPID.flatMap { pid_t($0) })
        try waitUntil("the terminated backend's process is gone") { kill(pid, 0) != 0 && errno == ESRCH }
        let secondPID = try pool.run { try $0.query("SELECT pg_backend_pid() AS pid").value(0, "pid") }
        XCTAssertNotEqual(firstPID, secondPID)
    }

    func testAnUnreachableServerFailsTheJobAndNamesTheEndpoint() {
        let pool = PostgresWorkerPool(
            settings: PostgresSettings(conninfo: "postgresql://rouse:pw-secret@127.0.0.1:1/rouse", connectTimeout: 2),
            threads: 1)
        defer { pool.shutdown() }
        XCTAssertThrowsError(try pool.run { try $0.query("SELECT 1") }) { error in
            XCTAssertTrue(String(describing: error).contains("127.0.0.1:1"), "\(error)")
            XCTAssertFalse(String(describing: error).contains("pw-secret"), "\(error)")
        }
    }

    func testShutdownFinishesQueuedJobsThenRefusesNewOnes() throws {
        let pool = PostgresWorkerPool(settings: database.settings(), threads: 1)
        let done = Collector<Bool>()
        for _ in 0..<5 {
            pool.submit({ try $0.query("SELECT pg_sleep(0.02)") }) { done.append((try? $0.get()) != nil) }
        }
        pool.shutdown()
        XCTAssertEqual(done.all, [true, true, true, true, true])
        XCTAssertThrowsError(try pool.run { try $0.query("SELECT 1") })
    }
}
