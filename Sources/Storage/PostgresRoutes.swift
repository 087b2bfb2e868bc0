public import SIPProxy

/// A route as an operator enters it (CLI, API, pages): text fields checked here, once, with the
/// field named in the error.
public struct RouteDraft: Sendable, Equatable {
    public var organisation: String
    public var name: String
    /// Where among the organisation's routes it is tried; nil: after the last (its position + 10).
    public var position: Int?
    public var pattern: String
    public var strip: Int
    public var prepend: String
    public var hops: [String]
    public var hopTimeoutMilliseconds: Int
    public var username: String?
    /// Write-only: stored for the digest answer to the trunk, never listed or shown.
    public var password: String?
    public var callerIdentity: String
    public var emergency: Bool
    /// RFC 5806 Diversion on diverted calls, beside History-Info.
    public var diversionHeader: Bool

    public init(
        organisation: String, name: String, position: Int? = nil, pattern: String, strip: Int = 0, prepend: String = "", hops: [String],
        hopTimeoutMilliseconds: Int = 4000, username: String? = nil, password: String? = nil, callerIdentity: String = "asserted-identity",
        emergency: Bool = false, diversionHeader: Bool = false
    ) {
        self.diversionHeader = diversionHeader
        self.organisation = organisation
        self.name = name
        self.position = position
        self.pattern = pattern
        self.strip = strip
        self.prepend = prepend
        self.hops = hops
        self.hopTimeoutMilliseconds = hopTimeoutMilliseconds
        self.username = username
        self.password = password
        self.callerIdentity = callerIdentity
        self.emergency = emergency
    }

    /// The route it describes (id 0), or the first field that is wrong.
    public func validated() throws(RouteError) -> OutboundRoute {
        guard !name.isEmpty, name.count <= 64, name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-_.".contains($0)) }) else {
            throw RouteError(field: "name", problem: "a route name is 1 to 64 letters, digits, -, _ or .")
        }
        let pattern: RoutePattern
        do { pattern = try RoutePattern(parsing: self.pattern) } catch { throw RouteError(field: "pattern", problem: error.description) }
        guard strip >= 0, strip <= 32 else { throw RouteError(field: "strip", problem: "strip is 0 to 32 characters") }
        guard prepend.allSatisfy({ $0.isASCII && ($0.isNumber || "+*#".contains($0)) }) else {
            throw RouteError(field: "prepend", problem: "prepend is digits, +, * and #")
        }
        guard !hops.isEmpty, hops.count <= 16 else { throw RouteError(field: "hops", problem: "a route has 1 to 16 hops") }
        var parsedHops: [RouteHop] = []
        for hop in hops {
            do { parsedHops.append(try RouteHop(parsing: hop)) } catch { throw RouteError(field: "hops", problem: error.description) }
        }
        guard (100...120_000).contains(hopTimeoutMilliseconds) else {
            throw RouteError(field: "hop_timeout", problem: "the hop timeout is 100 ms to 120 s")
        }
        if (username == nil) != (password == nil) || username?.isEmpty == true || password?.isEmpty == true {
            throw RouteError(field: "username", problem: "a route's credentials are a username and a password, both or neither")
        }
        let identity: CallerIdentity
        do { identity = try CallerIdentity(parsing: callerIdentity) } catch { throw RouteError(field: "caller_identity", problem: error.description) }
        return OutboundRoute(
            id: 0, organisation: organisation.lowercased(), name: name, position: position ?? 0, pattern: pattern, strip: strip, prepend: prepend,
            hops: parsedHops, hopTimeout: .milliseconds(hopTimeoutMilliseconds), username: username, callerIdentity: identity,
            emergency: emergency, diversionHeader: diversionHeader)
    }
}

/// A route that cannot be stored, with the field at fault (the API's JSON error names it).
public struct RouteError: Error, Sendable, Equatable, CustomStringConvertible {
    public let field: String
    public let problem: String

    public init(field: String, problem: String) {
        self.field = field
        self.problem = problem
    }

    public var description: String { "\(field): \(problem)" }
}

/// The outbound routes in PostgreSQL (`outbound_routes`, migration 600). Passwords are stored sealed
/// (`SealedSecrets`, bound to the route's id) and come out only through `credentials()`, for the
/// digest answer to a trunk; listings never carry them.
/// Every change is announced on `rouse_routes` by a trigger, so each instance reloads its table.
///
/// Threading: not thread-safe, like the `PostgresConnection` it uses; every call blocks until
/// PostgreSQL answers (a command-line run or a storage worker, never the SIP path).
public struct PostgresRoutes {
    let connection: PostgresConnection

    public init(connection: PostgresConnection) {
        self.connection = connection
    }

    /// The channel the trigger announces changes on.
    public static let notificationChannel = "rouse_routes"

    /// Validates and stores a route; returns its id.
    public func add(_ draft: RouteDraft) throws -> Int {
        let route = try draft.validated()
        // The id first: the sealed password is bound to it.
        guard let newID = try connection.query("SELECT nextval(pg_get_serial_sequence('outbound_routes', 'id')) AS id").value(0, "id") else {
            throw PostgresError(kind: .unexpectedResult, message: "PostgreSQL at \(connection.endpoint): outbound_routes has no id sequence")
        }
        let password = try draft.password.map { try connection.sealSecret($0, context: Self.passwordContext(newID)) }
        do {
            let rows = try connection.query(
                """
                INSERT INTO outbound_routes
                    (id, domain_id, name, position, pattern, strip, prepend, hops, hop_timeout_ms, username, password, caller_identity, emergency, diversion_header)
                SELECT $14::bigint, d.id, $2, COALESCE($3::integer, (SELECT max(position) + 10 FROM outbound_routes WHERE domain_id = d.id), 10), $4, $5::integer, $6, $7::jsonb, $8::integer, $9, $10, $11, $12::boolean, $13::boolean
                FROM sip_domains d WHERE d.domain = $1
                RETURNING id
                """,
                [
                    route.organisation, route.name, draft.position.map(String.init), route.pattern.description, String(route.strip), route.prepend,
                    JSONText.array(of: route.hops.map(\.description)), String(draft.hopTimeoutMilliseconds), draft.username, password,
                    route.callerIdentity.description, route.emergency ? "true" : "false", route.diversionHeader ? "true" : "false", newID,
                ])
            guard !rows.isEmpty, let id = rows.value(0, "id").flatMap({ Int($0) }) else {
                throw RouteError(field: "organisation", problem: "there is no organisation \(route.organisation)")
            }
            return id
        } catch let error as PostgresError where error.isUniqueViolation {
            throw RouteError(field: "name", problem: "\(route.organisation) already has a route named \(route.name)")
        }
    }

    /// Removes a route of an organisation; false when there was none by that name.
    @discardableResult
    public func remove(organisation: String, name: String) throws -> Bool {
        try connection.query(
            "DELETE FROM outbound_routes r USING sip_domains d WHERE d.id = r.domain_id AND d.domain = $1 AND r.name = $2",
            [organisation.lowercased(), name]
        ).affectedRows == 1
    }

    /// A route as listed: everything but the password, and whether there is one.
    public struct Listed: Sendable, Equatable {
        public let route: OutboundRoute
        public let hasPassword: Bool
    }

    /// Every route (of one organisation, or all), in organisation and position order.
    public func list(organisation: String? = nil) throws -> [Listed] {
        try rows(organisation: organisation).map { Listed(route: $0.route, hasPassword: $0.password != nil) }
    }

    /// Every route with its password (opened), for the instance's route table and digest answers only.
    public func credentials() throws -> [(route: OutboundRoute, password: String?)] {
        try rows(organisation: nil).map { row in
            (row.route, try row.password.map { try connection.openSecret($0, context: Self.passwordContext(String(row.route.id))) })
        }
    }

    /// What the sealed password of route `id` is bound to.
    static func passwordContext(_ id: String) -> String { "outbound_routes.password:\(id)" }

    /// Every route with its password as stored (sealed).

    private func rows(organisation: String?) throws -> [(route: OutboundRoute, password: String?)] {
        let result = try connection.query(
            """
            SELECT r.id, d.domain, r.name, r.position, r.pattern, r.strip, r.prepend,
                   array_to_string(ARRAY(SELECT jsonb_array_elements_text(r.hops)), E'\\n') AS hops,
                   r.hop_timeout_ms, r.username, r.password, r.caller_identity, r.emergency, r.diversion_header
            FROM outbound_routes r JOIN sip_domains d ON d.id = r.domain_id
            WHERE $1::text IS NULL OR d.domain = $1
            ORDER BY d.domain, r.position, r.id
            """,
            [organisation?.lowercased()])
        return result.rows.indices.compactMap { index -> (route: OutboundRoute, password: String?)? in
            guard let id = result.value(index, "id").flatMap({ Int($0) }),
                let pattern = try? RoutePattern(parsing: result.value(index, "pattern") ?? ""),
                let identity = try? CallerIdentity(parsing: result.value(index, "caller_identity") ?? "")
            else { return nil }
            let hops = (result.value(index, "hops") ?? "").split(separator: "\n").compactMap { try? RouteHop(parsing: String($0)) }
            let route = OutboundRoute(
                id: id, organisation: result.value(index, "domain") ?? "", name: result.value(index, "name") ?? "",
                position: result.value(index, "position").flatMap { Int($0) } ?? 0, pattern: pattern,
                strip: result.value(index, "strip").flatMap { Int($0) } ?? 0, prepend: result.value(index, "prepend") ?? "", hops: hops,
                hopTimeout: .milliseconds(result.value(index, "hop_timeout_ms").flatMap { Int($0) } ?? 4000),
                username: result.value(index, "username"), callerIdentity: identity, emergency: result.value(index, "emergency") == "t",
                diversionHeader: result.value(index, "diversion_header") == "t")
            return (route, result.value(index, "password"))
        }
    }
}
