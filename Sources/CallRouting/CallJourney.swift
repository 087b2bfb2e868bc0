import Foundation
import Push
import Registrar

/// How a call ended, as the journey and the metrics say it.
public enum CallOutcome: String, Sendable, Hashable, CaseIterable {
    /// Still ringing (a journey read while the call is live).
    case ringing
    /// A device answered (2xx).
    case answered
    /// The caller hung up (CANCEL) before anyone answered.
    case canceled
    /// Nothing could ring, nobody came back in time, or the ring timeout ran out: 480 to the caller.
    case unanswered
    /// Every branch answered with a final error (busy, declined, …): the best of them went back.
    case failed
}

/// What became of a woken device after its ring push (the "woke in time" column of Recent pushes).
public enum WakeResult: Sendable, Hashable {
    /// Not known yet: the call still waits.
    case pending
    /// The device registered again this long after the push was sent, in time for the call.
    case woke(afterMilliseconds: Int)
    /// The device registered again after the call had stopped waiting for it (too late to ring).
    case late(afterMilliseconds: Int)
    /// The device did not register again while the call could still reach it.
    case notInTime
    /// The call ended (answered elsewhere, caller hung up) before the device came back.
    case callEnded
    /// The push failed or was refused, so no wake was expected.
    case notPushed

    /// One word for storage and the API: `pending`, `woke`, `late`, `no`, `call_ended`, `not_pushed`.
    public var word: String {
        switch self {
        case .pending: return "pending"
        case .woke: return "woke"
        case .late: return "late"
        case .notInTime: return "no"
        case .callEnded: return "call_ended"
        case .notPushed: return "not_pushed"
        }
    }

    /// Milliseconds from push to the fresh REGISTER, when the device came back.
    public var milliseconds: Int? {
        switch self {
        case .woke(let ms), .late(let ms): return ms
        default: return nil
        }
    }

    /// In words, as the journey line ends: "woke in 1.9 s", "no re-register in time", …
    public var words: String {
        switch self {
        case .pending: return "waiting for the device"
        case .woke(let ms): return "woke in \(WakeResult.seconds(ms))"
        case .late(let ms): return "woke in \(WakeResult.seconds(ms)), too late for the call"
        case .notInTime: return "no re-register in time"
        case .callEnded: return "call ended before the device came back"
        case .notPushed: return "not woken"
        }
    }

    /// Rebuilds a result from its stored word and milliseconds.
    public init(word: String, milliseconds: Int?) {
        switch word {
        case "woke": self = .woke(afterMilliseconds: milliseconds ?? 0)
        case "late": self = .late(afterMilliseconds: milliseconds ?? 0)
        case "no": self = .notInTime
        case "call_ended": self = .callEnded
        case "not_pushed": self = .notPushed
        default: self = .pending
        }
    }

    static func seconds(_ ms: Int) -> String {
        ms < 1000 ? "\(ms) ms" : String(format: "%.1f s", Double(ms) / 1000)
    }
}

/// One ring push of a call: a line of the journey and a row of the extension's Recent pushes.
public struct JourneyPush: Sendable, Hashable {
    /// The push record's id (push_records.record_uuid).
    public var id: UUID
    /// The device as people know it: "iPhone (apns)", its user agent or contact.
    public var device: String
    public var provider: PushProvider
    public var appID: Int64?
    /// The first 8 characters of the token and an ellipsis.
    public var tokenShort: String
    /// `accepted`, `refused` or `failed`.
    public var outcome: String
    public var status: Int?
    /// The provider's reason (`Unregistered`, `BadDeviceToken`, …).
    public var reason: String?
    /// The outcome in words.
    public var explanation: String
    public var latencyMilliseconds: Int
    public var sentAt: Date
    public var wake: WakeResult

    public init(
        id: UUID = UUID(), device: String, provider: PushProvider, appID: Int64?, tokenShort: String, outcome: String, status: Int?,
        reason: String?, explanation: String, latencyMilliseconds: Int, sentAt: Date, wake: WakeResult
    ) {
        self.id = id
        self.device = device
        self.provider = provider
        self.appID = appID
        self.tokenShort = tokenShort
        self.outcome = outcome
        self.status = status
        self.reason = reason
        self.explanation = explanation
        self.latencyMilliseconds = latencyMilliseconds
        self.sentAt = sentAt
        self.wake = wake
    }

    /// The journey line: "pushed iPhone (apns): accepted in 182 ms, woke in 1.9 s".
    public var line: String {
        var text = "pushed \(device) (\(provider.rawValue)): "
        switch outcome {
        case "accepted": text += "accepted in \(latencyMilliseconds) ms"
        case "refused": text += "refused: \(reason ?? "?") (\(explanation))"
        default: text += "failed: \(explanation)"
        }
        if outcome == "accepted" { text += ", " + wake.words }
        return text
    }
}

/// One response a branch received.
public struct JourneyResponse: Sendable, Hashable {
    public var status: Int
    public var reason: String
    public var at: Date

    public init(status: Int, reason: String, at: Date) {
        self.status = status
        self.reason = reason
        self.at = at
    }
}

/// One branch of the fork (RFC 3261 §16): the INVITE sent to one registered device.
public struct JourneyBranch: Sendable, Hashable {
    public var bindingID: UUID
    /// The Contact the INVITE went to (tokens shortened).
    public var target: String
    public var device: String
    /// `udp`, `tcp`, `tls`.
    public var transport: String
    public var startedAt: Date
    /// Added after the fork began (a woken device that came back late).
    public var isLateFork: Bool
    public var responses: [JourneyResponse]
    /// Whether Rouse cancelled it, and why.
    public var canceledBecause: String?
    public var endedAt: Date?

    public init(
        bindingID: UUID, target: String, device: String, transport: String, startedAt: Date, isLateFork: Bool,
        responses: [JourneyResponse] = [], canceledBecause: String? = nil, endedAt: Date? = nil
    ) {
        self.bindingID = bindingID
        self.target = target
        self.device = device
        self.transport = transport
        self.startedAt = startedAt
        self.isLateFork = isLateFork
        self.responses = responses
        self.canceledBecause = canceledBecause
        self.endedAt = endedAt
    }

    /// The final status the branch got, if any.
    public var finalStatus: Int? { responses.last { $0.status >= 200 }?.status }
}

/// A line of the journey in words, at a moment.
public struct JourneyEvent: Sendable, Hashable {
    public var at: Date
    public var text: String

    public init(at: Date, text: String) {
        self.at = at
        self.text = text
    }
}

/// A call's journey (product.md "What happens on a call", item 6): arrival, each push, each
/// branch, who answered, how it ended and why. A value; the coordinator builds it as the call goes.
public struct CallJourney: Sendable, Hashable {
    /// Rouse's id of the call (the calls table's key).
    public var id: UUID
    /// The SIP Call-ID of the caller's INVITE.
    public var callID: String
    /// UUID v5 of the Call-ID (the push payload's `uuid`).
    public var uuid: String
    public var callee: AddressOfRecord
    /// The caller's address (`sip:1001@example.com`).
    public var caller: String
    public var callerName: String?
    /// The transport the INVITE came over and the address it came from.
    public var transport: String
    public var source: String
    /// Which Rouse instance held the call.
    public var instanceID: String
    public var startedAt: Date
    public var answeredAt: Date?
    public var endedAt: Date?
    public var outcome: CallOutcome
    /// The final status sent to the caller.
    public var finalStatus: Int?
    /// Why it ended, in words.
    public var reason: String?
    /// The device that answered.
    public var answeredBy: String?
    /// Nobody answered and the extension was told (no answer in time, the caller gave up, or every
    /// device busy): its devices got a missed-call notice.
    public var missed = false
    public var pushes: [JourneyPush]
    public var branches: [JourneyBranch]
    public var events: [JourneyEvent]

    public init(
        id: UUID = UUID(), callID: String, callee: AddressOfRecord, caller: String, callerName: String?, transport: String,
        source: String, instanceID: String, startedAt: Date
    ) {
        self.id = id
        self.callID = callID
        self.uuid = PushPayload.uuid(forCallID: callID)
        self.callee = callee
        self.caller = caller
        self.callerName = callerName
        self.transport = transport
        self.source = source
        self.instanceID = instanceID
        self.startedAt = startedAt
        self.outcome = .ringing
        self.pushes = []
        self.branches = []
        self.events = []
    }

    /// Ring duration (arrival to answer or end) in milliseconds, once known.
    public var ringMilliseconds: Int? {
        guard let end = answeredAt ?? endedAt else { return nil }
        return Int((end.timeIntervalSince(startedAt) * 1000).rounded())
    }
}

/// Where journeys and push records go (Storage implements it with PostgreSQL). Every method returns
/// at once and never fails the call: the implementation queues the write, keeps the order of the
/// writes of one call, and retries while PostgreSQL is slow or away (recording never delays
/// signalling, product.md).
public protocol JourneyStore: Sendable {
    /// A ring push's outcome, as a row of the callee's Recent pushes (wake result usually pending).
    func recordPush(_ push: JourneyPush, of journey: CallJourney)
    /// The push's wake result, once known.
    func recordWake(pushID: UUID, _ result: WakeResult)
    /// The whole journey, when the call has ended (insert or replace by `journey.id`).
    func recordCall(_ journey: CallJourney)
}
