import Crypto
import Foundation
public import Registrar

extension ExtensionDirectory {
    /// The extension `user` (`number@domain`) when `password` is its password; nil otherwise.
    /// An unknown or malformed user costs the same hash work and comparison as a wrong password
    /// (decisions.md: identical 401s, timing within noise).
    public func verify(user: String, password: String) -> AddressOfRecord? {
        let aor = AddressOfRecord(parsing: user)
        let number = aor?.number ?? user
        let domain = aor?.domain ?? ""
        let computed = Array(ExtensionCredentials.ha1(.md5, number: number, realm: domain, password: password).utf8)
        let stored = aor.flatMap { credentials(of: $0) }
        let expected = Array((stored?.ha1MD5 ?? unmatchableHA1).utf8)
        let equal = Digest.constantTimeEquals(computed, expected)
        guard let aor, stored != nil, equal else { return nil }
        return aor
    }
}

/// 32 characters that are not hex, so no MD5 hex digest ever equals them.
private let unmatchableHA1 = String(repeating: "z", count: 32)
