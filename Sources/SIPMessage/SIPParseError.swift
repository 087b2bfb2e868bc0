/// Why bytes are not an acceptable SIP message, and how to answer them: the status and reason
/// phrase of the error response, and the request lines needed to build it (RFC 3261 §8.2.6.2).
public struct SIPParseError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What the start line said the bytes were.
    public enum Kind: Hashable, Sendable {
        /// A request (or bytes that do not start like a response).
        case request
        /// A status line: a malformed response is always dropped (RFC 3261 §18.1.2).
        case response
        /// Nothing but line ends, or no start line at all.
        case empty
    }

    /// What is wrong, usable as a reason phrase: `Missing Call-ID header`, `Malformed Via header`.
    public let reason: String
    /// The status to answer with: 400, 416 (Request-URI scheme), 505 (SIP version), 414 (request
    /// line too long), 513 (message, header line or header count beyond the limits).
    public let statusCode: Int
    public let kind: Kind
    /// The request's Via lines and those of its From, To, Call-ID and CSeq lines that were there, as
    /// received, when an answer can reach the client transaction (a usable top Via and a CSeq) and
    /// the request is not an ACK (which is never answered, RFC 3261 §17.1.1.3); nil otherwise.
    public let replyHeaders: SIPHeaders?

    public init(reason: String, statusCode: Int = 400, kind: Kind = .request, replyHeaders: SIPHeaders? = nil) {
        self.reason = reason
        self.statusCode = statusCode
        self.kind = kind
        self.replyHeaders = replyHeaders
    }

    /// True when RFC 3261 says answer (a request whose answer can be routed back); false when the
    /// bytes must be dropped silently.
    public var canReply: Bool { replyHeaders != nil }

    /// The error response to send back (status and this reason phrase, Via/From/To/Call-ID/CSeq
    /// copied, a To tag added when To has none, RFC 3261 §8.2.6.2), or nil when the bytes must be
    /// dropped. Without `toTag` a random tag is made.
    public func response(toTag: String? = nil) -> SIPResponse? {
        guard let replyHeaders else { return nil }
        var headers = SIPHeaders()
        for field in replyHeaders {
            if field.key == .to, let to = try? SIPNameAddress(parsing: field.value), to.tag == nil {
                let tag = toTag ?? SIPParseError.randomTag()
                headers.add(SIPHeader(.to, field.value + ";tag=" + tag, spelled: field.name))
            } else {
                headers.add(field)
            }
        }
        return SIPResponse(statusCode: statusCode, reasonPhrase: reason, headers: headers)
    }

    public var description: String { "\(statusCode) \(reason)" }

    private static func randomTag() -> String {
        var generator = SystemRandomNumberGenerator()
        return String(generator.next() as UInt64, radix: 36)
    }
}
