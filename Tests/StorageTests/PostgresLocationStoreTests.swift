import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// The durable location service: round trips, group commit, failures, announcements, dead tokens.
final class PostgresLocationStoreTests: XCTestCase {
    var database: MigratedDatabase!
    var store: PostgresLocationStore!
    let alice = AddressOfRecord(number: "1000", domain: "example.com")
    let bob = AddressOfRecord(number: "1001", domain: "example.com")

    override func setUpWithError() throws {
        database = try MigratedDatabase(extensions: 20)
        store = PostgresLocationStore(settings: database.settings)
    }

    override func tearDown() {
        store?.shutdown()
        database?.drop()
    }

    func testSavedBindingComesBackWithEveryFieldAndItsPushChannels() throws {
        let voip = PushChannel(provider: .apns, token: "ABCDEF0123456789", param: "TEAM.com.example.app.voip", kind: .voip)
        let remote = PushChannel(provider: .apnsSandbox, token: "fedcba9876543210", param: "TEAM.com.example.app", kind: .remote)
        let now = Date(timeIntervalSince1970: 1_750_000_000.25)
        var binding = makeBinding(alice, channels: [voip, remote], now: now)
        binding.userAgent = "Téléphone ☎ \"quoted\" back\\slash\nnew line\ttab \u{1}"
        try store.applyAndWait([.save(binding)])

        let loaded = try store.loadBindings(for: alice, now: now)
        XCTAssertEqual(loaded.count, 1)
        let got = try XCTUnwrap(loaded.first)
        XCTAssertEqual(got.id, binding.id)
        XCTAssertEqual(got.aor, alice)
        XCTAssertEqual(got.contact, binding.contact)
        XCTAssertEqual(got.instance, binding.instance)
        XCTAssertEqual(got.regID, 1)
        XCTAssertEqual(got.q, 0.5)
        XCTAssertEqual(got.callID, binding.callID)
        XCTAssertEqual(got.cseq, binding.cseq)
        XCTAssertEqual(got.registeredAt.timeIntervalSince1970, now.timeIntervalSince1970, accuracy: 0.000_01)
        XCTAssertEqual(got.expiresAt.timeIntervalSince1970, binding.expiresAt.timeIntervalSince1970, accuracy: 0.000_01)
        XCTAssertEqual(got.path, binding.path)
        XCTAssertEqual(got.userAgent, binding.userAgent)
        XCTAssertEqual(got.flow, binding.flow)
        XCTAssertEqual(got.pushChannels, [voip, remote])
        XCTAssertEqual(got.pushChannels.first?.token, "abcdef0123456789")
        XCTAssertEqual(try store.loadBindings(for: bob, now: now), [])
        XCTAssertEqual(try store.loadBindings(now: now).map(\.id), [binding.id])
    }

    func testTheFlowsOfOneInstanceSharingATokenAllComeBack() throws {
        // RFC 5626: reg-id 1 and 2 of one phone are two bindings with one instance and one token;
        // a restart (a load from PostgreSQL) must bring back both, each with its reg-id and flow.
        let token = PushChannel(provider: .fcm, token: "shared-token", param: "project-1", kind: .standard)
        var first = makeBinding(alice, channels: [token])
        var second = makeBinding(alice, channels: [token])
        second.instance = first.instance
        second.regID = 2
        second.flow.connectionID = FlowConnectionID("tcp-18")
        first.regID = 1
        try store.applyAndWait([.save(first)])
        try store.applyAndWait([.save(second)])
        let loaded = try store.loadBindings(now: Date()).sorted { ($0.regID ?? 0) < ($1.regID ?? 0) }
        XCTAssertEqual(loaded.map(\.id), [first.id, second.id])
        XCTAssertEqual(loaded.map(\.regID), [1, 2])
        XCTAssertEqual(loaded.map(\.flow.connectionID.name), ["tcp-17", "tcp-18"])
        XCTAssertEqual(loaded.map(\.pushChannels), [[token], [token]])
    }

    func testRefreshReplacesTheRowAndItsChannelsAndDeleteRemovesBoth() throws {
        let first = PushChannel(provider: .fcm, token: "token-one", param: "project-1", kind: .standard)
        let second = PushChannel(provider: .fcm, token: "token-two", param: nil, kind: .standard)
        var binding = makeBinding(alice, channels: [first])
        try store.applyAndWait([.save(binding)])
        binding.cseq = 2
        binding.expiresAt = binding.expiresAt.addingTimeInterval(600)
        binding.pushChannels = [second]
        binding.path = []
        binding.userAgent = nil
        try store.applyAndWait([.save(binding)])

        let loaded = try XCTUnwrap(try store.loadBindings(for: alice, now: Date()).first)
        XCTAssertEqual(loaded.cseq, 2)
        XCTAssertEqual(loaded.pushChannels, [second])
        XCTAssertEqual(loaded.path, [])
        XCTAssertNil(loaded.userAgent)
        XCTAssertEqual(loaded.expiresAt.timeIntervalSince1970, binding.expiresAt.timeIntervalSince1970, accuracy: 0.000_01)

        try store.applyAndWait([.delete(binding, .removed)])
        XCTAssertEqual(try store.loadBindings(now: Date()), [])
        let connection = try database.database.connect()
        XCTAssertEqual(try connection.query("SELECT count(*) AS n FROM binding_push_channels").value(0, "n"), "0")
    }

    func testExpiredBindingsAreNotLoadedAndTheSweeperDeletesThem() throws {
        let now = Date()
        let stale = makeBinding(alice, expiresIn: -5, now: now)
        let live = makeBinding(bob, expiresIn: 300, now: now)
        try store.applyAndWait([.save(stale), .save(live)])
        XCTAssertEqual(try store.loadBindings(now: now).map(\.id), [live.id])
        let swept = try store.deleteExpired(before: now)
        XCTAssertEqual(swept.map(\.id), [stale.id])
        XCTAssertEqual(swept.first?.contact, stale.contact)
        XCTAssertEqual(try store.deleteExpired(before: now), [])
        let connection = try database.database.connect()
        XCTAssertEqual(try connection.query("SELECT count(*) AS n FROM bindings").value(0, "n"), "1")
    }

    func testGroupCommitStoresEverySaveInFewerTransactions() throws {
        let total = 2_000
        let threads = 8
        let results = Collector<Result<Void, any Error>>()
        let aors = (0..<20).map { AddressOfRecord(number: String(1000 + $0), domain: "example.com") }
        let bindings = (0..<total).map { index in
            makeBinding(
                aors[index % aors.count],
                channels: [PushChannel(provider: .fcm, token: "token-\(index)", param: "project", kind: .standard)])
        }
        let store = self.store!
        let before = store.transactionCount
        let started = Date()
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            for index in stride(from: thread, to: total, by: threads) {
                store.apply([.save(bindings[index])]) { results.append($0) }
            }
        }
        let finished = results.wait(for: total, timeout: 120)
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertEqual(finished.count, total)
        XCTAssertTrue(finished.allSatisfy { (try? $0.get()) != nil })
        let transactions = store.transactionCount - before
        XCTAssertLessThan(transactions, total)
        print(
            "group commit: \(total) saves from \(threads) threads in \(String(format: "%.3f", elapsed)) s "
                + "= \(Int(Double(total) / elapsed)) saves/s in \(transactions) transactions")
        let connection = try database.database.connect()
        XCTAssertEqual(try connection.query("SELECT count(*) AS n FROM bindings").value(0, "n"), String(total))
        XCTAssertEqual(try connection.query("SELECT count(*) AS n FROM binding_push_channels").value(0, "n"), String(total))
        XCTAssertEqual(try store.loadBindings(now: Date()).count, total)
    }

    func testAFailedTransactionReportsTheErrorToEveryBatchInIt() throws {
        // Another session holds the bindings table while it drops the channels table, so the
        // writer queues every batch behind it and each transaction then fails.
        let blocker = try database.database.connect()
        try blocker.query("BEGIN")
        try blocker.query("LOCK TABLE bindings IN ACCESS EXCLUSIVE MODE")
        try blocker.query("DROP TABLE binding_push_channels")
        let results = Collector<Result<Void, any Error>>()
        for index in 0..<20 {
            let channel = PushChannel(provider: .fcm, token: "t\(index)", param: nil, kind: .standard)
            store.apply([.save(makeBinding(alice, channels: [channel]))]) { results.append($0) }
        }
        let observer = try database.database.connect()
        try waitUntil("the writer waits for the lock on bindings") { try sessionsWaitingForALock(on: "bindings", observer) == 1 }
        try blocker.query("COMMIT")
        let finished = results.wait(for: 20)
        XCTAssertEqual(finished.count, 20)
        for result in finished {
            XCTAssertThrowsError(try result.get()) { error in
                XCTAssertTrue(String(describing: error).contains("binding_push_channels"), "\(error)")
            }
        }
        XCTAssertEqual(store.committedChangeCount, 0)
        XCTAssertEqual(try blocker.query("SELECT count(*) AS n FROM bindings").value(0, "n"), "0")
    }

    func testASaveForAMissingExtensionFailsAloneAndTheOthersCommit() throws {
        let ghost = AddressOfRecord(number: "9999", domain: "example.com")
        let results = Collector<(Int, Bool)>()
        let blocker = try database.database.connect()
        try blocker.query("BEGIN")
        try blocker.query("LOCK TABLE bindings IN ACCESS EXCLUSIVE MODE")
        store.apply([.save(makeBinding(alice))]) { results.append((0, (try? $0.get()) != nil)) }
        // Alice's save is in a transaction waiting for the lock, so the next two are queued behind it.
        let observer = try database.database.connect()
        try waitUntil("the writer waits for the lock on bindings") { try sessionsWaitingForALock(on: "bindings", observer) == 1 }
        store.apply([.save(makeBinding(ghost))]) { result in
            results.append((1, (try? result.get()) != nil))
            if case .failure(let error) = result {
                XCTAssertEqual(String(describing: error), "no such extension 9999@example.com")
            }
        }
        store.apply([.save(makeBinding(bob))]) { results.append((2, (try? $0.get()) != nil)) }
        try blocker.query("COMMIT")
        let finished = results.wait(for: 3).sorted { $0.0 < $1.0 }
        XCTAssertEqual(finished.map(\.1), [true, false, true])
        XCTAssertEqual(Set(try store.loadBindings(now: Date()).map(\.aor)), [alice, bob])
    }

    func testChangesAreAnnouncedOnRouseBindingsAfterCommit() throws {
        let (listener, received) = database.startListener([PostgresLocationStore.notificationChannel])
        defer { listener.stop() }

        var binding = makeBinding(alice)
        let expiring = makeBinding(bob, expiresIn: -1)
        try store.applyAndWait([.save(binding)])
        binding.cseq += 1
        try store.applyAndWait([.save(binding)])
        try store.applyAndWait([.delete(binding, .removed)])
        try store.applyAndWait([.save(expiring)])
        try store.deleteExpired(before: Date())

        let id = binding.id.uuidString.lowercased()
        let other = expiring.id.uuidString.lowercased()
        let payloads = received.wait(for: 5).map(\.payload)
        XCTAssertEqual(
            payloads,
            [
                "added 1000@example.com \(id)", "refreshed 1000@example.com \(id)", "removed 1000@example.com \(id)",
                "added 1001@example.com \(other)", "expired 1001@example.com \(other)",
            ])
        XCTAssertEqual(received.all.map(\.channel), Array(repeating: "rouse_bindings", count: 5))
        let parsed = BindingNotification(payload: payloads[0])
        XCTAssertEqual(parsed, BindingNotification(kind: .added, aor: alice, bindingID: binding.id))
    }

    func testListenerReconnectsAfterItsConnectionIsKilled() throws {
        let received = Collector<PostgresNotification>()
        let listening = Collector<Bool>()
        let listener = PostgresNotificationListener(
            settings: database.settings, channels: ["rouse_test"], maxReconnectDelay: 0.5,
            onListening: { listening.append(true) }, onNotification: { received.append($0) })
        listener.start()
        defer { listener.stop() }
        XCTAssertEqual(listening.wait(for: 1).count, 1)
        let admin = try database.database.connect()
        let killed = try admin.query(
            """
            SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN%'
            """)
        XCTAssertEqual(killed.count, 1)
        XCTAssertEqual(listening.wait(for: 2, timeout: 20).count, 2)
        try admin.query("SELECT pg_notify($1, $2)", ["rouse_test", "after reconnect"])
        XCTAssertEqual(received.wait(for: 1).map(\.payload), ["after reconnect"])
    }

    func testASaveClearsTheDeadMarkOfItsTokens() throws {
        let revived = PushChannel(provider: .apns, token: "AAAA1111BBBB2222", param: nil, kind: .voip)
        let stillDead = PushChannel(provider: .fcm, token: "gone-token", param: nil, kind: .standard)
        try store.markTokenDead(family: .apns, token: "aaaa1111bbbb2222", reason: "Unregistered")
        try store.markTokenDead(family: .fcm, token: "gone-token", reason: "UNREGISTERED")
        XCTAssertEqual(Set(try store.deadTokens(among: [revived, stillDead]).map(\.token)), ["aaaa1111bbbb2222", "gone-token"])

        try store.applyAndWait([.save(makeBinding(alice, channels: [revived]))])
        let dead = try store.deadTokens(among: [revived, stillDead])
        XCTAssertEqual(dead.map(\.token), ["gone-token"])
        XCTAssertEqual(dead.first?.reason, "UNREGISTERED")
    }

    func testSeveralChangesToOneBindingInABatchKeepTheLast() throws {
        var binding = makeBinding(alice)
        let first = binding
        binding.cseq = 7
        try store.applyAndWait([.save(first), .save(binding)])
        XCTAssertEqual(try store.loadBindings(for: alice, now: Date()).map(\.cseq), [7])
        try store.applyAndWait([.save(binding), .delete(binding, .removed)])
        XCTAssertEqual(try store.loadBindings(for: alice, now: Date()), [])
    }

    func testTextWithANulCharacterIsRefusedForItsBatchOnly() throws {
        var bad = makeBinding(alice)
        bad.callID = "evil\u{0}call"
        XCTAssertThrowsError(try store.applyAndWait([.save(bad)])) { error in
            XCTAssertEqual(String(describing: error), "binding of 1000@example.com: call-id holds a NUL character")
        }
        try store.applyAndWait([.save(makeBinding(bob))])
        XCTAssertEqual(try store.loadBindings(now: Date()).map(\.aor), [bob])
    }

    /// A quoted-pair may carry a NUL into a User-Agent comment, a Path display name or a quoted
    /// `+sip.instance` (RFC 3261 §25.1): stored with the NUL written `%00`.
    func testNulCarriedByAQuotedPairIsStoredEscaped() throws {
        var binding = makeBinding(alice)
        binding.userAgent = "Phone/1.0 (build \\\u{0} 7)"
        binding.instance = "\"<urn:uuid:\u{0}>\""
        binding.path = ["\"Edge\\\u{0}\" <sip:edge.example.com;lr>"]
        try store.applyAndWait([.save(binding)])
        let stored = try XCTUnwrap(try store.loadBindings(for: alice, now: Date()).first)
        XCTAssertEqual(stored.userAgent, "Phone/1.0 (build \\%00 7)")
        XCTAssertEqual(stored.instance, "\"<urn:uuid:%00>\"")
        XCTAssertEqual(stored.path, ["\"Edge\\%00\" <sip:edge.example.com;lr>"])
    }

    func testApplyAfterShutdownFailsWithoutBlocking() throws {
        store.shutdown()
        XCTAssertThrowsError(try store.applyAndWait([.save(makeBinding(alice))])) { error in
            XCTAssertEqual(error as? LocationStoreError, .stopped)
        }
    }
}
