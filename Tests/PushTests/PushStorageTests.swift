import Crypto
import Foundation
import Push
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// Push apps, dead tokens and push records in PostgreSQL.
final class PushStorageTests: XCTestCase {
    var database: TestDatabase!

    override func setUpWithError() throws {
        database = try TestDatabase()
        try Migrator.migrate(try database.connect())
    }

    override func tearDown() {
        database?.drop()
    }

    func testAppsRoundTripAndListWithoutKeys() throws {
        let connection = try database.connect()
        let apps = PostgresPushApps(connection: connection)
        let (id, notes) = try apps.add(PushModelTests.apnsApp(id: 0, topic: "com.example.app.voip", param: "com.example.app.voip", environment: .sandbox))
        XCTAssertFalse(notes.isEmpty)
        let stored = try XCTUnwrap(try apps.app(id: id))
        XCTAssertEqual(stored.credentials, PushModelTests.apnsApp(topic: "com.example.app.voip", environment: .sandbox).credentials)
        XCTAssertEqual(stored.param, "com.example.app.voip")
        let fcm = try apps.add(PushModelTests.fcmApp())
        XCTAssertEqual(try apps.all().map(\.id), [id, fcm.id])
        // Direct boot (migration 700): on by default, kept when turned off, said in the list.
        XCTAssertEqual(try apps.app(id: fcm.id)?.directBootOK, true)
        var noDirectBoot = try XCTUnwrap(try apps.app(id: fcm.id))
        noDirectBoot.directBootOK = false
        XCTAssertNotNil(try apps.update(noDirectBoot))
        XCTAssertEqual(try apps.app(id: fcm.id)?.directBootOK, false)
        XCTAssertEqual(try apps.summaries().last?.details.hasSuffix(", direct boot off"), true)
        let summaries = try apps.summaries()
        XCTAssertEqual(summaries.map(\.kind), ["apns", "fcm"])
        XCTAssertEqual(summaries.first?.environment, "sandbox")
        XCTAssertFalse("\(summaries)".contains("PRIVATE KEY"))
        XCTAssertThrowsError(try apps.add(PushModelTests.fcmApp())) { error in
            XCTAssertEqual((error as? PushAppError)?.field, "param")
        }
        XCTAssertTrue(try apps.remove(id: id))
        XCTAssertFalse(try apps.remove(id: id))
    }

    func testDeadTokensAndRecordsAreWritten() async throws {
        let stores = PostgresPushStores(settings: database.settings())
        defer { stores.shutdown() }
        try await stores.markDead(PushTokenID(family: .apns, token: "abcd"), reason: "BadDeviceToken")
        try await stores.markDead(PushTokenID(family: .apns, token: "abcd"), reason: "Unregistered")
        try await stores.record(PushRecord(
            createdAt: Date(timeIntervalSince1970: 1_700_000_000), aor: "1002@example.com", callID: "c1", provider: .apnsSandbox,
            tokenShort: "abcd…", appID: nil, outcome: "refused", status: 410, reason: "Unregistered", explanation: "dead", latencyMilliseconds: 12))
        XCTAssertTrue(stores.flush(timeout: 10), "queued writes reach PostgreSQL")
        let connection = try database.connect()
        XCTAssertTrue(try PostgresPushStores.isDead(on: connection, family: .apns, token: "abcd"))
        XCTAssertFalse(try PostgresPushStores.isDead(on: connection, family: .fcm, token: "abcd"))
        XCTAssertEqual(try connection.query("SELECT reason FROM push_dead_tokens").rows, [["Unregistered"]])
        let records = try PostgresPushStores.recent(on: connection, aor: "1002@example.com")
        XCTAssertEqual(records.count, 1)
        XCTAssertEqual(records.first?.provider, .apnsSandbox)
        XCTAssertEqual(records.first?.status, 410)
        XCTAssertEqual(records.first?.latencyMilliseconds, 12)
        XCTAssertEqual(records.first?.createdAt, Date(timeIntervalSince1970: 1_700_000_000))
    }
}
