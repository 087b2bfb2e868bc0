import Foundation
import HTTPServer
import Metrics

/// `GET /metrics`: the registry in the Prometheus text format 0.0.4 (`text/plain; version=0.0.4`).
/// Unauthenticated, like most scrape targets: it holds counts only, no addresses, users or tokens.
///
/// Threading: rendering takes the registry's lock briefly and runs its gauge callbacks (which
/// must be quick), on the handler's task.
public struct MetricsAPI: Sendable {
    public static let path = "/metrics"

    let registry: MetricsRegistry

    @Sendable func scrape(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        HTTPResponse(status: 200, headers: [("Content-Type", MetricsRegistry.contentType)], body: Data(registry.render().utf8))
    }
}
