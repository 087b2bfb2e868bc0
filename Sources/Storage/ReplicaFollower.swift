public import Foundation

/// How far this instance has followed the replica change log (`replica_changes`, migration 500),
/// and which read to make next: the logic of `PostgresReplica`, as a value that takes events and
/// the time and returns actions.
///
/// Numbers are given in commit order and announced in that order, so a NOTIFY whose number is not
/// the next one means some were lost (a catch-up). Every (re)connect of the listener is a catch-up
/// too, since NOTIFYs sent while it was away are gone. A change this instance's own location store
/// made needs no read (its index already holds it): it only moves `lastSeen` on. One read runs at
/// a time; what arrives meanwhile is looked at when it ends. A failed read is tried again after a
/// growing delay (0.5 s doubling up to 5 s).
///
/// Threading: a value; its owner keeps it on one queue.
public struct ReplicaFollower: Sendable, Equatable {
    /// Why a read is made; a later, stronger reason absorbs a weaker one.
    public enum Reason: Int, Sendable, Comparable {
        /// The next numbers were announced.
        case follow
        /// Numbers may have been missed: after a (re)connect, or a gap in the announced numbers.
        case catchUp
        /// Nothing is held yet: read everything.
        case start

        public static func < (lhs: Reason, rhs: Reason) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    public enum Event: Sendable, Equatable {
        /// The listener's `LISTEN` is (again) in place.
        case listening
        /// `rouse_replica` announced the changes `seqs` (one transaction's); `own` when this
        /// instance's location store made them and they are all binding changes.
        case notified(seqs: ClosedRange<Int64>, own: Bool)
        /// The read asked for ended: every change up to `through` is applied; `full` when it had
        /// to read everything (the changes after `lastSeen` were pruned).
        case readDone(through: Int64, full: Bool)
        /// The read asked for failed.
        case readFailed
        /// Time passed (for a retry that is due).
        case tick
    }

    public enum Action: Sendable, Equatable {
        /// Read the changes after `after` (everything when nil) and apply them, then send
        /// `readDone` or `readFailed`.
        case read(after: Int64?, reason: Reason)
        /// Send `tick` at `at`.
        case wake(at: Date)
    }

    /// Every change numbered up to this is applied; nil before the first read.
    public private(set) var lastSeen: Int64?
    /// Catch-up reads done (after a reconnect or a gap).
    public private(set) var catchUps = 0
    /// Reads that found the changes they needed pruned and read everything.
    public private(set) var fullReloads = 0
    /// The read out now.
    public private(set) var reading: Reason?
    private var wanted: Reason?
    /// Announced numbers above `lastSeen`, and whether each is the instance's own.
    private var heard: [Int64: Bool] = [:]
    private var retryAt: Date?
    private var retryDelay = ReplicaFollower.firstRetryDelay

    static let firstRetryDelay = 0.5
    static let maxRetryDelay = 5.0

    public init() {}

    public mutating func handle(_ event: Event, now: Date) -> [Action] {
        switch event {
        case .listening:
            want(lastSeen == nil ? .start : .catchUp)
        case .notified(let seqs, let own):
            if own, heard.isEmpty, let seen = lastSeen, seqs.lowerBound <= seen + 1 {
                // The common case under load: the next numbers are this instance's own.
                lastSeen = max(seen, seqs.upperBound)
            } else {
                for seq in seqs where lastSeen.map({ seq > $0 }) ?? true { heard[seq] = own }
            }
        case .readDone(let through, let full):
            if let reason = reading {
                if full && reason != .start { fullReloads += 1 }
                if reason == .catchUp { catchUps += 1 }
            }
            reading = nil
            retryDelay = Self.firstRetryDelay
            lastSeen = max(lastSeen ?? through, through)
            heard = heard.filter { $0.key > through }
        case .readFailed:
            if let reason = reading { want(reason) }
            reading = nil
            retryAt = now.addingTimeInterval(retryDelay)
            retryDelay = min(Self.maxRetryDelay, retryDelay * 2)
        case .tick:
            break
        }
        return next(now: now)
    }

    private mutating func want(_ reason: Reason) {
        wanted = max(wanted ?? reason, reason)
    }

    /// Moves past the instance's own announced changes, then asks for the read that is due.
    private mutating func next(now: Date) -> [Action] {
        // What the announced numbers ask for (looked at afresh each time: a read may have covered them).
        var announced: Reason? = nil
        if var seen = lastSeen {
            while let own = heard[seen + 1], own {
                heard[seen + 1] = nil
                seen += 1
            }
            lastSeen = seen
            if let lowest = heard.keys.min() { announced = lowest == seen + 1 ? .follow : .catchUp }
        } else if !heard.isEmpty {
            announced = .start
        }
        guard reading == nil, let reason = stronger(wanted, announced) else { return [] }
        if let retryAt, now < retryAt { return [.wake(at: retryAt)] }
        retryAt = nil
        wanted = nil
        reading = reason
        return [.read(after: reason == .start ? nil : lastSeen, reason: reason)]
    }
}

/// The stronger of two reasons, either of which may be absent.
private func stronger(_ lhs: ReplicaFollower.Reason?, _ rhs: ReplicaFollower.Reason?) -> ReplicaFollower.Reason? {
    guard let lhs else { return rhs }
    guard let rhs else { return lhs }
    return max(lhs, rhs)
}
