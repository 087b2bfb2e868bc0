import Crypto
public import Foundation
import RouseVocabulary

/// One APNs request (protocol.md "APNs provider API"). A value; thread-safe.
public struct APNsRequest: Sendable {
    /// `apns-push-type`.
    public enum PushType: String, Sendable {
        case voip, background, alert
    }

    /// Device token, lower-case hex.
    public var token: String
    public var topic: String
    public var pushType: PushType
    /// 10 = now; 5 = power-considerate (background pushes must be 5).
    public var priority: Int
    /// Epoch seconds after which Apple drops the push (0 = try once).
    public var expiration: Int
    /// At most 64 bytes; the call's UUID.
    public var collapseID: String?
    /// A UUID Apple echoes back.
    public var apnsID: String
    public var body: [UInt8]

    public init(
        token: String, topic: String, pushType: PushType, priority: Int, expiration: Int, collapseID: String?,
        apnsID: String = UUID().uuidString.lowercased(), body: [UInt8]
    ) {
        self.token = token
        self.topic = topic
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.apnsID = apnsID
        self.body = body
    }

    /// A VoIP ring push to a PushKit token: topic `<bundle>.voip`, priority 10, collapse id = the
    /// call's UUID, expiring when the call can no longer reach the device.
    public static func ring(token: String, credentials: APNsCredentials, payload: PushPayload, expiresAt: Date) -> APNsRequest {
        APNsRequest(
            token: token, topic: credentials.voipTopic, pushType: .voip, priority: 10,
            expiration: Int(expiresAt.timeIntervalSince1970.rounded(.up)), collapseID: payload.value("uuid"),
            body: payload.apnsBody(background: false))
    }

    /// A background cancel push to the regular token: topic `<bundle>`, priority 5.
    public static func cancel(token: String, credentials: APNsCredentials, payload: PushPayload, expiresAt: Date) -> APNsRequest {
        APNsRequest(
            token: token, topic: credentials.bundleID, pushType: .background, priority: 5,
            expiration: Int(expiresAt.timeIntervalSince1970.rounded(.up)), collapseID: payload.value("uuid"),
            body: payload.apnsBody(background: true))
    }

    /// A visible alert (the missed-call notice) to the regular token: topic `<bundle>`, priority 10.
    public static func alert(token: String, credentials: APNsCredentials, payload: PushPayload, expiresAt: Date) -> APNsRequest {
        APNsRequest(
            token: token, topic: credentials.bundleID, pushType: .alert, priority: 10,
            expiration: Int(expiresAt.timeIntervalSince1970.rounded(.up)), collapseID: payload.value("uuid"),
            body: payload.apnsAlertBody())
    }

    /// The header lines, exactly as protocol.md lists them (plus the JSON content type).
    func headers(jwt: String) -> [(name: String, value: String)] {
        var headers: [(name: String, value: String)] = [
            ("authorization", "bearer \(jwt)"),
            ("apns-topic", topic),
            ("apns-push-type", pushType.rawValue),
            ("apns-priority", String(priority)),
            ("apns-expiration", String(expiration)),
        ]
        if let collapseID { headers.append(("apns-collapse-id", collapseID)) }
        headers.append(("apns-id", apnsID))
        headers.append(("content-type", "application/json"))
        return headers
    }
}

/// Base URLs of Apple's two hosts (settings `apns_production_url`, `apns_sandbox_url`).
public struct APNsEndpoints: Sendable, Equatable {
    public var production: String
    public var sandbox: String

    public init(production: String = "https://api.push.apple.com", sandbox: String = "https://api.sandbox.push.apple.com") {
        self.production = production
        self.sandbox = sandbox
    }

    public func url(_ environment: APNsEnvironment) -> String {
        let base = environment == .production ? production : sandbox
        return base.hasSuffix("/") ? String(base.dropLast()) : base
    }
}

/// Sends pushes for one APNs app over its own HTTP/2 client (one multiplexed connection per host).
/// Token auth: one ES256 JWT per key, reused for `tokenLifetime` (20–50 minutes; Apple refuses a
/// new one more often than every 20 minutes and an old one after an hour), made again once when
/// Apple answers 403 `ExpiredProviderToken`. A transient failure (refused or lost connection, 500,
/// 503, 429 with a `Retry-After` that fits) is tried again as `retry` allows, within the push's
/// deadline; each host has its own `ProviderCircuit`, which fails pushes at once while Apple's
/// host keeps failing.
///
/// Threading: thread-safe; `send` may run from many tasks at once. A lock guards the JWT cache.
public final class APNsClient: @unchecked Sendable {
    public let credentials: APNsCredentials
    /// The circuit breaker of each of Apple's two hosts for this app.
    public let circuits: [APNsEnvironment: ProviderCircuit]
    private let key: SigningKey
    private let http: HTTP2Client
    private let endpoints: APNsEndpoints
    private let timeout: Duration
    private let retry: PushRetryPolicy
    private let tokenLifetime: TimeInterval
    private let now: @Sendable () -> Date
    private let lock = NSLock()
    private var cachedJWT: (token: String, issuedAt: Date)?
    private var generations = 0

    /// - Parameters:
    ///   - timeout: the deadline of one attempt (connect included).
    ///   - retry: how transient failures are tried again.
    ///   - breaker: when a host that keeps failing is backed off.
    ///   - proxy: the HTTP(S) proxy pushes go through (`push_proxy`); nil: none.
    ///   - tokenLifetime: how long one JWT is reused; clamped to 20–50 minutes.
    ///   - now: the clock JWTs are dated by (tests move it).
    public init(
        credentials: APNsCredentials, endpoints: APNsEndpoints, caFile: String?, timeout: Duration,
        retry: PushRetryPolicy = PushRetryPolicy(), breaker: ProviderCircuitBreaker.Settings = ProviderCircuitBreaker.Settings(),
        proxy: PushProxy? = nil, tokenLifetime: Duration = .seconds(40 * 60), now: @escaping @Sendable () -> Date = { Date() }
    ) throws(PushAppError) {
        do {
            key = try SigningKey.p256(pem: credentials.privateKeyPEM)
        } catch {
            throw PushAppError(field: "key", problem: "\(error)")
        }
        self.credentials = credentials
        self.endpoints = endpoints
        self.timeout = timeout
        self.retry = retry
        self.now = now
        let seconds = Double(tokenLifetime.components.seconds)
        self.tokenLifetime = min(max(seconds, 20 * 60), 50 * 60)
        http = HTTP2Client(options: .init(caFile: caFile, connectTimeout: timeout, proxy: proxy))
        circuits = [
            .production: ProviderCircuit(provider: PushProvider.apns.rawValue, app: credentials.bundleID, settings: breaker),
            .sandbox: ProviderCircuit(provider: PushProvider.apnsSandbox.rawValue, app: credentials.bundleID, settings: breaker),
        ]
    }

    /// How many JWTs this client has made (tests check reuse).
    public var jwtGenerations: Int {
        lock.lock()
        defer { lock.unlock() }
        return generations
    }

    /// Sends `request` to `environment`'s host, unless its circuit is backed off (then the push
    /// fails at once, saying so). On `ExpiredProviderToken` makes a new JWT and sends once more;
    /// on a transient failure sends again as `retry` allows, never past `deadline` (by default one
    /// push timeout from now).
    public func send(_ request: APNsRequest, environment: APNsEnvironment, deadline: Date? = nil) async -> PushOutcome {
        await circuits[environment]!.guarding { await attempt(request, environment: environment, deadline: deadline) }
    }

    private func attempt(_ request: APNsRequest, environment: APNsEnvironment, deadline: Date?) async -> PushOutcome {
        var jwt: String
        do {
            jwt = try providerToken(replacing: nil)
        } catch {
            return PushOutcome(result: .failed(.credentials, message: "cannot sign the provider token: \(error)"), latency: .zero)
        }
        var retriedToken = false
        return await retry.run(timeout: timeout, deadline: deadline) { attemptTimeout in
            let started = ContinuousClock.now
            let answer = await http.send(HTTP2Request(
                url: endpoints.url(environment) + "/3/device/" + request.token, headers: request.headers(jwt: jwt),
                body: request.body, timeout: attemptTimeout))
            let response: HTTP2Response
            switch answer {
            case .failure(let error): return PushRetryPolicy.Attempt(error)
            case .success(let answered): response = answered
            }
            if response.status == 200 {
                return .final(PushOutcome(result: .accepted(providerID: response.header("apns-id")), latency: ContinuousClock.now - started))
            }
            let reason = Self.reason(in: response)
            if response.status == 403, reason == "ExpiredProviderToken", !retriedToken {
                retriedToken = true
                if let fresh = try? providerToken(replacing: jwt) {
                    jwt = fresh
                    return .again
                }
            }
            let outcome = PushOutcome(
                result: .refused(
                    status: response.status, reason: reason,
                    explanation: APNsReason.explanation(
                        status: response.status, reason: reason, environment: environment, appRestricted: credentials.environment != nil)),
                latency: ContinuousClock.now - started,
                isDeadToken: APNsReason.isDead(status: response.status, reason: reason))
            return PushRetryPolicy.Attempt(outcome, answering: response)
        }
    }

    /// The JWT to use: the cached one while younger than the lifetime, else a new one. With
    /// `replacing`, a JWT Apple called expired: make a new one unless another request already has.
    func providerToken(replacing stale: String?) throws(SigningError) -> String {
        lock.lock()
        defer { lock.unlock() }
        let current = now()
        if let cached = cachedJWT {
            let fresh = current.timeIntervalSince(cached.issuedAt) < tokenLifetime && current >= cached.issuedAt
            if fresh && (stale == nil || cached.token != stale) { return cached.token }
        }
        let token = try Self.providerToken(credentials: credentials, key: key, issuedAt: current)
        cachedJWT = (token, current)
        generations += 1
        return token
    }

    /// A provider token (JWT) for `credentials` signed by `key`, dated `issuedAt`.
    static func providerToken(credentials: APNsCredentials, key: SigningKey, issuedAt: Date) throws(SigningError) -> String {
        try JSONWebToken.make(
            header: [("kid", .string(credentials.keyID))],
            claims: [("iss", .string(credentials.teamID)), ("iat", .integer(Int64(issuedAt.timeIntervalSince1970)))],
            key: key)
    }

    /// The `reason` of an APNs error body, or the status when there is none.
    static func reason(in response: HTTP2Response) -> String {
        if let object = (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any],
            let reason = object["reason"] as? String
        {
            return reason
        }
        return "HTTP \(response.status)"
    }
}
