public import Foundation

/// A token bucket per source address (setting `sip_rate_limit`): each source may send `rate`
/// messages a second, with bursts of twice that; what goes beyond is dropped before it is parsed,
/// so a flood from one address costs Rouse little and other phones keep being served (issue 9).
///
/// Threading: thread-safe behind a lock; `allow` is a dictionary lookup and a little arithmetic,
/// cheap enough for the SIP loop thread. Bounded: it tracks at most `maxSources` addresses; a new
/// one beyond that makes the longest-tracked go (it starts again with a full bucket), in O(1).
public final class SourceRateLimiter: @unchecked Sendable {
    // @unchecked: `buckets` and `dropped` are only touched under `lock`.
    private struct Bucket {
        var tokens: Double
        var updated: TimeInterval
    }

    let rate: Double
    let burst: Double
    let maxSources: Int
    private let lock = NSLock()
    /// Buckets never age out (a full one is what a new source gets anyway); when `maxSources` are
    /// tracked the longest-tracked goes.
    private var buckets: ExpiringTable<String, Bucket>
    private var dropped = 0

    public init(rate: Double, maxSources: Int = 100_000) {
        self.rate = rate
        self.burst = max(1, rate * 2)
        self.maxSources = maxSources
        self.buckets = ExpiringTable(limit: maxSources, maxAge: .infinity)
    }

    /// Whether a message from `source` may be handled now (`now` in seconds, monotonic).
    public func allow(_ source: String, now: TimeInterval = ProcessInfo.processInfo.systemUptime) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        var bucket = buckets[source] ?? Bucket(tokens: burst, updated: now)
        bucket.tokens = min(burst, bucket.tokens + (now - bucket.updated) * rate)
        bucket.updated = now
        let allowed = bucket.tokens >= 1
        if allowed { bucket.tokens -= 1 } else { dropped += 1 }
        if buckets[source] == nil {
            // With no maximum age the insert time only orders the sources.
            buckets.insert(bucket, for: source, at: Date(timeIntervalSinceReferenceDate: now))
        } else {
            buckets.update(bucket, for: source)
        }
        return allowed
    }

    /// Source addresses tracked now (at most `maxSources`).
    var trackedSources: Int {
        lock.lock()
        defer { lock.unlock() }
        return buckets.count
    }

    /// Messages dropped so far.
    var droppedCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return dropped
    }
}
