import Foundation

/// Refuses a client past its request rate (`HTTPRateLimiter`) with 429 and `Retry-After`, before
/// any route runs; put it outermost around a router so unknown paths count too. The client is the
/// request's `remoteAddress` (behind a trusted proxy, the forwarded one).
///
/// Threading: a value around the thread-safe limiter.
public struct HTTPRateLimitMiddleware<Context: HTTPRequestContext>: HTTPMiddleware {
    public let limiter: HTTPRateLimiter

    public init(limiter: HTTPRateLimiter) {
        self.limiter = limiter
    }

    public func handle(_ request: HTTPRequest, context: Context, next: HTTPNext<Context>) async throws -> HTTPResponse {
        guard let client = request.remoteAddress, let seconds = limiter.admit(client) else { return try await next(request, context) }
        return .error(
            429, code: "rate_limited", message: "too many requests from this address; try again in \(seconds) s",
            headers: [("Retry-After", String(seconds))])
    }
}
