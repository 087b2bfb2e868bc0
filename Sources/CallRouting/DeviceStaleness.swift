public import Foundation

/// Whether a pushed device is stale (issue 20 item 1): the rule, as a value that takes events and
/// the time. A device is stale once `policy.pushes` ring pushes in a row were accepted by the
/// provider and followed by no sign of life (no REGISTER, no post, no use of the call token)
/// although each call outlasted the wake wait, *and* at least `policy.after` has passed since its
/// last sign of life. Someone who declines calls from the lock screen shows life each time (the
/// woken app registers or declines with the call token), so never goes stale; a call the caller
/// ends before the wait is over, or a push the provider did not accept, proves nothing and does
/// not count. A stale device is not pushed until it shows life again.
///
/// Threading: a value; the caller owns it and serialises its events.
public struct DeviceStaleness: Hashable, Sendable {
    /// The operator's thresholds (`stale_after_pushes`, `stale_after`).
    public struct Policy: Hashable, Sendable {
        /// Unanswered ring pushes in a row before a device may be stale (at least 1).
        public var pushes: Int
        /// Time since the last sign of life before a device may be stale.
        public var after: TimeInterval

        public static let defaultPushes = 3
        public static let defaultAfter: TimeInterval = 7 * 24 * 3600

        public init(pushes: Int = Policy.defaultPushes, after: TimeInterval = Policy.defaultAfter) {
            self.pushes = max(1, pushes)
            self.after = max(0, after)
        }
    }

    /// What happened to the device.
    public enum Event: Hashable, Sendable {
        /// A REGISTER from it, a post of its token, or a use of a call token pushed to it.
        case signOfLife
        /// A ring push's wait is over: whether the provider accepted it, and whether the call was
        /// still going when the wake wait ended (the device had its whole chance to come back).
        case ringPushEnded(pushedAt: Date, accepted: Bool, callOutlastedWakeWait: Bool)
    }

    /// How an event changed the verdict (for a log line and the metrics).
    public enum Change: Hashable, Sendable {
        case unchanged
        case becameStale
        case revived
    }

    /// The last sign of life (at first, when the device became known: its REGISTER or post).
    public private(set) var lastSignOfLife: Date
    /// Ring pushes in a row that counted against the device since `lastSignOfLife`.
    public private(set) var unansweredPushes: Int

    public init(lastSignOfLife: Date, unansweredPushes: Int = 0) {
        self.lastSignOfLife = lastSignOfLife
        self.unansweredPushes = max(0, unansweredPushes)
    }

    /// Whether the device is stale at `now`: enough unanswered pushes, and long enough silent.
    /// Time alone can make a device stale (its pushes counted already; the silence grows).
    public func isStale(under policy: Policy, now: Date) -> Bool {
        unansweredPushes >= policy.pushes && now.timeIntervalSince(lastSignOfLife) >= policy.after
    }

    /// When the device is (or will be, as its silence grows) stale under `policy`: once enough
    /// pushes went unanswered, `policy.after` past its last sign of life; nil while too few did.
    /// What is stored and shared with every instance, so that each reads the verdict at its own
    /// `now` without knowing the policy.
    public func staleFrom(under policy: Policy) -> Date? {
        unansweredPushes >= policy.pushes ? lastSignOfLife.addingTimeInterval(policy.after) : nil
    }

    /// Applies `event` at `now` and says how the verdict changed.
    public mutating func handle(_ event: Event, now: Date, policy: Policy) -> Change {
        let before = isStale(under: policy, now: now)
        switch event {
        case .signOfLife:
            // A sign older than the last one known says nothing new (events may arrive late).
            if now > lastSignOfLife {
                lastSignOfLife = now
                unansweredPushes = 0
            }
        case .ringPushEnded(let pushedAt, let accepted, let outlasted):
            // Life shown after the push answered it (e.g. the woken app registered).
            if accepted, outlasted, lastSignOfLife < pushedAt { unansweredPushes += 1 }
        }
        let after = isStale(under: policy, now: now)
        return before == after ? .unchanged : after ? .becameStale : .revived
    }
}
