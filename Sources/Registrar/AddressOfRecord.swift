/// An extension's SIP address, `number@domain` (RFC 3261 §10: the address-of-record). The domain
/// is kept in lower case; the number as written.
public struct AddressOfRecord: Hashable, Sendable, Comparable, CustomStringConvertible {
    public let number: String
    public let domain: String

    public init(number: String, domain: String) {
        self.number = number
        // Most domains arrive lower-cased already (the registrar lower-cases the To host once).
        self.domain = AddressOfRecord.isLowercaseASCII(domain) ? domain : domain.lowercased()
    }

    /// Whether `text` is ASCII without capitals (what `lowercased()` returns unchanged), read in
    /// one loop over its bytes (iterating `utf8` cost some 75 instructions a byte).
    static func isLowercaseASCII(_ text: String) -> Bool {
        var text = text
        return text.withUTF8 { bytes in
            for c in bytes where c >= 0x80 || (c >= 0x41 && c <= 0x5A) { return false }
            return true
        }
    }

    /// Parses `number@domain`; nil unless both parts are present and well formed.
    public init?(parsing text: String) {
        let parts = text.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, AddressOfRecord.isValidNumber(String(parts[0])),
            AddressOfRecord.isValidDomain(String(parts[1]))
        else { return nil }
        self.init(number: String(parts[0]), domain: String(parts[1]))
    }

    public var description: String { "\(number)@\(domain)" }

    public static func < (lhs: AddressOfRecord, rhs: AddressOfRecord) -> Bool {
        (lhs.domain, lhs.number) < (rhs.domain, rhs.number)
    }

    /// An extension number: 1 to 64 characters of letters, digits, `.`, `_`, `-`, `+`.
    public static func isValidNumber(_ number: String) -> Bool {
        !number.isEmpty && number.utf8.count <= 64
            && number.utf8.allSatisfy { c in
                (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
                    || c == UInt8(ascii: ".") || c == UInt8(ascii: "_") || c == UInt8(ascii: "-") || c == UInt8(ascii: "+")
            }
    }

    /// A SIP domain: dot-separated labels of letters, digits and hyphens (no scheme, no port).
    public static func isValidDomain(_ domain: String) -> Bool {
        guard !domain.isEmpty, domain.utf8.count <= 253 else { return false }
        let labels = domain.split(separator: ".", omittingEmptySubsequences: false)
        return labels.allSatisfy { label in
            !label.isEmpty && label.utf8.count <= 63 && label.first != "-" && label.last != "-"
                && label.utf8.allSatisfy { c in
                    (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == UInt8(ascii: "-")
                }
        }
    }
}
