public import SIPMessage

/// Why a call was diverted, as the RFC 4458 `cause` URI parameter and the RFC 5806 Diversion
/// `reason` name it.
public enum DiversionCause: Int, Sendable, Hashable, CaseIterable {
    /// Forwarded before anything rang (call forwarding unconditional).
    case unconditional = 302
    /// Every device answered busy (call forwarding busy).
    case busy = 486
    /// Rang, nobody answered in time (call forwarding no reply).
    case noAnswer = 408
    /// Nothing could be woken or reached (RFC 4458: "mobile subscriber not reachable").
    case unreachable = 503

    /// The RFC 5806 `reason` of a Diversion header.
    public var diversionReason: String {
        switch self {
        case .unconditional: return "unconditional"
        case .busy: return "user-busy"
        case .noAnswer: return "no-answer"
        case .unreachable: return "unavailable"
        }
    }

    /// In words, for journeys and logs.
    public var words: String {
        switch self {
        case .unconditional: return "unconditional"
        case .busy: return "busy"
        case .noAnswer: return "no answer"
        case .unreachable: return "not reachable"
        }
    }
}

/// One `hi-entry` of a History-Info header (RFC 7044 §4.1): the URI a request was targeted to,
/// its `index`, and its other parameters (`rc`, `mp`, `np`, …). A value.
public struct HistoryInfoEntry: Sendable, Hashable, CustomStringConvertible {
    public var uri: SIPURI
    /// `1`, `1.1`, `1.1.2`: where the entry sits in the tree of targets.
    public var index: String
    /// The header parameters other than `index`, in order.
    public var parameters: SIPParameters

    public init(uri: SIPURI, index: String, parameters: SIPParameters = []) {
        self.uri = uri
        self.index = index
        self.parameters = parameters
    }

    /// `<sip:1002@example.com;cause=408>;index=1.1;mp=1`.
    public var description: String {
        "<\(uri)>;index=\(index)" + parameters.serialized
    }

    /// The index's parts (`1.1` → [1, 1]); nil when it is not dot-separated digits.
    var indexParts: [Int]? {
        let parts = index.split(separator: ".", omittingEmptySubsequences: false).map { Int($0) }
        guard !parts.isEmpty, parts.allSatisfy({ $0 != nil && $0! >= 0 }) else { return nil }
        return parts.map { $0! }
    }
}

/// History-Info (RFC 7044) and Diversion (RFC 5806) as a diverting proxy writes them: reads the
/// entries a request carries, counts the diversions it went through (the loop guard), and
/// rewrites a request for its new target. Pure functions on values.
public enum HistoryInfo {
    public static let header = SIPHeaderName("History-Info")
    public static let diversionHeader = SIPHeaderName("Diversion")

    /// The request's History-Info entries, in order; an entry that does not parse, or has no
    /// usable `index`, is left out.
    public static func entries(of request: SIPRequest) -> [HistoryInfoEntry] {
        request.headers.values(header).compactMap { text in
            guard let address = try? SIPNameAddress(parsing: text), let index = address.parameters.value("index") else { return nil }
            var parameters = address.parameters
            parameters.remove("index")
            let entry = HistoryInfoEntry(uri: address.uri, index: index, parameters: parameters)
            return entry.indexParts == nil ? nil : entry
        }
    }

    /// How many times the request was diverted already: History-Info entries retargeted with a
    /// RFC 4458 `cause` (or tagged `mp`, a change of target user), or Diversion entries, whichever
    /// counts more (a proxy may have written both for the same diversion).
    public static func diversionCount(of request: SIPRequest) -> Int {
        let fromHistory = entries(of: request).filter { $0.uri.parameters.contains("cause") || $0.parameters.contains("mp") }.count
        let fromDiversion = request.headers.values(diversionHeader).count
        return max(fromHistory, fromDiversion)
    }

    /// RFC 7044 §10.3 and RFC 4458: the request retargeted to `target` because of `cause`. The
    /// Request-URI becomes `target`; History-Info gets an entry for the Request-URI as it was
    /// (index 1) when it had none, and one for the target, a child of the entry for the old
    /// Request-URI (`1.1`, `1.1.1`, …), with `cause` as a URI parameter and `mp` naming its
    /// parent (the target user changed). For a cause other than unconditional, the parent's
    /// URI gets the RFC 3326 Reason of how its request ended (as a URI header, RFC 7044 §9.4).
    /// Max-Forwards and the rest are left as they are.
    public static func retarget(_ request: SIPRequest, to target: SIPURI, cause: DiversionCause) -> SIPRequest {
        var entries = entries(of: request)
        let current = request.uri
        if entries.isEmpty { entries.append(HistoryInfoEntry(uri: current, index: "1")) }
        let parentAt = entries.lastIndex { sameTarget($0.uri, current) } ?? entries.count - 1
        if cause != .unconditional, !entries[parentAt].uri.headers.contains(where: { $0.name.caseInsensitiveEquals("Reason") }) {
            entries[parentAt].uri.headers.append(SIPParameter("Reason", "SIP%3Bcause%3D\(cause.rawValue)"))
        }
        let parent = entries[parentAt]
        let parentParts = parent.indexParts ?? [1]
        let siblings = entries.compactMap(\.indexParts).filter { $0.count == parentParts.count + 1 && Array($0.prefix(parentParts.count)) == parentParts }
        let child = (siblings.map { $0.last ?? 0 }.max() ?? 0) + 1
        var targeted = target
        targeted.parameters.set("cause", String(cause.rawValue))
        entries.append(HistoryInfoEntry(
            uri: targeted, index: (parentParts + [child]).map(String.init).joined(separator: "."), parameters: [SIPParameter("mp", parent.index)]))
        var copy = request
        copy.uri = target
        copy.headers.remove(header)
        copy.headers.add(header, entries.map(\.description).joined(separator: ", "))
        return copy
    }

    /// RFC 5806: a Diversion entry for `from` (the target diverted away from) put on top of the
    /// request's (one line, where the first was), with its reason and `counter=1`. For a next hop that reads Diversion rather
    /// than History-Info (many trunks and PBXs), added on request.
    public static func addingDiversion(to request: SIPRequest, from: SIPURI, cause: DiversionCause) -> SIPRequest {
        var copy = request
        var diverting = from
        diverting.parameters.remove("cause")
        diverting.headers = []
        let entry = "<\(diverting)>;reason=\(cause.diversionReason);counter=1"
        copy.headers.set(diversionHeader, ([entry] + request.headers.values(diversionHeader)).joined(separator: ", "))
        return copy
    }

    /// RFC 7044 §9.1 for a proxy that only routes a request on (the target user is the same,
    /// the Request-URI is not: a route's trunk): when the request already carries History-Info,
    /// an entry for the new Request-URI, a child of the last entry, tagged `rc` with its parent's
    /// index. A request without History-Info is left as it is (Rouse starts none for routing).
    public static func routed(_ request: SIPRequest, from previous: SIPURI) -> SIPRequest {
        let all = entries(of: request)
        guard let parent = all.last, previous != request.uri, let parentParts = parent.indexParts else {
            return request
        }
        let siblings = all.compactMap(\.indexParts).filter { $0.count == parentParts.count + 1 && Array($0.prefix(parentParts.count)) == parentParts }
        let child = (siblings.map { $0.last ?? 0 }.max() ?? 0) + 1
        let entry = HistoryInfoEntry(
            uri: request.uri, index: (parentParts + [child]).map(String.init).joined(separator: "."), parameters: [SIPParameter("rc", parent.index)])
        var copy = request
        copy.headers.set(header, (all + [entry]).map(\.description).joined(separator: ", "))
        return copy
    }

    /// The last diversion the request's History-Info records: the target it was diverted away from
    /// (the parent named by the last `mp` entry's index) and its RFC 4458 cause.
    public static func lastDiversion(of request: SIPRequest) -> (from: SIPURI, cause: DiversionCause)? {
        let all = entries(of: request)
        guard let last = all.last(where: { $0.uri.parameters.contains("cause") }), let parentIndex = last.parameters.value("mp"),
            let parent = all.first(where: { $0.index == parentIndex }),
            let cause = last.uri.parameters.value("cause").flatMap(Int.init).flatMap(DiversionCause.init(rawValue:))
        else { return nil }
        return (parent.uri, cause)
    }

    /// Whether two URIs name the same target (scheme, user and host; parameters aside).
    private static func sameTarget(_ a: SIPURI, _ b: SIPURI) -> Bool {
        a.scheme == b.scheme && a.user == b.user && a.host.caseInsensitiveEquals(b.host)
    }
}
