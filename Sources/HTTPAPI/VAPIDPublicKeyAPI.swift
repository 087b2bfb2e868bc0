import Foundation
import HTTPServer
import Push
import Storage

/// `GET /api/v1/push/vapid-public-key` → `{"publicKey": "<base64url uncompressed P-256 point>"}`:
/// the key a browser subscribes with (`PushManager.subscribe({applicationServerKey})`), so that
/// only Rouse can push to the subscription (RFC 8292 §4). Public: no credentials. The key pair is
/// made in PostgreSQL on first use if no instance made it yet; only the public half is ever read
/// out here.
///
/// Threading: the first read is awaited on the worker pool until the route's `DatabaseDeadline`
/// (`deadline` seconds, then 503); the key is then kept in memory (it never changes).
public struct VAPIDPublicKeyAPI: Sendable {
    public static let path = "/api/v1/push/vapid-public-key"
    /// Seconds the first read waits for PostgreSQL.
    static let deadline: Double = 5

    private let cache = PublicKeyCache()

    /// The answer.
    struct Key: Encodable {
        let publicKey: String
    }

    /// The route's 503: the read failed, or did not end by the deadline.
    static func unavailable(_ error: any Error) -> HTTPResponse {
        let when = error is StorageDeadlinePassed ? "in time" : "now"
        return .error(503, code: "storage_unavailable", message: "the VAPID key could not be read \(when); try again")
    }

    @Sendable func answer(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        if let key = cache.value { return .json(200, Key(publicKey: key)) }
        let key = try await context.store().perform { connection in try PostgresVAPIDKeys.loadOrCreate(on: connection).publicKeyBase64URL }
        cache.value = key
        return .json(200, Key(publicKey: key))
    }

    /// The public key once read; a lock guards it.
    final class PublicKeyCache: @unchecked Sendable {
        // @unchecked: `stored` is only touched under `lock`.
        private let lock = NSLock()
        private var stored: String?

        var value: String? {
            get {
                lock.lock()
                defer { lock.unlock() }
                return stored
            }
            set {
                lock.lock()
                stored = newValue
                lock.unlock()
            }
        }
    }
}
