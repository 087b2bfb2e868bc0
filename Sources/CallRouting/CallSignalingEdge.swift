import Foundation
import Registrar
import SIPDNS
import SIPMessage
import SIPProxy
import SIPTransaction

/// A flow of the SIP side's (`CallSignaling.Flow`) with its type erased, so the call shards and
/// the machines they run are concrete code, specialised in this module whatever the SIP side's
/// flow type is (a shard generic over it, instantiated from another module, ran unspecialised: a
/// metadata lookup or witness call for nearly every event and action). Only `SignalingEdge` makes
/// one and reads it back. @unchecked Sendable: it only ever holds a `CallSignaling.Flow`, which is
/// Sendable.
struct CallFlow: Hashable, @unchecked Sendable {
    private let base: AnyHashable

    init<Flow: Hashable & Sendable>(_ flow: Flow) {
        base = AnyHashable(flow)
    }

    /// The flow it was made of.
    func unerased<Flow: Hashable & Sendable>(as _: Flow.Type = Flow.self) -> Flow {
        // Every `CallFlow` a coordinator holds was made by its own edge from its `Signaling.Flow`.
        base.base as! Flow
    }
}

/// `CallSignaling` as the shards drive it, flows as `CallFlow`: the one place where the SIP side's
/// flow type is known (the cold edge: a call or two per SIP message). Every method returns at once.
protocol CallSignalingEdge: AnyObject, Sendable {
    /// Whether the SIP side is still there (it owns the coordinator, so it is held weakly).
    var isAttached: Bool { get }
    func respond(_ response: SIPResponse, to handle: ServerTransactionHandle)
    func relay2xx(_ response: SIPResponse, to handle: ServerTransactionHandle, callerFlow: CallFlow)
    func reach(_ binding: Binding) -> BindingReach
    func sendInvite(
        _ request: SIPRequest, to binding: Binding, callerFlow: CallFlow, sent: @escaping @Sendable (SentRequest<CallFlow>?) -> Void,
        onResponse: @escaping @Sendable (ClientTransactionEvent) -> Void)
    func sendCancel(_ cancel: SIPRequest, over flow: CallFlow)
    func resolve(_ hop: RouteHop, completion: @escaping @Sendable ([ResolvedHop]) -> Void)
    func sendOutside(
        _ request: SIPRequest, to hop: ResolvedHop, callerFlow: CallFlow, sent: @escaping @Sendable (SentRequest<CallFlow>?) -> Void,
        onResponse: @escaping @Sendable (ClientTransactionEvent) -> Void)
}

/// The `CallSignalingEdge` over a `CallSignaling`, held weakly. Thread-safe: `signaling` is set
/// once, and the SIP side's methods may be called from any thread.
final class SignalingEdge<Signaling: CallSignaling>: CallSignalingEdge {
    private weak let signaling: Signaling?

    init(_ signaling: Signaling) {
        self.signaling = signaling
    }

    var isAttached: Bool { signaling != nil }

    func respond(_ response: SIPResponse, to handle: ServerTransactionHandle) {
        signaling?.respond(response, to: handle)
    }

    func relay2xx(_ response: SIPResponse, to handle: ServerTransactionHandle, callerFlow: CallFlow) {
        signaling?.relay2xx(response, to: handle, callerFlow: callerFlow.unerased())
    }

    func reach(_ binding: Binding) -> BindingReach {
        signaling?.reach(binding) ?? .gone
    }

    func sendInvite(
        _ request: SIPRequest, to binding: Binding, callerFlow: CallFlow, sent: @escaping @Sendable (SentRequest<CallFlow>?) -> Void,
        onResponse: @escaping @Sendable (ClientTransactionEvent) -> Void
    ) {
        guard let signaling else { return sent(nil) }
        signaling.sendInvite(request, to: binding, callerFlow: callerFlow.unerased(), sent: { sent($0.map(Self.erased)) }, onResponse: onResponse)
    }

    func sendCancel(_ cancel: SIPRequest, over flow: CallFlow) {
        signaling?.sendCancel(cancel, over: flow.unerased())
    }

    func resolve(_ hop: RouteHop, completion: @escaping @Sendable ([ResolvedHop]) -> Void) {
        guard let signaling else { return completion([]) }
        signaling.resolve(hop, completion: completion)
    }

    func sendOutside(
        _ request: SIPRequest, to hop: ResolvedHop, callerFlow: CallFlow, sent: @escaping @Sendable (SentRequest<CallFlow>?) -> Void,
        onResponse: @escaping @Sendable (ClientTransactionEvent) -> Void
    ) {
        guard let signaling else { return sent(nil) }
        signaling.sendOutside(request, to: hop, callerFlow: callerFlow.unerased(), sent: { sent($0.map(Self.erased)) }, onResponse: onResponse)
    }

    private static func erased(_ sent: SentRequest<Signaling.Flow>) -> SentRequest<CallFlow> {
        SentRequest(sent.request, over: CallFlow(sent.flow))
    }
}
