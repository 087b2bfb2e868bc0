public import Foundation

/// Counts failed credential attempts per source IP address (the port is ignored) in a sliding
/// window and blocks a source that fails too often: once `limit` failures fall within `window`
/// seconds, the source is refused for `blockFor` seconds. SIP REGISTER (503 with Retry-After) and
/// the HTTP posting endpoint (429 with Retry-After) share one instance, so guesses on either count
/// against both (issue 5, decisions.md).
///
/// A success neither resets the count nor lifts a block: a guesser that hits the password while
/// blocked is still refused. Memory is bounded: a source keeps at most `limit` timestamps, sources
/// with nothing left to remember are swept once per window, and past `maxSources` the source first
/// seen longest ago is forgotten.
///
/// Threading: every method is thread-safe (one `NSLock`) and does O(1) work, except the sweep,
/// which walks the table once per `window`.
public final class AuthFailureThrottle: @unchecked Sendable {
    // @unchecked: `sources`, `order`, `orderHead`, `sequence` and `lastSweep` are only touched under `lock`.
    /// Failures allowed within `window`; the one that reaches it starts the block.
    public let limit: Int
    /// Seconds over which failures are counted.
    public let window: TimeInterval
    /// Seconds a source stays blocked.
    public let blockFor: TimeInterval
    /// Most sources remembered at once.
    public let maxSources: Int

    private struct Source {
        /// Times of the failures still inside the window, oldest first (at most `limit`).
        var failures: [Date] = []
        var blockedUntil: Date?
        /// Which entry of `order` stands for this source.
        var sequence: UInt64
    }

    private let lock = NSLock()
    private var sources: [String: Source] = [:]
    /// Sources in the order they were first seen (entries of forgotten sources are skipped).
    private var order: [(address: String, sequence: UInt64)] = []
    private var orderHead = 0
    private var sequence: UInt64 = 0
    private var lastSweep: Date?

    public init(limit: Int = 20, window: TimeInterval = 60, blockFor: TimeInterval = 300, maxSources: Int = 100_000) {
        precondition(limit >= 1 && window > 0 && blockFor > 0 && maxSources >= 1, "AuthFailureThrottle needs positive settings")
        self.limit = limit
        self.window = window
        self.blockFor = blockFor
        self.maxSources = maxSources
    }

    /// The seconds `address` stays blocked at `now`, or nil when it may try.
    public func isBlocked(_ address: String, now: Date = Date()) -> TimeInterval? {
        lock.lock()
        defer { lock.unlock() }
        guard let until = sources[address]?.blockedUntil, until > now else { return nil }
        return until.timeIntervalSince(now)
    }

    /// Counts one failed attempt from `address` at `now`; returns true when this failure started a block.
    @discardableResult
    public func recordFailure(_ address: String, now: Date = Date()) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        sweepIfDue(now)
        var source: Source
        if let known = sources[address] {
            source = known
        } else {
            while sources.count >= maxSources { evictOldest() }
            sequence &+= 1
            source = Source(sequence: sequence)
            order.append((address, sequence))
        }
        if let until = source.blockedUntil, until > now {
            sources[address] = source  // already blocked: nothing more to count
            return false
        }
        source.blockedUntil = nil
        source.failures.removeAll { now.timeIntervalSince($0) >= window }
        source.failures.append(now)
        var started = false
        if source.failures.count >= limit {
            source.blockedUntil = now.addingTimeInterval(blockFor)
            source.failures.removeAll()
            started = true
        }
        sources[address] = source
        return started
    }

    /// How many sources are remembered (for tests and diagnostics).
    public var trackedSourceCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return sources.count
    }

    /// The IP address of a `host:port` source (`[v6]:port` or a bare address also accepted).
    public static func address(ofSource source: String) -> String {
        if source.hasPrefix("["), let close = source.firstIndex(of: "]") {
            return String(source[source.index(after: source.startIndex)..<close])
        }
        let colons = source.reduce(0) { $0 + ($1 == ":" ? 1 : 0) }
        if colons == 1, let colon = source.firstIndex(of: ":") { return String(source[..<colon]) }
        return source
    }

    /// Forgets the source first seen longest ago. Caller holds `lock`.
    private func evictOldest() {
        while orderHead < order.count {
            let entry = order[orderHead]
            orderHead += 1
            if sources[entry.address]?.sequence == entry.sequence {
                sources[entry.address] = nil
                break
            }
        }
        compactOrder()
    }

    /// Drops sources whose failures and block have all run out, at most once per window. Caller holds `lock`.
    private func sweepIfDue(_ now: Date) {
        if let lastSweep, now.timeIntervalSince(lastSweep) < window { return }
        lastSweep = now
        sources = sources.filter { _, source in
            if let until = source.blockedUntil, until > now { return true }
            return source.failures.contains { now.timeIntervalSince($0) < window }
        }
        order.removeFirst(orderHead)
        orderHead = 0
        order.removeAll { sources[$0.address]?.sequence != $0.sequence }
    }

    /// Keeps `order` from growing without bound as its head advances. Caller holds `lock`.
    private func compactOrder() {
        guard orderHead > 1024, orderHead * 2 > order.count else { return }
        order.removeFirst(orderHead)
        orderHead = 0
    }
}
