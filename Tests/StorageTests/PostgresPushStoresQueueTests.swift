import Foundation
import Push
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// Push records and dead-token marks go through `PostgresWriteQueue` (issue 9 item 3): made while
/// PostgreSQL is away, they wait without blocking the push and are written once it is back, once
/// each even when a transaction is tried again; a record PostgreSQL refuses is set aside.
final class PostgresPushStoresQueueTests: XCTestCase {
    var database: MigratedDatabase!

    override func setUpWithError() throws {
        database = try MigratedDatabase()
    }

    override func tearDown() {
        database?.drop()
    }

    func record(_ callID: String, appID: Int64? = nil, outcome: String = "failed") -> PushRecord {
        PushRecord(
            createdAt: Date(timeIntervalSince1970: 1_790_000_000), aor: "1002@example.com", callID: callID, provider: .apns,
            tokenShort: "0123abcd…", appID: appID, outcome: outcome, status: nil, reason: "connect",
            explanation: "127.0.0.1:1: Connection refused", latencyMilliseconds: 3)
    }

    func testRecordsMadeWhileTheDatabaseIsAwayAreWrittenWhenItIsBack() async throws {
        let admin = try XCTUnwrap(ProcessInfo.processInfo.environment["ROUSE_TEST_DATABASE_URL"])
        let name = "rouse_test_away_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(12)
        let adminConnection = try PostgresConnection(conninfo: admin)
        defer { _ = try? adminConnection.query("DROP DATABASE IF EXISTS \(name) WITH (FORCE)") }
        let stores = PostgresPushStores(settings: PostgresSettings(conninfo: admin + " dbname=\(name)", connectTimeout: 2, statementTimeout: 5))
        defer { stores.shutdown() }
        let started = Date()
        try await stores.record(record("away-1"))
        try await stores.markDead(PushTokenID(family: .apns, token: "dead" + String(repeating: "cd", count: 30)), reason: "Unregistered")
        try await stores.record(record("away-2"))
        XCTAssertLessThan(Date().timeIntervalSince(started), 1, "recording never waits for PostgreSQL")
        let deadline = Date().addingTimeInterval(10)
        while stores.queue.lastFailure == nil, Date() < deadline { try await Task.sleep(for: .milliseconds(50)) }
        XCTAssertTrue(stores.queue.lastFailure?.contains("cannot connect") == true, stores.queue.lastFailure ?? "no failure")
        XCTAssertEqual(stores.queue.pendingCount, 3)

        // The name holds only hex digits, made here.
        try adminConnection.query("CREATE DATABASE \(name)")
        let created = try PostgresConnection(conninfo: admin + " dbname=\(name)")
        try Migrator.migrate(created)
        XCTAssertTrue(stores.flush(timeout: 30), stores.queue.lastFailure ?? "")
        XCTAssertNil(stores.queue.lastFailure)
        XCTAssertEqual(try PostgresPushStores.recent(on: created, aor: "1002@example.com").map(\.callID), ["away-2", "away-1"])
        XCTAssertTrue(try PostgresPushStores.isDead(on: created, family: .apns, token: "dead" + String(repeating: "cd", count: 30)))
    }

    func testARecordIsWrittenOnceAndOneThatIsRefusedIsSetAside() async throws {
        let stores = PostgresPushStores(settings: database.settings)
        defer { stores.shutdown() }
        let connection = try database.database.connect()
        // Hold the writes back so that they go in one transaction, the refused one among them.
        let locker = try database.database.connect()
        try locker.query("BEGIN")
        try locker.query("LOCK TABLE push_records IN ACCESS EXCLUSIVE MODE")
        var once = record("once")
        once.id = UUID()
        try await stores.record(once)
        try await stores.record(once)
        try await stores.record(record("refused", outcome: "exploded"))
        try await stores.record(record("removed app", appID: 999))
        try locker.query("COMMIT")
        XCTAssertTrue(stores.flush(timeout: 30), stores.queue.lastFailure ?? "")
        XCTAssertEqual(stores.queue.rejectedCount, 1, "the outcome 'exploded' breaks a CHECK")
        let stored = try PostgresPushStores.recent(on: connection)
        XCTAssertEqual(stored.compactMap(\.callID).sorted(), ["once", "removed app"])
        XCTAssertEqual(stored.first { $0.callID == "removed app" }?.appID, nil, "an app that is gone leaves app_id empty")
    }
}
