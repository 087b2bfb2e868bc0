import Crypto
import RouseVocabulary
public import Foundation

/// One web push message before encryption (RFC 8030 §5): the plaintext, how long the push service
/// may keep it, how urgent it is, and the topic that lets a later message replace it. A value.
public struct WebPushMessage: Sendable, Equatable {
    /// RFC 8030 §5.3 `Urgency`.
    public enum Urgency: String, Sendable {
        case veryLow = "very-low"
        case low
        case normal
        case high
    }

    /// The plaintext (the payload JSON); empty sends a push without payload.
    public var payload: [UInt8]
    /// `TTL`: seconds the push service keeps an undelivered message (0: deliver now or drop).
    public var ttlSeconds: Int
    public var urgency: Urgency
    /// `Topic` (at most 32 base64url characters): a newer message with the same topic replaces an
    /// undelivered older one, as a cancel replaces its ring.
    public var topic: String?

    public init(payload: [UInt8], ttlSeconds: Int, urgency: Urgency, topic: String? = nil) {
        self.payload = payload
        self.ttlSeconds = ttlSeconds
        self.urgency = urgency
        self.topic = topic
    }

    /// A call's topic: its UUID without dashes (32 hex digits, all base64url characters).
    public static func topic(forCallUUID uuid: String?) -> String? {
        guard let uuid else { return nil }
        let compact = uuid.replacingOccurrences(of: "-", with: "")
        return compact.count == 32 ? compact : nil
    }
}

/// Sends web push messages (RFC 8030) to subscription endpoints: encrypts the payload to the
/// subscription's keys (RFC 8291, aes128gcm) when they are known, identifies Rouse with VAPID
/// (RFC 8292), POSTs over libcurl (HTTP/2 when the push service offers it, else HTTP/1.1) and
/// classifies the answer into a `PushOutcome` (404 and 410: the subscription is dead). Retries and
/// back-off are APNs's and FCM's: a transient failure (refused or lost connection, 5xx, 429 with
/// a `Retry-After` that fits) is sent again as `retry` allows within the push's deadline, and each
/// push service origin has its own `ProviderCircuit` (one failing push service does not hold back
/// the others).
///
/// A subscription known only from a SIP REGISTER (`pn-prid`, RFC 8599), whose keys were never
/// posted, gets a push without payload: it still wakes the browser's service worker.
///
/// Threading: thread-safe; `send` may run from many tasks at once. Its HTTP client has its own
/// thread (one connection per push service, reused); a lock guards the circuits.
public final class WebPushClient: @unchecked Sendable {
    // @unchecked: `circuitsByOrigin` is only touched under `lock`.
    public let vapid: VAPIDKeys
    /// The VAPID `sub`: a `mailto:` or `https:` URI the push service's operator can reach.
    public let contact: String
    private let http: HTTP2Client
    private let timeout: Duration
    private let subscriptions: (any WebPushSubscriptionKeySource)?
    /// The push services Rouse may send to.
    public let allowedHosts: WebPushHostPolicy
    private let tokens = VAPIDTokenCache()
    private let now: @Sendable () -> Date
    private let retry: PushRetryPolicy
    private let breaker: ProviderCircuitBreaker.Settings
    private let lock = NSLock()
    private var circuitsByOrigin: [String: ProviderCircuit] = [:]
    /// Push services kept track of at most; past it, those whose breaker is closed are forgotten.
    static let maximumCircuits = 256

    /// - Parameters:
    ///   - timeout: the deadline of one attempt (connect included).
    ///   - retry: how transient failures are tried again.
    ///   - breaker: when a push service that keeps failing is backed off.
    ///   - proxy: the HTTP(S) proxy pushes go through (`push_proxy`); nil: none.
    public init(
        vapid: VAPIDKeys, contact: String, caFile: String?, timeout: Duration, subscriptions: (any WebPushSubscriptionKeySource)?,
        allowedHosts: WebPushHostPolicy = WebPushHostPolicy(), retry: PushRetryPolicy = PushRetryPolicy(),
        breaker: ProviderCircuitBreaker.Settings = ProviderCircuitBreaker.Settings(), proxy: PushProxy? = nil,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.allowedHosts = allowedHosts
        self.vapid = vapid
        self.contact = contact
        self.timeout = timeout
        self.subscriptions = subscriptions
        self.retry = retry
        self.breaker = breaker
        self.now = now
        http = HTTP2Client(options: .init(caFile: caFile, connectTimeout: timeout, proxy: proxy))
    }

    /// The circuit breaker of each push service pushed to so far (`/health`, `/metrics`).
    public var circuits: [ProviderCircuit] {
        lock.lock()
        defer { lock.unlock() }
        return Array(circuitsByOrigin.values)
    }

    /// The circuit of the push service at `origin`, made at its first push.
    func circuit(for origin: String) -> ProviderCircuit {
        lock.lock()
        defer { lock.unlock() }
        if let circuit = circuitsByOrigin[origin] { return circuit }
        if circuitsByOrigin.count >= Self.maximumCircuits { circuitsByOrigin = circuitsByOrigin.filter(\.value.isBackedOff) }
        let circuit = ProviderCircuit(provider: PushProvider.webpush.rawValue, app: origin, settings: breaker)
        circuitsByOrigin[origin] = circuit
        return circuit
    }

    /// Sends `message` to the subscription at `endpoint`, unless its push service's circuit is
    /// backed off (then it fails at once, saying so); transient failures are sent again as
    /// `retry` allows, never past `deadline` (by default one push timeout from now).
    public func send(_ message: WebPushMessage, to endpoint: String, deadline: Date? = nil) async -> PushOutcome {
        let started = ContinuousClock.now
        func failed(_ kind: PushOutcome.FailureKind, _ text: String) -> PushOutcome {
            PushOutcome(result: .failed(kind, message: text), latency: ContinuousClock.now - started)
        }
        guard let origin = WebPushEndpoint.origin(of: endpoint) else {
            return failed(.other, "the subscription endpoint is not an https URL")
        }
        guard allowedHosts.permits(endpoint) else {
            return failed(.other, "\(origin) is not a push service Rouse sends to (webpush_allowed_hosts)")
        }
        var headers: [(name: String, value: String)]
        do {
            let token = try tokens.token(for: origin, keys: vapid, subject: contact, now: now())
            headers = [("authorization", vapid.authorization(token: token))]
        } catch {
            return failed(.credentials, "\(error)")
        }
        headers.append(("ttl", String(max(0, message.ttlSeconds))))
        headers.append(("urgency", message.urgency.rawValue))
        if let topic = message.topic { headers.append(("topic", topic)) }

        var body: [UInt8] = []
        if !message.payload.isEmpty {
            let keys: WebPushSubscriptionKeys?
            do {
                keys = try await subscriptions?.keys(forEndpoint: endpoint)
            } catch {
                return failed(.other, "the subscription's keys could not be read: \(error)")
            }
            if let keys {
                do {
                    let subscriber = try P256PublicKey(uncompressedPoint: keys.p256dh)
                    body = try WebPushEncryption.encrypt(message.payload, to: subscriber, authSecret: keys.auth)
                } catch {
                    return failed(.other, "the payload could not be encrypted: \(error)")
                }
                headers.append(("content-encoding", "aes128gcm"))
                headers.append(("content-type", "application/octet-stream"))
            }
        }
        let keysMissing = !message.payload.isEmpty && body.isEmpty
        let request = HTTP2Request(url: endpoint, headers: headers, body: body, timeout: timeout)
        return await circuit(for: origin).guarding {
            await retry.run(timeout: timeout, deadline: deadline) { attemptTimeout in
                var attempt = request
                attempt.timeout = attemptTimeout
                switch await http.send(attempt) {
                case .failure(let error): return PushRetryPolicy.Attempt(error)
                case .success(let response):
                    return PushRetryPolicy.Attempt(Self.outcome(of: response, latency: response.latency, keysMissing: keysMissing), answering: response)
                }
            }
        }
    }

    /// The push service's answer as an outcome (RFC 8030 §5, RFC 8292 §4, and what Mozilla and
    /// Google document): 2xx accepted; 404 and 410 dead; the rest refused, in words.
    static func outcome(of response: HTTP2Response, latency: Duration, keysMissing: Bool = false) -> PushOutcome {
        let status = response.status
        if (200...299).contains(status) {
            // The message's id: the last part of its Location (RFC 8030 §5), never the whole URL.
            let id = response.header("location").flatMap { URL(string: $0)?.lastPathComponent }.flatMap { $0.isEmpty ? nil : $0 }
            let note = keysMissing ? (id ?? "-") + "; sent without payload: no keys were posted for this subscription" : id
            return PushOutcome(result: .accepted(providerID: note), latency: latency)
        }
        let detail = Self.excerpt(response.bodyText)
        let (reason, explanation): (String, String)
        switch status {
        case 404: (reason, explanation) = ("NotFound", "the push service does not know the subscription (expired or unsubscribed): it is dead")
        case 410: (reason, explanation) = ("Gone", "the subscription was unsubscribed or has expired: it is dead")
        case 413: (reason, explanation) = ("PayloadTooLarge", "the push service says the encrypted payload is too large (Rouse's bug)")
        case 400: (reason, explanation) = ("BadRequest", "the push service refused the request" + detail)
        case 401: (reason, explanation) = ("Unauthorized", "the push service refused Rouse's VAPID token" + detail)
        case 403:
            (reason, explanation) = (
                "Forbidden",
                "the push service refused Rouse's VAPID key: the browser subscribed with another applicationServerKey "
                    + "(it must use /api/v1/push/vapid-public-key)" + detail)
        case 429:
            let retry = response.header("retry-after").map { " (Retry-After \($0))" } ?? ""
            (reason, explanation) = ("TooManyRequests", "the push service says too many pushes; back off" + retry)
        case 500...599: (reason, explanation) = ("HTTP \(status)", "the push service is unavailable for now")
        default: (reason, explanation) = ("HTTP \(status)", "the push service refused the push" + detail)
        }
        return PushOutcome(
            result: .refused(status: status, reason: reason, explanation: explanation), latency: latency,
            isDeadToken: status == 404 || status == 410)
    }

    /// `: <first line of the answer, at most 160 characters>`, or nothing for an empty answer.
    static func excerpt(_ text: String) -> String {
        let line = text.split(whereSeparator: \.isNewline).first.map(String.init)?.trimmingCharacters(in: .whitespaces) ?? ""
        guard !line.isEmpty else { return "" }
        let cleaned = String(line.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }.map(Character.init))
        return ": " + (cleaned.count > 160 ? String(cleaned.prefix(160)) + "…" : cleaned)
    }
}

extension PushPayload {
    /// The web push plaintext: the same keys and string values as FCM's `data`, as one JSON object.
    public var webPushBody: [UInt8] {
        JSONText.object(data.map { ($0.key, .string($0.value)) }).bytes
    }
}
