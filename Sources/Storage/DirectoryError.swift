import Foundation
public import Registrar

/// Why a directory operation was refused. Its description is one line for a person; it never
/// holds a password or hash. A value, safe to share; its parsing helpers do no I/O.
public enum DirectoryError: Error, Sendable, Hashable, CustomStringConvertible {
    case invalidDomain(String)
    case invalidNumber(String)
    /// Text that is not `number@domain` at all.
    case invalidAddress(String)
    case invalidPassword(reason: String)
    /// An extension's display name that cannot be shown on a phone (too long, a control character).
    case invalidDisplayName(reason: String)
    case noSuchDomain(String)
    case domainExists(String)
    case domainHasExtensions(String, count: Int)
    case noSuchExtension(AddressOfRecord)
    case extensionExists(AddressOfRecord)

    public var description: String {
        switch self {
        case .invalidDomain(let text): return "'\(Self.shown(text))' is not a valid domain"
        case .invalidNumber(let text): return "'\(Self.shown(text))' is not a valid extension number"
        case .invalidAddress(let text): return "'\(Self.shown(text))' is not an extension address (NUMBER@DOMAIN)"
        case .invalidPassword(let reason): return "unusable password: \(reason)"
        case .invalidDisplayName(let reason): return "unusable display name: \(reason)"
        case .noSuchDomain(let domain): return "no such domain \(domain)"
        case .domainExists(let domain): return "domain \(domain) already exists"
        case .domainHasExtensions(let domain, let count):
            return "domain \(domain) still has \(count) extension\(count == 1 ? "" : "s"); remove \(count == 1 ? "it" : "them") first"
        case .noSuchExtension(let aor): return "no such extension \(aor)"
        case .extensionExists(let aor): return "extension \(aor) already exists"
        }
    }

    /// Input echoed back on one line: control characters escaped, long text cut.
    static func shown(_ text: String) -> String {
        var shown = ""
        for scalar in text.unicodeScalars.prefix(80) {
            if scalar.value < 0x20 || scalar.value == 0x7F {
                shown += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                shown.unicodeScalars.append(scalar)
            }
        }
        return text.unicodeScalars.count > 80 ? shown + "…" : shown
    }

    /// Parses `number@domain`, saying which part is wrong.
    public static func parseAddress(_ text: String) throws(DirectoryError) -> AddressOfRecord {
        let parts = text.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2 else { throw .invalidAddress(text) }
        let number = String(parts[0])
        let domain = String(parts[1])
        guard AddressOfRecord.isValidNumber(number) else { throw .invalidNumber(number) }
        guard AddressOfRecord.isValidDomain(domain) else { throw .invalidDomain(domain) }
        return AddressOfRecord(number: number, domain: domain)
    }

    /// Checks and normalises (lower case) a domain.
    public static func parseDomain(_ text: String) throws(DirectoryError) -> String {
        guard AddressOfRecord.isValidDomain(text) else { throw .invalidDomain(text) }
        return text.lowercased()
    }

    /// A password must be 1 to 256 characters with no control characters (it is typed or pasted
    /// into a phone, and read from one line of input).
    public static func checkPassword(_ password: String) throws(DirectoryError) {
        guard !password.isEmpty else { throw .invalidPassword(reason: "it is empty") }
        guard password.count <= 256 else { throw .invalidPassword(reason: "it is longer than 256 characters") }
        guard !password.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            throw .invalidPassword(reason: "it holds a control character")
        }
    }

    /// The most Unicode scalars a display name may have (migration 730 checks the same).
    public static let displayNameLimit = 64

    /// An extension's display name as stored: trimmed; nil when empty (no name). Refused when
    /// longer than `displayNameLimit` characters (Unicode scalars), or when it holds a control
    /// character, a line or paragraph separator, or a bidirectional override (which could make a
    /// lock screen show another name than the one stored).
    public static func parseDisplayName(_ text: String) throws(DirectoryError) -> String? {
        let name = text.trimmingCharacters(in: .whitespaces)
        guard !name.isEmpty else { return nil }
        guard name.unicodeScalars.count <= displayNameLimit else {
            throw .invalidDisplayName(reason: "it is longer than \(displayNameLimit) characters")
        }
        let refused: (Unicode.Scalar) -> Bool = { scalar in
            scalar.properties.generalCategory == .control || (0x2028...0x2029).contains(scalar.value)
                || (0x202A...0x202E).contains(scalar.value) || (0x2066...0x2069).contains(scalar.value)
        }
        guard !name.unicodeScalars.contains(where: refused) else {
            throw .invalidDisplayName(reason: "it holds a control character")
        }
        return name
    }
}
