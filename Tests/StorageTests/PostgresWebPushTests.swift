import Foundation
import Push
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// The VAPID key pair and subscription keys in PostgreSQL (migration 400).
final class PostgresWebPushTests: XCTestCase {
    var database: TestDatabase!

    override func setUpWithError() throws {
        database = try TestDatabase()
        try Migrator.migrate(try database.connect())
    }

    override func tearDown() {
        database?.drop()
    }

    /// Instances starting together each find no key, each make one, and all end up with the one
    /// stored first.
    func testInstancesStartingAtOnceAgreeOnOneKey() throws {
        XCTAssertNil(try PostgresVAPIDKeys.load(on: try database.connect()))
        let conninfo = database.conninfo
        let keys = Keys()
        let group = DispatchGroup()
        for _ in 0..<6 {
            group.enter()
            Thread {
                defer { group.leave() }
                do {
                    keys.add(try PostgresVAPIDKeys.loadOrCreate(on: try TestDatabase.connect(conninfo)).publicKeyBase64URL)
                } catch {
                    keys.add("error: \(error)")
                }
            }.start()
        }
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success)
        XCTAssertEqual(keys.all.count, 6)
        XCTAssertEqual(Set(keys.all).count, 1, "\(keys.all)")
        XCTAssertEqual(try PostgresVAPIDKeys.load(on: try database.connect())?.publicKeyBase64URL, keys.all.first)
    }

    func testSubscriptionKeysNeedTheirPostedTokenAndGoWithIt() throws {
        let connection = try database.connect()
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        let aor = AddressOfRecord(number: "1001", domain: "example.com")
        try directory.addExtension(aor, password: "pw-1001")
        let endpoint = "https://push.example.net/p/1"
        let keys = try WebPushSubscriptionKeys(p256dh: VAPIDKeys.generate().keys.publicKeyBase64URL, auth: "AAECAwQFBgcICQoLDA0ODw")
        XCTAssertThrowsError(
            try PostgresWebPushSubscriptions.store(endpoint: endpoint, keys: keys, on: connection), "no posted token: no keys")
        _ = try PostedPushTokens.store(
            PushChannel(provider: .webpush, token: endpoint, param: nil, kind: .standard), deviceID: nil, for: aor, on: connection)
        try PostgresWebPushSubscriptions.store(endpoint: endpoint, keys: keys, on: connection)
        XCTAssertEqual(try PostgresWebPushSubscriptions.keys(forEndpoint: endpoint, on: connection), keys)
        XCTAssertNil(try PostgresWebPushSubscriptions.keys(forEndpoint: endpoint + "x", on: connection))
        try directory.removeExtension(aor)
        XCTAssertNil(try PostgresWebPushSubscriptions.keys(forEndpoint: endpoint, on: connection), "an extension removed takes its subscriptions' keys")
    }

    final class Keys: @unchecked Sendable {
        private let lock = NSLock()
        private var values: [String] = []
        func add(_ value: String) {
            lock.lock()
            values.append(value)
            lock.unlock()
        }
        var all: [String] {
            lock.lock()
            defer { lock.unlock() }
            return values
        }
    }
}
