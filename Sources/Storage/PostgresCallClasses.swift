public import CallRouting
public import Registrar
public import SIPProxy

/// The toll-fraud guard's data as stored: each extension's class of service (absent: the
/// instance's `outside_call_class`) and each organisation's national patterns. A value, safe to share.
public struct CallClasses: Sendable, Equatable {
    /// The extensions with a class of their own.
    public var classes: [AddressOfRecord: ClassOfService]
    /// The organisations (lower case) with national patterns, in the order they were given.
    public var national: [String: [RoutePattern]]

    public init(classes: [AddressOfRecord: ClassOfService] = [:], national: [String: [RoutePattern]] = [:]) {
        self.classes = classes
        self.national = national
    }
}

/// The class of service of extensions and the national patterns of organisations in PostgreSQL
/// (`extensions.call_class`, `sip_domains.national_patterns`, migration 601). Every change is
/// announced on `rouse_routes` by a trigger (`PostgresRoutes.notificationChannel`), so each
/// instance reloads them with its routes.
///
/// Threading: not thread-safe, like the `PostgresConnection` it uses; every call blocks until
/// PostgreSQL answers (a command-line run or a storage worker, never the SIP path).
public struct PostgresCallClasses {
    let connection: PostgresConnection

    public init(connection: PostgresConnection) {
        self.connection = connection
    }

    /// At most this many national patterns per organisation.
    public static let maximumPatterns = 64

    /// A class of service as the CLI, the API and the pages write it: `internal`, `national`,
    /// `international`, or `default` (nil: the instance's `outside_call_class`). Pure.
    public static func classOfService(named text: String) throws(RouteError) -> ClassOfService? {
        if text == "default" { return nil }
        guard let value = ClassOfService(rawValue: text) else {
            throw RouteError(field: "class_of_service", problem: "'\(text)' is not internal, national, international or default")
        }
        return value
    }

    /// Sets an extension's class of service; nil: back to the instance's default. Throws
    /// `RouteError` naming `extension` when there is no such extension.
    public func setClass(_ value: ClassOfService?, number: String, organisation: String) throws {
        let updated = try connection.query(
            """
            UPDATE extensions e SET call_class = $3, updated_at = now() FROM sip_domains d
            WHERE d.id = e.domain_id AND d.domain = $1 AND e.number = $2
            """,
            [organisation.lowercased(), number, value?.rawValue])
        guard updated.affectedRows == 1 else {
            throw RouteError(field: "extension", problem: "there is no extension \(number)@\(organisation.lowercased())")
        }
    }

    /// The class of service of one extension: nil when it has none of its own (the instance's
    /// default applies). Throws `RouteError` naming `extension` when there is no such extension.
    public func callClass(number: String, organisation: String) throws -> ClassOfService? {
        let rows = try connection.query(
            "SELECT e.call_class FROM extensions e JOIN sip_domains d ON d.id = e.domain_id WHERE d.domain = $1 AND e.number = $2",
            [organisation.lowercased(), number])
        guard !rows.isEmpty else {
            throw RouteError(field: "extension", problem: "there is no extension \(number)@\(organisation.lowercased())")
        }
        return rows.value(0, "call_class").flatMap(ClassOfService.init(rawValue:))
    }

    /// Replaces an organisation's national patterns (empty: none, so every outside call is
    /// international). Each is checked as a route's pattern is; throws `RouteError` naming
    /// `national_patterns` for a bad one, `organisation` when there is no such organisation.
    public func setNationalPatterns(_ patterns: [String], organisation: String) throws {
        let checked = try Self.checkedPatterns(patterns)
        let updated = try connection.query(
            "UPDATE sip_domains SET national_patterns = $2::jsonb WHERE domain = $1",
            [organisation.lowercased(), JSONText.array(of: checked.map(\.description))])
        guard updated.affectedRows == 1 else {
            throw RouteError(field: "organisation", problem: "there is no organisation \(organisation.lowercased())")
        }
    }

    /// `patterns` parsed and compiled, in order; the first bad one named in a `RouteError` for
    /// `national_patterns`. Pure.
    public static func checkedPatterns(_ patterns: [String]) throws(RouteError) -> [RoutePattern] {
        guard patterns.count <= maximumPatterns else {
            throw RouteError(field: "national_patterns", problem: "an organisation has at most \(maximumPatterns) national patterns")
        }
        var checked: [RoutePattern] = []
        for text in patterns {
            let pattern: RoutePattern
            do { pattern = try RoutePattern(parsing: text) } catch { throw RouteError(field: "national_patterns", problem: error.description) }
            guard CompiledRoutePattern(pattern) != nil else {
                throw RouteError(field: "national_patterns", problem: "\"\(text)\" does not compile as a regular expression")
            }
            checked.append(pattern)
        }
        return checked
    }

    /// The national patterns of one organisation, in order. Throws `RouteError` naming
    /// `organisation` when there is no such organisation.
    public func nationalPatterns(organisation: String) throws -> [RoutePattern] {
        let domain = organisation.lowercased()
        guard try !connection.query("SELECT 1 FROM sip_domains WHERE domain = $1", [domain]).isEmpty else {
            throw RouteError(field: "organisation", problem: "there is no organisation \(domain)")
        }
        return try load(organisation: domain).national[domain] ?? []
    }

    /// Every class of service and national pattern (of one organisation, or all), for the
    /// instance's guard and the admin pages.
    public func load(organisation: String? = nil) throws -> CallClasses {
        let domain = organisation?.lowercased()
        var loaded = CallClasses()
        let classes = try connection.query(
            """
            SELECT e.number, d.domain, e.call_class FROM extensions e JOIN sip_domains d ON d.id = e.domain_id
            WHERE e.call_class IS NOT NULL AND ($1::text IS NULL OR d.domain = $1)
            """,
            [domain])
        for index in classes.rows.indices {
            guard let number = classes.value(index, "number"), let domain = classes.value(index, "domain"),
                let value = classes.value(index, "call_class").flatMap(ClassOfService.init(rawValue:))
            else { continue }
            loaded.classes[AddressOfRecord(number: number, domain: domain)] = value
        }
        let patterns = try connection.query(
            """
            SELECT d.domain, p.pattern FROM sip_domains d
            CROSS JOIN LATERAL jsonb_array_elements_text(d.national_patterns) WITH ORDINALITY AS p (pattern, position)
            WHERE $1::text IS NULL OR d.domain = $1
            ORDER BY d.domain, p.position
            """,
            [domain])
        for index in patterns.rows.indices {
            guard let domain = patterns.value(index, "domain"),
                let pattern = try? RoutePattern(parsing: patterns.value(index, "pattern") ?? "")
            else { continue }
            loaded.national[domain, default: []].append(pattern)
        }
        return loaded
    }
}
