import Crypto
public import Foundation
import RouseVocabulary

/// Sends FCM HTTP v1 messages for one service account over its own HTTP/2 client. The OAuth2
/// access token comes from an RS256 JWT assertion POSTed to the account's `token_uri`; it is
/// cached until shortly before it expires and fetched again once when FCM answers 401. A transient
/// failure (refused or lost connection, 500, 503, 429 with a `Retry-After` that fits) is tried
/// again as `retry` allows, within the push's deadline; a `ProviderCircuit` fails pushes at once
/// while FCM keeps failing.
///
/// Threading: an actor; `send` may run from many tasks at once. Concurrent sends that find no valid
/// access token share one fetch.
public actor FCMClient {
    public nonisolated let account: FCMServiceAccount
    /// The circuit breaker of FCM for this service account's project.
    public nonisolated let circuit: ProviderCircuit
    private let key: SigningKey
    private let http: HTTP2Client
    private let baseURL: String
    private let timeout: Duration
    private let retry: PushRetryPolicy
    private let now: @Sendable () -> Date
    private var accessToken: (value: String, refreshAt: Date)?
    private var fetching: Task<Result<String, TokenFailure>, Never>?
    /// How many access tokens were fetched (tests check caching and the refresh on 401).
    public private(set) var tokenFetches = 0

    /// The OAuth2 scope FCM sending needs.
    public static let scope = "https://www.googleapis.com/auth/firebase.messaging"

    /// Why no access token could be had, as an outcome.
    struct TokenFailure: Error {
        let outcome: PushOutcome
    }

    /// - Parameters:
    ///   - timeout: the deadline of one attempt (connect included).
    ///   - retry: how transient failures are tried again.
    ///   - breaker: when FCM, failing again and again, is backed off.
    ///   - proxy: the HTTP(S) proxy pushes and token fetches go through (`push_proxy`); nil: none.
    public init(
        account: FCMServiceAccount, baseURL: String, caFile: String?, timeout: Duration,
        retry: PushRetryPolicy = PushRetryPolicy(), breaker: ProviderCircuitBreaker.Settings = ProviderCircuitBreaker.Settings(),
        proxy: PushProxy? = nil, now: @escaping @Sendable () -> Date = { Date() }
    ) throws(PushAppError) {
        do {
            key = try SigningKey.rsa(pem: account.privateKeyPEM)
        } catch {
            throw PushAppError(field: "private_key", problem: "\(error)")
        }
        self.account = account
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.timeout = timeout
        self.retry = retry
        self.now = now
        http = HTTP2Client(options: .init(caFile: caFile, connectTimeout: timeout, proxy: proxy))
        circuit = ProviderCircuit(provider: PushProvider.fcm.rawValue, app: account.projectID, settings: breaker)
    }

    /// The `messages:send` URL of the account's project.
    public nonisolated var sendURL: String { "\(baseURL)/v1/projects/\(account.projectID)/messages:send" }

    /// Sends one message body (`PushPayload.fcmBody`), unless the circuit is backed off (then the
    /// push fails at once, saying so); transient failures are sent again as `retry` allows, never
    /// past `deadline` (by default one push timeout from now).
    public func send(_ body: [UInt8], deadline: Date? = nil) async -> PushOutcome {
        await circuit.guarding { await attempt(body, deadline: deadline) }
    }

    private func attempt(_ body: [UInt8], deadline: Date?) async -> PushOutcome {
        var refreshed = false
        return await retry.run(timeout: timeout, deadline: deadline) { attemptTimeout in
            let token: String
            switch await currentAccessToken() {
            case .failure(let failure): return PushRetryPolicy.Attempt(failure: failure.outcome)
            case .success(let fetched): token = fetched
            }
            let started = ContinuousClock.now
            let answer = await http.send(HTTP2Request(
                url: sendURL, headers: [("authorization", "Bearer \(token)"), ("content-type", "application/json; charset=utf-8")],
                body: body, timeout: attemptTimeout))
            let response: HTTP2Response
            switch answer {
            case .failure(let error): return PushRetryPolicy.Attempt(error)
            case .success(let answered): response = answered
            }
            if response.status == 200 {
                let name = ((try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any])?["name"] as? String
                return .final(PushOutcome(result: .accepted(providerID: name), latency: ContinuousClock.now - started))
            }
            if response.status == 401, !refreshed {
                refreshed = true
                if accessToken?.value == token { accessToken = nil }
                return .again
            }
            let error = FCMError(response)
            let outcome = PushOutcome(
                result: .refused(status: response.status, reason: error.code, explanation: FCMReason.explanation(error)),
                latency: ContinuousClock.now - started, isDeadToken: FCMReason.isDead(error))
            return PushRetryPolicy.Attempt(outcome, answering: response)
        }
    }

    /// The cached access token, or a fresh one (one fetch shared by concurrent callers).
    private func currentAccessToken() async -> Result<String, TokenFailure> {
        if let cached = accessToken, now() < cached.refreshAt { return .success(cached.value) }
        if let fetching { return await fetching.value }
        let task = Task { await self.fetchAccessToken() }
        fetching = task
        let result = await task.value
        fetching = nil
        return result
    }

    private func fetchAccessToken() async -> Result<String, TokenFailure> {
        tokenFetches += 1
        let issued = now()
        let assertion: String
        do {
            assertion = try Self.assertion(account: account, key: key, issuedAt: issued)
        } catch {
            return .failure(TokenFailure(outcome: PushOutcome(result: .failed(.credentials, message: "cannot sign the token request: \(error)"), latency: .zero)))
        }
        let form = "grant_type=" + Self.formEncode("urn:ietf:params:oauth:grant-type:jwt-bearer") + "&assertion=" + Self.formEncode(assertion)
        let answer = await http.send(HTTP2Request(
            url: account.tokenURI, headers: [("content-type", "application/x-www-form-urlencoded")],
            body: Array(form.utf8), timeout: timeout))
        switch answer {
        case .failure(let error):
            let failure = PushOutcome.failure(error)
            let message: String
            if case .failed(_, let text) = failure.result { message = text } else { message = "\(error)" }
            return .failure(TokenFailure(outcome: PushOutcome(
                result: .failed(failure.reason.flatMap(PushOutcome.FailureKind.init(rawValue:)) ?? .other, message: "access token: \(message)"),
                latency: error.latency)))
        case .success(let response):
            let object = (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any]
            guard response.status == 200, let token = object?["access_token"] as? String, !token.isEmpty else {
                let detail = (object?["error_description"] as? String) ?? (object?["error"] as? String) ?? "HTTP \(response.status)"
                return .failure(TokenFailure(outcome: PushOutcome(
                    result: .failed(.credentials, message: "the token endpoint refused the service account \(account.clientEmail): \(detail)"),
                    latency: response.latency)))
            }
            let lifetime = (object?["expires_in"] as? NSNumber)?.doubleValue ?? 3600
            // Refresh a minute (or a tenth of a short lifetime) before the token runs out.
            let margin = min(60, lifetime / 10)
            accessToken = (token, issued.addingTimeInterval(lifetime - margin))
            return .success(token)
        }
    }

    /// The OAuth2 JWT-bearer assertion for `account`, signed by `key`, valid an hour from `issuedAt`.
    static func assertion(account: FCMServiceAccount, key: SigningKey, issuedAt: Date) throws(SigningError) -> String {
        let iat = Int64(issuedAt.timeIntervalSince1970)
        return try JSONWebToken.make(
            header: [("typ", .string("JWT"))],
            claims: [
                ("iss", .string(account.clientEmail)), ("scope", .string(scope)), ("aud", .string(account.tokenURI)),
                ("iat", .integer(iat)), ("exp", .integer(iat + 3600)),
            ],
            key: key)
    }

    /// `application/x-www-form-urlencoded` value encoding.
    static func formEncode(_ value: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return value.addingPercentEncoding(withAllowedCharacters: allowed) ?? value
    }
}
