/// One `;name=value` parameter of a URI or header. The value is kept verbatim (escapes and
/// quotes as received) so that what a phone sent (pn-prid, +sip.instance) comes back unchanged.
public struct SIPParameter: Hashable, Sendable {
    public var name: String
    public var value: String?

    public init(_ name: String, _ value: String? = nil) {
        self.name = name
        self.value = value
    }
}

/// Ordered parameters with case-insensitive names (RFC 3261 §19.1.4, §7.3.1).
public struct SIPParameters: Hashable, Sendable, Sequence, ExpressibleByArrayLiteral {
    public private(set) var items: [SIPParameter]

    public init(_ items: [SIPParameter] = []) { self.items = items }
    public init(arrayLiteral elements: SIPParameter...) { self.items = elements }

    public var isEmpty: Bool { items.isEmpty }
    public var count: Int { items.count }
    public func makeIterator() -> IndexingIterator<[SIPParameter]> { items.makeIterator() }

    /// The value of the named parameter: nil when absent, `.some(nil)` when present without a value.
    public subscript(_ name: String) -> String?? {
        guard let item = items.first(where: { $0.name.caseInsensitiveEquals(name) }) else { return nil }
        return .some(item.value)
    }

    /// The named parameter's value, or nil when absent or valueless.
    public func value(_ name: String) -> String? {
        items.first(where: { $0.name.caseInsensitiveEquals(name) })?.value
    }

    public func contains(_ name: String) -> Bool {
        items.contains { $0.name.caseInsensitiveEquals(name) }
    }

    /// Sets (replacing in place) or appends the parameter.
    public mutating func set(_ name: String, _ value: String?) {
        if let index = items.firstIndex(where: { $0.name.caseInsensitiveEquals(name) }) {
            items[index].value = value
        } else {
            items.append(SIPParameter(name, value))
        }
    }

    public mutating func remove(_ name: String) {
        items.removeAll { $0.name.caseInsensitiveEquals(name) }
    }

    /// The parameters with `%HH` escapes of unreserved characters in names and values read as the
    /// characters (`%6C%72` is `lr`), as URI parameters compare (RFC 3261 §19.1.4).
    func decodingUnreservedEscapes() -> SIPParameters {
        guard items.contains(where: { $0.name.utf8.contains(0x25) || $0.value?.utf8.contains(0x25) == true }) else { return self }
        return SIPParameters(
            items.map { item in
                SIPParameter(
                    SIPParameters.decodingUnreserved(item.name, tokenOnly: true),
                    item.value.map { SIPParameters.decodingUnreserved($0, tokenOnly: false) })
            })
    }

    /// Names stay tokens: `%28` and `%29` (`(`, `)`) are left escaped there.
    private static func decodingUnreserved(_ text: String, tokenOnly: Bool) -> String {
        guard text.utf8.contains(0x25) else { return text }
        return text.withSIPBytes { bytes in SIPHeaderValueScanner.decodingUnreserved(bytes, 0..<bytes.count, tokenOnly: tokenOnly) }
    }

    /// `;a=b;c` as written on the wire (empty when there are none).
    public var serialized: String {
        String(sipBytes: serializedLength) { out in write(to: &out) }
    }

    /// How many UTF-8 bytes `serialized` has.
    var serializedLength: Int {
        items.reduce(0) { $0 + 1 + $1.name.utf8.count + ($1.value.map { 1 + $0.utf8.count } ?? 0) }
    }

    /// Writes `serialized`'s bytes.
    func write(to out: inout SIPByteWriter) {
        for item in items {
            out.write(UInt8(ascii: ";"))
            out.write(text: item.name)
            if let value = item.value {
                out.write(UInt8(ascii: "="))
                out.write(text: value)
            }
        }
    }
}

extension String {
    /// ASCII case-insensitive comparison, as SIP compares tokens.
    @inlinable
    public func caseInsensitiveEquals(_ other: String) -> Bool {
        let a = self.utf8, b = other.utf8
        guard a.count == b.count else { return false }
        // The same spelling (`branch`, `rport` as nearly everyone writes them) needs no byte loop.
        if self == other { return true }
        for (x, y) in zip(a, b) where x != y {
            let lx = (x >= 65 && x <= 90) ? x | 0x20 : x
            let ly = (y >= 65 && y <= 90) ? y | 0x20 : y
            if lx != ly { return false }
        }
        return true
    }
}
