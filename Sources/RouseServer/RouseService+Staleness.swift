import Foundation
import Metrics
import Push
import RouseLog
import RouseVocabulary
import Storage
import CallRouting

/// Stale devices and retention wired (issue 20 item 1): the liveness record calls report to, its
/// log lines and gauge, and the retention job.
extension RouseService {
    /// The replica's token side, which logs `push.device_revived` when a stale mark in force is
    /// lifted (each instance logs it when its replica learns it).
    static func makeWakeTokenReplica(_ logger: Logger) -> WakeTokenReplica {
        WakeTokenReplica(revived: { token in
            logger.info("push.device_revived", ["provider": token.family.rawValue, "token": PushRecord.shorten(token.token)])
        })
    }

    /// What calls report ring-push ends and call-token uses to, the stale marks read from
    /// `replica`; `push.device_stale` when a device is marked, and the `rouse_push_devices_stale` gauge.
    static func makeLiveness(
        configuration: RouseConfiguration, pool: PostgresWorkerPool, replica: WakeTokenReplica, metrics: MetricsRegistry, logger: Logger
    ) -> PostgresDeviceLiveness {
        metrics.gauge("rouse_push_devices_stale", help: "Push devices marked stale (not pushed until they show life again), as this instance's replica holds them.") {
            Double(replica.staleCount(now: Date()))
        }
        let policy = DeviceStaleness.Policy(pushes: configuration.staleAfterPushes, after: configuration.staleAfter.timeInterval)
        return PostgresDeviceLiveness(pool: pool, replica: replica, policy: policy, onChange: { change in
            switch change {
            case .markedStale(let token, let device, let from):
                logger.info("push.device_stale", [
                    "provider": token.family.rawValue, "token": PushRecord.shorten(token.token), "unanswered_pushes": String(device.unansweredPushes),
                    "last_sign_of_life": ISO8601DateFormatter().string(from: device.lastSignOfLife),
                    "stale_from": ISO8601DateFormatter().string(from: from),
                ])
            case .writeFailed(let token, let error):
                logger.warning("push.liveness_unwritten", ["provider": token.family.rawValue, "token": PushRecord.shorten(token.token), "error": error])
            }
        })
    }

    /// Deletes history older than `history_retention` every 10 minutes (one instance at a time);
    /// `history.pruned` when a run deleted anything.
    static func startRetention(configuration: RouseConfiguration, settings: PostgresSettings, logger: Logger) -> HistoryRetentionJob {
        let job = HistoryRetentionJob(settings: settings, retention: configuration.historyRetention.timeInterval) { result in
            switch result {
            case .success(let deleted?) where deleted.pushRecords + deleted.calls + deleted.tokenRecords > 0:
                logger.info("history.pruned", [
                    "push_records": String(deleted.pushRecords), "calls": String(deleted.calls), "token_records": String(deleted.tokenRecords),
                    "batches": String(deleted.batches),
                ])
            case .success:
                break
            case .failure(let error):
                logger.warning("history.prune_failed", ["error": "\(error)"])
            }
        }
        job.start()
        return job
    }
}
