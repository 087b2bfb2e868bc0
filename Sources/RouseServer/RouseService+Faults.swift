import CallRouting
import Foundation
import Metrics
import Push
import Registrar
import SIPService
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

    /// `/health`'s problems besides PostgreSQL itself, each in words: broken push apps, push providers backed off, and
    /// call journeys or push records waiting for PostgreSQL (only while their writer is failing).
    static func healthProblems(
        pushService: PushService, journeys: PostgresJourneyStore, pushRecords: PostgresPushStores
    ) -> @Sendable () -> [String] {
        {
            var problems = pushService.healthProblems
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

extension RouseService {
    /// Where the replica puts the bindings it reads: the registrar's index (keeping what a local
    /// write still out holds); a woken app that registered on another instance ends a wait parked
    /// here.
    static func replicaTarget(registrar: Registrar, coordinator: CallCoordinator<SIPService>, gateway: UpstreamGateway? = nil) -> ReplicaBindingTarget {
        ReplicaBindingTarget(mark: { registrar.localWriteMark() }) { bindings, everything, mark in
            registrar.applyStored(bindings, everything: everything, since: mark) { replaced in
                for aor in replaced {
                    coordinator.bindingsChanged(aor)
                    gateway?.bindingsChanged(aor)
                }
            }
        }
    }

    /// What `/metrics` shows of the replica: catch-ups after a reconnect or a lost notification,
    /// full reloads, and the last change number applied.
    static func registerReplicaMetrics(_ metrics: MetricsRegistry, replica: PostgresReplica) {
        metrics.counter(
            "rouse_replica_catchups_total",
            help: "Catch-up reads of the replica change log (after the PostgreSQL listener reconnected, or a gap in the change numbers)."
        ) {
            Double(replica.catchUpCount)
        }
        metrics.counter(
            "rouse_replica_full_reloads_total",
            help: "Full reloads of the replica because the changes needed had been pruned from the change log."
        ) {
            Double(replica.fullReloadCount)
        }
        metrics.gauge("rouse_replica_change_seq", help: "The last change number of the replica change log applied here.") {
            Double(replica.lastSeen)
        }
    }
}
