import Foundation

/// A token bucket per source address (setting `sip_rate_limit`): each source may send `rate`
/// messages a second, with bursts of twice that; what goes beyond is dropped before it is parsed,
/// so a flood from one address costs Rouse little and other phones keep being served (issue 9).
///
/// Threading: thread-safe behind a lock; `allow` is a dictionary lookup and a little arithmetic,
/// cheap enough for the SIP loop thread. Bounded: it tracks at most `maxSources` addresses; a new
/// one beyond that makes the longest-tracked go (it starts again with a full bucket), in O(1).
final class SourceRateLimiter: @unchecked Sendable {
    // @unchecked: `buckets`, `order`, `head` and `dropped` are only touched under `lock`.
    private struct Bucket {
        var tokens: Double
        var updated: TimeInterval
    }

    let rate: Double
    let burst: Double
    let maxSources: Int
    private let lock = NSLock()
    private var buckets: [String: Bucket] = [:]
    /// The tracked sources in the order they came (from `head` on): the next to go is first.
    private var order: [String] = []
    private var head = 0
    private var dropped = 0

    init(rate: Double, maxSources: Int = 100_000) {
        self.rate = rate
        self.burst = max(1, rate * 2)
        self.maxSources = maxSources
    }

    /// Whether a message from `source` may be handled now (`now` in seconds, monotonic).
    func allow(_ source: String, now: TimeInterval = ProcessInfo.processInfo.systemUptime) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        var bucket = buckets[source] ?? Bucket(tokens: burst, updated: now)
        bucket.tokens = min(burst, bucket.tokens + (now - bucket.updated) * rate)
        bucket.updated = now
        let allowed = bucket.tokens >= 1
        if allowed { bucket.tokens -= 1 } else { dropped += 1 }
        if buckets[source] == nil {
            if buckets.count >= maxSources, head < order.count {
                buckets[order[head]] = nil
                head += 1
                if head * 2 > order.count {
                    order.removeFirst(head)
                    head = 0
                }
            }
            order.append(source)
        }
        buckets[source] = bucket
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
