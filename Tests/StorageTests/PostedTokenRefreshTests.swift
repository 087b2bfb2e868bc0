import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// Migrations 770 and 780 on a real PostgreSQL: a re-post that moves only `posted_at` of an
/// extension's one token is no replica change (no numbered row, no announcement), while a re-post
/// that changes what the replica holds, or that could reorder the extension's tokens, or that
/// lifts a stale mark, still is one.
final class PostedTokenRefreshTests: XCTestCase {
    var database: MigratedDatabase!
    var connection: PostgresConnection!
    let bob = AddressOfRecord(number: "1001", domain: "example.com")
    let fcm = PushChannel(provider: .fcm, token: "fcm-token-1", param: "project-1", kind: .standard)
    let voip = PushChannel(provider: .apns, token: "abcdef01", param: "app.voip", kind: .voip)

    override func setUpWithError() throws {
        database = try MigratedDatabase(extensions: 4)
        connection = try database.database.connect()
    }

    override func tearDown() {
        connection = nil
        database?.drop()
    }

    /// The replica change log's rows after `seq`: kind, key and tombstone.
    func changes(after seq: Int = 0) throws -> [[String?]] {
        try connection.query(
            "SELECT kind, key, tombstone::text FROM replica_changes WHERE seq > $1::bigint ORDER BY seq", [String(seq)]
        ).rows
    }

    func lastSeq() throws -> Int {
        Int(try connection.query("SELECT coalesce(max(seq), 0)::text FROM replica_changes").rows.first?[0] ?? "") ?? -1
    }

    func postedAt(_ channel: PushChannel) throws -> String? {
        try connection.query("SELECT posted_at::text FROM posted_push_tokens WHERE token = $1", [channel.token]).rows.first?[0]
    }

    func testARepostOfAnExtensionsOnlyTokenMovesItsTimeWithoutAReplicaChange() throws {
        XCTAssertEqual(try PostedPushTokens.store(fcm, deviceID: nil, for: bob, on: connection), .stored)
        XCTAssertEqual(try changes(), [["posted", "fcm:fcm-token-1", "false"]], "the first post is a change")
        let first = try postedAt(fcm)
        let seq = try lastSeq()

        XCTAssertEqual(try PostedPushTokens.store(fcm, deviceID: nil, for: bob, on: connection), .refreshed)
        XCTAssertNotEqual(try postedAt(fcm), first, "the re-post is stored: its time moved")
        XCTAssertEqual(try changes(after: seq), [], "nothing another instance holds changed")
    }

    func testARepostThatChangesTheTokensDetailsIsAReplicaChange() throws {
        _ = try PostedPushTokens.store(fcm, deviceID: nil, for: bob, on: connection)
        let seq = try lastSeq()
        let otherApp = PushChannel(provider: .fcm, token: fcm.token, param: "project-2", kind: .standard)
        XCTAssertEqual(try PostedPushTokens.store(otherApp, deviceID: nil, for: bob, on: connection), .updated(movedFrom: nil))
        XCTAssertEqual(try changes(after: seq), [["posted", "fcm:fcm-token-1", "false"]])
        let moved = try lastSeq()
        XCTAssertEqual(try PostedPushTokens.store(otherApp, deviceID: "phone-1", for: bob, on: connection), .updated(movedFrom: nil))
        XCTAssertEqual(try changes(after: moved), [["posted", "fcm:fcm-token-1", "false"]], "a device id is a detail too")
    }

    func testARepostOfOneOfAnExtensionsTokensIsAReplicaChangeSinceTheTimeOrdersThem() throws {
        _ = try PostedPushTokens.store(fcm, deviceID: nil, for: bob, on: connection)
        _ = try PostedPushTokens.store(voip, deviceID: nil, for: bob, on: connection)
        let seq = try lastSeq()
        XCTAssertEqual(try PostedPushTokens.store(fcm, deviceID: nil, for: bob, on: connection), .refreshed)
        XCTAssertEqual(try changes(after: seq), [["posted", "fcm:fcm-token-1", "false"]])
    }

    func testARepostOfAStaleDeviceLiftsItsMarkAndTheReplicaCarriesIt() throws {
        _ = try PostedPushTokens.store(fcm, deviceID: nil, for: bob, on: connection)
        try connection.query(
            "UPDATE push_token_liveness SET stale_from = now(), last_sign_of_life = now() - interval '1 day' WHERE token = $1", [fcm.token])
        let marked = try lastSeq()
        XCTAssertEqual(try changes(after: marked - 1), [["stale", "fcm:fcm-token-1", "false"]], "the mark set is a change")

        XCTAssertEqual(try PostedPushTokens.store(fcm, deviceID: nil, for: bob, on: connection), .refreshed)
        XCTAssertEqual(try connection.query("SELECT stale_from FROM push_token_liveness WHERE token = $1", [fcm.token]).rows, [[nil]])
        XCTAssertEqual(try changes(after: marked), [["stale", "fcm:fcm-token-1", "false"]], "the mark lifted is a change")
        let lifted = try lastSeq()
        XCTAssertEqual(try PostedPushTokens.store(fcm, deviceID: nil, for: bob, on: connection), .refreshed)
        XCTAssertEqual(try changes(after: lifted), [], "a sign of life that lifts nothing is none")
    }
}

