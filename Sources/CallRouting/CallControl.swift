import Foundation

/// Why a device declined a call from its lock screen (`POST /api/v1/calls/{id}/decline`).
public enum DeclineReason: String, Sendable, CaseIterable {
    /// The user declined: when every device has, the caller gets 603 Decline.
    case declined
    /// The device is on another call: when every device is, the caller gets 486 Busy Here.
    case busy
}

/// Where a call stands, as a woken app asks it with its call token (`GET /api/v1/calls/{id}`).
/// A value; thread-safe.
public struct CallStatus: Sendable, Equatable {
    /// The four states an app draws.
    public enum State: String, Sendable {
        /// Still ringing somewhere.
        case ringing
        /// Answered, and still talking (or its end not seen yet).
        case answered
        /// The caller hung up before anyone answered.
        case canceled
        /// Over: hung up after an answer, unanswered, or refused by every device.
        case ended
    }

    public var state: State
    /// Why it is where it is, in words ("answered on another device", "no answer within 45 s").
    public var reason: String?
    /// For an answered call: whether the device asking is the one that answered.
    public var answeredHere: Bool?
    /// The extension was told of a missed call.
    public var missed: Bool
    /// The device asking has declined this call.
    public var declinedHere: Bool

    public init(state: State, reason: String? = nil, answeredHere: Bool? = nil, missed: Bool = false, declinedHere: Bool = false) {
        self.state = state
        self.reason = reason
        self.answeredHere = answeredHere
        self.missed = missed
        self.declinedHere = declinedHere
    }
}

/// What the HTTP API asks of the calls a call token names (the coordinator implements it). Each
/// method returns at once; the completion runs on the coordinator's queue and must not block.
public protocol CallControl: Sendable {
    /// The device of `claims` declines the call. The completion gets the call's status after it,
    /// or nil when this instance does not hold the call.
    func decline(_ claims: CallTokenClaims, reason: DeclineReason, completion: @escaping @Sendable (CallStatus?) -> Void)
    /// The call's status as the device of `claims` sees it, or nil when this instance does not
    /// hold the call.
    func status(_ claims: CallTokenClaims, completion: @escaping @Sendable (CallStatus?) -> Void)
}
