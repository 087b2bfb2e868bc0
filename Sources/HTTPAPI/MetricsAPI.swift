import Foundation
import Metrics

/// `GET /metrics`: the registry in the Prometheus text format 0.0.4 (`text/plain; version=0.0.4`).
/// Unauthenticated, like most scrape targets: it holds counts only, no addresses, users or tokens.
///
/// Threading: the handler renders on the HTTP server's thread; rendering takes the registry's
/// lock briefly and runs its gauge callbacks (which must be quick).
public struct MetricsAPI: Sendable {
    public static let path = "/metrics"

    let registry: MetricsRegistry

    public init(registry: MetricsRegistry) {
        self.registry = registry
    }

    public func register(on router: inout HTTPRouter) {
        router.add("GET", Self.path) { _, respond in
            respond(HTTPResponse(status: 200, headers: [("Content-Type", MetricsRegistry.contentType)], body: Data(registry.render().utf8)))
        }
    }
}
