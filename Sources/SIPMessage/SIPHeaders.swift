/// One header line of a message: its name as spelled on the wire and its value, trimmed of
/// surrounding white space, with folded continuation lines joined by a single space.
///
/// A parsed line keeps its value as a range of the received message's bytes and makes a String
/// of it only when `value` is read: most lines of a message are only checked, copied into a
/// response or forwarded, which `withValueBytes` and the serializer do on the bytes themselves.
public struct SIPHeader: Hashable, Sendable {
    /// The name as it was received or given (serialized as is).
    public var name: String
    /// The value after the colon (decoded from the received bytes on each read of a parsed line).
    public var value: String {
        get {
            switch storage {
            case .text(let text): return text
            case .received(let bytes, let lower, let upper):
                return bytes.withUnsafeBufferPointer { whole in
                    String(decoding: UnsafeBufferPointer(rebasing: whole[Int(lower)..<Int(upper)]), as: UTF8.self)
                }
            }
        }
        set { storage = .text(newValue) }
    }
    /// The name as SIP compares it.
    public let key: SIPHeaderName
    /// Where the value is held.
    var storage: Storage

    /// A value given as text, or a range of the bytes of the message it was parsed from (which the
    /// line keeps alive; ranges are 32-bit so the enum stays two words and a tag).
    enum Storage: Sendable {
        case text(String)
        case received([UInt8], UInt32, UInt32)

        /// Runs `body` over the value's UTF-8 bytes. Called on a line's `storage` in place
        /// (`fields[i].storage.withBytes`), it copies only the storage, not the whole line as
        /// `fields[i].storage.withBytes` does (profiled: those copies were 1.4k instructions per REGISTER).
        func withBytes<T, E: Error>(_ body: (UnsafeBufferPointer<UInt8>) throws(E) -> T) throws(E) -> T {
            switch self {
            case .text(let text):
                return try text.parsingBytes(body)
            case .received(let bytes, let lower, let upper):
                return try bytes.withUnsafeBufferPointerTyped { whole throws(E) -> T in
                    try body(UnsafeBufferPointer(rebasing: whole[Int(lower)..<Int(upper)]))
                }
            }
        }
    }

    public init(name: String, value: String) {
        self.name = name
        self.storage = .text(value)
        self.key = SIPHeaderName(name)
    }

    public init(_ key: SIPHeaderName, _ value: String, spelled name: String? = nil) {
        self.name = name ?? SIPHeaders.preferredSpelling(of: key)
        self.storage = .text(value)
        self.key = key
    }

    init(_ key: SIPHeaderName, storage: Storage, spelled name: String) {
        self.name = name
        self.storage = storage
        self.key = key
    }

    /// This line's value under another name spelling (a response copying a request's line as
    /// its own stack spells it), sharing the received bytes.
    func respelled(_ name: String) -> SIPHeader { SIPHeader(key, storage: storage, spelled: name) }

    /// This line with `;tag=<tag>` after its value (a To a response adds its tag to), written as
    /// bytes, not Strings added up.
    func appendingTag(_ tag: String, spelled name: String) -> SIPHeader {
        let bytes = [UInt8](sipBytes: valueByteCount + 5 + tag.utf8.count) { out in
            storage.withBytes { out.write($0) }
            out.writeLiteral(";tag=")
            out.write(text: tag)
        }
        return SIPHeader(key, storage: .received(bytes, 0, UInt32(bytes.count)), spelled: name)
    }

    /// Runs `body` over the value's UTF-8 bytes without making a String of a received value.
    public func withValueBytes<T, E: Error>(_ body: (UnsafeBufferPointer<UInt8>) throws(E) -> T) throws(E) -> T {
        try storage.withBytes(body)
    }

    /// The value's length in bytes.
    var valueByteCount: Int {
        switch storage {
        case .text(let text): return text.utf8.count
        case .received(_, let lower, let upper): return Int(upper - lower)
        }
    }

    public static func == (lhs: SIPHeader, rhs: SIPHeader) -> Bool {
        guard lhs.key == rhs.key, lhs.name == rhs.name, lhs.valueByteCount == rhs.valueByteCount else { return false }
        return lhs.withValueBytes { left in rhs.withValueBytes { right in left.elementsEqual(right) } }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(key)
        hasher.combine(name)
        withValueBytes { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }
}

extension String {
    /// Runs a throwing body over the string's contiguous UTF-8 bytes (made contiguous first when
    /// it is bridged or a shared substring).
    func parsingBytes<T, E: Error>(_ body: (UnsafeBufferPointer<UInt8>) throws(E) -> T) throws(E) -> T {
        var text = self
        let result = text.withUTF8 { bytes in Result<T, E>(catching: { () throws(E) -> T in try body(bytes) }) }
        return try result.get()
    }
}

extension Array where Element == UInt8 {
    /// Appends a literal's bytes (its UTF-8 view would be appended a byte at a time).
    mutating func append(literal: StaticString) {
        append(contentsOf: UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
    }

    /// `withUnsafeBufferPointer` with a typed throw.
    func withUnsafeBufferPointerTyped<T, E: Error>(_ body: (UnsafeBufferPointer<UInt8>) throws(E) -> T) throws(E) -> T {
        let result = withUnsafeBufferPointer { bytes in Result<T, E>(catching: { () throws(E) -> T in try body(bytes) }) }
        return try result.get()
    }
}

/// The ordered header fields of a message. Order is kept (Via and Route order matter); lookups
/// compare names case-insensitively and accept compact forms.
/// Equality and hashing look at the lines only, not at what the parser kept of them.
public struct SIPHeaders: Hashable, Sendable, Sequence, ExpressibleByArrayLiteral {
    public private(set) var fields: [SIPHeader]
    /// What the parser kept of the lines every message has; nil for headers built otherwise and
    /// after any change but a line added at the end or the source noted in the top Via.
    private(set) var kept: SIPKeptLines?
    /// True once the top Via line was rewritten (`noteSourceInTopVia`): the kept top Via and its
    /// place in the line are then out of date, the other kept lines not.
    private(set) var topViaEdited = false

    public init(_ fields: [SIPHeader] = []) {
        self.fields = fields
        self.kept = nil
    }

    /// A parsed message's lines with what the parser kept of them.
    init(_ fields: [SIPHeader], kept: SIPKeptLines) {
        self.fields = fields
        self.kept = kept
    }

    /// No lines yet, with room for `capacity`.
    init(capacity: Int) {
        fields = []
        fields.reserveCapacity(capacity)
        kept = nil
    }

    public init(arrayLiteral elements: (String, String)...) {
        self.fields = elements.map { SIPHeader(name: $0.0, value: $0.1) }
        self.kept = nil
    }

    public static func == (lhs: SIPHeaders, rhs: SIPHeaders) -> Bool { lhs.fields == rhs.fields }

    public func hash(into hasher: inout Hasher) { hasher.combine(fields) }

    public var count: Int { fields.count }
    public func makeIterator() -> IndexingIterator<[SIPHeader]> { fields.makeIterator() }

    /// Where the first line with this name stands. By index, comparing each line's name in place:
    /// `first(where:)` and `compactMap` copy (retain and release) every line they pass.
    func position(of key: SIPHeaderName) -> Int? {
        var index = 0
        while index < fields.count {
            if fields[index].key == key { return index }
            index += 1
        }
        return nil
    }

    /// Runs `body` over the value bytes of the first line with this name (nil when there is none),
    /// without copying the line.
    func withFirstValueBytes<T>(_ key: SIPHeaderName, _ body: (UnsafeBufferPointer<UInt8>) -> T) -> T? {
        position(of: key).map { fields[$0].storage.withBytes(body) }
    }

    /// The value of the first line with this name.
    public subscript(_ key: SIPHeaderName) -> String? {
        position(of: key).map { fields[$0].value }
    }

    /// The first line with this name (its value undecoded: read it with `withValueBytes`).
    public func first(_ key: SIPHeaderName) -> SIPHeader? {
        position(of: key).map { fields[$0] }
    }

    /// The value of the first line with this name (any spelling or compact form).
    public subscript(_ name: String) -> String? { self[SIPHeaderName(name)] }

    /// Every line's value with this name, in order, each as written (not split at commas).
    public func lines(_ key: SIPHeaderName) -> [String] {
        var result: [String] = []
        for index in fields.indices where fields[index].key == key { result.append(fields[index].value) }
        return result
    }

    /// Every element of a list header (RFC 3261 §7.3.1): all lines with this name, each split at
    /// commas that stand outside quoted strings and angle brackets.
    public func values(_ key: SIPHeaderName) -> [String] {
        var result: [String] = []
        for index in fields.indices where fields[index].key == key {
            result.append(contentsOf: fields[index].storage.withBytes(SIPHeaderValueScanner.splitList))
        }
        return result
    }

    /// The first element of the first line with this name: `values(key).first`, without splitting
    /// the other lines (the top Via of a message with several).
    public func firstValue(_ key: SIPHeaderName) -> String? {
        for index in fields.indices where fields[index].key == key {
            if let element = fields[index].storage.withBytes(SIPHeaderValueScanner.firstListElement) { return element }
        }
        return nil
    }

    public func contains(_ key: SIPHeaderName) -> Bool { position(of: key) != nil }

    /// Appends a line after the existing ones.
    public mutating func add(_ key: SIPHeaderName, _ value: String) {
        fields.append(SIPHeader(key, value))
    }

    public mutating func add(_ header: SIPHeader) { fields.append(header) }

    /// Adds a line before all others (a proxy's Via, RFC 3261 §16.6 step 8).
    public mutating func prepend(_ key: SIPHeaderName, _ value: String) {
        kept = nil
        fields.insert(SIPHeader(key, value), at: 0)
    }

    /// Replaces every line with this name by one line, placed where the first was (or at the end).
    public mutating func set(_ key: SIPHeaderName, _ value: String) {
        kept = nil
        if let first = position(of: key) {
            let spelled = fields[first].name
            fields.removeAll { $0.key == key }
            fields.insert(SIPHeader(key, value, spelled: spelled), at: Swift.min(first, fields.count))
        } else {
            fields.append(SIPHeader(key, value))
        }
    }

    /// Removes every line with this name.
    public mutating func remove(_ key: SIPHeaderName) {
        kept = nil
        fields.removeAll { $0.key == key }
    }

    /// Removes the first line with this name, or the first element of it when the line holds a list
    /// (a proxy removing its own Via, RFC 3261 §16.7 step 3).
    public mutating func removeFirstValue(_ key: SIPHeaderName) {
        guard let index = position(of: key) else { return }
        kept = nil
        // A line of one element (no comma outside quotes and brackets) goes without being split.
        if fields[index].storage.withBytes({ SIPHeaderValueScanner.listElementEnd($0, 0..<$0.count) == $0.count }) {
            fields.remove(at: index)
            return
        }
        var elements = SIPHeaderValueScanner.splitList(fields[index].value)
        if elements.count <= 1 {
            fields.remove(at: index)
        } else {
            elements.removeFirst()
            fields[index].value = elements.joined(separator: ", ")
        }
    }

    /// Notes where a request came from in its top Via element (RFC 3261 §18.2.1, RFC 3581 §4):
    /// `received` set to `received` (in place of the element's own, else after its parameters)
    /// and, when `rport` is given, the `rport` parameter given that value where it stands. The
    /// line's bytes are spliced, not parsed and written again: the element's other bytes, the
    /// elements after it and the line's place and spelling stay as received. Does nothing when
    /// there is no Via.
    public mutating func noteSourceInTopVia(received: String, rport: Int?) {
        let index: Int
        let element: Range<Int>
        let elementEnd: Int
        if let kept, !topViaEdited {
            (index, element, elementEnd) = (kept.topViaLine, kept.topViaElement, kept.topViaElementEnd)
        } else {
            guard let first = position(of: .via) else { return }
            index = first
            (element, elementEnd) = fields[first].storage.withBytes(SIPHeaders.firstElement)
        }
        let line = fields[index].storage.withBytes { bytes in
            SIPHeaders.splicingSource(bytes, element, elementEnd, received: received, rport: rport)
        }
        fields[index].storage = .received(line, 0, UInt32(line.count))
        topViaEdited = true
    }

    /// The first non-empty element of a list value (trimmed) and the index of the comma ending it
    /// (or the value's length); an empty range at the end when there is none.
    private static func firstElement(_ bytes: UnsafeBufferPointer<UInt8>) -> (Range<Int>, Int) {
        typealias Scanner = SIPHeaderValueScanner
        var element = 0..<0
        var elementEnd = bytes.count
        var start = 0
        while start <= bytes.count {
            let end = Scanner.listElementEnd(bytes, start..<bytes.count)
            element = Scanner.trim(bytes, start..<end)
            elementEnd = end
            if !element.isEmpty { break }
            start = end + 1
        }
        return (element, elementEnd)
    }

    /// The top Via line's value with the source written in (see `noteSourceInTopVia`), given its
    /// top element (trimmed) and the index of the comma ending it (or the value's length).
    private static func splicingSource(
        _ bytes: UnsafeBufferPointer<UInt8>, _ element: Range<Int>, _ elementEnd: Int, received: String, rport: Int?
    ) -> [UInt8] {
        typealias Scanner = SIPHeaderValueScanner
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count + received.utf8.count + 24)
        let parameters = Scanner.firstIndex(of: UInt8(ascii: ";"), in: bytes, element) ?? element.upperBound
        out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[0..<parameters]))
        var wroteReceived = false
        func appendReceived(_ out: inout [UInt8]) {
            out.append(literal: ";received=")
            received.withSIPBytes { out.append(contentsOf: $0) }
            wroteReceived = true
        }
        // Each parameter from its `;` to the next one outside a quoted string.
        var i = parameters
        while i < element.upperBound {
            let parameter = i
            i += 1
            var nameEnd = element.upperBound
            while i < element.upperBound, bytes[i] != UInt8(ascii: ";") {
                if bytes[i] == UInt8(ascii: "="), nameEnd == element.upperBound { nameEnd = i }
                if bytes[i] == UInt8(ascii: "\""), let close = try? Scanner.quotedStringEnd(bytes, from: i, element.upperBound) {
                    i = close
                } else {
                    i += 1
                }
            }
            let name = Scanner.trim(bytes, (parameter + 1)..<Swift.min(nameEnd, i))
            if Scanner.equalsLowercased(bytes, name, "received") {
                if !wroteReceived { appendReceived(&out) }
            } else if let rport, Scanner.equalsLowercased(bytes, name, "rport") {
                out.append(literal: ";rport=")
                Scanner.appendDecimal(rport, to: &out)
            } else {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[parameter..<i]))
            }
        }
        if !wroteReceived { appendReceived(&out) }
        if elementEnd < bytes.count {
            let rest = Scanner.trim(bytes, (elementEnd + 1)..<bytes.count)
            if !rest.isEmpty {
                out.append(literal: ", ")
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[rest]))
            }
        }
        return out
    }

    static func preferredSpelling(of key: SIPHeaderName) -> String {
        if key.code != 0 { return spellingsByCode[Int(key.code)] }
        if let spelled = preferredSpellings[key.canonical] { return spelled }
        return capitalised(key.canonical)
    }

    /// `call-id` as `Call-Id`: each part after a `-` capitalised.
    private static func capitalised(_ canonical: String) -> String {
        canonical.split(separator: "-", omittingEmptySubsequences: false)
            .map { $0.prefix(1).uppercased() + $0.dropFirst() }
            .joined(separator: "-")
    }

    /// The spellings of the names with codes (`SIPHeaderName.knownNames`), by code: read without
    /// hashing the name.
    private static let spellingsByCode: [String] =
        [""] + SIPHeaderName.knownNames.map { preferredSpellings[$0] ?? capitalised($0) }

    /// How the headers a SIP stack writes are spelled, looked up instead of capitalised anew on
    /// every line a response or request is built with (profiled: the capitalising was 4 % of a
    /// REGISTER's instructions).
    static let preferredSpellings: [String: String] = {
        var table = ["call-id": "Call-ID", "cseq": "CSeq", "www-authenticate": "WWW-Authenticate", "mime-version": "MIME-Version"]
        let names = [
            "via", "from", "to", "contact", "max-forwards", "content-length", "content-type", "expires", "min-expires", "route",
            "record-route", "path", "allow", "accept", "supported", "require", "proxy-require", "unsupported", "user-agent",
            "server", "authorization", "proxy-authorization", "proxy-authenticate", "authentication-info", "retry-after",
            "reason", "feature-caps", "timestamp", "date", "warning", "allow-events", "event", "subject", "organization",
            "priority", "content-encoding", "content-disposition", "accept-encoding", "accept-language", "alert-info",
            "call-info", "error-info", "in-reply-to", "reply-to", "session-expires", "min-se", "refer-to", "referred-by",
            "p-asserted-identity", "privacy", "security-client", "security-server", "security-verify", "flow-timer",
        ]
        for name in names where table[name] == nil { table[name] = capitalised(name) }
        return table
    }()
}
