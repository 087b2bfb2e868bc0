// libFuzzer harness for the digest Authorization parser and the digest check.
// Build and run as SIPParserFuzz (scripts/fuzz.sh): the target exists only when ROUSE_FUZZ=1.
//   ROUSE_FUZZ=1 swift build --scratch-path /tmp/rouse-fuzz -c release --product DigestFuzz \
//     --sanitize=fuzzer -Xswiftc -parse-as-library
//   SWIFT_BACKTRACE=enable=no /tmp/rouse-fuzz/release/DigestFuzz -max_total_time=60 Tests/Fuzz/digest-corpus
import Crypto
import Foundation
import Registrar

/// The one extension the harness knows: 1001@example.com with password `pw-1001`.
private let realm = "example.com"
private let known = ExtensionCredentials(aor: AddressOfRecord(number: "1001", domain: realm), password: "pw-1001")
private let authenticator = DigestAuthenticator(secret: Array("fuzz-secret-fuzz-secret-fuzz-sec".utf8), nonceLifetime: 300)
private let now = Date(timeIntervalSince1970: 1_800_000_000)

private func lookup(_ aor: AddressOfRecord) -> ExtensionCredentials? {
    aor == known.aor ? known : nil
}

/// Parses the input as an Authorization value and checks it as is (it must never authenticate:
/// its nonce is not one this secret made, unless libFuzzer forged an HMAC). Then replaces the
/// nonce with a fresh one and the response with the right answer for `pw-1001`: when the header
/// names 1001 in the right realm with a known algorithm and qop, that answer must authenticate.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    guard var credentials = DigestCredentials(header: text) else { return 0 }
    _ = (credentials.username, credentials.realm, credentials.uri, credentials.opaque, credentials.algorithm)
    if case .authenticated = authenticator.verify(credentials, method: "REGISTER", realm: realm, now: now, lookup: lookup) {
        fatalError("a header with a foreign nonce authenticated: \(text)")
    }

    guard let challenge = authenticator.challenges(realm: realm, stale: false, now: now).first,
        let start = challenge.range(of: "nonce=\""),
        let end = challenge[start.upperBound...].firstIndex(of: "\"")
    else { fatalError("challenge without a nonce") }
    let nonce = String(challenge[start.upperBound..<end])
    credentials.parameters["nonce"] = nonce
    guard let algorithm = credentials.algorithm, let uri = credentials.uri else { return 0 }
    let ha1 = known.ha1(for: algorithm)
    let ha2 = Digest.hex(algorithm, "REGISTER:\(uri)")
    let qop = credentials.qop?.lowercased()
    switch qop {
    case "auth":
        guard let cnonce = credentials.cnonce, let nc = credentials.nc else { return 0 }
        credentials.parameters["response"] = Digest.hex(algorithm, "\(ha1):\(nonce):\(nc):\(cnonce):auth:\(ha2)")
    case nil:
        credentials.parameters["response"] = Digest.hex(algorithm, "\(ha1):\(nonce):\(ha2)")
    default:
        return 0
    }
    let verdict = authenticator.verify(credentials, method: "REGISTER", realm: realm, now: now, lookup: lookup)
    let username = credentials.username ?? ""
    let namesKnown = username == "1001" || username.lowercased() == "1001@example.com"
    let realmMatches = credentials.realm?.lowercased() == realm
    let countParses = qop == nil || credentials.nc.flatMap { UInt32($0, radix: 16) } != nil
    switch verdict {
    case .authenticated(let aor):
        guard aor == known.aor, namesKnown, realmMatches else { fatalError("authenticated the wrong extension: \(text)") }
    case .rejected, .stale:
        if namesKnown, realmMatches, countParses { fatalError("the right answer was refused (\(verdict)): \(text)") }
    }
    return 0
}
