public import Foundation
public import Push
public import Registrar
public import RouseVocabulary

/// The pushed device that answered a call: what a `call.ended` push to it needs. A value.
public struct AnsweredDevice: Sendable, Equatable {
    /// The device as people know it (the journey's and the log's name).
    public var device: String
    /// The extension it answered for.
    public var callee: AddressOfRecord
    /// Its regular channel: the FCM token, a browser subscription, or an iPhone's regular
    /// (background) token; never a VoIP token (iOS would show a VoIP push as a new call).
    public var channel: PushChannel
    /// The call facts of its ring push (Call-ID, UUID).
    public var content: CallPushContent

    public init(device: String, callee: AddressOfRecord, channel: PushChannel, content: CallPushContent) {
        self.device = device
        self.callee = callee
        self.channel = channel
        self.content = content
    }
}

/// An answered call followed to its end, for the one push that ends it on the device that
/// answered when the BYE cannot reach that device: its flow is gone (the TCP or TLS connection
/// closed, the app was killed after answering) or the BYE's transaction failed (Timer F, a
/// transport error). The device then gets `call.ended` on its regular channel, so its CallKit or
/// Telecom call ends even though no SIP message can tell it.
///
/// Events go in with the time, actions come out; it never reads the clock. A value: the
/// coordinator keeps one per answered call on its queue, keyed by Call-ID.
public struct AnsweredCall: Sendable, Equatable {
    /// How long after a BYE passed its failure may still be reported: Timer F of the BYE's
    /// transaction (64 × T1 = 32 s), with room to spare.
    public static var byeOutcomeWait: TimeInterval { 40 }
    /// How long Apple or Google keep a `call.ended` for a device that is offline.
    public static var endedPushLifetime: TimeInterval { 60 }

    /// What happens to the answered call.
    public enum Event: Sendable, Equatable {
        /// A BYE of the dialog passed through Rouse; `fromCallee`: sent by the device that
        /// answered (nil when unknown).
        case byeForwarded(fromCallee: Bool?)
        /// The BYE toward the device that answered could not reach it (`status`: 430 its flow is
        /// gone, 408 no answer, 503 the transport failed).
        case byeUnreachable(status: Int)
    }

    /// What the coordinator does.
    public enum Action: Sendable, Equatable {
        /// Sends `call.ended` to the device.
        case push(EndedCallPush)
        /// Forgets the answered call at this time (now: at once).
        case forget(at: Date)
    }

    public let device: AnsweredDevice
    /// When the caller's BYE passed toward the device; nil before.
    public private(set) var byeAt: Date?
    /// `call.ended` went out (at most once).
    public private(set) var pushed = false

    public init(device: AnsweredDevice) {
        self.device = device
    }

    /// Handles one event at `now`; returns what to do, in order.
    public mutating func handle(_ event: Event, at now: Date) -> [Action] {
        switch event {
        case .byeForwarded(fromCallee: true):
            // The device hung up itself: it knows the call ended.
            return [.forget(at: now)]
        case .byeForwarded:
            guard byeAt == nil else { return [] }
            byeAt = now
            return [.forget(at: now.addingTimeInterval(Self.byeOutcomeWait))]
        case .byeUnreachable(let status):
            guard !pushed, let byeAt, now.timeIntervalSince(byeAt) <= Self.byeOutcomeWait else { return [] }
            pushed = true
            var content = device.content
            content.timestamp = now
            return [
                .push(EndedCallPush(
                    device: device.device, callee: device.callee, channel: device.channel, content: content, reason: .callerHangup, status: status,
                    expiresAt: now.addingTimeInterval(Self.endedPushLifetime))),
                .forget(at: now),
            ]
        }
    }
}

/// A `call.ended` push: the call was answered on this device and ended, and no SIP message can
/// tell the device. A value.
public struct EndedCallPush: Sendable, Equatable {
    public var device: String
    public var callee: AddressOfRecord
    public var channel: PushChannel
    /// The call facts, stamped with when the push was made.
    public var content: CallPushContent
    /// The push's `reason`: why the call ended (`caller_hangup`: the other party hung up).
    public var reason: CallEndReason
    /// How the BYE failed (430, 408, 503), for the log.
    public var status: Int
    public var expiresAt: Date
}
