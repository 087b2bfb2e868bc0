import CallRouting
import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// Tokens follow their holder (issue 20 item 1) on real PostgreSQL: a token registered by one
/// extension leaves no posted copy on another, a post with a device's id replaces that device's
/// earlier token of the same kind, and every instance's replica hears both.
extension PostgresReplicaTests {
    var voip: PushChannel {
        PushChannel(provider: .apns, token: String(repeating: "ab", count: 32), param: "TEAM123456.com.example.app.voip", kind: .voip)
    }

    /// A replica that keeps the tokens (its bindings go into an index nobody reads).
    func replica(origin: String) -> PostgresReplica {
        replica(origin: origin, into: Index())
    }

    func posted(_ aor: AddressOfRecord) throws -> [PushChannel] {
        try PostedPushTokens.list(for: aor, on: try database.database.connect()).map(\.channel)
    }

    func testARegisteredTokenRemovesAnotherExtensionsPostedCopyAndEveryReplicaHearsIt() throws {
        let connection = try database.database.connect()
        _ = try PostedPushTokens.store(voip, deviceID: "phone-1", for: bob, on: connection)
        let fcm = PushChannel(provider: .fcm, token: "bobs-other-phone", param: nil, kind: .standard)
        _ = try PostedPushTokens.store(fcm, deviceID: nil, for: bob, on: connection)
        // The instance that writes the binding and another one both hold bob's posted tokens.
        let own = replica(origin: "instance-a")
        let other = replica(origin: "instance-b")
        try own.start()
        try other.start()
        XCTAssertEqual(own.tokens.postedTokens(of: bob).map(\.channel), [voip, fcm])
        let (listener, heard) = try database.listening(to: [PostedPushTokens.notificationChannel])
        defer { listener.stop() }

        // Alice's phone registers the token bob had posted (the phone changed hands).
        try store(origin: "instance-a").applyAndWait([.save(makeBinding(alice, channels: [voip]))])

        XCTAssertEqual(try posted(bob), [fcm], "bob's posted copy of the token is gone; his other token stays")
        XCTAssertEqual(heard.wait(for: 1), [PostedPushTokens.notificationChannel])
        for replica in [own, other] {
            replica.listening()
            try waitUntil("the replica dropped the token") { replica.tokens.postedTokens(of: bob).map(\.channel) == [fcm] }
        }
        let rows = try connection.query("SELECT kind, key, tombstone::text FROM replica_changes WHERE kind = 'posted' ORDER BY seq DESC LIMIT 1").rows
        XCTAssertEqual(rows.first, ["posted", "apns:" + voip.token, "true"], "the change log carries the delete")
    }

    func testATokenPostedByTheRegisteringExtensionItselfStays() throws {
        let connection = try database.database.connect()
        _ = try PostedPushTokens.store(voip, deviceID: nil, for: alice, on: connection)
        try store(origin: "instance-a").applyAndWait([.save(makeBinding(alice, channels: [voip]))])
        XCTAssertEqual(try posted(alice), [voip], "the same device by both ways is still one device")
    }

    // MARK: - Rotation by deviceId

    func testAPostWithTheSameDeviceIdAndKindReplacesTheEarlierPostAndTheReplicaDropsIt() throws {
        let connection = try database.database.connect()
        let remote = PushChannel(provider: .apns, token: String(repeating: "cd", count: 32), param: "TEAM123456.com.example.app", kind: .remote)
        let rotated = PushChannel(provider: .apns, token: String(repeating: "ef", count: 32), param: "TEAM123456.com.example.app.voip", kind: .voip)
        let undisclosed = PushChannel(provider: .fcm, token: "no-device-id", param: nil, kind: .standard)
        XCTAssertEqual(try PostedPushTokens.store(voip, deviceID: "phone-1", for: alice, on: connection), .stored)
        XCTAssertEqual(try PostedPushTokens.store(remote, deviceID: "phone-1", for: alice, on: connection), .stored)
        XCTAssertEqual(try PostedPushTokens.store(undisclosed, deviceID: nil, for: alice, on: connection), .stored)
        XCTAssertEqual(try PostedPushTokens.store(voip, deviceID: "phone-1", for: bob, on: connection), .updated(movedFrom: alice))
        XCTAssertEqual(try PostedPushTokens.store(voip, deviceID: "phone-1", for: alice, on: connection), .updated(movedFrom: bob))
        let replica = replica(origin: "instance-a")
        try replica.start()

        XCTAssertEqual(try PostedPushTokens.store(rotated, deviceID: "phone-1", for: alice, on: connection), .stored)
        XCTAssertEqual(Set(try posted(alice)), [remote, rotated, undisclosed], "the rotated-out VoIP token is gone; the pair and the other stay")
        replica.listening()
        try waitUntil("the replica dropped the old token") { Set(replica.tokens.postedTokens(of: alice).map(\.channel)) == [remote, rotated, undisclosed] }
        XCTAssertEqual(replica.tokens.postedTokens(of: alice).filter { $0.deviceID == "phone-1" }.count, 2, "VoIP and regular still paired")

        // Posting the same token again changes nothing; a post without a device id replaces nothing.
        XCTAssertEqual(try PostedPushTokens.store(rotated, deviceID: "phone-1", for: alice, on: connection), .refreshed)
        let another = PushChannel(provider: .fcm, token: "second-android", param: nil, kind: .standard)
        XCTAssertEqual(try PostedPushTokens.store(another, deviceID: nil, for: alice, on: connection), .stored)
        XCTAssertEqual(Set(try posted(alice)), [remote, rotated, undisclosed, another])
    }
}
