public import Crypto
public import Foundation
public import Registrar

/// An organisation as the directory lists it. A value, safe to share.
public struct DirectoryDomain: Hashable, Sendable {
    public let domain: String
    public let extensionCount: Int
    public let createdAt: Date
}

/// An extension as the directory lists it: never its hashes. A value, safe to share.
public struct DirectoryExtension: Hashable, Sendable {
    public let aor: AddressOfRecord
    /// Bindings stored for it that had not expired when listed.
    public let liveBindingCount: Int
    /// What phones and ring pushes call it (`callee_name`); nil when it has none.
    public let displayName: String?
    public let createdAt: Date
    public let updatedAt: Date
}

/// The organisations (SIP domains) and extensions in PostgreSQL: what the registrar loads, and
/// the operator's operations on them. Passwords are kept only as `ExtensionCredentials` hashes,
/// stored sealed (`SealedSecrets`, bound to the extension's address) and opened only here, when the
/// directory is loaded into memory: the REGISTER path never opens one.
/// Every change commits together with `NOTIFY rouse_directory` (payload `<what> <name>`, e.g.
/// `extension-added 1001@example.com`, `domain-removed example.org`) so every instance reloads.
///
/// Threading: every method may be called from any thread and blocks it until PostgreSQL answers
/// (on a short-lived connection of its own, or on a worker of the pool it was given), so call it
/// off the SIP path. Refusals are `DirectoryError`s; database failures are `PostgresError`s.
public final class PostgresDirectory: DirectorySource, Sendable {
    /// The channel directory changes are announced on.
    public static let notificationChannel = "rouse_directory"

    private enum Executor: Sendable {
        case connectPerCall(PostgresSettings)
        case pool(PostgresWorkerPool, waitDeadline: Double?)
    }

    private let executor: Executor

    /// Each call opens its own connection and closes it (the command line, rare admin work).
    public init(settings: PostgresSettings) {
        executor = .connectPerCall(settings)
    }

    /// Each call runs on a worker of `pool` and waits for it, at most `waitDeadline` seconds when
    /// given (then `PostgresError.deadlinePassed`; see `PostgresWorkerPool.run(within:)`).
    public init(pool: PostgresWorkerPool, waitDeadline: Double? = nil) {
        executor = .pool(pool, waitDeadline: waitDeadline)
    }

    private func run<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> T) throws -> T {
        switch executor {
        case .connectPerCall(let settings): return try body(try settings.connect())
        case .pool(let pool, nil): return try pool.run(body)
        case .pool(let pool, let seconds?): return try pool.run(within: seconds, body)
        }
    }

    // MARK: - DirectorySource

    public func loadDirectory() throws -> DirectorySnapshot {
        try run { connection in try Self.loadDirectory(on: connection) }
    }

    /// Rows one statement of the directory load reads (see `loadDirectory(on:pageSize:)`).
    static let defaultPageSize = 5000

    /// The directory read on `connection` in one repeatable-read transaction (one snapshot), the
    /// extensions in pages of `pageSize` by primary key, each page its own short statement, so no
    /// count of extensions reaches a `statement_timeout`; each page's rows are dropped once its
    /// hashes are opened, so the load holds one page of rows at a time.
    static func loadDirectory(on connection: PostgresConnection, pageSize: Int = defaultPageSize) throws -> DirectorySnapshot {
        try connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        do {
            let snapshot = try readDirectory(on: connection, pageSize: max(1, pageSize))
            try connection.query("COMMIT")
            return snapshot
        } catch {
            _ = try? connection.query("ROLLBACK")
            throw error
        }
    }

    private static func readDirectory(on connection: PostgresConnection, pageSize: Int) throws -> DirectorySnapshot {
        // The domains first (few): each page of extensions names its domain by id, so a page is
        // an index range scan of the extensions' primary key alone, whatever the statistics, and
        // every extension of a domain shares one copy of its name (a row's own would be a heap
        // string per extension).
        var domainByID: [String: String] = [:]
        for row in try connection.query("SELECT id, domain FROM sip_domains").rows {
            if let id = row[0], let domain = row[1] { domainByID[id] = domain }
        }
        // Display names travel with the extensions (migration 730; absent before it).
        let hasNames = try !connection.query(
            "SELECT 1 FROM information_schema.columns WHERE table_name = 'extensions' AND column_name = 'display_name'").isEmpty
        let nameColumn = hasNames ? "display_name" : "NULL::text"
        let firstSQL = "SELECT id, domain_id, number, ha1_md5, ha1_sha256, \(nameColumn) FROM extensions ORDER BY id LIMIT $1"
        let nextSQL = """
            SELECT id, domain_id, number, ha1_md5, ha1_sha256, \(nameColumn) FROM extensions WHERE id > $2::bigint ORDER BY id LIMIT $1
            """
        var extensions: [AddressOfRecord: ExtensionCredentials] = [:]
        var names: [AddressOfRecord: String] = [:]
        if let count = try connection.query("SELECT count(*) FROM extensions").rows.first?[0].flatMap({ Int($0) }) {
            extensions.reserveCapacity(count)
        }
        // The hashes are opened on every core, each thread with an opener of its own.
        let openers = try (0..<ConcurrentMap.threads).map { _ in try connection.secretOpener() }
        var after: String?
        repeat {
            let rows = try connection.query(after.map { _ in nextSQL } ?? firstSQL, [String(pageSize)] + (after.map { [$0] } ?? [])).rows
            for case let entry? in try openHA1s(rows, domainByID: domainByID, openers: openers) {
                extensions[entry.aor] = entry.credentials
                if let name = entry.name { names[entry.aor] = name }
            }
            after = rows.count < pageSize ? nil : rows.last?[0]
        } while after != nil
        // Call forwarding travels with the directory (migration 602; absent before it).
        let hasDiversions = try connection.query("SELECT to_regclass('extension_diversions') IS NOT NULL").rows.first?[0] == "t"
        let diversions = hasDiversions ? try PostgresDiversions.all(on: connection) : [:]
        return DirectorySnapshot(domains: Set(domainByID.values), extensions: extensions, diversions: diversions, displayNames: names)
    }

    /// Each row's address, opened hashes and display name (nil for a row of no known domain), the
    /// rows shared among `openers`, one thread each. Throws the first hash that does not open.
    private static func openHA1s(
        _ rows: [[String?]], domainByID: [String: String], openers: [SealedSecrets.Opener]
    ) throws -> [(aor: AddressOfRecord, credentials: ExtensionCredentials, name: String?)?] {
        try ConcurrentMap.map(count: rows.count, states: openers) { opener, index in
            let row = rows[index]
            guard let domainID = row[1], let domain = domainByID[domainID], let number = row[2], let md5 = row[3], let sha256 = row[4]
            else { return nil }
            let aor = AddressOfRecord(number: number, domain: domain)
            guard
                let credentials = ExtensionCredentials(
                    aor: aor, ha1MD5: try opener.open(md5, context: Self.ha1Context(.md5, aor)),
                    ha1SHA256: try opener.open(sha256, context: Self.ha1Context(.sha256, aor)))
            else {
                throw PostgresError(kind: .unexpectedResult, message: "the stored password hashes of \(aor) are not MD5 and SHA-256 hex")
            }
            return (aor, credentials, row[5])
        }
    }

    // MARK: - Domains

    /// Adds an organisation; returns the domain as stored (lower case).
    @discardableResult
    public func addDomain(_ text: String) throws -> String {
        let domain = try DirectoryError.parseDomain(text)
        return try run { connection in
            try connection.transaction { connection in
                do {
                    try connection.query("INSERT INTO sip_domains (domain) VALUES ($1)", [domain])
                } catch let error as PostgresError where error.isUniqueViolation {
                    throw DirectoryError.domainExists(domain)
                }
                try Self.announce("domain-added \(domain)", on: connection)
                return domain
            }
        }
    }

    /// Every organisation, by name.
    public func listDomains() throws -> [DirectoryDomain] {
        try run { connection in
            try connection.query(
                """
                SELECT d.domain, (SELECT count(*) FROM extensions e WHERE e.domain_id = d.id),
                    extract(epoch FROM d.created_at)
                FROM sip_domains d ORDER BY d.domain
                """
            ).rows.compactMap { row in
                guard let domain = row[0] else { return nil }
                return DirectoryDomain(
                    domain: domain, extensionCount: row[1].flatMap { Int($0) } ?? 0, createdAt: Self.date(row[2]))
            }
        }
    }

    /// Removes an organisation; refused while it still has extensions.
    public func removeDomain(_ text: String) throws {
        let domain = try DirectoryError.parseDomain(text)
        try run { connection in
            try connection.transaction { connection in
                let found = try connection.query("SELECT id FROM sip_domains WHERE domain = $1 FOR UPDATE", [domain])
                guard let id = found.rows.first?[0] else { throw DirectoryError.noSuchDomain(domain) }
                let count = Int(try connection.query(
                    "SELECT count(*) FROM extensions WHERE domain_id = $1", [id]).rows.first?[0] ?? "0") ?? 0
                guard count == 0 else { throw DirectoryError.domainHasExtensions(domain, count: count) }
                do {
                    try connection.query("DELETE FROM sip_domains WHERE id = $1", [id])
                } catch let error as PostgresError where error.sqlState == "23503" {
                    throw DirectoryError.domainHasExtensions(domain, count: 1)
                }
                try Self.announce("domain-removed \(domain)", on: connection)
            }
        }
    }

    // MARK: - Extensions

    /// Adds an extension with its password (stored only as HA1 hashes) and display name (checked
    /// by `DirectoryError.parseDisplayName`; nil or blank: none). The domain must exist.
    public func addExtension(_ aor: AddressOfRecord, password: String, displayName: String? = nil) throws {
        try Self.check(aor)
        try DirectoryError.checkPassword(password)
        let name = try displayName.flatMap { text throws(DirectoryError) in try DirectoryError.parseDisplayName(text) }
        let credentials = ExtensionCredentials(aor: aor, password: password)
        try run { connection in
            try connection.transaction { connection in
                let inserted: PostgresRows
                do {
                    inserted = try connection.query(
                        """
                        INSERT INTO extensions (domain_id, number, ha1_md5, ha1_sha256)
                        SELECT id, $2, $3, $4 FROM sip_domains WHERE domain = $1
                        RETURNING id
                        """,
                        try Self.sealedHA1s(of: credentials, for: aor, on: connection))
                } catch let error as PostgresError where error.isUniqueViolation {
                    throw DirectoryError.extensionExists(aor)
                }
                guard !inserted.isEmpty else { throw DirectoryError.noSuchDomain(aor.domain) }
                if let name { try connection.query("UPDATE extensions SET display_name = $2 WHERE id = $1", [inserted.rows.first?[0], name]) }
                try Self.announce("extension-added \(aor)", on: connection)
            }
        }
    }

    /// The extensions of one organisation, or of all, ordered by domain then number.
    public func listExtensions(domain text: String? = nil) throws -> [DirectoryExtension] {
        let domain = try text.map { text throws(DirectoryError) in try DirectoryError.parseDomain(text) }
        return try run { connection in
            if let domain, try connection.query("SELECT 1 FROM sip_domains WHERE domain = $1", [domain]).isEmpty {
                throw DirectoryError.noSuchDomain(domain)
            }
            let rows = try connection.query(
                """
                SELECT e.number, d.domain,
                    (SELECT count(*) FROM bindings b WHERE b.extension_id = e.id AND b.expires_at > now()),
                    extract(epoch FROM e.created_at), extract(epoch FROM e.updated_at), e.display_name
                FROM extensions e JOIN sip_domains d ON d.id = e.domain_id
                WHERE $1::text IS NULL OR d.domain = $1
                ORDER BY d.domain, e.number
                """,
                [domain])
            return rows.rows.compactMap { row in
                guard let number = row[0], let domain = row[1] else { return nil }
                return DirectoryExtension(
                    aor: AddressOfRecord(number: number, domain: domain), liveBindingCount: row[2].flatMap { Int($0) } ?? 0,
                    displayName: row[5], createdAt: Self.date(row[3]), updatedAt: Self.date(row[4]))
            }
        }
    }

    /// True when the extension exists.
    public func hasExtension(_ aor: AddressOfRecord) throws -> Bool {
        try run { connection in
            try !connection.query(
                """
                SELECT 1 FROM extensions e JOIN sip_domains d ON d.id = e.domain_id
                WHERE d.domain = $1 AND e.number = $2
                """,
                [aor.domain, aor.number]
            ).isEmpty
        }
    }

    /// Replaces an extension's password (its hashes).
    public func changePassword(_ aor: AddressOfRecord, password: String) throws {
        try Self.check(aor)
        try DirectoryError.checkPassword(password)
        let credentials = ExtensionCredentials(aor: aor, password: password)
        try run { connection in
            try connection.transaction { connection in
                let updated = try connection.query(
                    """
                    UPDATE extensions e SET ha1_md5 = $3, ha1_sha256 = $4, updated_at = now()
                    FROM sip_domains d WHERE d.id = e.domain_id AND d.domain = $1 AND e.number = $2
                    """,
                    try Self.sealedHA1s(of: credentials, for: aor, on: connection))
                guard updated.affectedRows > 0 else { throw try Self.missing(aor, on: connection) }
                try Self.announce("extension-password \(aor)", on: connection)
            }
        }
    }

    /// Sets an extension's display name (checked by `DirectoryError.parseDisplayName`); nil or
    /// blank removes it. Every instance's ring pushes use it from the next call.
    public func setDisplayName(_ aor: AddressOfRecord, _ displayName: String?) throws {
        try Self.check(aor)
        let name = try displayName.flatMap { text throws(DirectoryError) in try DirectoryError.parseDisplayName(text) }
        try run { connection in
            try connection.transaction { connection in
                let updated = try connection.query(
                    """
                    UPDATE extensions e SET display_name = $3, updated_at = now()
                    FROM sip_domains d WHERE d.id = e.domain_id AND d.domain = $1 AND e.number = $2
                    """,
                    [aor.domain, aor.number, name])
                guard updated.affectedRows > 0 else { throw try Self.missing(aor, on: connection) }
                try Self.announce("extension-name \(aor)", on: connection)
            }
        }
    }

    /// An extension's display name, read on `connection` (nil: none, or no such extension).
    public static func displayName(of aor: AddressOfRecord, on connection: PostgresConnection) throws -> String? {
        try connection.query(
            """
            SELECT e.display_name FROM extensions e JOIN sip_domains d ON d.id = e.domain_id
            WHERE d.domain = $1 AND e.number = $2
            """,
            [aor.domain, aor.number]
        ).rows.first?[0] ?? nil
    }

    /// Removes an extension and its bindings (each announced on `rouse_bindings` as `removed`).
    public func removeExtension(_ aor: AddressOfRecord) throws {
        try Self.check(aor)
        try run { connection in
            try connection.transaction { connection in
                // Locking the extension row first keeps bindings from being added meanwhile.
                try connection.query(
                    """
                    SELECT e.id FROM extensions e JOIN sip_domains d ON d.id = e.domain_id
                    WHERE d.domain = $1 AND e.number = $2 FOR UPDATE OF e
                    """,
                    [aor.domain, aor.number])
                let bindings = try connection.query(
                    """
                    SELECT b.id::text FROM bindings b JOIN extensions e ON e.id = b.extension_id
                    JOIN sip_domains d ON d.id = e.domain_id
                    WHERE d.domain = $1 AND e.number = $2
                    """,
                    [aor.domain, aor.number]
                ).rows.compactMap { $0[0].flatMap(UUID.init(uuidString:)) }
                let removed = try connection.query(
                    """
                    DELETE FROM extensions e USING sip_domains d
                    WHERE d.id = e.domain_id AND d.domain = $1 AND e.number = $2
                    """,
                    [aor.domain, aor.number])
                guard removed.affectedRows > 0 else { throw try Self.missing(aor, on: connection) }
                try BindingRecords.announce(
                    bindings.map { BindingNotification(kind: .removed, aor: aor, bindingID: $0).payload }, on: connection)
                try Self.announce("extension-removed \(aor)", on: connection)
            }
        }
    }

    // MARK: - Helpers

    /// What the sealed HA1 of `aor` is bound to.
    static func ha1Context(_ algorithm: Digest.Algorithm, _ aor: AddressOfRecord) -> String {
        "extensions.\(algorithm == .md5 ? "ha1_md5" : "ha1_sha256"):\(aor)"
    }

    /// `$1` domain, `$2` number, `$3` and `$4` the sealed MD5 and SHA-256 HA1s.
    private static func sealedHA1s(of credentials: ExtensionCredentials, for aor: AddressOfRecord, on connection: PostgresConnection) throws -> [String?] {
        let sealed = try credentials.sealedHA1s(of: aor, on: connection)
        return [aor.domain, aor.number, sealed.md5, sealed.sha256]
    }

    private static func check(_ aor: AddressOfRecord) throws(DirectoryError) {
        guard AddressOfRecord.isValidNumber(aor.number) else { throw .invalidNumber(aor.number) }
        guard AddressOfRecord.isValidDomain(aor.domain) else { throw .invalidDomain(aor.domain) }
    }

    /// Which of the domain or the extension is missing.
    private static func missing(_ aor: AddressOfRecord, on connection: PostgresConnection) throws -> DirectoryError {
        try connection.query("SELECT 1 FROM sip_domains WHERE domain = $1", [aor.domain]).isEmpty
            ? .noSuchDomain(aor.domain) : .noSuchExtension(aor)
    }

    private static func announce(_ payload: String, on connection: PostgresConnection) throws {
        try connection.query("SELECT pg_notify($1, $2)", [notificationChannel, payload])
    }

    private static func date(_ text: String?) -> Date {
        Date(timeIntervalSince1970: text.flatMap { Double($0) } ?? 0)
    }
}

extension ExtensionCredentials {
    /// The two HA1s (of `aor`'s password) sealed as the `extensions` table stores them (for bulk
    /// loaders such as the benchmark's, which write rows themselves).
    public func sealedHA1s(of aor: AddressOfRecord, on connection: PostgresConnection) throws(SecretSealError) -> (md5: String, sha256: String) {
        (
            try connection.sealSecret(ha1MD5, context: PostgresDirectory.ha1Context(.md5, aor)),
            try connection.sealSecret(ha1SHA256, context: PostgresDirectory.ha1Context(.sha256, aor))
        )
    }
}

/// A `LISTEN` on the directory's channel taken before the start-up's directory load, so that the
/// notification listener's first `LISTEN` reads the directory again (a million extensions) only
/// when a change was announced in between. Used once, from one thread.
public final class PostgresDirectoryWatch: @unchecked Sendable {
    // @unchecked: `connection` is used by one thread at a time (taken once, then closed).
    private var connection: PostgresConnection?

    /// Listens from now on; call before loading the directory.
    public init(settings: PostgresSettings) throws {
        let connection = try settings.connect()
        try connection.query("LISTEN \(PostgresDirectory.notificationChannel)")
        self.connection = connection
    }

    /// Whether a directory change was announced since `init` (true as well when the watch broke or
    /// was already asked, since then one may have been missed); stops watching. Call once the
    /// listener is listening: any change after that is announced to it.
    public func changedSinceLoad() -> Bool {
        guard let connection else { return true }
        self.connection = nil
        // A change's commit signals the listening sessions before it returns, and PostgreSQL (14
        // and later) sends a signalled session its notifications before a statement's answer: after
        // one round trip, every change committed before now has reached the watch.
        guard (try? connection.query("SELECT 1")) != nil, connection.consumeInput() else { return true }
        return connection.nextNotification() != nil
    }
}
