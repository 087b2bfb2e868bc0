import CallRouting
import Foundation
import Metrics
import Push
import Storage

extension RouseService {
    /// What `/metrics` shows of faults (issue 9): push provider hosts backed off now, and the
    /// statements this process has sent to PostgreSQL (a round trip each).
    static func registerFaultMetrics(_ metrics: MetricsRegistry, pushService: PushService) {
        metrics.gauge(
            "rouse_push_providers_backed_off", help: "Push provider hosts (per push app) whose circuit breaker holds pushes back now."
        ) {
            Double(pushService.backedOffProviderCount)
        }
        metrics.counter(
            "rouse_database_statements_total", help: "Statements this process has sent to PostgreSQL (one round trip each)."
        ) {
            Double(PostgresConnection.statementCount)
        }
    }

    /// `/health`'s problems besides PostgreSQL itself, each in words: push providers backed off, and
    /// call journeys or push records waiting for PostgreSQL (only while their writer is failing).
    static func healthProblems(
        pushService: PushService, journeys: PostgresJourneyStore, pushRecords: PostgresPushStores
    ) -> @Sendable () -> [String] {
        {
            var problems = pushService.providerProblems
            if let failure = journeys.lastFailure, journeys.pendingCount > 0 {
                problems.append("\(journeys.pendingCount) call journey writes waiting for PostgreSQL (last attempt: \(failure))")
            }
            if let failure = pushRecords.queue.lastFailure, pushRecords.queue.pendingCount > 0 {
                problems.append("\(pushRecords.queue.pendingCount) push record writes waiting for PostgreSQL (last attempt: \(failure))")
            }
            return problems
        }
    }
}
