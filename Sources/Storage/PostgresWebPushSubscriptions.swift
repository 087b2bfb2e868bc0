public import Push
import Registrar

/// The keys of posted web push subscriptions (`webpush_subscriptions`, migration 400), by endpoint:
/// what `WebPushClient` encrypts a push with. A row lives as long as the posted token it belongs
/// to (`posted_push_tokens`, family `webpush`, token = endpoint; deleted with it).
///
/// Threading: the instance is thread-safe (its reads run on the worker pool and suspend the caller
/// without blocking it); the static functions block their thread on the connection given.
public final class PostgresWebPushSubscriptions: WebPushSubscriptionKeySource {
    private let pool: PostgresWorkerPool

    public init(pool: PostgresWorkerPool) {
        self.pool = pool
    }

    public func keys(forEndpoint endpoint: String) async throws -> WebPushSubscriptionKeys? {
        try await pool.perform { connection in try Self.keys(forEndpoint: endpoint, on: connection) }
    }

    /// Stores (or replaces) the keys of `endpoint`, whose posted token must exist already (call it
    /// after `PostedPushTokens.store`, in the same transaction).
    public static func store(endpoint: String, keys: WebPushSubscriptionKeys, on connection: PostgresConnection) throws {
        try connection.query(
            """
            INSERT INTO webpush_subscriptions (family, endpoint, p256dh, auth, updated_at) VALUES ('webpush', $1, $2, $3, now())
            ON CONFLICT (family, endpoint) DO UPDATE SET p256dh = EXCLUDED.p256dh, auth = EXCLUDED.auth, updated_at = now()
            """,
            [endpoint, keys.p256dhBase64URL, keys.authBase64URL])
    }

    /// The statement storing (or replacing) the keys of `endpoint` if its posted token is `aor`'s
    /// (else nothing): run after `PostedPushTokens.storeStatement`, in the same transaction.
    static func storeStatement(endpoint: String, keys: WebPushSubscriptionKeys, for aor: AddressOfRecord) -> PostgresStatement {
        PostgresStatement(
            prepared: "rouse_webpush_keys_store",
            """
            INSERT INTO webpush_subscriptions (family, endpoint, p256dh, auth, updated_at)
            SELECT 'webpush', $1, $2, $3, now()
            FROM posted_push_tokens p JOIN extensions e ON e.id = p.extension_id JOIN sip_domains d ON d.id = e.domain_id
            WHERE p.family = 'webpush' AND p.token = $1 AND d.domain = $4 AND e.number = $5
            ON CONFLICT (family, endpoint) DO UPDATE SET p256dh = EXCLUDED.p256dh, auth = EXCLUDED.auth, updated_at = now()
            """,
            PostgresParameters([endpoint, keys.p256dhBase64URL, keys.authBase64URL, aor.domain, aor.number]))
    }

    /// The keys posted for `endpoint`, or nil.
    public static func keys(forEndpoint endpoint: String, on connection: PostgresConnection) throws -> WebPushSubscriptionKeys? {
        let rows = try connection.query(
            "SELECT p256dh, auth FROM webpush_subscriptions WHERE family = 'webpush' AND endpoint = $1", [endpoint])
        guard !rows.isEmpty, let p256dh = rows.value(0, "p256dh"), let auth = rows.value(0, "auth") else { return nil }
        return try? WebPushSubscriptionKeys(p256dh: p256dh, auth: auth)
    }
}
