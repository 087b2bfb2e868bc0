import Foundation
import Push
import Registrar
import RouseLog
import RouseVocabulary
import SIPProxy

/// The shell of `AnsweredCall`: an answered call's device is told by `call.ended` when the
/// caller's BYE cannot reach it. Runs on the coordinator's queue, as the rest of it.
extension CallCoordinatorShard {
    /// An answered call kept for `call.ended`: its machine, and its journey once the BYE passed
    /// (the push's outcome is added to it).
    struct AnsweredEntry: Sendable {
        var call: AnsweredCall
        var journey: CallJourney?
    }

    /// The BYE of an answered call toward the device that answered could not reach it:
    /// `status` 430 (its flow is gone), 408 (no answer) or 503 (the transport failed).
    func dialogUnreachable(callID: String, status: Int) {
        queue.async { [self] in answeredCallEvent(.byeUnreachable(status: status), callID: callID) }
    }

    /// Keeps an answered call whose answering device has a regular channel.
    func rememberAnswered(_ device: AnsweredDevice, callID: String, now: Date) {
        answeredCalls.prune(now: now)
        answeredCalls.insert(AnsweredEntry(call: AnsweredCall(device: device)), for: callID, at: now)
    }

    /// The journey of an answered call whose BYE passed, with its hang-up.
    func keepForEndedPush(_ journey: CallJourney, callID: String) {
        guard var entry = answeredCalls[callID] else { return }
        entry.journey = journey
        answeredCalls.update(entry, for: callID)
    }

    /// On `queue`: feeds the answered call its event and carries out the actions.
    func answeredCallEvent(_ event: AnsweredCall.Event, callID: String) {
        guard var entry = answeredCalls[callID] else { return }
        let now = clock()
        let actions = entry.call.handle(event, at: now)
        answeredCalls.update(entry, for: callID)
        for action in actions {
            switch action {
            case .push(let order):
                pushEnded(order, journey: entry.journey)
            case .forget(let at) where at <= now:
                _ = answeredCalls.removeValue(forKey: callID)
            case .forget(let at):
                later(at.timeIntervalSince(now)) { _ = $0.answeredCalls.removeValue(forKey: callID) }
            }
        }
    }

    /// Sends `call.ended`, then adds its outcome to the call's journey (written again).
    private func pushEnded(_ order: EndedCallPush, journey: CallJourney?) {
        let callID = order.content.callID
        logger.info("call.ended_push", ["call": callID, "device": order.device, "bye_status": String(order.status)])
        Task { [self] in
            let outcome = await pusher.ended(
                order.content, reason: order.reason.rawValue, to: order.channel, expiresAt: order.expiresAt, aor: order.callee.description)
            logger.info("call.ended_pushed", ["call": callID, "device": order.device, "outcome": outcome.word])
            guard let journey else { return }
            queue.async { [self] in
                var recorder = JourneyRecorder(continuing: journey)
                _ = recorder.apply(.endedPushed(device: order.device, byeStatus: order.status, outcome), at: clock())
                journeys?.recordCall(recorder.journey)
            }
        }
    }
}
