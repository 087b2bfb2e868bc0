public import CallRouting
public import Foundation
import HTTPServer
import Registrar
import RouseVocabulary
import SIPProxy
public import Storage

/// Outbound routes of an organisation (list, add, remove; a route's password is write-only, its
/// answers say `hasPassword`), an organisation's national patterns and an extension's class of
/// service (the toll-fraud guard's data, docs/calls.md). Every instance picks a change up at once
/// (`NOTIFY rouse_routes`).
extension AdminAPI {
    // MARK: - Routes

    /// `GET /routes` (every organisation's) and `GET /organisations/{domain}/routes` (404 for an
    /// unknown organisation), in organisation and position order.
    @Sendable func listRoutes(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let given = context.parameter("domain")
        let domain: String? = given.isEmpty ? nil : try DirectoryError.parseDomain(given)
        let store = try context.store()
        if let domain { try await Self.requireOrganisation(domain, store) }
        let routes = try await store.perform { try PostgresRoutes(connection: $0).list(organisation: domain) }
        return .json(200, AdminAnswer.List(items: routes.map(AdminAnswer.Route.init), total: routes.count))
    }

    /// `POST /organisations/{domain}/routes`: 201 with the route as stored (its position filled in).
    @Sendable func addRoute(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let draft = try Self.parseRouteBody(request.body, organisation: context.parameter("domain"))
        let stored = try await context.store().perform { connection -> PostgresRoutes.Listed? in
            let routes = PostgresRoutes(connection: connection)
            let id = try routes.add(draft)
            return try routes.list(organisation: draft.organisation).first { $0.route.id == id }
        }
        guard let stored else { return .error(409, code: "conflict", message: "the route was removed as it was added") }
        return .json(201, AdminAnswer.Route(stored))
    }

    /// `DELETE /organisations/{domain}/routes/{name}`.
    @Sendable func removeRoute(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let domain = context.parameter("domain").lowercased()
        let name = context.parameter("name")
        guard try await context.store().perform({ try PostgresRoutes(connection: $0).remove(organisation: domain, name: name) }) else {
            return .error(404, code: "not_found", message: "\(domain) has no route named \(name)")
        }
        return .json(200, ["status": "removed"])
    }

    /// 404 (`DirectoryError.noSuchDomain`) unless the organisation exists.
    static func requireOrganisation(_ domain: String, _ store: Store) async throws {
        guard try await store.directory({ try $0.listDomains() }).contains(where: { $0.domain == domain }) else {
            throw DirectoryError.noSuchDomain(domain)
        }
    }

    /// A `POST /organisations/{domain}/routes` body.
    struct RouteBody: Decodable {
        let name: JSONField
        let position: JSONField
        let pattern: JSONField
        let strip: JSONField
        let prepend: JSONField
        let hops: JSONField
        let hopTimeoutMs: JSONField
        let username: JSONField
        let password: JSONField
        let callerIdentity: JSONField
        let emergency: JSONField
        let diversionHeader: JSONField
    }

    /// Reads a `POST /organisations/{domain}/routes` body into a draft (not yet validated: storing
    /// it validates, naming the field). Pure; throws what `response(for:)` turns into a 400.
    public static func parseRouteBody(_ data: Data, organisation: String) throws -> RouteDraft {
        let body = try fields(RouteBody.self, data)
        func whole(_ value: JSONField, _ name: String) throws -> Int? {
            guard value.hasValue else { return nil }
            guard case .number(let number) = value, number.rounded() == number, abs(number) < 1e9 else {
                throw FieldProblem(field: name, message: "\(name) must be a whole number")
            }
            return Int(number)
        }
        guard case .array(let items) = body.hops else { throw FieldProblem(field: "hops", message: "hops must be an array of next hops (strings)") }
        let hops = try items.map { item in
            guard let text = item.string else { throw FieldProblem(field: "hops", message: "hops must be an array of next hops (strings)") }
            return text
        }
        func flag(_ value: JSONField, _ name: String) throws -> Bool {
            guard value.hasValue else { return false }
            guard case .bool(let flag) = value else { throw FieldProblem(field: name, message: "\(name) must be true or false") }
            return flag
        }
        func optional(_ value: JSONField, _ name: String) throws -> String? {
            value.hasValue ? try string(value, name) : nil
        }
        let identity = try string(body.callerIdentity, "callerIdentity", optional: true)
        return RouteDraft(
            organisation: organisation, name: try string(body.name, "name"), position: try whole(body.position, "position"),
            pattern: try string(body.pattern, "pattern"), strip: try whole(body.strip, "strip") ?? 0,
            prepend: try string(body.prepend, "prepend", optional: true), hops: hops,
            hopTimeoutMilliseconds: try whole(body.hopTimeoutMs, "hopTimeoutMs") ?? 4000, username: try optional(body.username, "username"),
            password: try optional(body.password, "password"), callerIdentity: identity.isEmpty ? "asserted-identity" : identity,
            emergency: try flag(body.emergency, "emergency"), diversionHeader: try flag(body.diversionHeader, "diversionHeader"))
    }

    /// A route's (or class setting's) field as the API's bodies name it.
    static func routeField(_ field: String) -> String {
        switch field {
        case "hop_timeout": return "hopTimeoutMs"
        case "caller_identity": return "callerIdentity"
        case "national_patterns": return "patterns"
        case "class_of_service": return "classOfService"
        default: return field
        }
    }

    /// A `RouteError` as an answer: a missing organisation or extension (named by the path) is
    /// 404, a bad field 400 naming it as the body does.
    static func routeResponse(_ refusal: RouteError) -> HTTPResponse {
        if refusal.field == "organisation" || refusal.field == "extension" {
            return .error(404, code: "not_found", message: refusal.problem)
        }
        return .error(400, code: "invalid_field", message: refusal.description, field: routeField(refusal.field))
    }

    // MARK: - National patterns and class of service

    /// A `PUT /organisations/{domain}/national-patterns` body.
    struct NationalPatternsBody: Decodable {
        let patterns: JSONField
    }

    /// Reads a `PUT /organisations/{domain}/national-patterns` body: the pattern texts as given
    /// (storing them checks each). Pure.
    public static func parseNationalPatternsBody(_ data: Data) throws -> [String] {
        let body = try fields(NationalPatternsBody.self, data)
        let problem = FieldProblem(field: "patterns", message: "patterns must be an array of patterns (prefix:…, regex:…, domain:…)")
        guard case .array(let items) = body.patterns else { throw problem }
        return try items.map { item in
            guard let text = item.string else { throw problem }
            return text
        }
    }

    /// `GET /organisations/{domain}/national-patterns`.
    @Sendable func nationalPatterns(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let domain = try DirectoryError.parseDomain(context.parameter("domain"))
        let patterns = try await context.store().perform { try PostgresCallClasses(connection: $0).nationalPatterns(organisation: domain) }
        return .json(200, AdminAnswer.NationalPatterns(domain: domain, patterns: patterns.map(\.description)))
    }

    /// `PUT /organisations/{domain}/national-patterns`: replaces them (an empty array: none).
    @Sendable func setNationalPatterns(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let domain = try DirectoryError.parseDomain(context.parameter("domain"))
        let given = try Self.parseNationalPatternsBody(request.body)
        let patterns = try await context.store().perform { connection in
            let classes = PostgresCallClasses(connection: connection)
            try classes.setNationalPatterns(given, organisation: domain)
            return try classes.nationalPatterns(organisation: domain)
        }
        return .json(200, AdminAnswer.NationalPatterns(domain: domain, patterns: patterns.map(\.description)))
    }

    /// A `PUT /extensions/{address}/class-of-service` body.
    struct ClassOfServiceBody: Decodable {
        let classOfService: JSONField
    }

    /// Reads a `PUT /extensions/{address}/class-of-service` body: a class, or nil for the
    /// instance's default (`null` or `"default"`). Pure.
    public static func parseClassOfServiceBody(_ data: Data) throws -> ClassOfService? {
        let body = try fields(ClassOfServiceBody.self, data)
        guard body.classOfService.isPresent else { throw FieldProblem(field: "classOfService", message: "classOfService is required") }
        return try PostgresCallClasses.classOfService(named: body.classOfService.hasValue ? try string(body.classOfService, "classOfService") : "default")
    }

    /// `PUT /extensions/{address}/class-of-service`.
    @Sendable func setClassOfService(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let aor = try DirectoryError.parseAddress(context.parameter("address"))
        let value = try Self.parseClassOfServiceBody(request.body)
        try await context.store().perform { try PostgresCallClasses(connection: $0).setClass(value, number: aor.number, organisation: aor.domain) }
        return .json(200, AdminAnswer.ClassOfServiceSet(address: aor.description, classOfService: value?.rawValue))
    }

    /// A route in a list (for `rouse route list --json`): every field but the password.
    public static func item(_ listed: PostgresRoutes.Listed) -> [String: Any] {
        AdminAnswer.dictionary(AdminAnswer.Route(listed))
    }
}

extension AdminAnswer {
    /// An outbound route: every field but the password, and whether there is one.
    struct Route: Encodable, Sendable {
        let id: Int
        let organisation: String
        let name: String
        let position: Int
        let pattern: String
        let strip: Int
        let prepend: String
        let hops: [String]
        let hopTimeoutMs: Int
        @NullWhenAbsent var username: String?
        let hasPassword: Bool
        let callerIdentity: String
        let emergency: Bool
        let diversionHeader: Bool

        init(_ listed: PostgresRoutes.Listed) {
            let route = listed.route
            id = route.id
            organisation = route.organisation
            name = route.name
            position = route.position
            pattern = route.pattern.description
            strip = route.strip
            prepend = route.prepend
            hops = route.hops.map(\.description)
            hopTimeoutMs = route.hopTimeout.wholeMilliseconds
            username = route.username
            hasPassword = listed.hasPassword
            callerIdentity = route.callerIdentity.description
            emergency = route.emergency
            diversionHeader = route.diversionHeader
        }
    }

    /// An organisation's national patterns.
    struct NationalPatterns: Encodable, Sendable {
        let domain: String
        let patterns: [String]
    }

    /// An extension's class of service once set (null: the instance's default).
    struct ClassOfServiceSet: Encodable, Sendable {
        let address: String
        @NullWhenAbsent var classOfService: String?
    }
}
