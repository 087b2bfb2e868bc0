import Dispatch
import Foundation
import Push
import Storage

/// `GET /api/v1/push/vapid-public-key` → `{"publicKey": "<base64url uncompressed P-256 point>"}`:
/// the key a browser subscribes with (`PushManager.subscribe({applicationServerKey})`), so that
/// only Rouse can push to the subscription (RFC 8292 §4). Public: no credentials. The key pair is
/// made in PostgreSQL on first use if no instance made it yet; only the public half is ever read
/// out here.
///
/// Threading: the handler runs on the HTTP server's thread and never blocks: the first read runs
/// on the worker pool (the answer comes from the worker, or 503 from a timer after `deadline`
/// seconds); the key is then kept in memory (it never changes).
public struct VAPIDPublicKeyAPI: Sendable {
    public static let path = "/api/v1/push/vapid-public-key"

    let pool: PostgresWorkerPool
    let deadline: Double
    private let cache = PublicKeyCache()

    public init(pool: PostgresWorkerPool, deadline: Double = 5) {
        self.pool = pool
        self.deadline = deadline
    }

    public func register(on router: inout HTTPRouter) {
        router.add("GET", Self.path) { _, respond in answer(respond) }
    }

    func answer(_ respond: HTTPResponder) {
        if let key = cache.value {
            respond(Self.response(key))
            return
        }
        let cache = self.cache
        pool.submit({ connection in try PostgresVAPIDKeys.loadOrCreate(on: connection).publicKeyBase64URL }) { result in
            switch result {
            case .success(let key):
                cache.value = key
                respond(Self.response(key))
            case .failure:
                respond(.error(503, code: "storage_unavailable", message: "the VAPID key could not be read now; try again"))
            }
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + deadline) {
            respond(.error(503, code: "storage_unavailable", message: "the VAPID key could not be read in time; try again"))
        }
    }

    static func response(_ key: String) -> HTTPResponse {
        .json(200, ["publicKey": key])
    }

    /// The public key once read; a lock guards it.
    final class PublicKeyCache: @unchecked Sendable {
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
