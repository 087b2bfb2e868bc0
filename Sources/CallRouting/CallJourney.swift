public import Foundation
public import Push
public import Registrar
public import RouseVocabulary

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
    /// The callee's call forwarding sent it on (unconditionally, busy, no answer, unreachable):
    /// the journey's final status is the RFC 4458 cause (302, 486, 408, 503), and the target's
    /// call has a journey of its own.
    case diverted
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
    /// `accepted`, `refused` or `failed` (`PushOutcome.Kind`), as stored.
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
        switch outcomeKind {
        case .accepted: text += "accepted in \(latencyMilliseconds) ms, " + wake.words
        case .refused: text += "refused: \(reason ?? "?") (\(explanation))"
        case .failed, nil: text += "failed: \(explanation)"
        }
        return text
    }

    /// Which of the three outcomes the stored word names; nil for a word that is none of them.
    public var outcomeKind: PushOutcome.Kind? { PushOutcome.Kind(rawValue: outcome) }
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
