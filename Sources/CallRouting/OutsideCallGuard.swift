public import Foundation
public import Registrar
public import SIPProxy

/// How far an extension may call outside Rouse (toll-fraud guard, issue 19). Ordered: each class
/// allows what the ones below it allow.
public enum ClassOfService: String, Sendable, Hashable, CaseIterable, Comparable, CustomStringConvertible {
    /// Other extensions only (and emergency numbers).
    case internalOnly = "internal"
    case national
    case international

    private var rank: Int {
        switch self {
        case .internalOnly: return 0
        case .national: return 1
        case .international: return 2
        }
    }

    public static func < (lhs: ClassOfService, rhs: ClassOfService) -> Bool { lhs.rank < rhs.rank }

    public var description: String { rawValue }
}

/// Which outside targets an organisation counts as national. With patterns of its own, what they
/// name is national and everything else international (the stricter reading, so an unforeseen
/// number costs no more than allowed). Without, a number that starts with neither `+` nor `00`
/// (the international prefix of most of the world) is national, and so is a user at another
/// domain (`sip:bob@partner.example`: no call charge).
public struct DialPlanClasses: Sendable {
    private let national: [CompiledRoutePattern]?

    /// - Parameter national: the organisation's national patterns; nil or empty: the default rule.
    public init(national: [RoutePattern]? = nil) {
        let compiled = (national ?? []).compactMap(CompiledRoutePattern.init)
        self.national = compiled.isEmpty ? nil : compiled
    }

    /// The class a call to `target` needs.
    public func required(for target: DialledTarget) -> ClassOfService {
        guard let national else {
            return target.isNumber && (target.user.hasPrefix("+") || target.user.hasPrefix("00")) ? .international : .national
        }
        return national.contains { $0.matches(target) } ? .national : .international
    }
}

/// Limits on outside calls; nil: no limit.
public struct OutsideCallLimits: Sendable, Hashable {
    public var concurrentPerExtension: Int?
    public var concurrentPerOrganisation: Int?
    public var perHourPerExtension: Int?
    public var perHourPerOrganisation: Int?
    /// An extension's calls in the last hour count as a surge when at least this many…
    public var surgeMinimum: Int
    /// …and this many times its hourly average over the 24 hours before.
    public var surgeFactor: Double

    public init(
        concurrentPerExtension: Int? = 4, concurrentPerOrganisation: Int? = nil, perHourPerExtension: Int? = 60,
        perHourPerOrganisation: Int? = nil, surgeMinimum: Int = 10, surgeFactor: Double = 4
    ) {
        self.concurrentPerExtension = concurrentPerExtension
        self.concurrentPerOrganisation = concurrentPerOrganisation
        self.perHourPerExtension = perHourPerExtension
        self.perHourPerOrganisation = perHourPerOrganisation
        self.surgeMinimum = surgeMinimum
        self.surgeFactor = surgeFactor
    }
}

/// The toll-fraud guard of one instance: admits or refuses each outside call by the caller's
/// class of service and the limits, counts calls in progress and in the last 25 hours, and tells
/// when an extension's outside calls jump. A route flagged emergency is always admitted (and
/// still counted). A value with the time passed in; owned by the call coordinator's queue.
public struct OutsideCallGuard: Sendable {
    /// The guard's answer.
    public enum Decision: Sendable, Hashable {
        /// Go ahead; hand `ticket` back to `ended` when the call is over.
        case admit(ticket: Int)
        /// 403 with these words (for the journey; the caller sees "Forbidden").
        case refuse(String)
    }

    public var limits: OutsideCallLimits
    private var nextTicket = 1
    private var live: [Int: (caller: AddressOfRecord, organisation: String)] = [:]
    private var liveByCaller: [AddressOfRecord: Int] = [:]
    private var liveByOrganisation: [String: Int] = [:]
    /// When each admitted call began, per caller and per organisation, for the last 25 hours.
    private var startsByCaller: [AddressOfRecord: [Date]] = [:]
    private var startsByOrganisation: [String: [Date]] = [:]

    public init(limits: OutsideCallLimits) { self.limits = limits }

    public mutating func admit(
        caller: AddressOfRecord, classOfService: ClassOfService, required: ClassOfService, route: OutboundRoute, now: Date
    ) -> Decision {
        let organisation = caller.domain
        prune(caller: caller, organisation: organisation, now: now)
        if !route.emergency {
            if classOfService < required {
                return .refuse("\(caller) may call \(classOfService == .internalOnly ? "extensions only" : "\(classOfService) numbers only"); this call is \(required)")
            }
            let hourAgo = now.addingTimeInterval(-3600)
            if let limit = limits.concurrentPerExtension, liveByCaller[caller, default: 0] >= limit {
                return .refuse("\(caller) already has \(limit) outside call\(limit == 1 ? "" : "s") (limit per extension)")
            }
            if let limit = limits.concurrentPerOrganisation, liveByOrganisation[organisation, default: 0] >= limit {
                return .refuse("\(organisation) already has \(limit) outside call\(limit == 1 ? "" : "s") (limit per organisation)")
            }
            if let limit = limits.perHourPerExtension, (startsByCaller[caller] ?? []).filter({ $0 > hourAgo }).count >= limit {
                return .refuse("\(caller) made \(limit) outside calls in the last hour (limit per extension)")
            }
            if let limit = limits.perHourPerOrganisation, (startsByOrganisation[organisation] ?? []).filter({ $0 > hourAgo }).count >= limit {
                return .refuse("\(organisation) made \(limit) outside calls in the last hour (limit per organisation)")
            }
        }
        let ticket = nextTicket
        nextTicket += 1
        live[ticket] = (caller, organisation)
        liveByCaller[caller, default: 0] += 1
        liveByOrganisation[organisation, default: 0] += 1
        startsByCaller[caller, default: []].append(now)
        startsByOrganisation[organisation, default: []].append(now)
        return .admit(ticket: ticket)
    }

    /// The call of `ticket` is over (answered and hung up, failed or cancelled).
    public mutating func ended(_ ticket: Int) {
        guard let (caller, organisation) = live.removeValue(forKey: ticket) else { return }
        liveByCaller[caller, default: 1] -= 1
        if liveByCaller[caller] == 0 { liveByCaller[caller] = nil }
        liveByOrganisation[organisation, default: 1] -= 1
        if liveByOrganisation[organisation] == 0 { liveByOrganisation[organisation] = nil }
    }

    /// Outside calls in progress.
    public var liveCount: Int { live.count }

    /// Extensions whose outside calls in the last hour are at least `surgeMinimum` and
    /// `surgeFactor` times their hourly average of the 24 hours before, with that count. Also lets
    /// go of every start older than 25 hours (call it every few minutes: the metric and the page).
    public mutating func surges(now: Date) -> [(caller: AddressOfRecord, lastHour: Int)] {
        let keep = now.addingTimeInterval(-25 * 3600)
        startsByCaller = startsByCaller.compactMapValues { starts in
            let kept = starts.filter { $0 > keep }
            return kept.isEmpty ? nil : kept
        }
        startsByOrganisation = startsByOrganisation.compactMapValues { starts in
            let kept = starts.filter { $0 > keep }
            return kept.isEmpty ? nil : kept
        }
        let hourAgo = now.addingTimeInterval(-3600)
        let dayBefore = hourAgo.addingTimeInterval(-24 * 3600)
        var found: [(caller: AddressOfRecord, lastHour: Int)] = []
        for (caller, starts) in startsByCaller {
            let lastHour = starts.filter { $0 > hourAgo }.count
            guard lastHour >= limits.surgeMinimum else { continue }
            let average = Double(starts.filter { $0 > dayBefore && $0 <= hourAgo }.count) / 24
            if Double(lastHour) >= limits.surgeFactor * max(average, 1) { found.append((caller, lastHour)) }
        }
        return found.sorted { $0.caller < $1.caller }
    }

    private mutating func prune(caller: AddressOfRecord, organisation: String, now: Date) {
        let keep = now.addingTimeInterval(-25 * 3600)
        startsByCaller[caller]?.removeAll { $0 <= keep }
        startsByOrganisation[organisation]?.removeAll { $0 <= keep }
    }
}
