import Dispatch
import Foundation
import Storage

/// `GET /health`: 200 `{"status": "ok", "database": "reachable", "pushApps": N}` when PostgreSQL
/// answers and nothing else is wrong. Each problem is said in words in `problems`:
/// - PostgreSQL unreachable: 503 `{"status": "degraded", "problems": [...]}` (an instance that
///   cannot store a registration; a `PostgresError` names host and port, never a password);
/// - otherwise, what `problems` reports (a push provider backed off, call and push records
///   waiting for PostgreSQL): 200 with `"status": "degraded"`, since the instance still serves
///   registrations and calls, and a load balancer must not take every instance out because Apple
///   or Google is down.
///
/// Threading: the handler runs on the HTTP server's thread and never blocks: the query runs on the
/// worker pool and the answer comes from the worker, or from a timer after `deadline` seconds.
/// `problems` is called on those threads and must be quick.
public struct HealthAPI: Sendable {
    public static let path = "/health"

    let pool: PostgresWorkerPool
    let deadline: Double
    let problems: @Sendable () -> [String]

    /// - Parameter problems: what is wrong besides PostgreSQL, each in words (empty when nothing is).
    public init(pool: PostgresWorkerPool, deadline: Double = 3, problems: @escaping @Sendable () -> [String] = { [] }) {
        self.pool = pool
        self.deadline = deadline
        self.problems = problems
    }

    public func register(on router: inout HTTPRouter) {
        router.add("GET", Self.path) { _, respond in check(respond) }
    }

    func check(_ respond: HTTPResponder) {
        let problems = self.problems
        pool.submit({ connection in try PostedPushTokens.pushAppCount(on: connection) }) { result in
            switch result {
            case .success(let count):
                let others = problems()
                if others.isEmpty {
                    respond(.json(200, ["status": "ok", "database": "reachable", "pushApps": count]))
                } else {
                    respond(.json(200, ["status": "degraded", "database": "reachable", "pushApps": count, "problems": others]))
                }
            case .failure(let error):
                respond(Self.degraded(["PostgreSQL unreachable: \(error)"] + problems()))
            }
        }
        let seconds = deadline
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
            respond(Self.degraded(["PostgreSQL unreachable: no answer within \(seconds) s"] + problems()))
        }
    }

    static func degraded(_ problems: [String]) -> HTTPResponse {
        .json(503, ["status": "degraded", "problems": problems])
    }
}
