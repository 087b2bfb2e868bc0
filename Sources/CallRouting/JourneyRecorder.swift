public import Foundation
public import Push
public import Registrar
public import RouseVocabulary
public import SIPProxy

/// A fact of a call's journey, as `CallStateMachine` (and the coordinator, for what happens after
/// a call is gone from the machine) states it; `JourneyRecorder` puts it in words.
public enum CallFact: Sendable, Equatable {
    /// How the wake wait ended.
    public enum WaitEnd: Sendable, Equatable {
        case because(String)
        case nobodyBack(after: TimeInterval)
        case back([String])
    }

    /// The posted tokens could not be read (PostgreSQL unavailable).
    case tokensUnreadable
    /// The posted tokens did not come within `token_read_timeout`.
    case tokensOverdue(after: Duration)
    case nothingToWake(deskPhones: Int)
    case pushing(devices: Int, wait: Duration, deskPhone: Bool)
    case pushingPosted(device: String)
    /// A device was left out: it is stale (pushed again and again without a sign of life).
    case notPushedStale(device: String)
    /// A ring push's answer: a line of the journey and of Recent pushes.
    case pushAnswered(JourneyPush)
    /// A pushed device registered again in time.
    case woke(pushID: UUID, device: String, WakeResult)
    case waitEnded(WaitEnd)
    case branchStarted(JourneyBranch)
    case branchResponse(branch: Int, status: Int, reason: String)
    case branchEnded(branch: Int)
    /// The branch's INVITE could not be sent (its flow is gone).
    case branchUnreachable(branch: Int)
    case branchCanceled(branch: Int, because: String)
    /// A flow of a device failed and the call moves to its next one.
    case nextFlow(after: String, transport: String)
    case answered(device: String, after: TimeInterval)
    case declined(device: String, DeclineReason)
    /// A VoIP-only iPhone is kept for its cancel grace.
    case graceNoticed(device: String, grace: Duration)
    /// A pending wake result, settled when the call ended.
    case wakeSettled(pushID: UUID, WakeResult)
    case ended(outcome: CallOutcome, status: Int, reason: String, missed: Bool)
    /// A VoIP-only iPhone registered within its grace: it got the INVITE and a CANCEL.
    case lateReturn(pushID: UUID, device: String, WakeResult)
    /// The outcome of the `call.canceled` push to a woken device.
    case stoppedRinging(device: String, reason: CallEndReason, PushOutcome)
    /// The outcome of a missed-call notice.
    case missedNotice(device: String, PushOutcome)
    /// The answered call's BYE could not reach the device that answered (`byeStatus`): the
    /// outcome of the `call.ended` push that told it.
    case endedPushed(device: String, byeStatus: Int, PushOutcome)
    /// The BYE of an answered call passed (`fromCallee`: who sent it, when known).
    case hungUp(fromCallee: Bool?, afterTalk: TimeInterval)
    /// A step of a call to the outside: its route, each hop and what it answered.
    case outside(OutsideCallFact)
    /// The callee's call forwarding sent the call to `target`.
    case diverted(target: String, cause: DiversionCause, because: String)
    /// A forwarding was not followed (the loop guard, or a target that cannot be used).
    case diversionRefused(target: String, because: String)
    /// This call is the target's side of a diversion from `from`.
    case divertedHere(from: AddressOfRecord, cause: DiversionCause)
}

/// Builds a call's journey from its facts: the words of each line, the push and branch rows, and
/// what must be written to the journey store. A value; the coordinator keeps one per call on its
/// queue.
public struct JourneyRecorder: Sendable {
    /// What a fact asks of the journey store.
    public enum Write: Sendable, Equatable {
        /// A push record (a row of Recent pushes).
        case push(JourneyPush)
        /// A push record's wake result.
        case wake(pushID: UUID, WakeResult)
        /// The whole journey (once the batch of facts is applied).
        case call
    }

    public private(set) var journey: CallJourney

    /// A journey that starts with the INVITE's arrival; `caller` is the extension that
    /// authenticated, nil for a trusted peer.
    public init(_ journey: CallJourney, authenticatedAs caller: AddressOfRecord?) {
        self.journey = journey
        let who = caller.map { " (authenticated as \($0))" } ?? " (trusted peer)"
        self.journey.events.append(JourneyEvent(
            at: journey.startedAt,
            text: "INVITE from \(journey.caller)\(who) for \(journey.callee) over \(journey.transport) from \(journey.source)"))
    }

    /// Goes on with a journey kept elsewhere (an answered call's, until its BYE).
    public init(continuing journey: CallJourney) {
        self.journey = journey
    }

    /// Applies `fact` at `now`; returns what to write, if anything.
    public mutating func apply(_ fact: CallFact, at now: Date) -> Write? {
        switch fact {
        case .tokensUnreadable:
            line(now, "posted tokens could not be read (database unavailable)")
        case .tokensOverdue(let timeout):
            line(now, "posted tokens not read within \(CallText.seconds(timeout.timeInterval)) (database slow or unreachable)")
        case .nothingToWake(let count):
            line(now, "no device to wake; \(count) registered device(s) to ring")
        case .pushing(let count, let wait, let deskPhone):
            line(now, "pushing \(count) device(s); waiting up to \(CallText.seconds(wait.timeInterval)) for an app to register"
                + (deskPhone ? " (a desk phone is registered)" : ""))
        case .pushingPosted(let device):
            line(now, "pushing \(device), known by a posted token")
        case .notPushedStale(let device):
            line(now, "\(device) not pushed: stale (its last ring pushes went unanswered and it has shown no sign of life since)")
        case .pushAnswered(let push):
            journey.pushes.append(push)
            return .push(push)
        case .woke(let pushID, let device, let wake):
            line(now, "\(device) registered again: \(wake.words)")
            if let index = journey.pushes.firstIndex(where: { $0.id == pushID }) {
                journey.pushes[index].wake = wake
                return .wake(pushID: pushID, wake)
            }
        case .waitEnded(.because(let reason)):
            line(now, "wait ended: \(reason)")
        case .waitEnded(.nobodyBack(let after)):
            line(now, "wait ended after \(CallText.seconds(after)): no app back yet")
        case .waitEnded(.back(let devices)):
            line(now, "wait ended: \(devices.joined(separator: ", ")) registered again")
        case .branchStarted(let branch):
            journey.branches.append(branch)
        case .branchResponse(let index, let status, let reason):
            guard journey.branches.indices.contains(index) else { return nil }
            journey.branches[index].responses.append(JourneyResponse(status: status, reason: reason, at: now))
        case .branchEnded(let index):
            guard journey.branches.indices.contains(index) else { return nil }
            journey.branches[index].endedAt = now
        case .branchUnreachable(let index):
            guard journey.branches.indices.contains(index) else { return nil }
            journey.branches[index].responses.append(JourneyResponse(status: 503, reason: "unreachable", at: now))
            journey.branches[index].endedAt = now
        case .branchCanceled(let index, let why):
            guard journey.branches.indices.contains(index) else { return nil }
            journey.branches[index].canceledBecause = why
        case .nextFlow(let device, let transport):
            line(now, "the flow to \(device) failed; trying its next flow (\(transport))")
        case .answered(let device, let after):
            journey.answeredAt = now
            journey.answeredBy = device
            line(now, "answered by \(device) after \(CallText.seconds(after))")
        case .declined(let device, let reason):
            line(now, "\(device) declined the call from the device (\(reason.rawValue))")
            return .call
        case .graceNoticed(let device, let grace):
            line(now, "\(device) has only a VoIP token: if it registers within \(CallText.seconds(grace.timeInterval)) it gets the INVITE and a CANCEL")
        case .wakeSettled(let pushID, let wake):
            if let index = journey.pushes.firstIndex(where: { $0.id == pushID }) { journey.pushes[index].wake = wake }
        case .ended(let outcome, let status, let reason, let missed):
            journey.outcome = outcome
            journey.finalStatus = status
            journey.reason = reason
            // An answered call ends when its BYE passes; until then it is talking.
            journey.endedAt = outcome == .answered ? nil : now
            journey.missed = missed
            line(now, "call \(outcome.rawValue): \(status) \(reason)")
            return .call
        case .lateReturn(let pushID, let device, let wake):
            if let index = journey.pushes.firstIndex(where: { $0.id == pushID }) { journey.pushes[index].wake = wake }
            line(now, "\(device) registered again after the call ended: INVITE and CANCEL sent")
        case .stoppedRinging(let device, let reason, let outcome):
            line(now, "stopped ringing on \(device): call.canceled (\(reason.rawValue)) push \(outcome.word)" + (outcome.isAccepted ? "" : ": \(outcome.explanation)"))
        case .missedNotice(let device, let outcome):
            line(now, "missed-call notice to \(device): \(outcome.word)" + (outcome.isAccepted ? "" : ": \(outcome.explanation)"))
        case .endedPushed(let device, let status, let outcome):
            line(now, "the BYE could not reach \(device) (\(status)): call.ended push \(outcome.word)" + (outcome.isAccepted ? "" : ": \(outcome.explanation)"))
        case .diverted(let target, let cause, let reason):
            line(now, "forwarded to \(target) (\(cause.words), History-Info cause \(cause.rawValue)): \(reason)")
        case .diversionRefused(let target, let reason):
            line(now, "not forwarded to \(target): \(reason)")
            return .call
        case .divertedHere(let from, let cause):
            line(now, "forwarded here from \(from) (\(cause.words), History-Info cause \(cause.rawValue))")
        case .hungUp(let fromCallee, let talk):
            journey.endedAt = now
            let who = fromCallee.map { $0 ? "the callee" : "the caller" } ?? "one side"
            line(now, "\(who) hung up after \(CallText.seconds(talk.rounded())) of talk")
            return .call
        case .outside(let fact):
            line(now, fact.words)
        }
        return nil
    }

    private mutating func line(_ at: Date, _ text: String) {
        journey.events.append(JourneyEvent(at: at, text: text))
    }
}

/// How call texts write durations and status-line phrases.
enum CallText {
    /// `8 s`, `2.5 s`.
    static func seconds(_ interval: TimeInterval) -> String {
        if interval == interval.rounded() { return "\(Int(interval)) s" }
        // One decimal without Foundation's `String(format:)` (two journey lines a call have one).
        let tenths = Int((interval * 10).rounded())
        return "\(tenths < 0 ? "-" : "")\(abs(tenths) / 10).\(abs(tenths) % 10) s"
    }

    /// A reason phrase: the text with a capital letter, limited to what a status line may hold.
    static func phrase(_ text: String) -> String {
        let cleaned = String(text.filter { $0 != "\r" && $0 != "\n" }.prefix(120))
        return cleaned.prefix(1).uppercased() + cleaned.dropFirst()
    }
}
