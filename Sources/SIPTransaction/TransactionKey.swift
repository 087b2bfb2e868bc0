public import SIPMessage

/// Identifies a transaction for matching (RFC 3261 §17.1.3, §17.2.3); a value, safe anywhere.
///
/// Server keys come from the top Via branch when it carries the magic cookie `z9hG4bK` (branch,
/// sent-by, method with ACK counted as INVITE), otherwise from the RFC 2543 fields (Request-URI,
/// From tag, Call-ID, CSeq number, top Via, method). The RFC 2543 key leaves out the To tag, which
/// the owner compares on its own (`TransactionKey.rfc2543ToTagMatches`), because the ACK carries
/// the tag of the response while the INVITE carried none. Client keys are branch + CSeq method.
///
/// The key's hash is computed once, when it is made: a transaction is looked up several times per
/// message (match, insert, timers, removal, the flow index) and its branch and sent-by are long
/// strings, so hashing them anew each time was a measurable share of a REGISTER.
public struct TransactionKey: Hashable, Sendable, CustomStringConvertible {
    @usableFromInline
    enum Storage: Hashable, Sendable {
        case server(branch: String, sentBy: String, method: SIPMethod)
        case rfc2543(
            requestURI: SIPURI, fromTag: String?, callID: String, cseqNumber: UInt32, topVia: SIPVia,
            method: SIPMethod)
        case client(branch: String, method: SIPMethod)
    }

    @usableFromInline let storage: Storage
    /// `storage.hashValue`, computed once; also picks the key's shard in `TransactionLayer`.
    @usableFromInline let hash: Int

    init(storage: Storage) {
        self.storage = storage
        self.hash = storage.hashValue
    }

    @inlinable
    public static func == (lhs: TransactionKey, rhs: TransactionKey) -> Bool {
        lhs.hash == rhs.hash && lhs.storage == rhs.storage
    }

    @inlinable
    public func hash(into hasher: inout Hasher) { hasher.combine(hash) }

    /// True for a server key built by the RFC 2543 fallback of §17.2.3.
    public var isRFC2543: Bool {
        if case .rfc2543 = storage { return true }
        return false
    }

    /// True for a key of an INVITE server or client transaction (an ACK's key is its INVITE's).
    @inlinable
    public var isInvite: Bool {
        switch storage {
        case .server(_, _, let method), .rfc2543(_, _, _, _, _, let method), .client(_, let method): method == .invite
        }
    }

    public var description: String {
        switch storage {
        case .server(let branch, let sentBy, let method):
            return "server \(method) \(branch) \(sentBy)"
        case .rfc2543(let uri, let fromTag, let callID, let number, let via, let method):
            return "server-2543 \(method) \(uri) \(fromTag ?? "-") \(callID) \(number) \(via)"
        case .client(let branch, let method):
            return "client \(method) \(branch)"
        }
    }

    /// The server transaction key of a request (§17.2.3), nil when it has no top Via or CSeq
    /// (or, without a cookie branch, no Call-ID). An ACK gets the key of its INVITE.
    public static func server(for request: SIPRequest) -> TransactionKey? {
        server(for: request, topVia: request.topVia)
    }

    /// The key of the INVITE server transaction a CANCEL cancels: §9.2, the CANCEL matches as in
    /// §17.2.3 except that the method is not considered.
    public static func inviteServer(cancelledBy cancel: SIPRequest) -> TransactionKey? {
        guard cancel.method == .cancel else { return nil }
        return server(for: cancel, method: .invite, topVia: cancel.topVia)
    }

    /// The client transaction key of a request about to be sent: its top Via branch and method.
    /// Nil when the branch is missing or lacks the RFC 3261 cookie (§8.1.1.7: Rouse always sends one).
    public static func client(for request: SIPRequest) -> TransactionKey? {
        guard let branch = request.topVia?.branch.flatMap(cookieBranchKey) else { return nil }
        return TransactionKey(storage: .client(branch: branch, method: request.method))
    }

    /// The client transaction key a response matches (§17.1.3): top Via branch + CSeq method.
    public static func client(for response: SIPResponse) -> TransactionKey? {
        guard let branch = response.topVia?.branch.flatMap(cookieBranchKey), let cseq = response.cseq else { return nil }
        return TransactionKey(storage: .client(branch: branch, method: cseq.method))
    }

    /// §17.2.3, RFC 2543 fallback: the To tag of a request matching an RFC 2543 key must equal the
    /// To tag of the request that created the transaction, except for an ACK, whose To tag must
    /// equal the one of the response the transaction sent.
    public static func rfc2543ToTagMatches(
        _ request: SIPRequest, transactionRequest: SIPRequest, lastResponse: SIPResponse?
    ) -> Bool {
        let tag = request.to?.tag
        if request.method == .ack, let lastResponse {
            return tag == lastResponse.to?.tag
        }
        return tag == transactionRequest.to?.tag
    }

    /// A branch with the RFC 3261 cookie and something after it, as keys hold it: lower-cased
    /// after the cookie (tokens compare case-insensitively, §7.3.1; the cookie itself is always
    /// written exactly so), the same String when that part has no capitals (as most stacks write
    /// it). Nil for any other branch. One pass over the bytes, no copy in the usual case.
    static func cookieBranchKey(_ branch: String) -> String? {
        var text = branch
        let cookie = cookieBytes
        let verdict = text.withUTF8 { bytes -> Bool? in
            guard bytes.count > cookie.count else { return nil }
            for k in 0..<cookie.count where bytes[k] != cookie[k] { return nil }
            for k in cookie.count..<bytes.count where bytes[k] >= 0x80 || (bytes[k] >= 0x41 && bytes[k] <= 0x5A) { return true }
            return false
        }
        guard let needsLowering = verdict else { return nil }
        guard needsLowering else { return branch }
        return SIPVia.magicCookie + String(branch.utf8.dropFirst(cookie.count))!.lowercased()
    }

    private static let cookieBytes = Array(SIPVia.magicCookie.utf8)

    /// `text.lowercased()`, the same String when it has no capitals (a host as an IP).
    static func lowercased(_ text: String) -> String {
        var copy = text
        let plain = copy.withUTF8 { bytes in !bytes.contains { $0 >= 0x80 || ($0 >= 0x41 && $0 <= 0x5A) } }
        return plain ? text : text.lowercased()
    }

    /// The server transaction key of a request whose top Via the caller has already parsed
    /// (`topVia` is the request's top Via as it stands; nil when it has none).
    public static func server(for request: SIPRequest, topVia: SIPVia?) -> TransactionKey? {
        server(for: request, method: request.method == .ack ? .invite : request.method, topVia: topVia)
    }

    private static func server(for request: SIPRequest, method: SIPMethod, topVia: SIPVia?) -> TransactionKey? {
        guard let via = topVia, let cseq = request.cseq else { return nil }
        if let branch = via.branch.flatMap(cookieBranchKey) {
            // §17.2.3: branch (tokens compare case-insensitively, §7.3.1) + sent-by + method.
            var sentBy = via.host
            if let port = via.port {
                sentBy.append(":")
                sentBy.append(String(port))
            }
            return TransactionKey(
                storage: .server(branch: branch, sentBy: lowercased(sentBy), method: method))
        }
        guard let callID = request.callID else { return nil }
        // §17.2.3: without the cookie, match on Request-URI, To tag (compared by the owner), From
        // tag, Call-ID, CSeq and top Via.
        return TransactionKey(
            storage: .rfc2543(
                requestURI: request.uri, fromTag: request.from?.tag, callID: callID, cseqNumber: cseq.number,
                topVia: via, method: method))
    }
}
