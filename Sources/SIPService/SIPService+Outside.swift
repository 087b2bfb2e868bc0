public import CallRouting
import Foundation
import RouseVocabulary
public import SIPDNS
public import SIPMessage
public import SIPProxy
public import SIPTransaction
public import SIPTransport

/// The SIP side of calls to the outside (issue 19): a route hop resolved by RFC 3263, and an
/// outside call's INVITE sent to a resolved hop over UDP, or over a connection set up on the
/// transport's loop (the call queue never waits for it).
extension SIPService {
    public func resolve(_ hop: RouteHop, completion: @escaping @Sendable ([ResolvedHop]) -> Void) {
        let supported = SIPHopTransport.allCases.filter { kind in listeningPoints.contains { $0.transport == Self.transportKind(kind) } }
        Task { [resolver] in completion(await resolver.locate(hop.target, supported: supported).hops) }
    }

    public func sendOutside(
        _ request: SIPRequest, to hop: ResolvedHop, callerFlow: FlowID, sent: @escaping @Sendable (SentRequest<FlowID>?) -> Void,
        onResponse: @escaping @Sendable (ClientTransactionEvent) -> Void
    ) {
        guard let address = try? SocketAddress(ip: hop.ip, port: hop.port) else { return sent(nil) }
        let kind = Self.transportKind(hop.transport)
        guard kind.isReliable else {
            return sent(transport.datagramFlow(from: nil, to: address).flatMap {
                sendBranch(request, to: nil, over: $0, callerFlow: callerFlow, onResponse: onResponse)
            })
        }
        transport.streamFlow(to: address, transport: kind) { [weak self] flow in
            guard let self, let flow else { return sent(nil) }
            sent(sendBranch(request, to: nil, over: flow, callerFlow: callerFlow, onResponse: onResponse))
        }
    }

    static func transportKind(_ hop: SIPHopTransport) -> SIPTransportKind {
        switch hop {
        case .udp: return .udp
        case .tcp: return .tcp
        case .tls: return .tls
        }
    }
}
