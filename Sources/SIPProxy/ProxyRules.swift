public import SIPMessage

/// RFC 3261 §16 proxy behaviour as pure functions on messages: checks on an arriving request
/// (§16.3), the copy sent to each target (§16.6), the CANCEL of a branch (§9.1) and the response
/// that goes back upstream (§16.7). No I/O: the SIP side adds Via and Record-Route and sends.
public enum ProxyRules {
    /// Max-Forwards put on a request that arrived without one (§16.6 step 3).
    public static let defaultMaxForwards = 70

    /// §16.3 step 3: a request whose Max-Forwards is 0 gets 483 (OPTIONS to Rouse itself is
    /// answered elsewhere). Nil when the request may be forwarded.
    public static func tooManyHops(_ request: SIPRequest) -> SIPResponse? {
        guard let value = request.maxForwards, value <= 0 else { return nil }
        return SIPResponse(replyingTo: request, statusCode: 483, reasonPhrase: "Too Many Hops")
    }

    /// §16.3 step 4, first half: the request already passed through this proxy (a Via carrying
    /// this instance's marker). A loop when it comes back unchanged; a spiral (a new Request-URI,
    /// as a PBX in front of which Rouse stands sends it) is not: the caller tells them apart.
    public static func isLooping(_ request: SIPRequest, instanceMarker: String) -> Bool {
        // A Via carrying the marker has its text in it: the Vias are parsed only when a line holds
        // it (a request that came through Rouse before), not on every request.
        guard request.headers.contains(where: { $0.key == .via && holds($0, instanceMarker) }) else { return false }
        return request.vias.contains { $0.parameters.value(viaMarkerParameter) == instanceMarker }
    }

    /// Whether `line`'s value holds `text`'s bytes.
    private static func holds(_ line: SIPHeader, _ text: String) -> Bool {
        var text = text
        return text.withUTF8 { needle in
            line.withValueBytes { bytes in
                guard let first = needle.first else { return true }
                guard bytes.count >= needle.count else { return false }
                var start = 0
                while start <= bytes.count - needle.count {
                    if bytes[start] == first, UnsafeBufferPointer(rebasing: bytes[start..<(start + needle.count)]).elementsEqual(needle) {
                        return true
                    }
                    start += 1
                }
                return false
            }
        }
    }

    /// The Via parameter naming the Rouse instance that added the Via (loop detection).
    public static let viaMarkerParameter = "rouse"

    /// The copy of `request` sent to one target (§16.6 steps 1–3 and 6): Request-URI = the
    /// target's Contact URI, Max-Forwards one less, and the credentials meant for Rouse removed
    /// (§22.3: a proxy consumes the Proxy-Authorization of its own realm). Via and Record-Route
    /// are added by whoever sends it.
    public static func branchRequest(from request: SIPRequest, to target: SIPURI) -> SIPRequest {
        var copy = request
        copy.uri = target
        copy.headers.set(.maxForwards, String(max(0, (request.maxForwards ?? defaultMaxForwards) - 1)))
        copy.headers.remove(.proxyAuthorization)
        return copy
    }

    /// §9.1: the CANCEL of a branch INVITE as it was sent (with Rouse's Via on top): same
    /// Request-URI, Call-ID, To, From, CSeq number and top Via, the INVITE's Route, and `reason`
    /// (RFC 3326) when given.
    public static func cancel(of sentInvite: SIPRequest, reason: String? = nil) -> SIPRequest {
        var headers = SIPHeaders()
        if let via = sentInvite.headers.lines(.via).first.flatMap({ SIPHeaderValueScanner.splitList($0).first }) {
            headers.add(.via, via)
        }
        for value in sentInvite.headers.lines(.route) { headers.add(.route, value) }
        for key in [SIPHeaderName.from, .to, .callID] {
            if let value = sentInvite.headers[key] { headers.add(key, value) }
        }
        headers.add(.cseq, "\(sentInvite.cseq?.number ?? 1) CANCEL")
        headers.add(.maxForwards, String(defaultMaxForwards))
        if let reason { headers.add(.reason, reason) }
        headers.add(.contentLength, "0")
        return SIPRequest(method: .cancel, uri: sentInvite.uri, headers: headers)
    }

    /// §16.7 step 3: a branch's response as it goes upstream, without Rouse's own Via.
    public static func upstream(_ response: SIPResponse) -> SIPResponse {
        var copy = response
        copy.headers.removeFirstValue(.via)
        return copy
    }

    /// An RFC 3326 Reason header value: `SIP;cause=480;text="no device woke in time"`.
    public static func reason(cause: Int, text: String) -> String {
        "SIP;cause=\(cause);text=" + SIPHeaderValueScanner.quote(text)
    }

    /// The Reason of the CANCELs sent when another branch answered (product.md).
    public static let completedElsewhere = reason(cause: 200, text: "Call completed elsewhere")
}

/// Keeps the best final response of a fork (RFC 3261 §16.7 step 6): any 6xx wins; otherwise the
/// lowest class, preferring within 4xx the answers a caller can act on (401, 407, 415, 420, 484);
/// a 503 goes upstream as 500 (a downstream server's overload is not Rouse's). A value.
public struct ForkResponseSelector: Sendable {
    private(set) var best: SIPResponse?

    public init() {}

    /// Considers a final (≥ 300) branch response, with Rouse's Via already removed.
    public mutating func consider(_ response: SIPResponse) {
        guard response.statusCode >= 300 else { return }
        guard let current = best else {
            best = response
            return
        }
        if rank(response) < rank(current) { best = response }
    }

    /// The response to send upstream, if any branch answered finally.
    public var chosen: SIPResponse? {
        guard var response = best else { return nil }
        if response.statusCode == 503 {
            response.statusCode = 500
            response.reasonPhrase = "Server Internal Error"
        }
        return response
    }

    /// Lower is better.
    private func rank(_ response: SIPResponse) -> Int {
        let status = response.statusCode
        if status >= 600 { return 0 }
        let preferred4xx: Set<Int> = [401, 407, 415, 420, 484]
        let classRank = (status / 100) * 10
        if status / 100 == 4 && preferred4xx.contains(status) { return classRank - 1 }
        // 408 (a branch that never answered) is the least useful 4xx.
        if status == 408 { return classRank + 5 }
        if status == 503 { return 55 }
        return classRank
    }
}
