public import Foundation

/// A JWT signed with HMAC-SHA256 (RFC 7519, RFC 7515 `HS256`) under a key derived for one purpose
/// from a secret every instance shares, and carrying one audience (`aud`) that it checks: the
/// call tokens and the wake credentials are made with it, each with its own purpose and audience,
/// so one is never taken for the other. A value; thread-safe.
public struct HS256TokenKey: Sendable {
    /// The `aud` every token made with this key carries, and every token it accepts must carry.
    public let audience: String
    private let key: [UInt8]

    /// `purpose` names the use (e.g. `rouse call token v1`): the signing key is HMAC(secret,
    /// purpose), so the same secret never signs two kinds of thing under one key.
    public init(secret: [UInt8], purpose: String, audience: String) {
        self.audience = audience
        key = Digest.hmacSHA256(key: secret, message: Array(purpose.utf8))
    }

    /// Why a token is refused (callers answer each the same way; a log may say which).
    public enum Refusal: String, Error, Sendable {
        case malformed, badSignature = "bad signature", wrongAudience = "wrong audience", expired
    }

    /// A token whose body is `aud` followed by `claims`, each value already JSON text (use
    /// `JSONString.quoted` for strings), in the order given.
    public func sign(_ claims: [(name: String, json: String)]) -> String {
        let header = #"{"alg":"HS256","typ":"JWT"}"#
        let body = "{" + ([("aud", JSONString.quoted(audience))] + claims.map { ($0.name, $0.json) })
            .map { JSONString.quoted($0.0) + ":" + $0.1 }.joined(separator: ",") + "}"
        let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(body.utf8))
        return input + "." + Base64URL.encode(Digest.hmacSHA256(key: key, message: Array(input.utf8)))
    }

    /// The claims of a token this key signed, with this audience, whose `exp` (seconds since the
    /// epoch, a fraction allowed: RFC 7519 §2 NumericDate) is after `now`. Numbers come as `Double`.
    public func verify(_ token: String, now: Date) -> Result<[String: any Sendable], Refusal> {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard token.utf8.count <= 2048, parts.count == 3, let signature = Self.decode(parts[2]) else { return .failure(.malformed) }
        let input = Array(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        guard Digest.constantTimeEquals(Digest.hmacSHA256(key: key, message: input), signature) else { return .failure(.badSignature) }
        guard let body = Self.decode(parts[1]),
            let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let audience = object["aud"] as? String
        else { return .failure(.malformed) }
        guard audience == self.audience else { return .failure(.wrongAudience) }
        guard let expiry = (object["exp"] as? NSNumber)?.doubleValue else { return .failure(.malformed) }
        guard Date(timeIntervalSince1970: TimeInterval(expiry)) > now else { return .failure(.expired) }
        var claims: [String: any Sendable] = [:]
        for (name, value) in object {
            if let text = value as? String {
                claims[name] = text
            } else if let number = value as? NSNumber {
                claims[name] = number.doubleValue
            }
        }
        return .success(claims)
    }

    /// Strict base64url: no padding, no `+` or `/`.
    private static func decode(_ part: Substring) -> [UInt8]? {
        guard !part.contains("="), !part.contains("+"), !part.contains("/") else { return nil }
        var text = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        text += String(repeating: "=", count: (4 - text.count % 4) % 4)
        return Data(base64Encoded: text).map(Array.init)
    }
}
