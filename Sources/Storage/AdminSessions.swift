import Crypto
public import Foundation

/// A signed-in administrator's session of the admin pages: the secret token its cookie carries,
/// who signed in and when the session ends. A value, safe to share; `token` is a credential and
/// never belongs in a log or a page.
public struct AdminSession: Sendable, Hashable {
    /// 64 hex digits; PostgreSQL keeps only its SHA-256.
    public let token: String
    public let adminName: String
    public let expiresAt: Date

    /// The session's CSRF token, carried by every form: an HMAC of a fixed text under the session
    /// token, so any instance derives it and nobody without the cookie can.
    public var csrfToken: String { AdminSessions.csrfToken(for: token) }
}

/// Sessions of the admin pages in PostgreSQL (`admin_sessions`, migration 201), so a session
/// made on one instance is good on every instance. The table holds a SHA-256 of each token, never
/// the token; a session ends at its expiry, at sign-out, or when its administrator is removed.
///
/// Threading: stateless; every function runs on the connection it is given and blocks its thread
/// until PostgreSQL answers, so call it on a `PostgresWorkerPool` worker.
public enum AdminSessions {
    /// Opens a session for the administrator `adminName` lasting `lifetime` seconds; nil when
    /// there is no such administrator. Expired sessions are removed on the way.
    public static func create(adminName: String, lifetime: TimeInterval, on connection: PostgresConnection) throws -> AdminSession? {
        try connection.query("DELETE FROM admin_sessions WHERE expires_at <= now()")
        let token = SecureRandom.hex(32)
        let rows = try connection.query(
            """
            INSERT INTO admin_sessions (token_hash, admin_id, expires_at)
            SELECT $1, id, now() + make_interval(secs => $3::double precision) FROM admins WHERE name = $2
            RETURNING extract(epoch FROM expires_at)::double precision AS expires
            """,
            [hash(token), adminName, String(lifetime)])
        guard !rows.isEmpty, let expires = rows.value(0, "expires").flatMap(Double.init) else { return nil }
        return AdminSession(token: token, adminName: adminName, expiresAt: Date(timeIntervalSince1970: expires))
    }

    /// The live session whose token is `token`, or nil (unknown, malformed, expired, or its
    /// administrator removed).
    public static func find(token: String, on connection: PostgresConnection) throws -> AdminSession? {
        guard isWellFormed(token) else { return nil }
        let rows = try connection.query(
            """
            SELECT a.name, extract(epoch FROM s.expires_at)::double precision AS expires
            FROM admin_sessions s JOIN admins a ON a.id = s.admin_id
            WHERE s.token_hash = $1 AND s.expires_at > now()
            """,
            [hash(token)])
        guard !rows.isEmpty, let name = rows.value(0, "name"), let expires = rows.value(0, "expires").flatMap(Double.init) else { return nil }
        return AdminSession(token: token, adminName: name, expiresAt: Date(timeIntervalSince1970: expires))
    }

    /// Ends the session whose token is `token` (sign-out); nothing happens for an unknown one.
    public static func remove(token: String, on connection: PostgresConnection) throws {
        guard isWellFormed(token) else { return }
        try connection.query("DELETE FROM admin_sessions WHERE token_hash = $1", [hash(token)])
    }

    /// The CSRF token of the session whose token is `token`.
    public static func csrfToken(for token: String) -> String {
        Hex.encode(Digest.hmacSHA256(key: Array(token.utf8), message: Array("rouse admin pages csrf".utf8)))
    }

    /// What the table keeps of a token.
    static func hash(_ token: String) -> String {
        Hex.encode(Digest.hash(.sha256, Array(token.utf8)))
    }

    static func isWellFormed(_ token: String) -> Bool {
        token.utf8.count == 64 && token.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }
}
