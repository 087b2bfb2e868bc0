public import Crypto
import Foundation

/// Rouse's secrets at rest: every column that holds one, and how a value in it is sealed, opened,
/// re-sealed under a new key, and sealed when it was stored before sealing (migration 740 marked
/// such values `plain:`). Every secret is stored as a `SecretSeal` envelope bound to its table,
/// column and row, so a database dump alone gives neither a push key nor a password's hash, and a
/// sealed value copied to another row does not open (docs/operators.md, "Secrets at rest").
///
/// The secret columns: `push_apps.key_text` (APNs `.p8` keys and FCM service-account keys),
/// `extensions.ha1_md5` and `.ha1_sha256` (digest HA1s, as good as passwords), `outbound_routes.password`
/// (trunk passwords), `webpush_vapid_keys.private_key_pem` (the VAPID key) and the `rouse_settings`
/// values that are secrets (`*_secret`: the call-token, digest-nonce, flow-token and instance
/// forwarding keys).
///
/// Threading: stateless; each function blocks its thread on the connection it is given.
public enum SealedSecrets {
    /// The prefix migration 740 put on each secret stored in plain text before it.
    static let plainMarker = "plain:"

    /// One secret column: how to read each value with its row's key and identity, and write it back.
    struct Column {
        let table: String
        let column: String
        /// Selects (row key, identity, stored value) of every row with a value, locking them.
        let select: String
        /// Sets `$1` as the value of the row whose key is `$2`.
        let update: String

        func context(_ identity: String) -> String { "\(table).\(column):\(identity)" }

        /// `select` without its row locks, for counting.
        var unlockedSelect: String {
            guard let lock = select.range(of: "FOR UPDATE", options: .backwards) else { return select }
            return String(select[..<lock.lowerBound])
        }
    }

    /// Every secret column Rouse has.
    static let columns: [Column] = [
        Column(
            table: "push_apps", column: "key_text",
            select: "SELECT id::text, id::text, key_text FROM push_apps ORDER BY id FOR UPDATE",
            update: "UPDATE push_apps SET key_text = $1 WHERE id = $2::bigint"),
        Column(
            table: "extensions", column: "ha1_md5",
            select: """
                SELECT e.id::text, e.number || '@' || d.domain, e.ha1_md5
                FROM extensions e JOIN sip_domains d ON d.id = e.domain_id ORDER BY e.id FOR UPDATE OF e
                """,
            update: "UPDATE extensions SET ha1_md5 = $1 WHERE id = $2::bigint"),
        Column(
            table: "extensions", column: "ha1_sha256",
            select: """
                SELECT e.id::text, e.number || '@' || d.domain, e.ha1_sha256
                FROM extensions e JOIN sip_domains d ON d.id = e.domain_id ORDER BY e.id FOR UPDATE OF e
                """,
            update: "UPDATE extensions SET ha1_sha256 = $1 WHERE id = $2::bigint"),
        Column(
            table: "outbound_routes", column: "password",
            select: "SELECT id::text, id::text, password FROM outbound_routes WHERE password IS NOT NULL ORDER BY id FOR UPDATE",
            update: "UPDATE outbound_routes SET password = $1 WHERE id = $2::bigint"),
        Column(
            table: "webpush_vapid_keys", column: "private_key_pem",
            select: "SELECT id::text, id::text, private_key_pem FROM webpush_vapid_keys FOR UPDATE",
            update: "UPDATE webpush_vapid_keys SET private_key_pem = $1 WHERE id = $2::smallint"),
        Column(
            table: "rouse_settings", column: "value",
            select: """
                SELECT key, key, value FROM rouse_settings
                WHERE value LIKE 'v1:%' OR value LIKE 'plain:%' ORDER BY key FOR UPDATE
                """,
            update: "UPDATE rouse_settings SET value = $1, updated_at = now() WHERE key = $2"),
    ]

    /// What `sealPlainValues` and `reseal` did.
    public struct Count: Sendable, Equatable {
        /// Values written sealed (by the current key, or the new one).
        public var sealed = 0
        /// Values left as they were (already sealed by the right key).
        public var unchanged = 0

        public init(sealed: Int = 0, unchanged: Int = 0) {
            self.sealed = sealed
            self.unchanged = unchanged
        }
    }

    /// Seals every value stored before sealing (marked `plain:` by migration 740) with the
    /// connection's current key, in one transaction. Rouse runs it at every start; a second run
    /// finds nothing to do.
    @discardableResult
    public static func sealPlainValues(on connection: PostgresConnection) throws -> Count {
        let seal = try requireKeys(connection)
        // Nearly every start finds nothing to seal: columns are counted first, so their rows (a
        // million extensions' hashes) are neither read into memory nor locked unless one is plain.
        var untouched = Count()
        var pending: [Column] = []
        for column in columns where try tableExists(column.table, on: connection) {
            let counts = try connection.query(
                "SELECT count(*) FILTER (WHERE s.v LIKE 'plain:%'), count(*) FROM (\(column.unlockedSelect)) AS s(k, i, v) WHERE s.v IS NOT NULL"
            ).rows.first
            let plain = counts?[0].flatMap { Int($0) } ?? 0
            if plain > 0 {
                pending.append(column)
            } else {
                untouched.unchanged += counts?[1].flatMap { Int($0) } ?? 0
            }
        }
        guard !pending.isEmpty else { return untouched }
        var count = try rewrite(on: connection, columns: pending) { stored, context in
            guard stored.hasPrefix(plainMarker) else { return nil }
            return try seal.seal(String(stored.dropFirst(plainMarker.count)), context: context)
        }
        count.unchanged += untouched.unchanged
        return count
    }

    /// Opens every secret with the connection's keys and seals it again with `newSeal`'s current
    /// key, in one transaction: either every value is sealed by the new key afterwards, or nothing
    /// changed. Values marked `plain:` are sealed too. Throws, changing nothing, when any value
    /// does not open.
    @discardableResult
    public static func reseal(on connection: PostgresConnection, with newSeal: SecretSeal) throws -> Count {
        let seal = try requireKeys(connection)
        return try rewrite(on: connection) { stored, context in
            if SecretSeal.keyID(of: stored) == newSeal.current.id {
                _ = try newSeal.open(stored, context: context)
                return nil
            }
            let plaintext = stored.hasPrefix(plainMarker) ? String(stored.dropFirst(plainMarker.count)) : try seal.open(stored, context: context)
            return try newSeal.seal(plaintext, context: context)
        }
    }

    /// Checks that every stored secret opens with the connection's keys (and none is left plain);
    /// returns how many there are. Throws the first that does not.
    @discardableResult
    public static func verify(on connection: PostgresConnection) throws -> Int {
        let seal = try requireKeys(connection)
        var count = 0
        try connection.transaction { connection in
            for column in columns where try tableExists(column.table, on: connection) {
                for row in try connection.query(column.select).rows {
                    guard let identity = row[1], let stored = row[2] else { continue }
                    _ = try seal.open(stored, context: column.context(identity))
                    count += 1
                }
            }
        }
        return count
    }

    /// Rewrites, in one transaction, each value `transform` returns a new value for.
    private static func rewrite(
        on connection: PostgresConnection, columns: [Column] = columns, _ transform: (_ stored: String, _ context: String) throws -> String?
    ) throws -> Count {
        try connection.transaction { connection in
            var count = Count()
            for column in columns where try tableExists(column.table, on: connection) {
                for row in try connection.query(column.select).rows {
                    guard let key = row[0], let identity = row[1], let stored = row[2] else { continue }
                    if let rewritten = try transform(stored, column.context(identity)) {
                        try connection.query(column.update, [rewritten, key])
                        count.sealed += 1
                    } else {
                        count.unchanged += 1
                    }
                }
            }
            return count
        }
    }

    private static func tableExists(_ table: String, on connection: PostgresConnection) throws -> Bool {
        try connection.query("SELECT to_regclass($1) IS NOT NULL", [table]).rows.first?[0] == "t"
    }

    static func requireKeys(_ connection: PostgresConnection) throws(SecretSealError) -> SecretSeal {
        guard let seal = connection.secrets else { throw missingKey }
        return seal
    }

    /// The refusal when a secret must be sealed or opened and no key was configured.
    public static let missingKey = SecretSealError(
        "no secrets key: set secrets_key_file (a file of 32 random bytes, mode 0600) or ROUSE_SECRETS_KEY; "
            + "Rouse stores push keys, trunk passwords and password hashes only sealed (docs/operators.md, \"Secrets at rest\")")
}

extension PostgresConnection {
    /// `plaintext` sealed with this connection's current key for `context` (`table.column:row`).
    func sealSecret(_ plaintext: String, context: String) throws(SecretSealError) -> String {
        try SealedSecrets.requireKeys(self).seal(plaintext, context: context)
    }

    /// The plaintext of a stored secret of `context`; throws a clear error when there is no key,
    /// the value was sealed by another key, does not belong to `context`, or is still plain (the
    /// start-up's `SealedSecrets.sealPlainValues` seals those).
    func openSecret(_ stored: String, context: String) throws(SecretSealError) -> String {
        try secretOpener().open(stored, context: context)
    }

    /// What opens many stored secrets on one thread as `openSecret` does, each key's cipher set up
    /// once (the directory's start-up load).
    func secretOpener() throws(SecretSealError) -> SealedSecrets.Opener {
        SealedSecrets.Opener(opener: try SealedSecrets.requireKeys(self).opener())
    }
}

extension SealedSecrets {
    /// `PostgresConnection.openSecret` for many values: one per thread, not thread-safe.
    struct Opener {
        let opener: SecretSeal.Opener

        func open(_ stored: String, context: String) throws(SecretSealError) -> String {
            guard !stored.hasPrefix(SealedSecrets.plainMarker) else {
                throw SecretSealError("\(context) is not sealed yet: start rouse serve, or run rouse secrets seal, with the secrets key")
            }
            return try opener.open(stored, context: context)
        }
    }
}

extension SealedSecrets {
    /// A random secret of 32 bytes shared by every instance through `rouse_settings` under `name`
    /// (which ends in `_secret`), sealed there: made by whichever instance asks first, read back by
    /// all.
    public static func sharedSecret(named name: String, on connection: PostgresConnection) throws -> [UInt8] {
        let context = "rouse_settings.value:\(name)"
        try connection.query(
            "INSERT INTO rouse_settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
            [name, try connection.sealSecret(SecureRandom.hex(32), context: context)])
        let rows = try connection.query("SELECT value FROM rouse_settings WHERE key = $1", [name])
        guard let stored = rows.value(0, "value"), let bytes = Hex.decode(try connection.openSecret(stored, context: context)) else {
            throw PostgresError(kind: .unexpectedResult, message: "rouse_settings holds no usable \(name)")
        }
        return bytes
    }
}
