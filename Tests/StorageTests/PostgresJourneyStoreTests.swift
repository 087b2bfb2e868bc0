import CallRouting
import Foundation
import Push
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// `PostgresJourneyStore` and `PostgresCalls` on a real PostgreSQL: journeys round-trip, a wake
/// lands after its push, writes wait (without blocking the caller) behind a lock or a database
/// that is not there yet and are all written afterwards, the queue's bound, refused writes, and
/// the calls migration on a database that already holds push records.
final class PostgresJourneyStoreTests: XCTestCase {
    var database: MigratedDatabase!
    let aor = AddressOfRecord(number: "1001", domain: "example.com")

    override func setUpWithError() throws {
        database = try MigratedDatabase()
    }

    override func tearDown() {
        database?.drop()
    }

    /// A date on a whole millisecond, as stored times read back.
    func at(_ offset: TimeInterval) -> Date {
        MillisecondTime.rounded(Date(timeIntervalSince1970: 1_790_000_000.123 + offset))
    }

    func push(_ device: String, outcome: String = "accepted", sentAt: TimeInterval = 0.2, wake: WakeResult = .pending) -> JourneyPush {
        JourneyPush(
            device: device, provider: outcome == "accepted" ? .apns : .fcm, appID: nil, tokenShort: "01234567…",
            outcome: outcome, status: outcome == "accepted" ? 200 : 410, reason: outcome == "accepted" ? nil : "Unregistered",
            explanation: outcome == "accepted" ? "accepted by APNs" : "the token is no longer valid", latencyMilliseconds: 182,
            sentAt: at(sentAt), wake: wake)
    }

    /// An answered call: two pushes, two branches (one a late fork that was cancelled), events.
    func answeredJourney(startedAt offset: TimeInterval = 0, callee: AddressOfRecord? = nil) -> CallJourney {
        var journey = CallJourney(
            callID: "a84b4c76e66710@pc33.example.com", callee: callee ?? aor, caller: "sip:1002@example.com",
            callerName: "Zoë \"Z\" \\ 😀", transport: "udp", source: "192.0.2.4:5060", instanceID: "instance-a",
            startedAt: at(offset))
        journey.pushes = [
            push("iPhone (apns)", sentAt: offset + 0.2, wake: .woke(afterMilliseconds: 1900)),
            push("Pixel (fcm)", outcome: "refused", sentAt: offset + 0.21, wake: .notPushed),
        ]
        journey.branches = [
            JourneyBranch(
                bindingID: UUID(), target: "sip:1001@192.0.2.7:5060;transport=tcp;pn-prid=01234567…", device: "iPhone (apns)",
                transport: "tcp", startedAt: at(offset + 2.1), isLateFork: false,
                responses: [
                    JourneyResponse(status: 180, reason: "Ringing", at: at(offset + 2.3)),
                    JourneyResponse(status: 200, reason: "OK", at: at(offset + 5.4)),
                ], endedAt: at(offset + 5.4)),
            JourneyBranch(
                bindingID: UUID(), target: "sip:1001@198.51.100.9:5060", device: "Linphone/5.2", transport: "udp",
                startedAt: at(offset + 3), isLateFork: true, canceledBecause: "answered elsewhere", endedAt: at(offset + 5.5)),
        ]
        journey.events = [
            JourneyEvent(at: at(offset), text: "INVITE from sip:1002@example.com over udp"),
            JourneyEvent(at: at(offset + 5.4), text: "answered by iPhone (apns)"),
        ]
        journey.answeredAt = at(offset + 5.4)
        journey.endedAt = at(offset + 65)
        journey.outcome = .answered
        journey.finalStatus = 200
        journey.reason = "answered"
        journey.answeredBy = "iPhone (apns)"
        return journey
    }

    func makeStore(_ settings: PostgresSettings? = nil, capacity: Int = PostgresJourneyStore.defaultCapacity) -> PostgresJourneyStore {
        PostgresJourneyStore(
            settings: settings ?? database.settings, capacity: capacity, initialRetryDelay: 0.05, maximumRetryDelay: 0.5)
    }

    /// A store with a 1 s statement deadline, and a connection holding `push_records` and `calls`
    /// locked in an open transaction (the store's writes wait until it commits).
    func lockedStore() throws -> (PostgresJourneyStore, PostgresConnection) {
        var settings = database.settings
        settings.statementTimeout = 1
        let store = makeStore(settings)
        let locker = try database.database.connect()
        try locker.query("BEGIN")
        try locker.query("LOCK TABLE push_records, calls IN ACCESS EXCLUSIVE MODE")
        return (store, locker)
    }

    func count(_ sql: String, on connection: PostgresConnection) throws -> Int {
        Int(try connection.query(sql).rows.first?.first.flatMap { $0 } ?? "") ?? -1
    }

    func testJourneyWithPushesAndBranchesRoundTrips() throws {
        let store = makeStore()
        defer { store.shutdown() }
        let final = answeredJourney()
        var ringing = final
        ringing.outcome = .ringing
        ringing.pushes = final.pushes.map { push in
            var pending = push
            pending.wake = .pending
            return pending
        }
        for push in ringing.pushes { store.recordPush(push, of: ringing) }
        store.recordCall(final)
        XCTAssertTrue(store.flush(timeout: 30), store.lastFailure ?? "")
        XCTAssertEqual(store.writtenCount, 3)
        XCTAssertNil(store.lastFailure)

        let connection = try database.database.connect()
        let read = try XCTUnwrap(try PostgresCalls.journey(id: final.id, on: connection))
        XCTAssertEqual(read, final)
        XCTAssertEqual(Double(read.ringMilliseconds ?? 0), 5400, accuracy: 1)
        XCTAssertEqual(read.pushes.first?.line, "pushed iPhone (apns) (apns): accepted in 182 ms, woke in 1.9 s")
        XCTAssertNil(try PostgresCalls.journey(id: UUID(), on: connection))
        XCTAssertEqual(try PostgresCalls.recent(on: connection, aor: aor), [final])
        XCTAssertEqual(try PostgresCalls.recent(on: connection, aor: AddressOfRecord(number: "1002", domain: "example.com")), [])

        // The push records carry the call's final word on each wake, and the device.
        let records = try PostgresPushStores.recent(on: connection, aor: aor.description)
        XCTAssertEqual(records.count, 2)
        let iPhone = try XCTUnwrap(records.first { $0.device == "iPhone (apns)" })
        XCTAssertEqual(iPhone.id, final.pushes[0].id)
        XCTAssertEqual(iPhone.wake?.word, "woke")
        XCTAssertEqual(iPhone.wokeAfterMilliseconds, 1900)
        XCTAssertEqual(iPhone.callID, final.callID)
        XCTAssertEqual(iPhone.createdAt, final.pushes[0].sentAt)
        let pixel = try XCTUnwrap(records.first { $0.device == "Pixel (fcm)" })
        XCTAssertEqual(pixel.wake?.word, "not_pushed")
        XCTAssertNil(pixel.wokeAfterMilliseconds)
        XCTAssertEqual(pixel.reason, "Unregistered")
        XCTAssertEqual(
            try connection.query("SELECT count(*) FROM push_records WHERE call_uuid = $1::uuid", [final.id.uuidString]).rows,
            [["2"]])

        // Recording the call again replaces it (a retried or corrected journey).
        var corrected = final
        corrected.reason = "answered (corrected)"
        corrected.events.append(JourneyEvent(at: at(65), text: "BYE from the caller"))
        store.recordCall(corrected)
        XCTAssertTrue(store.flush(timeout: 30))
        XCTAssertEqual(try PostgresCalls.journey(id: final.id, on: connection), corrected)
        XCTAssertEqual(try count("SELECT count(*) FROM calls", on: connection), 1)
        XCTAssertEqual(try count("SELECT count(*) FROM push_records", on: connection), 2)
    }

    /// Calls without pushes are group-committed: the queue held back behind a lock, 50 calls each
    /// recorded as answered and again at the BYE are all written, each in its latest form.
    func testJourneysWithoutPushesAreWrittenTogetherInTheirLatestForm() throws {
        let (store, locker) = try lockedStore()
        defer { store.shutdown() }
        var finals: [CallJourney] = []
        for index in 0..<50 {
            var answered = answeredJourney(startedAt: Double(index))
            answered.pushes = []
            answered.endedAt = nil
            store.recordCall(answered)
            var hungUp = answered
            hungUp.endedAt = at(Double(index) + 65)
            hungUp.events.append(JourneyEvent(at: at(Double(index) + 65), text: "the caller hung up after 60 s of talk"))
            store.recordCall(hungUp)
            finals.append(hungUp)
        }
        try locker.query("COMMIT")
        XCTAssertTrue(store.flush(timeout: 30), store.lastFailure ?? "")
        XCTAssertEqual(store.writtenCount, 100)
        XCTAssertEqual(store.rejectedCount, 0)
        XCTAssertEqual(try count("SELECT count(*) FROM calls", on: locker), 50)
        XCTAssertEqual(try PostgresCalls.recent(on: locker, limit: 100), finals.reversed())
    }

    /// SIP lets a quoted-pair carry a NUL, which `jsonb` cannot hold: the call is stored with each
    /// one written `%00`, the rest of its text as it was.
    func testAJourneyWithNULCharactersIsStoredWithThemWrittenPercent00() throws {
        let store = makeStore()
        defer { store.shutdown() }
        var journey = answeredJourney()
        journey.pushes = []
        journey.callerName = "Zo\u{0}ë"
        journey.events.append(JourneyEvent(at: at(6), text: "BYE \u{0}from\u{0} the caller"))
        store.recordCall(journey)
        XCTAssertTrue(store.flush(timeout: 30), store.lastFailure ?? "")
        XCTAssertEqual(store.rejectedCount, 0)
        let read = try XCTUnwrap(try PostgresCalls.journey(id: journey.id, on: try database.database.connect()))
        XCTAssertEqual(read.callerName, "Zo%00ë")
        XCTAssertEqual(read.events.last?.text, "BYE %00from%00 the caller")
        XCTAssertEqual(read.events.first?.text, journey.events.first?.text)
        XCTAssertEqual(read.branches.map(\.bindingID), journey.branches.map(\.bindingID))
    }

    func testACallWhosePushRowsNeverArrivedStillGetsThem() throws {
        let store = makeStore()
        defer { store.shutdown() }
        let journey = answeredJourney()
        store.recordCall(journey)
        XCTAssertTrue(store.flush(timeout: 30))
        let records = try PostgresPushStores.recent(on: try database.database.connect(), aor: aor.description)
        XCTAssertEqual(Set(records.compactMap(\.id)), Set(journey.pushes.map(\.id)))
        XCTAssertEqual(records.first { $0.id == journey.pushes[0].id }?.wake?.word, "woke")
    }

    func testADeviceBackAfterTheCallShowsInItsJourney() throws {
        let store = makeStore()
        defer { store.shutdown() }
        var journey = answeredJourney()
        journey.pushes[0].wake = .callEnded
        for push in journey.pushes { store.recordPush(push, of: journey) }
        store.recordCall(journey)
        store.recordWake(pushID: journey.pushes[0].id, .late(afterMilliseconds: 12_300))
        XCTAssertTrue(store.flush(timeout: 30))
        let connection = try database.database.connect()
        let read = try XCTUnwrap(try PostgresCalls.journey(id: journey.id, on: connection))
        XCTAssertEqual(read.pushes.map(\.wake), [.late(afterMilliseconds: 12_300), .notPushed])
        XCTAssertEqual(try PostgresCalls.recent(on: connection).first?.pushes.first?.wake, .late(afterMilliseconds: 12_300))
    }

    func testAWakeLandsAfterItsPush() throws {
        let store = makeStore()
        defer { store.shutdown() }
        let journey = answeredJourney()
        var pushes: [JourneyPush] = []
        for index in 0..<200 {
            let pending = push("device \(index)", sentAt: Double(index))
            pushes.append(pending)
            store.recordPush(pending, of: journey)
            store.recordWake(pushID: pending.id, index % 2 == 0 ? .woke(afterMilliseconds: 1000 + index) : .notInTime)
        }
        XCTAssertTrue(store.flush(timeout: 30), store.lastFailure ?? "")
        XCTAssertEqual(store.writtenCount, 400)
        let records = try PostgresPushStores.recent(on: try database.database.connect(), aor: aor.description, limit: 500)
        XCTAssertEqual(records.count, 200)
        for (index, pending) in pushes.enumerated() {
            let record = records.first { $0.id == pending.id }
            XCTAssertEqual(record?.wake?.word, index % 2 == 0 ? "woke" : "no", "push \(index)")
            XCTAssertEqual(record?.wokeAfterMilliseconds, index % 2 == 0 ? 1000 + index : nil, "push \(index)")
        }
    }

    func testWritesWaitBehindALockWithoutBlockingTheCallerAndAreAllWrittenAfter() throws {
        let (store, locker) = try lockedStore()
        defer { store.shutdown() }

        let started = Date()
        var journeys: [CallJourney] = []
        for index in 0..<300 {
            var journey = answeredJourney(startedAt: Double(index))
            let pending = push("iPhone \(index)", sentAt: Double(index))
            journey.pushes = [pending]
            journey.pushes[0].wake = .woke(afterMilliseconds: 1900)
            journeys.append(journey)
            store.recordPush(pending, of: journey)
            store.recordWake(pushID: pending.id, .woke(afterMilliseconds: 900))
            store.recordCall(journey)
        }
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertLessThan(elapsed, 0.5, "900 writes took \(elapsed) s for the caller")

        // Past a statement deadline the writer has failed at least once and keeps everything.
        let deadline = Date().addingTimeInterval(10)
        while store.lastFailure == nil, Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        XCTAssertNotNil(store.lastFailure)
        XCTAssertEqual(store.pendingCount, 900)
        XCTAssertFalse(store.flush(timeout: 0.2))
        XCTAssertEqual(store.writtenCount, 0)

        try locker.query("COMMIT")
        XCTAssertTrue(store.flush(timeout: 30), store.lastFailure ?? "")
        XCTAssertEqual(store.pendingCount, 0)
        XCTAssertEqual(store.writtenCount, 900)
        XCTAssertEqual(store.droppedCount, 0)
        XCTAssertEqual(store.rejectedCount, 0)
        XCTAssertNil(store.lastFailure)
        XCTAssertEqual(try count("SELECT count(*) FROM calls", on: locker), 300)
        XCTAssertEqual(try count("SELECT count(*) FROM push_records WHERE wake = 'woke' AND woke_after_ms = 1900", on: locker), 300)
        let newest = try PostgresCalls.recent(on: locker, limit: 2)
        XCTAssertEqual(newest.map(\.id), [journeys[299].id, journeys[298].id])
        XCTAssertEqual(try PostgresCalls.recent(on: locker, limit: 1, before: journeys[1].startedAt).map(\.id), [journeys[0].id])
    }

    /// A database that is not there yet (the store is started before PostgreSQL is ready), then is.
    func testWritesWaitForADatabaseThatIsNotThereYet() throws {
        let admin = try XCTUnwrap(ProcessInfo.processInfo.environment["ROUSE_TEST_DATABASE_URL"])
        let name = "rouse_test_late_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(12)
        let adminConnection = try PostgresConnection(conninfo: admin)
        defer { _ = try? adminConnection.query("DROP DATABASE IF EXISTS \(name) WITH (FORCE)") }
        let store = makeStore(PostgresSettings(conninfo: admin + " dbname=\(name)", connectTimeout: 2, statementTimeout: 5))
        defer { store.shutdown() }
        let journey = answeredJourney()
        for push in journey.pushes { store.recordPush(push, of: journey) }
        store.recordWake(pushID: journey.pushes[0].id, .woke(afterMilliseconds: 1500))
        store.recordCall(journey)
        let deadline = Date().addingTimeInterval(10)
        while store.lastFailure == nil, Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        XCTAssertTrue(store.lastFailure?.contains("cannot connect") == true, store.lastFailure ?? "no failure")
        XCTAssertEqual(store.pendingCount, 4)

        // The name holds only hex digits, made here.
        try adminConnection.query("CREATE DATABASE \(name)")
        let created = try PostgresConnection(conninfo: admin + " dbname=\(name)")
        try Migrator.migrate(created)
        XCTAssertTrue(store.flush(timeout: 30), store.lastFailure ?? "")
        XCTAssertEqual(try PostgresCalls.journey(id: journey.id, on: created), journey)
        XCTAssertEqual(try count("SELECT count(*) FROM push_records", on: created), 2)
    }

    func testABrokenConnectionIsReplaced() throws {
        let store = makeStore()
        defer { store.shutdown() }
        let first = answeredJourney()
        store.recordCall(first)
        XCTAssertTrue(store.flush(timeout: 30))
        let connection = try database.database.connect()
        try connection.query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
        let second = answeredJourney(startedAt: 100)
        store.recordCall(second)
        XCTAssertTrue(store.flush(timeout: 30), store.lastFailure ?? "")
        XCTAssertEqual(try PostgresCalls.recent(on: connection).map(\.id), [second.id, first.id])
    }

    func testTheQueueIsBoundedAndDropsTheOldest() throws {
        let admin = try XCTUnwrap(ProcessInfo.processInfo.environment["ROUSE_TEST_DATABASE_URL"])
        let store = makeStore(PostgresSettings(conninfo: admin + " dbname=rouse_test_nowhere_0", connectTimeout: 2), capacity: 10)
        let journey = answeredJourney()
        let started = Date()
        for index in 0..<25 { store.recordWake(pushID: UUID(), .woke(afterMilliseconds: index)) }
        XCTAssertLessThan(Date().timeIntervalSince(started), 0.5)
        XCTAssertEqual(store.pendingCount, 10)
        XCTAssertEqual(store.droppedCount, 15)
        XCTAssertFalse(store.flush(timeout: 0.3))
        store.shutdown()
        XCTAssertEqual(store.pendingCount, 0)
        XCTAssertEqual(store.droppedCount, 25)
        store.recordCall(journey)
        XCTAssertEqual(store.droppedCount, 26, "a write after shutdown is dropped")
        XCTAssertTrue(store.flush(timeout: 1))
    }

    func testAWritePostgreSQLRefusesIsSetAsideAndTheRestIsWritten() throws {
        var settings = database.settings
        settings.statementTimeout = 1
        let store = makeStore(settings)
        defer { store.shutdown() }
        // Hold the writes back so they go in one transaction.
        let locker = try database.database.connect()
        try locker.query("BEGIN")
        try locker.query("LOCK TABLE push_records, calls IN ACCESS EXCLUSIVE MODE")
        let journey = answeredJourney()
        store.recordPush(journey.pushes[0], of: journey)
        store.recordPush(push("broken", outcome: "exploded"), of: journey)
        store.recordPush(journey.pushes[1], of: journey)
        store.recordCall(journey)
        try locker.query("COMMIT")
        XCTAssertTrue(store.flush(timeout: 30), store.lastFailure ?? "")
        XCTAssertEqual(store.rejectedCount, 1)
        XCTAssertEqual(store.writtenCount, 3)
        XCTAssertEqual(try count("SELECT count(*) FROM push_records", on: locker), 2)
        XCTAssertEqual(try PostgresCalls.journey(id: journey.id, on: locker), journey)
    }

    func testTheCallsMigrationAppliesToADatabaseWithPushRecords() throws {
        let older = try TestDatabase()
        defer { older.drop() }
        let connection = try older.connect()
        try Migrator.migrate(connection, migrations: Migrator.all.filter { $0.version < 300 })
        try PostgresPushStores.insert(
            PushRecord(
                createdAt: at(0), aor: aor.description, callID: nil, provider: .fcm, tokenShort: "fcm-toke…", appID: nil,
                outcome: "accepted", status: 200, reason: nil, explanation: "accepted by FCM", latencyMilliseconds: 90),
            on: connection)
        XCTAssertEqual(try Migrator.migrate(connection), Migrator.all.filter { $0.version >= 300 }.map(\.version))
        let records = try PostgresPushStores.recent(on: connection, aor: aor.description)
        XCTAssertEqual(records.count, 1)
        XCTAssertNil(records.first?.id)
        XCTAssertNil(records.first?.wake)
        XCTAssertNil(records.first?.device)
        XCTAssertEqual(try PostgresCalls.recent(on: connection), [])
    }

    func testMillisecondTimes() {
        XCTAssertEqual(MillisecondTime.string(at(0)), "2026-09-21T14:13:20.123Z")
        XCTAssertEqual(MillisecondTime.date("2026-09-21T14:13:20.123Z"), at(0))
        XCTAssertEqual(MillisecondTime.date("2026-09-21T16:13:20.123+02:00"), at(0))
        XCTAssertEqual(MillisecondTime.date("2026-09-21T14:13:20Z"), Date(timeIntervalSince1970: 1_790_000_000))
        XCTAssertEqual(MillisecondTime.string(Date(timeIntervalSince1970: 0)), "1970-01-01T00:00:00.000Z")
        XCTAssertEqual(MillisecondTime.string(Date(timeIntervalSince1970: -0.001)), "1969-12-31T23:59:59.999Z")
        XCTAssertEqual(MillisecondTime.string(Date(timeIntervalSince1970: 951_825_600.5)), "2000-02-29T12:00:00.500Z")
        XCTAssertEqual(MillisecondTime.string(Date(timeIntervalSince1970: 1e15)), "9999-12-31T23:59:59.999Z")
        XCTAssertEqual(MillisecondTime.string(Date(timeIntervalSince1970: -1e15)), "0001-01-01T00:00:00.000Z")
        XCTAssertNil(MillisecondTime.date("yesterday"))
        XCTAssertNil(MillisecondTime.date("2026-09-21"))
        for offset in stride(from: -1e10, to: 2e11, by: 7_777_777.777) {
            let date = MillisecondTime.rounded(Date(timeIntervalSince1970: offset))
            XCTAssertEqual(MillisecondTime.date(MillisecondTime.string(date)), date, "\(offset)")
        }
    }
}
