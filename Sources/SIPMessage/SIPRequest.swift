/// A SIP request (RFC 3261 §7.1). Headers are the one source of truth; the typed accessors parse
/// them on demand.
public struct SIPRequest: Hashable, Sendable, SIPMessageHeaders {
    public var method: SIPMethod
    public var uri: SIPURI
    /// `SIP/2.0`.
    public var version: String
    public var headers: SIPHeaders
    public var body: [UInt8]

    public init(
        method: SIPMethod, uri: SIPURI, version: String = "SIP/2.0", headers: SIPHeaders = [],
        body: [UInt8] = []
    ) {
        self.method = method
        self.uri = uri
        self.version = version
        self.headers = headers
        self.body = body
    }
}

/// A SIP response (RFC 3261 §7.2).
public struct SIPResponse: Hashable, Sendable, SIPMessageHeaders {
    public var statusCode: Int
    public var reasonPhrase: String
    public var version: String
    public var headers: SIPHeaders
    public var body: [UInt8]

    public init(
        statusCode: Int, reasonPhrase: String? = nil, version: String = "SIP/2.0",
        headers: SIPHeaders = [], body: [UInt8] = []
    ) {
        self.statusCode = statusCode
        self.reasonPhrase = reasonPhrase ?? SIPStatus.reasonPhrase(for: statusCode)
        self.version = version
        self.headers = headers
        self.body = body
    }

    /// A response to `request` built as RFC 3261 §8.2.6.2 says: Via (all, in order), From, Call-ID
    /// and CSeq copied; To copied with `toTag` added when it has none (not for 100 Trying).
    public init(replyingTo request: SIPRequest, statusCode: Int, reasonPhrase: String? = nil, toTag: String? = nil) {
        // Room for what a registrar's 200 adds too (Server, Contact, Date...): no growing.
        var headers = SIPHeaders(capacity: 12)
        // By index: a for-in over the lines copies (retains and releases) every one of them.
        let fields = request.headers.fields
        for index in fields.indices where fields[index].key == .via {
            headers.add(fields[index])
        }
        // The lines are copied as received (their bytes, not decoded), spelled as this stack spells them.
        if let kept = request.headers.kept {
            headers.add(fields[kept.fromLine].respelled(Spelling.from))
            let to = fields[kept.toLine]
            if statusCode != 100, let toTag, kept.to.tag == nil {
                headers.add(to.appendingTag(toTag, spelled: Spelling.to))
            } else {
                headers.add(to.respelled(Spelling.to))
            }
            headers.add(fields[kept.callIDLine].respelled(Spelling.callID))
            headers.add(fields[kept.cseqLine].respelled(Spelling.cseq))
        } else {
            for key in Self.copiedFromRequest {
                guard let field = request.headers.first(key) else { continue }
                if key == .to, statusCode != 100, let toTag, field.withValueBytes(Self.lacksTag) {
                    headers.add(field.appendingTag(toTag, spelled: SIPHeaders.preferredSpelling(of: key)))
                } else {
                    headers.add(field.respelled(SIPHeaders.preferredSpelling(of: key)))
                }
            }
        }
        if statusCode == 100, let timestamp = request.headers.first(.timestamp) {
            headers.add(timestamp.respelled(SIPHeaders.preferredSpelling(of: .timestamp)))  // RFC 3261 §8.2.6.1
        }
        self.init(statusCode: statusCode, reasonPhrase: reasonPhrase, headers: headers)
    }

    /// The lines a response copies from its request besides Via (RFC 3261 §8.2.6.2).
    private static let copiedFromRequest: [SIPHeaderName] = [.from, .to, .callID, .cseq]

    /// How this stack spells the lines it copies (`SIPHeaders.preferredSpelling`), as literals.
    private enum Spelling {
        static let from = "From"
        static let to = "To"
        static let callID = "Call-ID"
        static let cseq = "CSeq"
    }

    /// True when a To value is a name-address without a tag. One without the letters "tag"
    /// anywhere has none and is not parsed (profiled: parsing it was 1.5 % of a REGISTER).
    private static func lacksTag(_ value: UnsafeBufferPointer<UInt8>) -> Bool {
        var matched = 0
        var mayHoldTag = false
        for byte in value {
            let lower = byte | 0x20
            let expected: UInt8 = matched == 0 ? UInt8(ascii: "t") : matched == 1 ? UInt8(ascii: "a") : UInt8(ascii: "g")
            if lower == expected {
                matched += 1
                if matched == 3 {
                    mayHoldTag = true
                    break
                }
            } else {
                matched = lower == UInt8(ascii: "t") ? 1 : 0
            }
        }
        guard mayHoldTag else { return true }
        return (try? SIPNameAddress(value, 0..<value.count)).map { $0.tag == nil } ?? false
    }
}

/// A request or a response.
public enum SIPMessage: Hashable, Sendable {
    case request(SIPRequest)
    case response(SIPResponse)

    public var headers: SIPHeaders {
        switch self {
        case .request(let request): return request.headers
        case .response(let response): return response.headers
        }
    }
}

/// The header accessors requests and responses share.
public protocol SIPMessageHeaders {
    var headers: SIPHeaders { get set }
    var body: [UInt8] { get set }
}

extension SIPMessageHeaders {
    /// Every Via element, top first.
    public var vias: [SIPVia] {
        var result: [SIPVia] = []
        let fields = headers.fields
        for index in fields.indices where fields[index].key == .via {
            fields[index].storage.withBytes { bytes in
                SIPHeaderValueScanner.forEachListElement(bytes) { element in
                    if let via = try? SIPVia(bytes, element) { result.append(via) }
                    return true
                }
            }
        }
        return result
    }
    /// The topmost Via element (the first non-empty element of the first Via line that has one),
    /// nil when there is none or it is malformed. Scanned in the line's own bytes: no String is
    /// made of the element before it is parsed.
    public var topVia: SIPVia? {
        if let kept = headers.kept, !headers.topViaEdited { return kept.topVia }
        let fields = headers.fields
        for index in fields.indices where fields[index].key == .via {
            var found = false
            var via: SIPVia?
            fields[index].storage.withBytes { bytes in
                SIPHeaderValueScanner.forEachListElement(bytes) { element in
                    found = true
                    via = try? SIPVia(bytes, element)
                    return false
                }
            }
            if found { return via }
        }
        return nil
    }
    public var callID: String? {
        if let kept = headers.kept { return headers.fields[kept.callIDLine].value }
        return headers[.callID]
    }
    public var cseq: SIPCSeq? {
        if let kept = headers.kept { return kept.cseq }
        return headers.withFirstValueBytes(.cseq) { try? SIPCSeq($0, 0..<$0.count) } ?? nil
    }
    public var from: SIPNameAddress? {
        let line = headers.kept?.fromLine ?? headers.position(of: .from)
        return line.flatMap { headers.fields[$0].storage.withBytes { try? SIPNameAddress($0, 0..<$0.count) } }
    }
    public var to: SIPNameAddress? {
        if let kept = headers.kept { return kept.to }
        return headers.withFirstValueBytes(.to) { try? SIPNameAddress($0, 0..<$0.count) } ?? nil
    }
    /// `to?.tag`, without building the To of a message that was not parsed.
    public var toTag: String? {
        if let kept = headers.kept { return kept.to.tag }
        return headers.withFirstValueBytes(.to, SIPNameAddress.tag(of:)) ?? nil
    }
    /// `from?.tag`, without building the From: its tag parameter is read off the line's bytes.
    public var fromTag: String? {
        let line = headers.kept?.fromLine ?? headers.position(of: .from)
        return line.flatMap { headers.fields[$0].storage.withBytes(SIPNameAddress.tag(of:)) }
    }
    /// Max-Forwards (leading zeros allowed); nil when absent or above 255, which RFC 4475 §3.1.2.4
    /// lets a proxy take as absent (it then sends 70 on, RFC 3261 §16.6 step 3).
    public var maxForwards: Int? {
        guard let value = headers.withFirstValueBytes(.maxForwards, { SIPHeaderValueScanner.decimal($0, 0..<$0.count) }) ?? nil,
            value <= 255
        else { return nil }
        return Int(value)
    }
    /// Contact elements; nil when there is no Contact header or one is malformed.
    public var contacts: [SIPContact]? {
        guard headers.contains(.contact) else { return nil }
        var result: [SIPContact] = []
        var malformed = false
        let fields = headers.fields
        for index in fields.indices where fields[index].key == .contact {
            fields[index].storage.withBytes { bytes in
                SIPHeaderValueScanner.forEachListElement(bytes) { element in
                    guard let contact = try? SIPContact(bytes, element) else {
                        malformed = true
                        return false
                    }
                    result.append(contact)
                    return true
                }
            }
            if malformed { return nil }
        }
        return result
    }
    /// Expires in seconds (leading zeros allowed); a value beyond 2^32-1 reads as 2^32-1, so an
    /// overlarge request is granted the registrar's maximum, never wrapped (RFC 4475 §3.1.2.4).
    public var expires: Int? { headers.withFirstValueBytes(.expires, SIPNameAddress.deltaSeconds) ?? nil }
}

extension String {
    /// The string without leading and trailing spaces, tabs, CR and LF.
    public var trimmingSIPWhitespace: String {
        withSIPBytes { bytes in
            SIPHeaderValueScanner.text(bytes, SIPHeaderValueScanner.trim(bytes, 0..<bytes.count))
        }
    }
}
