import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// `BindingChange.refresh`: a binding registered again with only its CSeq and times moved is
/// written as those alone, announced and logged for the replica as a save would be, and saved
/// whole when its row has gone.
final class PostgresLocationStoreRefreshTests: XCTestCase {
    var database: MigratedDatabase!
    var store: PostgresLocationStore!
    let alice = AddressOfRecord(number: "1000", domain: "example.com")

    override func setUpWithError() throws {
        database = try MigratedDatabase(extensions: 5)
        store = PostgresLocationStore(settings: database.settings, origin: "instance-refresh")
    }

    override func tearDown() {
        store?.shutdown()
        database?.drop()
    }

    func testARefreshMovesTheTimesAndTheCSeqAndKeepsTheRest() throws {
        let start = Date(timeIntervalSince1970: 1_750_000_000.125)
        var binding = makeBinding(alice, now: start)
        try store.applyAndWait([.save(binding)])
        binding.cseq = 9
        binding.registeredAt = start.addingTimeInterval(61.000_25)
        binding.expiresAt = binding.registeredAt.addingTimeInterval(3600)
        try store.applyAndWait([.refresh(binding)])

        let loaded = try XCTUnwrap(try store.loadBindings(for: alice, now: start).first)
        XCTAssertEqual(loaded.cseq, 9)
        XCTAssertEqual(loaded.registeredAt.timeIntervalSince1970, binding.registeredAt.timeIntervalSince1970, accuracy: 0.000_001)
        XCTAssertEqual(loaded.expiresAt.timeIntervalSince1970, binding.expiresAt.timeIntervalSince1970, accuracy: 0.000_001)
        XCTAssertEqual(loaded.contact, binding.contact)
        XCTAssertEqual(loaded.callID, binding.callID)
        XCTAssertEqual(loaded.path, binding.path)
        XCTAssertEqual(loaded.userAgent, binding.userAgent)
        XCTAssertEqual(loaded.flow, binding.flow)
        XCTAssertEqual(store.transactionCount, 2, "a refresh whose row is there takes one transaction")
    }

    func testARefreshIsAnnouncedAsRefreshedAndLoggedForTheReplica() throws {
        let (listener, received) = database.startListener([PostgresLocationStore.notificationChannel])
        defer { listener.stop() }

        var binding = makeBinding(alice)
        try store.applyAndWait([.save(binding)])
        let connection = try database.database.connect()
        let logged = "SELECT count(*) AS n FROM replica_changes WHERE kind = 'binding' AND key = $1 AND origin = 'instance-refresh'"
        let before = try connection.query(logged, [alice.description]).value(0, "n").flatMap { Int($0) }
        binding.cseq += 1
        binding.expiresAt = binding.expiresAt.addingTimeInterval(600)
        try store.applyAndWait([.refresh(binding)])

        let id = binding.id.uuidString.lowercased()
        XCTAssertEqual(
            received.wait(for: 2).map(\.payload),
            ["added 1000@example.com \(id) instance-refresh", "refreshed 1000@example.com \(id) instance-refresh"])
        let after = try connection.query(logged, [alice.description]).value(0, "n").flatMap { Int($0) }
        XCTAssertEqual(after, before.map { $0 + 1 }, "the update is in the replica's change log, with its origin")
    }

    func testARefreshWhoseRowIsGoneSavesTheBindingWhole() throws {
        let binding = makeBinding(alice)
        try store.applyAndWait([.save(binding)])
        let connection = try database.database.connect()
        try connection.query("DELETE FROM bindings")
        var again = binding
        again.cseq = 3
        try store.applyAndWait([.refresh(again)])
        let loaded = try store.loadBindings(for: alice, now: Date())
        XCTAssertEqual(loaded.map(\.cseq), [3])
        XCTAssertEqual(loaded.first?.path, binding.path)
    }

    func testARefreshOfAnExtensionRemovedFailsAndTheRestOfTheBatchStands() throws {
        let ghost = AddressOfRecord(number: "9999", domain: "example.com")
        let results = Collector<(Int, Bool)>()
        store.apply([.refresh(makeBinding(ghost))]) { result in
            if case .failure(let error) = result { XCTAssertEqual(error as? LocationStoreError, .noSuchExtension(ghost)) }
            results.append((0, (try? result.get()) != nil))
        }
        store.apply([.save(makeBinding(alice))]) { results.append((1, (try? $0.get()) != nil)) }
        let all = results.wait(for: 2).sorted { $0.0 < $1.0 }
        XCTAssertEqual(all.map(\.1), [false, true])
        XCTAssertEqual(try store.loadBindings(now: Date()).map(\.aor), [alice])
    }

    func testARefreshAfterASaveInOneBatchIsThatSave() throws {
        var binding = makeBinding(alice)
        let first = binding
        binding.cseq = 4
        try store.applyAndWait([.save(first), .refresh(binding)])
        XCTAssertEqual(try store.loadBindings(for: alice, now: Date()).map(\.cseq), [4])
        XCTAssertEqual(store.transactionCount, 1)
    }
}
