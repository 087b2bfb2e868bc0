import Foundation

/// A request as a route sees it: method, path (no query string), headers with lower-case names,
/// the whole body (at most the server's limit), the client's address and the query string's
/// arguments (decoded; a repeated one keeps its last value). A value, safe to share.
public struct HTTPRequest: Sendable {
    public let method: String
    public let path: String
    public let headers: [String: String]
    public let body: Data
    public let remoteAddress: String?
    public let query: [String: String]

    public init(
        method: String, path: String, headers: [String: String], body: Data, remoteAddress: String?, query: [String: String] = [:]
    ) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.remoteAddress = remoteAddress
        self.query = query
    }

    /// A header by name, in any case.
    public func header(_ name: String) -> String? { headers[name.lowercased()] }
}

/// An answer: status, headers (in order) and body. A value, safe to share.
public struct HTTPResponse: Sendable, Equatable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: Data

    public init(status: Int, headers: [(String, String)] = [], body: Data = Data()) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public static func == (lhs: HTTPResponse, rhs: HTTPResponse) -> Bool {
        lhs.status == rhs.status && lhs.body == rhs.body && lhs.headers.map { "\($0.0): \($0.1)" } == rhs.headers.map { "\($0.0): \($0.1)" }
    }

    /// A JSON answer of `object` (keys sorted, so equal objects give equal bytes).
    public static func json(_ status: Int, _ object: [String: Any], headers: [(String, String)] = []) -> HTTPResponse {
        let body = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
        return HTTPResponse(status: status, headers: [("Content-Type", "application/json")] + headers, body: body + Data("\n".utf8))
    }

    /// The one error shape of the API: `{"error": {"code": …, "message": …, "field": …}}`, with
    /// `field` only when one field is at fault. Messages never hold secrets.
    public static func error(
        _ status: Int, code: String, message: String, field: String? = nil, headers: [(String, String)] = []
    ) -> HTTPResponse {
        var error: [String: Any] = ["code": code, "message": message]
        if let field { error["field"] = field }
        return json(status, ["error": error], headers: headers)
    }
}

/// Routes requests by method and exact path, then by the longest matching path prefix (for paths
/// with a parameter at the end, such as `/api/v1/admin/extensions/{address}`). Unknown paths get
/// 404, known paths with another method 405 (with `Allow`), both in the error shape. Immutable
/// once built, so thread-safe.
public struct HTTPRouter: Sendable {
    /// A route: runs on a server thread, must not block, answers through the responder (now or
    /// later, from any thread).
    public typealias Handler = @Sendable (HTTPRequest, HTTPResponder) -> Void

    /// A prefix route: also gets the rest of the path after the prefix (never empty).
    public typealias PrefixHandler = @Sendable (HTTPRequest, String, HTTPResponder) -> Void

    private var routes: [String: [String: Handler]] = [:]
    private var prefixRoutes: [String: [String: PrefixHandler]] = [:]

    public init() {}

    /// Adds `handler` for `method` on `path`.
    public mutating func add(_ method: String, _ path: String, _ handler: @escaping Handler) {
        routes[path, default: [:]][method.uppercased()] = handler
    }

    /// Adds `handler` for `method` on every path that starts with `prefix` and goes on; exact
    /// routes win over prefix routes, and longer prefixes over shorter ones.
    public mutating func add(_ method: String, prefix: String, _ handler: @escaping PrefixHandler) {
        prefixRoutes[prefix, default: [:]][method.uppercased()] = handler
    }

    func route(_ request: HTTPRequest, _ respond: HTTPResponder) {
        if routes[request.path] == nil,
            let prefix = prefixRoutes.keys.filter({ request.path.hasPrefix($0) && request.path.count > $0.count })
                .max(by: { $0.count < $1.count }), let methods = prefixRoutes[prefix]
        {
            guard let handler = methods[request.method.uppercased()] else {
                respond(
                    .error(
                        405, code: "method_not_allowed", message: "\(request.method) is not allowed here",
                        headers: [("Allow", methods.keys.sorted().joined(separator: ", "))]))
                return
            }
            handler(request, String(request.path.dropFirst(prefix.count)), respond)
            return
        }
        guard let methods = routes[request.path] else {
            respond(.error(404, code: "not_found", message: "no such path"))
            return
        }
        guard let handler = methods[request.method.uppercased()] else {
            respond(
                .error(
                    405, code: "method_not_allowed", message: "\(request.method) is not allowed here",
                    headers: [("Allow", methods.keys.sorted().joined(separator: ", "))]))
            return
        }
        handler(request, respond)
    }
}

extension HTTPRouter {
    /// The route pattern `path` would be served by, for metrics: the path of an exact route, a
    /// prefix route's prefix followed by `*`, or nil when no route matches (never the raw path of
    /// an unknown request, so labels stay few).
    public func routePattern(for path: String) -> String? {
        if routes[path] != nil { return path }
        let prefix = prefixRoutes.keys.filter { path.hasPrefix($0) && path.count > $0.count }.max { $0.count < $1.count }
        return prefix.map { $0 + "*" }
    }
}
