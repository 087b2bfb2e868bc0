import Foundation

/// What a route's middleware and handler know about a request besides the request itself: the
/// path's parameters, and whatever the application's middleware adds (who authenticated, the
/// database deadline). A value, made fresh for every request.
public protocol HTTPRequestContext: Sendable {
    /// A context with no parameters yet.
    init()
    /// The path's parameters by name (`{address}` in `/extensions/{address}`), percent-decoded.
    var parameters: [String: String] { get set }
}

extension HTTPRequestContext {
    /// A path parameter; empty when the route has none of that name.
    public func parameter(_ name: String) -> String { parameters[name] ?? "" }
}

/// The rest of a chain: the next middleware, or the handler.
public typealias HTTPNext<Context> = @Sendable (HTTPRequest, Context) async throws -> HTTPResponse

/// A route's handler: the request and its context in, the answer out. It may suspend (awaiting
/// storage or another service); it must not block its thread.
public typealias HTTPHandler<Context> = @Sendable (HTTPRequest, Context) async throws -> HTTPResponse

/// A step that runs around a handler (the shape of hummingbird's `Middleware`): it may answer
/// itself (a refusal), change the request or the context and call `next`, or change what `next`
/// answered. Throwing `HTTPError` answers with its response.
public protocol HTTPMiddleware<Context>: Sendable {
    associatedtype Context: HTTPRequestContext
    func handle(_ request: HTTPRequest, context: Context, next: HTTPNext<Context>) async throws -> HTTPResponse
}

/// One entry of a route table: a method, a path pattern (`/api/v1/calls/{call}/decline`), the
/// middleware it runs through (first is outermost) and its handler. `documented` is false for
/// routes outside the API contract (the admin HTML pages), which the OpenAPI document leaves out.
public struct HTTPRoute<Context: HTTPRequestContext>: Sendable {
    public let method: String
    public let path: String
    public let documented: Bool
    let segments: [HTTPPathSegment]
    /// The number of fixed segments: how specific the pattern is.
    let specificity: Int
    let responder: HTTPNext<Context>

    public init(
        _ method: String, _ path: String, documented: Bool = true, middleware: [any HTTPMiddleware<Context>] = [],
        _ handler: @escaping HTTPHandler<Context>
    ) {
        self.method = method.uppercased()
        self.path = path
        self.documented = documented
        segments = Self.pieces(path).map { piece in
            piece.hasPrefix("{") && piece.hasSuffix("}") ? .parameter(String(piece.dropFirst().dropLast())) : .literal(String(piece))
        }
        specificity = segments.filter { if case .literal = $0 { return true } else { return false } }.count
        responder = middleware.reversed().reduce(handler) { next, step in
            { request, context in try await step.handle(request, context: context, next: next) }
        }
    }


    /// A path's segments between its slashes, empty ones kept (so `/admin/` is not `/admin`).
    static func pieces(_ path: String) -> [String] {
        let trimmed = path.hasPrefix("/") ? path.dropFirst() : path[...]
        return trimmed.isEmpty ? [] : trimmed.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
    }

    /// The parameters when a path of these `pieces` matches the pattern; nil otherwise.
    func match(_ pieces: [String]) -> [String: String]? {
        HTTPPathSegment.match(segments, pieces)
    }
}

/// A piece of a route's pattern: a fixed path segment, or a named parameter. A parameter takes one
/// or more whole segments (so `{call}` holds a Call-ID with `/` in it); where two patterns match,
/// the one with more fixed segments wins. Outside the generic `HTTPRoute`, so matching a path
/// (against every route, for every request) runs without looking up generic type metadata.
enum HTTPPathSegment: Sendable, Equatable {
    case literal(String)
    case parameter(String)

    /// The parameters when a path of these `pieces` matches `segments`; nil otherwise.
    static func match(_ segments: [HTTPPathSegment], _ pieces: [String]) -> [String: String]? {
        if case .literal(let text) = segments.first, pieces.first != text { return nil }
        var found: [String: String] = [:]
        return match(segments[...], pieces[...], &found) ? found : nil
    }

    private static func match(_ segments: ArraySlice<HTTPPathSegment>, _ pieces: ArraySlice<String>, _ found: inout [String: String]) -> Bool {
        guard let first = segments.first else { return pieces.isEmpty }
        switch first {
        case .literal(let text):
            guard pieces.first == text else { return false }
            return match(segments.dropFirst(), pieces.dropFirst(), &found)
        case .parameter(let name):
            // Greedy: the longest run of segments (never empty) that lets the rest match.
            let rest = segments.dropFirst()
            var take = pieces.count - rest.count
            while take >= 1 {
                var attempt = found
                let value = pieces.prefix(take).joined(separator: "/")
                attempt[name] = value
                if !value.isEmpty, match(rest, pieces.dropFirst(take), &attempt) {
                    found = attempt
                    return true
                }
                take -= 1
            }
            return false
        }
    }
}

/// Answers requests by its route table: the most specific pattern matching the path with the
/// request's method. An unknown path gets 404, a known path with another method 405 (with
/// `Allow`), both in the error shape. The router's own middleware (`middleware`, first is
/// outermost) runs around every request, those 404s and 405s included. A thrown `HTTPError`
/// answers with its response; any other error is a 500 without details.
///
/// Threading: immutable once built, so it may answer from any number of tasks at once.
public struct HTTPRouter<Context: HTTPRequestContext>: HTTPResponding {
    public let routes: [HTTPRoute<Context>]
    private let chain: HTTPNext<Context>

    public init(routes: [HTTPRoute<Context>], middleware: [any HTTPMiddleware<Context>] = []) {
        self.routes = routes
        let dispatch: HTTPNext<Context> = { request, context in try await Self.dispatch(routes, request, context) }
        chain = middleware.reversed().reduce(dispatch) { next, step in
            { request, context in try await step.handle(request, context: context, next: next) }
        }
    }

    public func respond(to request: HTTPRequest) async -> HTTPResponse {
        do {
            return try await chain(request, Context())
        } catch let refusal as HTTPError {
            return refusal.response
        } catch {
            return .error(500, code: "internal_error", message: "the request could not be handled")
        }
    }

    private static func dispatch(_ routes: [HTTPRoute<Context>], _ request: HTTPRequest, _ context: Context) async throws -> HTTPResponse {
        let pieces = HTTPRoute<Context>.pieces(request.path)
        let matching = routes.compactMap { route in route.match(pieces).map { (route, $0) } }
        guard !matching.isEmpty else { return .error(404, code: "not_found", message: "no such path") }
        let method = request.method.uppercased()
        guard let (route, parameters) = matching.filter({ $0.0.method == method }).max(by: { $0.0.specificity < $1.0.specificity }) else {
            let allowed = Set(matching.map(\.0.method)).sorted().joined(separator: ", ")
            return .error(405, code: "method_not_allowed", message: "\(request.method) is not allowed here", headers: [("Allow", allowed)])
        }
        var context = context
        context.parameters = parameters
        return try await route.responder(request, context)
    }

    /// The route pattern `path` would be served by (for metrics labels): the most specific
    /// matching route's pattern whatever the method, or nil when none matches (never the raw path
    /// of an unknown request, so labels stay few).
    public func routePattern(for path: String) -> String? {
        let pieces = HTTPRoute<Context>.pieces(path)
        return routes.filter { $0.match(pieces) != nil }.max { $0.specificity < $1.specificity }?.path
    }
}

/// What `HTTPServer` hands each request to: it answers, suspending as long as it needs.
public protocol HTTPResponding: Sendable {
    func respond(to request: HTTPRequest) async -> HTTPResponse
}
