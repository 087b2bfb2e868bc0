public import Foundation
public import Registrar
public import SIPMessage
public import SIPProxy

extension DiversionRules {
    /// Where a call diverted for `cause` goes: the rule's target; for an unreachable callee with
    /// no rule of its own, the no-answer target (so the caller never hears the 480 when a
    /// forwarding is set).
    public func target(for cause: DiversionCause) -> SIPURI? {
        switch cause {
        case .unconditional: return always
        case .busy: return busy
        case .noAnswer: return noAnswer
        case .unreachable: return unreachable ?? noAnswer
        }
    }

    /// When the no-answer diversion fires for a call that arrived at `arrivedAt`: its own ring
    /// time when shorter than `ringTimeout` (at `ringTimeout` the ring timer diverts instead).
    func noAnswerDeadline(arrivedAt: Date, ringTimeout: Duration) -> Date? {
        guard noAnswer != nil, let after = noAnswerAfter, after < ringTimeout else { return nil }
        return arrivedAt.addingTimeInterval(after.timeInterval)
    }
}

/// A call `CallStateMachine` diverted: the INVITE rewritten for the new target (Request-URI,
/// History-Info, Max-Forwards), why, and the answer the caller would have had, for a target that
/// turns out unusable. A value.
public struct DiversionOrder: Sendable {
    public var target: SIPURI
    public var cause: DiversionCause
    /// The INVITE to send on: Request-URI `target`, History-Info with the cause, Max-Forwards
    /// decremented, the caller's Proxy-Authorization removed.
    public var request: SIPRequest
    /// The extension whose forwarding it is.
    public var divertedBy: AddressOfRecord
    /// The final response the call would have ended with had no forwarding been set.
    public var fallback: SIPResponse
    /// Why, in words ("no answer within 20 s").
    public var reason: String
}
