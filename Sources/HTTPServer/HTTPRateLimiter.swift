public import Foundation

/// A token bucket per client address for the HTTP API (setting `http_rate_limit`): each client may
/// make `rate` requests a second, with bursts of twice that; beyond it a request gets 429 with
/// `Retry-After` before a route runs (issue 9; `HTTPRateLimitMiddleware`). The client is the address
/// `HTTPServer.client` names (behind a trusted proxy, the forwarded one).
///
/// Threading: thread-safe behind a lock; `admit` is a dictionary lookup and a little arithmetic.
/// Bounded: past `maxClients` addresses, the buckets that are full again (idle clients) are forgotten.
public final class HTTPRateLimiter: @unchecked Sendable {
    // @unchecked: `buckets` and `refused` are only touched under `lock`.
    private struct Bucket {
        var tokens: Double
        var updated: TimeInterval
    }

    public let rate: Double
    public let burst: Double
    public let maxClients: Int
    private let lock = NSLock()
    private var buckets: [String: Bucket] = [:]
    private var refused = 0

    public init(rate: Double, maxClients: Int = 100_000) {
        self.rate = max(0.001, rate)
        burst = max(1, self.rate * 2)
        self.maxClients = max(1, maxClients)
    }

    /// Nil when a request from `client` may be served now (`now` in seconds, monotonic); else the
    /// whole seconds until it may (at least 1), for `Retry-After`.
    public func admit(_ client: String, now: TimeInterval = ProcessInfo.processInfo.systemUptime) -> Int? {
        lock.lock()
        defer { lock.unlock() }
        var bucket = buckets[client] ?? Bucket(tokens: burst, updated: now)
        bucket.tokens = min(burst, bucket.tokens + (now - bucket.updated) * rate)
        bucket.updated = now
        var wait: Int? = nil
        if bucket.tokens >= 1 {
            bucket.tokens -= 1
        } else {
            refused += 1
            wait = max(1, Int(((1 - bucket.tokens) / rate).rounded(.up)))
        }
        if buckets[client] == nil, buckets.count >= maxClients {
            buckets = buckets.filter { min(burst, $0.value.tokens + (now - $0.value.updated) * rate) < burst }
        }
        buckets[client] = bucket
        return wait
    }

    /// Requests refused so far.
    public var refusedCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return refused
    }
}
