public import Foundation
public import RouseVocabulary
import RouseLog

/// What the stale-device rule (`DeviceStaleness`, issue 20 item 1) needs from calls, and what it
/// tells them: the coordinator reports each ring push's end and each use of a call token, and asks
/// which tokens are stale before it picks the devices to push. PostgreSQL holds the record
/// (`PushTokenLiveness`) and every instance's replica holds the stale marks.
///
/// Threading: called on the coordinator's queue; every method returns at once (a write goes to a
/// worker, the stale marks are read from memory) and never blocks on I/O.
public protocol DeviceLiveness: Sendable {
    /// Which of `tokens` are stale at `now`.
    func staleTokens(among tokens: [PushTokenID], now: Date) -> Set<PushTokenID>
    /// A ring push to `token`, sent at `pushedAt`, has had its wait.
    func ringPushEnded(_ token: PushTokenID, pushedAt: Date, accepted: Bool, callOutlastedWakeWait: Bool)
    /// The device of `token` used its call token (a decline, a status read): it is alive.
    func signOfLife(_ token: PushTokenID)
}

extension CallCoordinatorShard {
    /// The journey names the devices a call leaves out because they are stale, once per call.
    /// On `queue`, before the machine gets `event`.
    func noteStaleDevices(_ event: CallEvent<Flow>, on entry: CallEntry, at now: Date) {
        let targets: CallTargets
        switch event {
        case .admitted(let found, _), .tokensRead(let found, _), .tokensOverdue(let found): targets = found
        default: return
        }
        for device in targets.staleDevices where entry.staleNoted.insert(device.id).inserted {
            _ = entry.recorder.apply(.notPushedStale(device: device.name), at: now)
            logger.info("call.not_pushed_stale", ["call": entry.recorder.journey.callID, "device": device.name])
        }
    }

    /// Reports the end of each ring push whose wake result is settled, once. A device that came
    /// back registered (a sign of life of its own) or declined with its call token (reported as
    /// one) is not counted against; a push the provider did not accept proves nothing. On `queue`.
    func reportRingPushEnds(of entry: CallEntry, now: Date) {
        guard let liveness else { return }
        let journey = entry.recorder.journey
        for device in entry.machine.devices where device.answered && !entry.livenessReported.contains(device.pushID) {
            guard let sentAt = device.sentAt else { continue }
            switch device.wake {
            case .pending:
                continue
            case .notInTime, .callEnded:
                if device.accepted, device.declined == nil {
                    let over = journey.endedAt ?? journey.answeredAt ?? now
                    let waitEnd = Self.wakeWaitEnd(sentAt: sentAt, callWaitDeadline: entry.machine.waitDeadline, settings: settings)
                    liveness.ringPushEnded(device.device.id, pushedAt: sentAt, accepted: true, callOutlastedWakeWait: over >= waitEnd)
                }
            case .woke, .late, .notPushed:
                break
            }
            entry.livenessReported.insert(device.pushID)
        }
    }

    /// `CallCoordinator.wakeWaitEnd`.
    static func wakeWaitEnd(sentAt: Date, callWaitDeadline: Date, settings: CallSettings) -> Date {
        if callWaitDeadline != .distantFuture, sentAt <= callWaitDeadline { return callWaitDeadline.addingTimeInterval(-0.05) }
        return sentAt.addingTimeInterval(min(settings.wakeWait, settings.wakeWaitWithDeskPhone).timeInterval - 0.05)
    }

    /// A call token was used: its device is alive. On `queue`.
    func callTokenUsed(_ claims: CallTokenClaims) {
        guard let liveness, let device = callees[claims.aor]?.calls[claims.callID]?.machine.devices.first(where: { $0.tag == claims.device })
        else { return }
        liveness.signOfLife(device.device.id)
    }
}
