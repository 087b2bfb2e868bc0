import Foundation
import Registrar
import RouseTestSupport
import SIPMessage
import Storage
import XCTest

/// Extensions' call forwarding in PostgreSQL (migration 602): targets made URIs as entered,
/// loaded with the directory, refused with the field at fault, announced on `rouse_directory`.
final class PostgresDiversionsTests: XCTestCase {
    private var database: MigratedDatabase!
    let a = AddressOfRecord(number: "1000", domain: "example.com")
    let b = AddressOfRecord(number: "1001", domain: "example.com")

    override func setUpWithError() throws {
        database = try MigratedDatabase(domain: "example.com", extensions: 2)
    }

    override func tearDown() {
        database?.drop()
    }

    func testTargetsAreStoredAsURIsAndTravelWithTheDirectory() throws {
        let store = PostgresDiversions(connection: try database.database.connect())
        let rules = try store.set(a, DiversionDraft(
            busy: "sip:vm1000@pbx.example", noAnswer: "1001", noAnswerAfterSeconds: 20, unreachable: "+44 1234 567"))
        XCTAssertEqual(rules.busy?.description, "sip:vm1000@pbx.example")
        XCTAssertEqual(rules.noAnswer?.description, "sip:1001@example.com", "1001 is an extension of the same organisation")
        XCTAssertEqual(rules.unreachable?.description, "sip:+441234567@example.com;user=phone", "a number for the outbound routes")
        XCTAssertEqual(rules.noAnswerAfter, .seconds(20))

        let snapshot = try database.directory.loadDirectory()
        XCTAssertEqual(snapshot.diversions[a], rules)
        XCTAssertNil(snapshot.diversions[b])
        XCTAssertEqual(try store.rules(of: a), rules)

        try store.set(a, DiversionDraft(always: "bob@partner.example"))
        XCTAssertEqual(try store.rules(of: a), DiversionRules(always: try SIPURI(parsing: "sip:bob@partner.example")), "a set replaces")
        XCTAssertTrue(try store.clear(a))
        XCTAssertFalse(try store.clear(a))
        XCTAssertNil(try database.directory.loadDirectory().diversions[a])
    }

    func testRemovingTheExtensionRemovesItsForwarding() throws {
        let store = PostgresDiversions(connection: try database.database.connect())
        try store.set(a, DiversionDraft(busy: "1001"))
        try database.directory.removeExtension(a)
        XCTAssertTrue(try database.directory.loadDirectory().diversions.isEmpty)
    }

    func testABadForwardingIsRefusedNamingItsField() throws {
        let store = PostgresDiversions(connection: try database.database.connect())
        func refusal(_ draft: DiversionDraft, of aor: AddressOfRecord? = nil) -> String? {
            do {
                try store.set(aor ?? a, draft)
                return nil
            } catch let error as RouteError {
                return error.field
            } catch {
                return "\(error)"
            }
        }
        XCTAssertEqual(refusal(DiversionDraft(busy: "not a target!")), "busy")
        XCTAssertEqual(refusal(DiversionDraft(noAnswer: "1000")), "no-answer", "not to itself")
        XCTAssertEqual(refusal(DiversionDraft(noAnswer: "1001", noAnswerAfterSeconds: 0)), "after")
        XCTAssertEqual(refusal(DiversionDraft(busy: "1001", noAnswerAfterSeconds: 20)), "after", "a ring time needs a no-answer target")
        XCTAssertEqual(refusal(DiversionDraft(busy: "1001"), of: AddressOfRecord(number: "1999", domain: "example.com")),
                       "\(DirectoryError.noSuchExtension(AddressOfRecord(number: "1999", domain: "example.com")))")
        XCTAssertNil(try store.rules(of: a), "nothing was stored")
    }

    func testEveryChangeIsAnnouncedOnTheDirectoryChannel() throws {
        let heard = Collector<String>()
        let listening = DispatchSemaphore(value: 0)
        let listener = PostgresNotificationListener(
            settings: database.settings, channels: [PostgresDirectory.notificationChannel], onListening: { listening.signal() }
        ) { heard.append($0.payload) }
        listener.start()
        defer { listener.stop() }
        XCTAssertEqual(listening.wait(timeout: .now() + 30), .success)
        let store = PostgresDiversions(connection: try database.database.connect())
        try store.set(a, DiversionDraft(busy: "1001"))
        XCTAssertEqual(heard.wait(for: 1), ["extension-forwarding"])
        try store.clear(a)
        XCTAssertEqual(heard.wait(for: 2).count, 2)
    }
}
