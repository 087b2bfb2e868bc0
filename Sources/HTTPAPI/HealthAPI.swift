import Foundation
import HTTPServer
import Storage

/// `GET /health`: 200 `{"status": "ok", "database": "reachable", "pushApps": N}` when PostgreSQL
/// answers and nothing else is wrong. Each problem is said in words in `problems`:
/// - PostgreSQL unreachable: 503 `{"status": "degraded", "problems": [...]}` (an instance that
///   cannot store a registration; a `PostgresError` names host and port, never a password);
/// - otherwise, what `problems` reports (a stored push app that cannot push, a push provider
///   backed off, call and push records waiting for PostgreSQL): 200 with `"status": "degraded"`, since the instance still serves
///   registrations and calls, and a load balancer must not take every instance out because Apple
///   or Google is down.
///
/// Threading: the handler awaits the query on the worker pool until its `DatabaseDeadline`
/// (`deadline` seconds); `problems` is called on the handler's task and must be quick.
public struct HealthAPI: Sendable {
    public static let path = "/health"
    /// Seconds the check waits for PostgreSQL.
    static let deadline: Double = 3

    let problems: @Sendable () -> [String]

    /// The answer: `status`, and `database`/`pushApps` when PostgreSQL answered, `problems` when any.
    struct Report: Encodable {
        let status: String
        let database: String?
        let pushApps: Int?
        let problems: [String]?
    }

    @Sendable func check(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let count: Int
        do {
            count = try await context.store().perform { connection in try PostedPushTokens.pushAppCount(on: connection) }
        } catch is StorageDeadlinePassed {
            return Self.degraded(["PostgreSQL unreachable: no answer within \(Self.deadline) s"] + problems())
        } catch let refusal as HTTPError {
            throw refusal
        } catch {
            return Self.degraded(["PostgreSQL unreachable: \(error)"] + problems())
        }
        let others = problems()
        return .json(
            200, Report(status: others.isEmpty ? "ok" : "degraded", database: "reachable", pushApps: count, problems: others.isEmpty ? nil : others))
    }

    static func degraded(_ problems: [String]) -> HTTPResponse {
        .json(503, Report(status: "degraded", database: nil, pushApps: nil, problems: problems))
    }
}
