import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
@testable import Storage
import XCTest

/// Posts queued together on the group commit, stored by one statement on a real PostgreSQL: each
/// post gets the answer it would get alone (stored, refreshed, moved, unknown extension), a dead
/// mark is lifted, a device's rotated token replaces its old one, two posts of one token keep their
/// order, and the replica is told of exactly the real changes.
final class PostedTokenBatchTests: XCTestCase {
    var database: MigratedDatabase!
    var connection: PostgresConnection!

    override func setUpWithError() throws {
        database = try MigratedDatabase(extensions: 6)
        connection = try database.database.connect()
    }

    override func tearDown() {
        connection = nil
        database?.drop()
    }

    func aor(_ number: Int) -> AddressOfRecord { AddressOfRecord(number: String(number), domain: "example.com") }

    func fcm(_ token: String) -> PushChannel { PushChannel(provider: .fcm, token: token, param: "project-1", kind: .standard) }

    func lastSeq() throws -> String {
        try connection.query("SELECT coalesce(max(seq), 0)::text FROM replica_changes").rows[0][0] ?? ""
    }

    func testPostsQueuedTogetherEachGetTheirOwnAnswerFromOneTransaction() async throws {
        _ = try PostedPushTokens.store(fcm("tok-refresh"), deviceID: nil, for: aor(1000), on: connection)
        _ = try PostedPushTokens.store(fcm("tok-move"), deviceID: nil, for: aor(1002), on: connection)
        _ = try PostedPushTokens.store(fcm("tok-old"), deviceID: "phone-9", for: aor(1003), on: connection)
        try connection.query("INSERT INTO push_dead_tokens (family, token, reason) VALUES ('fcm', 'tok-dead', 'unregistered')")
        let seq = try lastSeq()

        let group = PostgresGroupCommit(settings: database.settings, lanes: 1)
        defer { group.shutdown() }
        func post(_ token: String, _ number: Int, device: String? = nil) -> Task<PostedTokenChange?, any Error> {
            let channel = fcm(token), poster = aor(number)
            return Task { try await PostedPushTokens.store(channel, deviceID: device, webPushKeys: nil, for: poster, on: group, within: 60) }
        }
        let locker = try database.database.connect()
        try locker.query("BEGIN")
        try locker.query("LOCK TABLE posted_push_tokens IN ACCESS EXCLUSIVE MODE")
        let first = post("tok-first", 1005)
        try waitUntil("the first post waits for the lock") { try sessionsWaitingForALock(on: "posted_push_tokens", connection) == 1 }
        let posts: [(String, Int, String?)] = [
            ("tok-refresh", 1000, nil), ("tok-new", 1001, nil), ("tok-move", 1001, nil), ("tok-x", 9999, nil),
            ("tok-dead", 1001, nil), ("tok-rotated", 1003, "phone-9"), ("tok-new", 1002, nil),
        ]
        var tasks: [Task<PostedTokenChange?, any Error>] = []
        for (token, number, device) in posts {
            tasks.append(post(token, number, device: device))
            try waitUntil("\(token) for \(number) waits") { group.waitingJobCount == tasks.count }  // queued in this order
        }
        try locker.query("COMMIT")
        let firstAnswer = try await first.value
        XCTAssertEqual(firstAnswer, .stored)
        var answers: [PostedTokenChange?] = []
        for task in tasks { answers.append(try await task.value) }
        XCTAssertEqual(
            answers, [.refreshed, .stored, .updated(movedFrom: aor(1002)), nil, .stored, .stored, .updated(movedFrom: aor(1001))])
        XCTAssertEqual(group.transactionCount, 2, "the first post alone, the seven queued behind it together")

        let held = try connection.query(
            """
            SELECT p.token, e.number, p.device_id FROM posted_push_tokens p JOIN extensions e ON e.id = p.extension_id ORDER BY p.token
            """
        ).rows
        XCTAssertEqual(
            held,
            [
                ["tok-dead", "1001", nil], ["tok-first", "1005", nil], ["tok-move", "1001", nil], ["tok-new", "1002", nil],
                ["tok-refresh", "1000", nil], ["tok-rotated", "1003", "phone-9"],
            ])
        XCTAssertEqual(try connection.query("SELECT token FROM push_dead_tokens").rows, [], "a post lifts the dead mark")
        let changes = try connection.query(
            "SELECT DISTINCT kind, key, tombstone::text FROM replica_changes WHERE seq > $1::bigint ORDER BY kind, key", [seq]
        ).rows
        XCTAssertEqual(
            changes,
            [
                ["dead", "fcm:tok-dead", "true"], ["posted", "fcm:tok-dead", "false"], ["posted", "fcm:tok-first", "false"],
                ["posted", "fcm:tok-move", "false"], ["posted", "fcm:tok-new", "false"], ["posted", "fcm:tok-old", "true"],
                ["posted", "fcm:tok-rotated", "false"],
            ], "every real change, and not the re-post of an extension's only token")
    }
}
