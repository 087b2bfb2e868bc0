import Dispatch
import Foundation
import Storage

/// `GET /health`: 200 `{"status": "ok", "database": "reachable", "pushApps": N}` when PostgreSQL
/// answers, else 503 `{"status": "degraded", "problems": [...]}` with each problem in words
/// (a `PostgresError` names host and port, never a password).
///
/// Threading: the handler runs on the HTTP server's thread and never blocks: the query runs on the
/// worker pool and the answer comes from the worker, or from a timer after `deadline` seconds.
public struct HealthAPI: Sendable {
    public static let path = "/health"

    let pool: PostgresWorkerPool
    let deadline: Double

    public init(pool: PostgresWorkerPool, deadline: Double = 3) {
        self.pool = pool
        self.deadline = deadline
    }

    public func register(on router: inout HTTPRouter) {
        router.add("GET", Self.path) { _, respond in check(respond) }
    }

    func check(_ respond: HTTPResponder) {
        pool.submit({ connection in try PostedPushTokens.pushAppCount(on: connection) }) { result in
            switch result {
            case .success(let count):
                respond(.json(200, ["status": "ok", "database": "reachable", "pushApps": count]))
            case .failure(let error):
                respond(Self.degraded("PostgreSQL unreachable: \(error)"))
            }
        }
        let seconds = deadline
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
            respond(Self.degraded("PostgreSQL unreachable: no answer within \(seconds) s"))
        }
    }

    static func degraded(_ problem: String) -> HTTPResponse {
        .json(503, ["status": "degraded", "problems": [problem]])
    }
}
