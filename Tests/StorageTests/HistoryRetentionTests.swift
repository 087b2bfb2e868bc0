import CallRouting
import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// Stale marks shared through the replica, and history retention, on real PostgreSQL (issue 20
/// item 1).
final class HistoryRetentionTests: XCTestCase {
    var database: MigratedDatabase!
    let alice = AddressOfRecord(number: "1000", domain: "example.com")
    let channel = PushChannel(provider: .fcm, token: "fcm-stale-1", param: "project-1", kind: .standard)
    let day: TimeInterval = 24 * 3600

    override func setUpWithError() throws {
        database = try MigratedDatabase(extensions: 1)
    }

    override func tearDown() {
        database?.drop()
    }

    func connect() throws -> PostgresConnection { try database.database.connect() }

    /// The change numbers the log holds now.
    func lastSeq(_ connection: PostgresConnection) throws -> Int64 {
        Int64(try connection.query("SELECT coalesce(max(seq), 0)::text FROM replica_changes").rows.first?[0] ?? "0") ?? 0
    }

    func testAStaleMarkAndItsLiftingReachTheReplicaButAnOrdinarySignOfLifeDoesNot() throws {
        let connection = try connect()
        let policy = DeviceStaleness.Policy(pushes: 2, after: 0)
        // Pushes after the post (its sign of life is the database's now).
        let pushedAt = Date().addingTimeInterval(60)
        _ = try PostedPushTokens.store(channel, deviceID: nil, for: alice, on: connection)
        var seq = try lastSeq(connection)

        // A sign of life of a device with nothing counted against it is no change for the replica.
        try PushTokenLiveness.signOfLife([channel.tokenID], on: connection)
        XCTAssertEqual(try PostgresReplica.read(on: connection, after: seq, skippingOrigin: "", now: Date()).stale, [:])

        let first = try PushTokenLiveness.recordRingPushEnd(
            channel.tokenID, pushedAt: pushedAt + 30, accepted: true, callOutlastedWakeWait: true, now: pushedAt + 38, policy: policy, on: connection)
        XCTAssertFalse(first.markedStale)
        XCTAssertEqual(try PostgresReplica.read(on: connection, after: seq, skippingOrigin: "", now: Date()).stale, [:], "one push of two")
        let second = try PushTokenLiveness.recordRingPushEnd(
            channel.tokenID, pushedAt: pushedAt + 40, accepted: true, callOutlastedWakeWait: true, now: pushedAt + 48, policy: policy, on: connection)
        XCTAssertTrue(second.markedStale)
        let marked = try PostgresReplica.read(on: connection, after: seq, skippingOrigin: "", now: Date())
        let staleFrom = try XCTUnwrap(marked.stale[channel.tokenID] ?? nil)
        XCTAssertEqual(staleFrom.timeIntervalSince1970, second.device.lastSignOfLife.timeIntervalSince1970, accuracy: 0.001)

        // Every instance's replica holds it: a call there leaves the token out.
        let replica = WakeTokenReplica()
        replica.update(posted: [:], dead: [:], stale: marked.stale)
        XCTAssertEqual(replica.staleTokens(among: [channel.tokenID], now: Date()), [channel.tokenID])
        XCTAssertEqual(replica.staleCount(now: Date()), 1)
        XCTAssertEqual(try PushTokenLiveness.staleCount(on: connection), 1)
        XCTAssertEqual(try PushTokenLiveness.staleMarks(among: [channel.tokenID], on: connection)[channel.tokenID]?.unansweredPushes, 2)

        // The app posts its token again: alive, the mark lifted everywhere.
        seq = try lastSeq(connection)
        _ = try PostedPushTokens.store(channel, deviceID: nil, for: alice, on: connection)
        let lifted = try PostgresReplica.read(on: connection, after: seq, skippingOrigin: "", now: Date())
        XCTAssertEqual(lifted.stale.count, 1)
        XCTAssertEqual(lifted.stale[channel.tokenID], .some(nil))
        let revived = Collector<PushTokenID>()
        let listening = WakeTokenReplica(revived: { revived.append($0) })
        listening.update(posted: [:], dead: [:], stale: marked.stale)
        listening.update(posted: [:], dead: [:], stale: lifted.stale)
        XCTAssertEqual(listening.staleTokens(among: [channel.tokenID], now: Date()), [])
        XCTAssertEqual(revived.all, [channel.tokenID])
        XCTAssertEqual(try PushTokenLiveness.staleCount(on: connection), 0)

        // A full read carries the marks too.
        _ = try PushTokenLiveness.recordRingPushEnd(
            channel.tokenID, pushedAt: Date() + 60, accepted: true, callOutlastedWakeWait: true, now: Date() + 68, policy: DeviceStaleness.Policy(pushes: 1, after: 0),
            on: connection)
        let full = try PostgresReplica.read(on: connection, after: nil, skippingOrigin: "", now: Date())
        XCTAssertNotNil(full.stale[channel.tokenID] ?? nil)
    }

    /// Rows `daysAgo` old in push_records and calls.
    func insertHistory(count: Int, daysAgo: Double, on connection: PostgresConnection) throws {
        try connection.query(
            """
            INSERT INTO push_records (created_at, aor, provider, token_short, outcome, explanation, latency_ms)
            SELECT now() - make_interval(secs => $2::double precision), '1000@example.com', 'fcm', 'abcd…', 'accepted', 'accepted', 10
            FROM generate_series(1, $1::integer)
            """, [String(count), String(daysAgo * day)])
        try connection.query(
            """
            INSERT INTO calls (id, call_id, uuid, aor, caller, transport, source, instance_id, started_at, outcome, journey)
            SELECT gen_random_uuid(), 'c' || n, 'u' || n, '1000@example.com', 'sip:1001@example.com', 'udp', '127.0.0.1', 'i',
                now() - make_interval(secs => $2::double precision), 'answered', '{}'::jsonb
            FROM generate_series(1, $1::integer) AS n
            """, [String(count), String(daysAgo * day)])
    }

    func count(_ table: String, on connection: PostgresConnection) throws -> Int {
        Int(try connection.query("SELECT count(*)::text FROM \(table)").rows.first?[0] ?? "0") ?? 0
    }

    func testHistoryOlderThanTheRetentionGoesInSmallBatchesAndOneInstanceAtATime() throws {
        let connection = try connect()
        try insertHistory(count: 7, daysAgo: 91, on: connection)
        try insertHistory(count: 3, daysAgo: 89, on: connection)
        // The record of a token nobody holds any more, silent for longer than the retention, goes
        // too; a held token's record stays however old.
        let gone = PushChannel(provider: .fcm, token: "gone-token", param: nil, kind: .standard)
        _ = try PostedPushTokens.store(channel, deviceID: nil, for: alice, on: connection)
        try PushTokenLiveness.signOfLife([gone.tokenID, channel.tokenID], at: Date().addingTimeInterval(-100 * day), on: connection)
        try connection.query("UPDATE push_token_liveness SET last_sign_of_life = now() - interval '100 days'")

        // Another instance is at it: this one skips the round.
        let other = try connect()
        try other.query("SELECT pg_advisory_lock($1::bigint)", [HistoryRetention.lockID])
        XCTAssertNil(try HistoryRetention.run(on: connection, retention: 90 * day, batchSize: 3))
        XCTAssertEqual(try count("push_records", on: connection), 10)
        try other.query("SELECT pg_advisory_unlock($1::bigint)", [HistoryRetention.lockID])

        let deleted = try XCTUnwrap(try HistoryRetention.run(on: connection, retention: 90 * day, batchSize: 3))
        XCTAssertEqual(deleted.pushRecords, 7)
        XCTAssertEqual(deleted.calls, 7)
        XCTAssertEqual(deleted.tokenRecords, 1)
        // 7 rows in batches of 3: 3, 3, 1 for each of the two tables; the one token record in one batch.
        XCTAssertEqual(deleted.batches, 3 + 3 + 1)
        XCTAssertEqual(try count("push_records", on: connection), 3)
        XCTAssertEqual(try count("calls", on: connection), 3)
        XCTAssertEqual(
            try PushTokenLiveness.liveness(of: [gone.tokenID, channel.tokenID], on: connection).keys.sorted(), [channel.tokenID])
        // The lock was let go: the other instance may run the next round.
        XCTAssertEqual(try other.query("SELECT pg_try_advisory_lock($1::bigint)::text", [HistoryRetention.lockID]).rows.first?[0], "true")
    }
}
