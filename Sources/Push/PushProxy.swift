import Foundation

/// The HTTP or HTTPS proxy every push goes through (setting `push_proxy`), for servers that reach
/// the internet only through one: APNs, FCM (its OAuth token fetch too) and web push are tunnelled
/// through it with HTTP CONNECT, so the proxy sees only the provider's host, never a push.
/// Holds the password for libcurl alone: `description` never shows it. A value; thread-safe.
public struct PushProxy: Sendable, Equatable, CustomStringConvertible {
    /// `http` or `https` (TLS to the proxy itself).
    public let scheme: String
    public let host: String
    public let port: Int
    /// Basic credentials for the proxy (percent-decoded), when the URL has them.
    public let user: String?
    let password: String?

    /// Why a `push_proxy` value is not one. Never quotes the password.
    public struct Problem: Error, Sendable, Equatable, CustomStringConvertible {
        public let description: String
    }

    /// Reads `http://[user:password@]host:port` or `https://[user:password@]host[:port]` (443 by
    /// default); the user and password percent-encoded as in any URL.
    public init(parsing text: String) throws(Problem) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard let components = URLComponents(string: trimmed), let scheme = components.scheme?.lowercased(),
            scheme == "http" || scheme == "https"
        else {
            throw Problem(description: "not an http:// or https:// proxy URL (http://proxy.example.com:3128)")
        }
        guard let host = components.host, !host.isEmpty else { throw Problem(description: "the proxy URL names no host") }
        guard components.path.isEmpty || components.path == "/", components.query == nil, components.fragment == nil else {
            throw Problem(description: "a proxy URL is scheme://host:port, without a path")
        }
        guard let port = components.port ?? (scheme == "https" ? 443 : nil) else {
            throw Problem(description: "give the proxy's port (http://\(host):3128)")
        }
        guard (1...65535).contains(port) else { throw Problem(description: "the proxy port must be 1 to 65535") }
        self.scheme = scheme
        self.host = host
        self.port = port
        user = components.user.flatMap { $0.isEmpty ? nil : $0 }
        password = components.password
        guard user != nil || password == nil else { throw Problem(description: "the proxy URL has a password but no user") }
    }

    /// `scheme://host:port` (brackets around an IPv6 address), what libcurl's CURLOPT_PROXY gets;
    /// the credentials go apart.
    var address: String {
        let shown = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        return "\(scheme)://\(shown):\(port)"
    }

    /// The URL as logs and `rouse config` show it: the user, never the password.
    public var description: String {
        guard let user else { return address }
        let shownUser = user.addingPercentEncoding(withAllowedCharacters: .urlUserAllowed) ?? user
        return address.replacingOccurrences(of: "://", with: "://\(shownUser)\(password == nil ? "" : ":•••")@")
    }
}
