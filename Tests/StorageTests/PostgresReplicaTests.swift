import CallRouting
import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// The replica change log on real PostgreSQL: every change is numbered once per key and
/// transaction, in commit order, and announced; a replica that missed announcements catches up
/// from the last number it saw; one whose changes were pruned reloads everything.
final class PostgresReplicaTests: XCTestCase {
    var database: MigratedDatabase!
    var stores: [PostgresLocationStore] = []
    var replicas: [PostgresReplica] = []
    let alice = AddressOfRecord(number: "1000", domain: "example.com")
    let bob = AddressOfRecord(number: "1001", domain: "example.com")
    let token = PushChannel(provider: .fcm, token: "fcm-token-1", param: "project-1", kind: .standard)

    override func setUpWithError() throws {
        database = try MigratedDatabase(extensions: 4)
    }

    override func tearDown() {
        replicas.forEach { $0.stop() }
        stores.forEach { $0.shutdown() }
        database?.drop()
    }

    func store(origin: String) -> PostgresLocationStore {
        let store = PostgresLocationStore(settings: database.settings, origin: origin)
        stores.append(store)
        return store
    }

    /// A replica whose bindings go into a plain dictionary, as the registrar's index would hold them.
    func replica(origin: String, into index: Index) -> PostgresReplica {
        let replica = PostgresReplica(
            settings: database.settings, origin: origin,
            bindings: ReplicaBindingTarget(mark: { 0 }) { bindings, everything, _ in index.apply(bindings, everything: everything) })
        replicas.append(replica)
        return replica
    }

    final class Index: @unchecked Sendable {
        // @unchecked: `held` is only touched under `lock`.
        private let lock = NSLock()
        private var held: [AddressOfRecord: [Binding]] = [:]
        private(set) var fullReads = 0

        func apply(_ bindings: [AddressOfRecord: [Binding]], everything: Bool) {
            lock.withLock {
                if everything {
                    held = [:]
                    fullReads += 1
                }
                for (aor, list) in bindings { held[aor] = list.isEmpty ? nil : list }
            }
        }

        func ids(_ aor: AddressOfRecord) -> [UUID] { lock.withLock { (held[aor] ?? []).map(\.id) } }
        var fullReadCount: Int { lock.withLock { fullReads } }
    }

    func changes() throws -> [[String?]] {
        try database.database.connect().query("SELECT seq::text, kind, key, tombstone::text, origin FROM replica_changes ORDER BY seq").rows
    }

    func testEveryChangeIsNumberedOncePerKeyAndTransactionAndAnnounced() throws {
        let heard = Collector<String>()
        let listening = Collector<Bool>()
        let listener = PostgresNotificationListener(
            settings: database.settings, channels: [PostgresReplica.notificationChannel], onListening: { listening.append(true) }
        ) { heard.append($0.payload) }
        listener.start()
        defer { listener.stop() }
        XCTAssertEqual(listening.wait(for: 1).count, 1)

        // One REGISTER's transaction: the binding row and its two channel rows are one change.
        let second = PushChannel(provider: .apns, token: "abcdef", param: nil, kind: .voip)
        let binding = makeBinding(alice, channels: [token, second])
        try store(origin: "instance-a").applyAndWait([.save(binding)])
        let connection = try database.database.connect()
        _ = try PostedPushTokens.store(token, deviceID: nil, for: bob, on: connection)
        try PostgresPushStores.markDead(on: connection, family: .apns, token: second.token, reason: "Unregistered")
        // A refresh-push claim changes nothing another instance holds.
        try connection.query("UPDATE bindings SET refresh_pushed_at = now()")
        try store(origin: "instance-b").applyAndWait([.delete(binding, .removed)])

        let rows = try changes()
        XCTAssertEqual(rows.map { $0[1] }, ["binding", "binding", "posted", "dead", "binding"])
        XCTAssertEqual(rows.map { $0[0] }, ["1", "2", "3", "4", "5"], "numbers without gaps")
        XCTAssertEqual(rows[0][2], "1000@example.com")
        XCTAssertEqual(rows[0][4], "instance-a")
        // Posting the token for bob took it from alice's binding, in the same transaction: her
        // extension changed too.
        XCTAssertEqual(rows[1][2], "1000@example.com")
        XCTAssertEqual(rows[1][4], "")
        XCTAssertEqual(rows[2][2], "fcm:fcm-token-1")
        XCTAssertEqual(rows[3][2], "apns:abcdef")
        XCTAssertEqual(rows[4].map { $0 ?? "" }, ["5", "binding", "1000@example.com", "true", "instance-b"], "the delete's tombstone")
        // One announcement per transaction, naming its numbers, kinds and origin.
        XCTAssertEqual(heard.wait(for: 4), ["1 1 binding instance-a", "2 3 binding,posted ", "4 4 dead ", "5 5 binding instance-b"])
    }

    func testAReplicaThatMissedChangesCatchesUpFromTheLastNumberItSaw() throws {
        let index = Index()
        let replica = replica(origin: "instance-a", into: index)
        let early = makeBinding(alice)
        let other = store(origin: "instance-b")
        try other.applyAndWait([.save(early)])
        try replica.start()
        XCTAssertEqual(index.ids(alice), [early.id])
        XCTAssertEqual(replica.lastSeen, 1)

        // Changes made while this replica heard nothing (its listener was away).
        let late = makeBinding(bob, channels: [])
        try other.applyAndWait([.delete(early, .removed), .save(late)])
        let connection = try database.database.connect()
        _ = try PostedPushTokens.store(token, deviceID: "phone-1", for: bob, on: connection)
        try PostgresPushStores.markDead(on: connection, family: .fcm, token: token.token, reason: "UNREGISTERED")
        XCTAssertEqual(index.ids(alice), [early.id], "nothing read yet")

        replica.listening()
        try waitUntil("the replica caught up") { replica.lastSeen == 5 }
        XCTAssertEqual(index.ids(alice), [])
        XCTAssertEqual(index.ids(bob), [late.id])
        XCTAssertEqual(replica.tokens.postedTokens(of: bob).map(\.channel), [token])
        XCTAssertEqual(replica.tokens.postedTokens(of: bob).map(\.deviceID), ["phone-1"])
        XCTAssertEqual(replica.tokens.deadKeys(among: [token]), [PushTokenID(family: .fcm, token: "fcm-token-1")])
        XCTAssertEqual(replica.catchUpCount, 1)
        XCTAssertEqual(replica.fullReloadCount, 0)

        // A gap in the announced numbers is a catch-up too: the token removed (6) was not heard.
        XCTAssertTrue(try PostedPushTokens.remove(token: token.token, family: .fcm, from: bob, on: connection))
        try other.applyAndWait([.save(makeBinding(alice))])
        replica.notified(payload: "7 7 binding instance-b")
        try waitUntil("the replica read the gap") { replica.lastSeen == 7 }
        XCTAssertEqual(replica.tokens.postedTokens(of: bob), [])
        XCTAssertEqual(index.ids(alice).count, 1)
        XCTAssertEqual(replica.catchUpCount, 2)
    }

    func testOwnBindingChangesAreNotReadBack() throws {
        try store(origin: "instance-a").applyAndWait([.save(makeBinding(alice))])
        let connection = try database.database.connect()
        let own = try PostgresReplica.read(on: connection, after: 0, skippingOrigin: "instance-a", now: Date())
        XCTAssertEqual(own.through, 1)
        XCTAssertEqual(own.bindings, [:])
        let elsewhere = try PostgresReplica.read(on: connection, after: 0, skippingOrigin: "instance-b", now: Date())
        XCTAssertEqual(elsewhere.bindings[alice]?.count, 1)
    }

    func testAReplicaWhoseChangesWerePrunedReloadsEverything() throws {
        let index = Index()
        let replica = replica(origin: "instance-a", into: index)
        try replica.start()
        let other = store(origin: "instance-b")
        let first = makeBinding(alice)
        try other.applyAndWait([.save(first)])
        XCTAssertEqual(try PostgresReplica.prune(on: try database.database.connect(), olderThan: 0), 1)
        let second = makeBinding(bob)
        try other.applyAndWait([.save(second)])
        XCTAssertEqual(try changes().map { $0[0] }, ["2"], "the first change is gone, tombstones and all")

        replica.listening()
        try waitUntil("the replica reloaded") { replica.lastSeen == 2 }
        XCTAssertEqual(replica.fullReloadCount, 1)
        XCTAssertEqual(index.fullReadCount, 2, "the start, then the reload")
        XCTAssertEqual(index.ids(alice), [first.id])
        XCTAssertEqual(index.ids(bob), [second.id])
        // A change kept in the log is not pruned before its time.
        XCTAssertEqual(try replica.prune(), 0)
    }
}
