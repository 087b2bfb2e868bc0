import CallRouting
import Foundation
import Registrar

/// What a call reads when it arrives (CallRouting's `WakeTokenSource`): the callee's posted tokens
/// and which of its tokens a provider called dead. One round trip on the worker pool.
///
/// Threading: thread-safe; the query runs on a pool thread and suspends the caller without
/// blocking it.
public final class PostgresWakeTokens: WakeTokenSource {
    private let pool: PostgresWorkerPool

    public init(pool: PostgresWorkerPool) {
        self.pool = pool
    }

    public func wakeTokens(for aor: AddressOfRecord, checking tokens: [PushChannel]) async throws -> (posted: [PostedToken], dead: Set<String>) {
        try await pool.perform { connection in
            let posted = try PostedPushTokens.list(for: aor, on: connection).map { PostedToken(channel: $0.channel, deviceID: $0.deviceID) }
            let all = tokens + posted.map(\.channel)
            guard !all.isEmpty else { return (posted, []) }
            let families = "{" + all.map { $0.family.rawValue }.joined(separator: ",") + "}"
            let values = "{" + all.map { "\"" + $0.token.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\"" }
                .joined(separator: ",") + "}"
            let rows = try connection.query(
                """
                SELECT d.family, d.token FROM push_dead_tokens d
                JOIN unnest($1::text[], $2::text[]) AS t(family, token) ON t.family = d.family AND t.token = d.token
                """,
                [families, values])
            var dead: Set<String> = []
            for row in rows.rows {
                if let family = row[0], let token = row[1] { dead.insert("\(family):\(token)") }
            }
            return (posted, dead)
        }
    }
}
