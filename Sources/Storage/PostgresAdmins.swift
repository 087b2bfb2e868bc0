import Crypto
public import Foundation

/// Why an administrator operation was refused: one line for a person, never a password.
public enum AdminError: Error, Sendable, Hashable, CustomStringConvertible {
    case invalidName(String)
    case invalidPassword(reason: String)
    case exists(String)

    public var description: String {
        switch self {
        case .invalidName(let name):
            return "'\(DirectoryError.shown(name))' is not a usable admin name (1 to 64 letters, digits, '.', '_', '-' or '@')"
        case .invalidPassword(let reason): return "unusable password: \(reason)"
        case .exists(let name): return "admin \(name) already exists"
        }
    }
}

/// An administrator as listed: never the hash. A value, safe to share.
public struct AdminAccount: Hashable, Sendable {
    public let name: String
    public let createdAt: Date
}

/// The administrators of the admin API (`admins`, migration 200), with passwords kept only as
/// `Password` hashes (PBKDF2-HMAC-SHA256).
///
/// Threading: stateless; every function runs on the connection it is given and blocks its thread
/// until PostgreSQL answers (and `add`/`verify` for the hash work, tens of milliseconds), so call
/// it on a `PostgresWorkerPool` worker or a command-line thread.
public enum PostgresAdmins {
    /// Adds an administrator; refuses a name already taken.
    public static func add(name: String, password: String, on connection: PostgresConnection) throws {
        try checkName(name)
        do {
            try DirectoryError.checkPassword(password)
        } catch {
            if case .invalidPassword(let reason) = error { throw AdminError.invalidPassword(reason: reason) }
            throw error
        }
        let stored = Password.hash(password)
        do {
            try connection.query("INSERT INTO admins (name, password_hash) VALUES ($1, $2)", [name, stored])
        } catch where error.isUniqueViolation {
            throw AdminError.exists(name)
        }
    }

    /// Adds `name` only when there is no administrator at all yet (the first run of a fresh
    /// database); returns false, adding nothing, when one exists. The table is locked for the
    /// check, so two instances starting together make one first administrator, not two.
    public static func addFirst(name: String, password: String, on connection: PostgresConnection) throws -> Bool {
        try checkName(name)
        return try connection.transaction { connection in
            try connection.query("LOCK TABLE admins IN SHARE ROW EXCLUSIVE MODE")
            guard try connection.query("SELECT 1 FROM admins LIMIT 1").isEmpty else { return false }
            try add(name: name, password: password, on: connection)
            return true
        }
    }

    /// Replaces `name`'s password and ends every admin-page session of theirs; false when there is
    /// no such administrator.
    public static func changePassword(name: String, password: String, on connection: PostgresConnection) throws -> Bool {
        do {
            try DirectoryError.checkPassword(password)
        } catch {
            if case .invalidPassword(let reason) = error { throw AdminError.invalidPassword(reason: reason) }
            throw error
        }
        let stored = Password.hash(password)
        return try connection.transaction { connection in
            let changed = try connection.query("UPDATE admins SET password_hash = $2 WHERE name = $1 RETURNING id::text", [name, stored])
            guard let id = changed.rows.first?[0] ?? nil else { return false }
            try connection.query("DELETE FROM admin_sessions WHERE admin_id = $1::bigint", [id])
            return true
        }
    }

    /// Removes an administrator (their sessions go with them); false when there was none.
    public static func remove(name: String, on connection: PostgresConnection) throws -> Bool {
        try connection.query("DELETE FROM admins WHERE name = $1", [name]).affectedRows == 1
    }

    /// True when `password` is the administrator `name`'s. An unknown name costs the same hash
    /// work as a wrong password.
    public static func verify(name: String, password: String, on connection: PostgresConnection) throws -> Bool {
        let rows = try connection.query("SELECT password_hash FROM admins WHERE name = $1", [name])
        let stored = rows.rows.first?[0] ?? nil
        let matched = Password.verify(password, against: stored ?? dummyHash)
        return stored != nil && matched
    }

    /// Every administrator, by name.
    public static func list(on connection: PostgresConnection) throws -> [AdminAccount] {
        try connection.query("SELECT name, extract(epoch FROM created_at) FROM admins ORDER BY name").rows.compactMap { row in
            guard let name = row[0] else { return nil }
            return AdminAccount(name: name, createdAt: Date(timeIntervalSince1970: row[1].flatMap { Double($0) } ?? 0))
        }
    }

    /// A well-formed hash of the default cost that no password is checked for success against.
    static let dummyHash = Password.hash(SecureRandom.hex(16))

    static func checkName(_ name: String) throws(AdminError) {
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-@")
        guard (1...64).contains(name.count), name.allSatisfy({ allowed.contains($0) }) else { throw .invalidName(name) }
    }
}
