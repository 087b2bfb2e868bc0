import Crypto
public import Foundation
import Registrar
public import RouseVocabulary

/// What asking to send a test push to a device token gave.
public enum TestPushClaim: Sendable, Equatable {
    /// The push may go. `previous` is when the last one went (nil: never, or long ago); give the
    /// claim back with `TestPushClaims.release` when the push did not reach the phone.
    case claimed(key: String, at: Date, previous: Date?)
    /// A test push went to this token less than the interval ago: the next may go in this many
    /// whole seconds (at least 1).
    case limited(retryAfterSeconds: Int)
}

/// The last test push to each device token (`test_push_claims`, migration 202), shared by every
/// instance, so that the admin pages, the admin API and `rouse push test` together send at most
/// one test push per token per `test_push_interval` (iOS stops delivering VoIP pushes to an app
/// flooded with them). Rows are keyed by a SHA-256 of family and token: the table holds no token.
/// Rows older than a day (or the interval, if longer) are swept by later claims.
///
/// Threading: stateless; every function runs on the connection it is given and blocks its thread
/// until PostgreSQL answers (a worker pool thread or a command-line thread).
public enum TestPushClaims {
    /// The row key of a token: hex SHA-256 of `family:token` (APNs tokens in lower case).
    public static func key(family: PushProviderFamily, token: String) -> String {
        Digest.hex(.sha256, PushTokenID(family: family, token: token).key)
    }

    /// Claims a test push to `token` at `now`, unless one went less than `interval` seconds before.
    /// One statement: two instances claiming at once cannot both win.
    public static func claim(
        family: PushProviderFamily, token: String, interval: TimeInterval, now: Date = Date(), on connection: PostgresConnection
    ) throws -> TestPushClaim {
        let key = key(family: family, token: token)
        let at = String(now.timeIntervalSince1970)
        let rows = try connection.query(
            """
            WITH prev AS (
                SELECT extract(epoch FROM sent_at) AS sent FROM test_push_claims WHERE token_hash = $1
            ), claimed AS (
                INSERT INTO test_push_claims (token_hash, sent_at) VALUES ($1, to_timestamp($2::double precision))
                ON CONFLICT (token_hash) DO UPDATE SET sent_at = EXCLUDED.sent_at
                WHERE test_push_claims.sent_at <= EXCLUDED.sent_at - make_interval(secs => $3::double precision)
                RETURNING 1
            ), swept AS (
                DELETE FROM test_push_claims WHERE token_hash <> $1
                    AND sent_at < to_timestamp($2::double precision) - make_interval(secs => greatest($3::double precision, 86400))
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM claimed), (SELECT sent FROM prev), (SELECT count(*) FROM swept)
            """,
            [key, at, String(interval)])
        let row = rows.rows.first
        let previous = row?[1].flatMap(Double.init).map { Date(timeIntervalSince1970: $0) }
        if row?[0] == "1" { return .claimed(key: key, at: now, previous: previous) }
        let left = (previous.map { $0.addingTimeInterval(interval).timeIntervalSince(now) } ?? interval).rounded(.up)
        return .limited(retryAfterSeconds: max(1, Int(min(left, interval.rounded(.up)))))
    }

    /// Gives a claim back (the push did not reach the phone: refused, or the provider could not be
    /// asked), so the next test may go at once. Does nothing when another test claimed the token since.
    public static func release(_ claim: TestPushClaim, on connection: PostgresConnection) throws {
        guard case .claimed(let key, let at, let previous) = claim else { return }
        let claimedAt = String(at.timeIntervalSince1970)
        if let previous {
            try connection.query(
                """
                UPDATE test_push_claims SET sent_at = to_timestamp($3::double precision)
                WHERE token_hash = $1 AND sent_at = to_timestamp($2::double precision)
                """,
                [key, claimedAt, String(previous.timeIntervalSince1970)])
        } else {
            try connection.query(
                "DELETE FROM test_push_claims WHERE token_hash = $1 AND sent_at = to_timestamp($2::double precision)", [key, claimedAt])
        }
    }
}
