import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// `test_push_claims` on a real PostgreSQL, with the times given (no clock is waited on): one test
/// push per token per interval, whichever connection (instance) asks; a claim given back restores
/// the one before; the table keeps a hash, never the token.
final class TestPushClaimsTests: XCTestCase {
    var database: MigratedDatabase!

    override func setUpWithError() throws {
        database = try MigratedDatabase()
    }

    override func tearDown() {
        database?.drop()
    }

    func testOneTestPushPerTokenPerIntervalAcrossConnections() throws {
        let first = try database.database.connect()
        let second = try database.database.connect()
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        let token = String(repeating: "AB", count: 32)

        guard case .claimed(_, _, let previous) = try TestPushClaims.claim(family: .apns, token: token, interval: 30, now: start, on: first) else {
            return XCTFail("the first test push may go")
        }
        XCTAssertNil(previous)
        // Another instance, 10 s later, the token in another case: the same APNs token, spaced.
        XCTAssertEqual(
            try TestPushClaims.claim(family: .apns, token: token.lowercased(), interval: 30, now: start + 10, on: second),
            .limited(retryAfterSeconds: 20))
        XCTAssertEqual(try TestPushClaims.claim(family: .apns, token: token, interval: 30, now: start + 29.5, on: first), .limited(retryAfterSeconds: 1))
        // Another family's token of the same text is another device.
        guard case .claimed = try TestPushClaims.claim(family: .fcm, token: token, interval: 30, now: start + 10, on: first) else {
            return XCTFail("an FCM token is not the APNs one")
        }
        guard case .claimed(_, _, let before) = try TestPushClaims.claim(family: .apns, token: token, interval: 30, now: start + 30, on: second) else {
            return XCTFail("after the interval the next may go")
        }
        XCTAssertEqual(before?.timeIntervalSince1970 ?? 0, start.timeIntervalSince1970, accuracy: 0.001)
        let stored = try first.query("SELECT token_hash FROM test_push_claims").rows.compactMap { $0[0] }
        XCTAssertEqual(stored.count, 2)
        XCTAssertFalse(stored.contains { $0.contains(token.lowercased()) }, "a hash, never the token")
    }

    func testAClaimGivenBackLetsTheNextGoAtOnceAndRestoresTheOneBefore() throws {
        let connection = try database.database.connect()
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        let token = "fcm-token-1"
        let accepted = try TestPushClaims.claim(family: .fcm, token: token, interval: 30, now: start, on: connection)
        // 40 s later a test is refused by the provider: given back, the accepted one still spaces the next.
        let refused = try TestPushClaims.claim(family: .fcm, token: token, interval: 30, now: start + 40, on: connection)
        guard case .claimed = refused else { return XCTFail("\(refused)") }
        try TestPushClaims.release(refused, on: connection)
        guard case .claimed = try TestPushClaims.claim(family: .fcm, token: token, interval: 30, now: start + 41, on: connection) else {
            return XCTFail("a test that never reached the phone does not count")
        }
        // Giving back the very first claim (never used) removes the row.
        let other = try TestPushClaims.claim(family: .fcm, token: "fcm-token-2", interval: 30, now: start, on: connection)
        try TestPushClaims.release(other, on: connection)
        guard case .claimed(_, _, .none) = try TestPushClaims.claim(family: .fcm, token: "fcm-token-2", interval: 30, now: start + 1, on: connection) else {
            return XCTFail("a first claim given back leaves nothing behind")
        }
        // A stale give-back (another test claimed since) changes nothing.
        try TestPushClaims.release(accepted, on: connection)
        XCTAssertEqual(
            try TestPushClaims.claim(family: .fcm, token: token, interval: 30, now: start + 50, on: connection), .limited(retryAfterSeconds: 21))
    }

    func testOldRowsAreSweptByLaterClaims() throws {
        let connection = try database.database.connect()
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        _ = try TestPushClaims.claim(family: .fcm, token: "old", interval: 30, now: start, on: connection)
        _ = try TestPushClaims.claim(family: .fcm, token: "new", interval: 30, now: start + 86_401, on: connection)
        XCTAssertEqual(try connection.query("SELECT count(*) FROM test_push_claims").rows.first?[0], "1")
    }
}
