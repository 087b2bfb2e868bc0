public import Registrar
import SIPMessage
import SIPProxy

/// An extension's call forwarding as an operator enters it (CLI): each target as text, checked
/// and made a URI by `PostgresDiversions.set`. A target is a URI (`sip:vm1001@pbx.example`,
/// `tel:+441234567`), `user@domain`, or a number: an extension of the same organisation when one
/// has that number, else a number dialled through the outbound routes
/// (`sip:+441234567@example.com;user=phone`).
public struct DiversionDraft: Sendable, Equatable {
    public var always: String?
    public var busy: String?
    public var noAnswer: String?
    /// The no-answer ring time in seconds (1 to 3600); nil: `ring_timeout`.
    public var noAnswerAfterSeconds: Int?
    public var unreachable: String?

    public init(always: String? = nil, busy: String? = nil, noAnswer: String? = nil, noAnswerAfterSeconds: Int? = nil, unreachable: String? = nil) {
        self.always = always
        self.busy = busy
        self.noAnswer = noAnswer
        self.noAnswerAfterSeconds = noAnswerAfterSeconds
        self.unreachable = unreachable
    }
}

/// Extensions' call forwarding in PostgreSQL (`extension_diversions`, migration 602). A trigger
/// announces every change on `rouse_directory`, so every instance reloads its directory, which
/// carries the rules (`DirectorySnapshot.diversions`): a call never reads the database for them.
///
/// Threading: not thread-safe, like the `PostgresConnection` it uses; every call blocks until
/// PostgreSQL answers (a command-line run or a storage worker, never the SIP path).
public struct PostgresDiversions {
    let connection: PostgresConnection

    public init(connection: PostgresConnection) {
        self.connection = connection
    }

    /// Sets the extension's forwarding (replacing what it had) and returns it as stored; a draft
    /// with no target clears it. Refusals are `RouteError`s naming the field.
    @discardableResult
    public func set(_ aor: AddressOfRecord, _ draft: DiversionDraft) throws -> DiversionRules {
        try connection.transaction { connection in
            guard let id = try Self.extensionID(aor, on: connection) else { throw DirectoryError.noSuchExtension(aor) }
            func target(_ text: String?, _ field: String) throws -> SIPURI? {
                guard let text = text?.trimmingSIPWhitespace, !text.isEmpty else { return nil }
                return try Self.target(text, field: field, of: aor, on: connection)
            }
            if let seconds = draft.noAnswerAfterSeconds, !(1...3600).contains(seconds) {
                throw RouteError(field: "after", problem: "the no-answer ring time is 1 to 3600 seconds")
            }
            let rules = DiversionRules(
                always: try target(draft.always, "always"), busy: try target(draft.busy, "busy"), noAnswer: try target(draft.noAnswer, "no-answer"),
                noAnswerAfter: draft.noAnswerAfterSeconds.map { .seconds($0) }, unreachable: try target(draft.unreachable, "unreachable"))
            if draft.noAnswerAfterSeconds != nil, rules.noAnswer == nil {
                throw RouteError(field: "after", problem: "a no-answer ring time needs a no-answer target")
            }
            guard !rules.isEmpty else {
                try connection.query("DELETE FROM extension_diversions WHERE extension_id = $1", [id])
                return rules
            }
            try connection.query(
                """
                INSERT INTO extension_diversions (extension_id, always_target, busy_target, no_answer_target, no_answer_after_s, unreachable_target)
                VALUES ($1, $2, $3, $4, $5::integer, $6)
                ON CONFLICT (extension_id) DO UPDATE SET always_target = $2, busy_target = $3, no_answer_target = $4,
                    no_answer_after_s = $5::integer, unreachable_target = $6, updated_at = now()
                """,
                [id, rules.always?.description, rules.busy?.description, rules.noAnswer?.description, draft.noAnswerAfterSeconds.map(String.init),
                 rules.unreachable?.description])
            return rules
        }
    }

    /// Removes the extension's forwarding; false when it had none.
    @discardableResult
    public func clear(_ aor: AddressOfRecord) throws -> Bool {
        try connection.transaction { connection in
            guard let id = try Self.extensionID(aor, on: connection) else { throw DirectoryError.noSuchExtension(aor) }
            return try connection.query("DELETE FROM extension_diversions WHERE extension_id = $1", [id]).affectedRows > 0
        }
    }

    /// The extension's forwarding; nil when it has none.
    public func rules(of aor: AddressOfRecord) throws -> DiversionRules? {
        guard try Self.extensionID(aor, on: connection) != nil else { throw DirectoryError.noSuchExtension(aor) }
        return try Self.all(on: connection, only: aor)[aor]
    }

    /// Every extension's forwarding (the directory's load), or one extension's. A stored target
    /// that no longer parses is left out.
    static func all(on connection: PostgresConnection, only aor: AddressOfRecord? = nil) throws -> [AddressOfRecord: DiversionRules] {
        let rows = try connection.query(
            """
            SELECT e.number, d.domain, v.always_target, v.busy_target, v.no_answer_target, v.no_answer_after_s, v.unreachable_target
            FROM extension_diversions v JOIN extensions e ON e.id = v.extension_id JOIN sip_domains d ON d.id = e.domain_id
            WHERE $1::text IS NULL OR (d.domain = $1 AND e.number = $2)
            """,
            [aor?.domain, aor?.number])
        var result: [AddressOfRecord: DiversionRules] = [:]
        for row in rows.rows {
            guard let number = row[0], let domain = row[1] else { continue }
            func uri(_ text: String?) -> SIPURI? { text.flatMap { try? SIPURI(parsing: $0) } }
            let rules = DiversionRules(
                always: uri(row[2]), busy: uri(row[3]), noAnswer: uri(row[4]), noAnswerAfter: row[5].flatMap { Int($0) }.map { .seconds($0) },
                unreachable: uri(row[6]))
            if !rules.isEmpty { result[AddressOfRecord(number: number, domain: domain)] = rules }
        }
        return result
    }

    private static func extensionID(_ aor: AddressOfRecord, on connection: PostgresConnection) throws -> String? {
        try connection.query(
            "SELECT e.id FROM extensions e JOIN sip_domains d ON d.id = e.domain_id WHERE d.domain = $1 AND e.number = $2",
            [aor.domain, aor.number]
        ).rows.first?[0] ?? nil
    }

    /// A target as entered, made a URI: a URI as is, `user@domain` as a SIP URI, a number as the
    /// extension of `aor`'s organisation that has it, else as a number for the outbound routes.
    static func target(_ text: String, field: String, of aor: AddressOfRecord, on connection: PostgresConnection) throws -> SIPURI {
        let uriText: String
        if text.contains(":") {
            uriText = text
        } else if text.contains("@") {
            uriText = "sip:" + text
        } else {
            // A number as the routes read one (RFC 3966 visual separators dropped).
            guard let dialled = DialledTarget(SIPURI(user: text, host: aor.domain)), dialled.isNumber else {
                throw RouteError(field: field, problem: "'\(text)' is neither a URI, user@domain nor a number")
            }
            let number = dialled.user
            let isExtension = try !connection.query(
                "SELECT 1 FROM extensions e JOIN sip_domains d ON d.id = e.domain_id WHERE d.domain = $1 AND e.number = $2", [aor.domain, number]
            ).isEmpty
            uriText = "sip:\(number)@\(aor.domain)" + (isExtension ? "" : ";user=phone")
        }
        let uri: SIPURI
        do { uri = try SIPURI(parsing: uriText) } catch { throw RouteError(field: field, problem: "'\(text)': \(error.description)") }
        guard uri.scheme == .tel || (uri.user?.isEmpty == false) else {
            throw RouteError(field: field, problem: "'\(text)' names no user or number")
        }
        guard !(uri.scheme != .tel && uri.user == aor.number && uri.host.lowercased() == aor.domain) else {
            throw RouteError(field: field, problem: "an extension cannot forward to itself")
        }
        return uri
    }
}
