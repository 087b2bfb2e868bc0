import Crypto
import Foundation

/// The keys of a browser's push subscription (`PushSubscription.toJSON().keys`): the P-256 public
/// key messages are encrypted to (`p256dh`) and the 16-byte `auth` secret (RFC 8291 §2). The auth
/// secret is a secret: `description` never shows it. A value; thread-safe.
public struct WebPushSubscriptionKeys: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The uncompressed P-256 point (65 bytes).
    public let p256dh: [UInt8]
    /// The authentication secret (16 bytes).
    public let auth: [UInt8]

    /// Which of the two keys is wrong, and why (for a 400 naming the field).
    public struct Problem: Error, Sendable, Equatable {
        /// `p256dh` or `auth`.
        public let key: String
        public let message: String
    }

    /// Checks and decodes the base64url texts a browser gives.
    public init(p256dh: String, auth: String) throws(Problem) {
        guard let point = Base64URL.decode(p256dh), (try? P256PublicKey(uncompressedPoint: point)) != nil else {
            throw Problem(
                key: "p256dh", message: "p256dh must be the subscription's P-256 public key: an uncompressed point (65 bytes) in base64url")
        }
        guard let secret = Base64URL.decode(auth), secret.count == 16 else {
            throw Problem(key: "auth", message: "auth must be the subscription's 16-byte authentication secret in base64url")
        }
        self.p256dh = point
        self.auth = secret
    }

    public var p256dhBase64URL: String { Base64URL.encode(p256dh) }
    /// The auth secret as base64url: for storage only, never for logs or answers.
    public var authBase64URL: String { Base64URL.encode(auth) }

    public var description: String { "web push keys (p256dh \(Base64URL.encode(p256dh.prefix(6)))…, auth hidden)" }
    public var debugDescription: String { description }
}

/// Where the keys of a subscription are kept, by its endpoint (Storage implements it with the
/// subscriptions apps post). Thread-safe; must not block the caller's thread.
public protocol WebPushSubscriptionKeySource: Sendable {
    /// The keys posted for `endpoint`, or nil when none were.
    func keys(forEndpoint endpoint: String) async throws -> WebPushSubscriptionKeys?
}

/// A push subscription's endpoint (RFC 8030 §4: the push resource), checked. Pure.
public enum WebPushEndpoint {
    /// The longest endpoint accepted (browsers' are a few hundred bytes).
    public static let maxLength = 2048

    /// The endpoint's origin (RFC 6454: `https://host[:port]`, the port only when not 443), the
    /// VAPID JWT's `aud`; nil unless the endpoint is an https URL with a host.
    public static func origin(of endpoint: String) -> String? {
        guard endpoint.utf8.count <= maxLength, !endpoint.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value >= 0x7F }),
            let components = URLComponents(string: endpoint), components.scheme?.lowercased() == "https",
            let host = components.host, !host.isEmpty, components.user == nil, components.password == nil
        else { return nil }
        let shownHost = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        let port = components.port.flatMap { $0 == 443 ? nil : $0 }
        return "https://" + shownHost.lowercased() + (port.map { ":\($0)" } ?? "")
    }
}

/// Which push services Rouse sends web pushes to (`webpush_allowed_hosts`): an endpoint comes from
/// an app (posted, or `pn-prid`), so without a list any extension could make Rouse POST to any
/// https host, internal ones included. Entries are host names, `*.suffix` for a domain's hosts, or
/// `*` for every host. A value; thread-safe.
public struct WebPushHostPolicy: Sendable, Equatable {
    /// The browsers' push services: Chrome and Edge on Android (FCM), Firefox (Mozilla autopush),
    /// Edge on Windows (WNS), Safari (Apple).
    public static let browserPushServices = [
        "fcm.googleapis.com", "android.googleapis.com", "*.push.services.mozilla.com", "*.notify.windows.com", "*.push.apple.com",
    ]

    public let entries: [String]

    public init(entries: [String] = WebPushHostPolicy.browserPushServices) {
        self.entries = entries.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }.filter { !$0.isEmpty }
    }

    /// Whether `endpoint`'s host is on the list.
    public func permits(_ endpoint: String) -> Bool {
        guard let host = URLComponents(string: endpoint)?.host?.lowercased(), !host.isEmpty else { return false }
        return entries.contains { entry in
            if entry == "*" { return true }
            if entry.hasPrefix("*.") { return host.hasSuffix(String(entry.dropFirst())) }
            return host == entry
        }
    }
}
