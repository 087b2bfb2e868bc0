import Crypto
public import Foundation
public import SIPMessage
import RouseVocabulary
public import SIPTransport

/// Rouse's part as a proxy on requests it does not answer itself (RFC 3261 §16), as pure functions
/// on messages: its own Route entries popped (§16.4), Record-Route entries carrying signed flow
/// tokens so requests inside a dialog reach each end over its own flow (RFC 5626 §5.3 style), the
/// checks and header changes of a forwarded request (§16.3 step 3, §16.6 steps 3 and 8), and where
/// a request inside a dialog or an ACK for a 2xx goes. No I/O: `SIPService` asks whether a flow is
/// open and sends.
///
/// A value, safe to share between threads. The listen points are passed in, since they are known
/// only once the sockets are bound.
public struct ProxyCore: Sendable {
    /// URI parameters of Rouse's Record-Route entries: the caller's flow and the device's flow. (A
    /// Route from another instance carries `InstanceForwardProof`'s parameters instead.)
    public static let callerFlowParameter = "rouse-c"
    public static let deviceFlowParameter = "rouse-d"

    /// Names this instance in flow tokens and in its Via (loop detection, `ProxyRules.isLooping`).
    public let instanceID: String
    /// The names a Request-URI or Route may use for this server (host or address, lower-case,
    /// IPv6 in brackets).
    public let ownNames: Set<String>
    /// Signs flow tokens (shared by every instance, so one instance can route through another's
    /// flows and nobody else can forge them).
    private let flowTokenKey: [UInt8]
    /// Tokens already signed or checked, so the HMAC runs once per flow, not on every request of
    /// a dialog, and the Record-Route entries written here (shared by the copies of this value).
    let tokenCache = FlowTokenCache()
    /// The text around a Via's branch, and before a Record-Route entry's tokens (`head`; no
    /// `tail`), for each transport and listen point they were made for (a few), written once
    /// instead of on every request (shared by the copies of this value).
    private let texts = Locked([TextKey: (head: String, tail: String)]())

    public init(instanceID: String, ownNames: Set<String>, flowTokenKey: [UInt8]) {
        self.instanceID = instanceID
        self.ownNames = ownNames
        self.flowTokenKey = flowTokenKey
    }

    // MARK: Flow tokens

    /// A flow of this instance, named and signed:
    /// `hex(instance " " name).hex(HMAC-SHA256(key, instance " " name)[0..<8])`. Every instance
    /// shares the key; nobody else can forge a token, and an instance accepts only its own.
    public func flowToken(_ flow: FlowID) -> String {
        if let known = tokenCache.token(of: flow) { return known }
        let text = Array("\(instanceID) \(flow.description)".utf8)
        let token = Hex.encode(text) + "." + Hex.encode(Digest.hmacSHA256(key: flowTokenKey, message: text).prefix(8))
        tokenCache.remember(signed: token, for: flow)
        return token
    }

    /// The flow a token names, when the signature is Rouse's and the flow is this instance's. A
    /// token seen before (signed here or checked) is looked up, not checked again: the whole
    /// token is the key, so only a token that passed the check can match.
    public func flow(fromToken token: String) -> FlowID? {
        if let known = tokenCache.flow(of: token) { return known }
        guard let flow = checkedFlow(fromToken: token) else { return nil }
        tokenCache.remember(checked: token, for: flow)
        return flow
    }

    private func checkedFlow(fromToken token: String) -> FlowID? {
        // Read as bytes: every in-dialog request carries two tokens per Route entry, and
        // Character-wise splitting cost more than the HMAC.
        guard let dot = token.utf8.firstIndex(of: UInt8(ascii: ".")), let textBytes = Hex.decode(String(token[..<dot])),
            let mac = Hex.decode(String(token[token.utf8.index(after: dot)...]))
        else { return nil }
        let expected = Array(Digest.hmacSHA256(key: flowTokenKey, message: textBytes).prefix(8))
        guard Digest.constantTimeEquals(expected, mac), let space = textBytes.firstIndex(of: UInt8(ascii: " ")),
            textBytes[..<space].elementsEqual(instanceID.utf8)
        else { return nil }
        return FlowID(description: String(decoding: textBytes[(space + 1)...], as: UTF8.self))
    }

    // MARK: Route and Record-Route

    /// Rouse's own entries at the top of the Route set, removed (§16.4: loose routing), with the
    /// flow tokens and the forward proof they carried. An entry is Rouse's when it carries a flow
    /// token of this instance or names this server (`namesThisServer`).
    public func popOwnRoutes(_ request: inout SIPRequest, listening: [ListenPoint]) -> RouteTokens {
        var tokens = RouteTokens()
        // `firstValue`: only the top entry is split out (`values(.route)` split every line each time round).
        while let first = request.headers.firstValue(.route) {
            // An entry of this instance's Record-Route, come back unchanged: known without a parse.
            if let known = tokenCache.flows(ofRoute: first) {
                request.headers.removeFirstValue(.route)
                tokens.popped = true
                tokens.caller = tokens.caller ?? known.caller
                tokens.device = tokens.device ?? known.device
                continue
            }
            guard let address = try? SIPNameAddress(parsing: first) else { break }
            let uri = address.uri
            let caller = uri.parameters.value(Self.callerFlowParameter).flatMap(flow(fromToken:))
            let device = uri.parameters.value(Self.deviceFlowParameter).flatMap(flow(fromToken:))
            guard caller != nil || device != nil || namesThisServer(uri, listening: listening) else { break }
            request.headers.removeFirstValue(.route)
            tokens.popped = true
            tokens.caller = tokens.caller ?? caller
            tokens.device = tokens.device ?? device
            if tokens.forwarded == nil, let binding = uri.parameters.value(InstanceForwardProof.bindingParameter).flatMap(UUID.init(uuidString:)),
                let proof = uri.parameters.value(InstanceForwardProof.proofParameter)
            {
                tokens.forwarded = (binding, proof)
            }
        }
        return tokens
    }

    /// Whether a Route URI is this server: one of its names and one of its ports.
    public func namesThisServer(_ uri: SIPURI, listening: [ListenPoint]) -> Bool {
        let host = uri.host.lowercased()
        guard ownNames.contains(host) else { return false }
        let port = uri.port.map { UInt16(clamping: $0) } ?? 5060
        return listening.contains { $0.port == port }
    }

    /// Record-Route naming both flows (RFC 3261 §16.6 step 4); two entries when the two sides use
    /// different transports (RFC 5658 double record-routing), so each side reaches Rouse its way.
    public func addRecordRoutes(to request: inout SIPRequest, callerFlow: FlowID, deviceFlow: FlowID, listening: [ListenPoint]) {
        let callerToken = flowToken(callerFlow)
        let deviceToken = flowToken(deviceFlow)
        func entry(_ transport: SIPTransportKind) -> String {
            let point = listening.first { $0.transport == transport } ?? listening.first
            let head = texts.withLock { texts in
                let key = TextKey(kind: .recordRoute, transport: transport, local: point)
                if let known = texts[key] { return known.head }
                let host = point.map { $0.isIPv6 ? "[\($0.host)]" : $0.host } ?? "127.0.0.1"
                let port = point.map { String($0.port) } ?? "5060"
                let transportParameter = transport == .udp ? "" : ";transport=\(transport.rawValue)"
                let made = "<sip:\(host):\(port)\(transportParameter);lr;\(Self.callerFlowParameter)="
                if texts.count < 64 { texts[key] = (made, "") }
                return made
            }
            var entry = head
            entry.reserveCapacity(head.utf8.count + callerToken.utf8.count + deviceToken.utf8.count + 16)
            entry += callerToken
            entry += Self.deviceFlowSeparator
            entry += deviceToken
            entry += ">"
            tokenCache.remember(route: entry, caller: callerFlow, device: deviceFlow)
            return entry
        }
        // The device side is nearest the device: its entry comes first in the request it gets.
        if callerFlow.transport != deviceFlow.transport { request.headers.prepend(.recordRoute, entry(callerFlow.transport)) }
        request.headers.prepend(.recordRoute, entry(deviceFlow.transport))
    }

    /// Between a Record-Route entry's two tokens.
    private static let deviceFlowSeparator = ";\(deviceFlowParameter)="

    /// Rouse's Via on an outgoing request (§16.6 step 8): the listen point of the flow's
    /// transport, `branch` (a fresh `z9hG4bK` one), rport, and the instance marker for loop
    /// detection.
    public func addVia(to request: inout SIPRequest, over flow: FlowID, listening: [ListenPoint], branch: String) {
        let local = listening.first { $0.transport == flow.transport } ?? listening.first
        let text = texts.withLock { texts in
            let key = TextKey(kind: .via, transport: flow.transport, local: local)
            if let known = texts[key] { return known }
            let host = local.map { $0.isIPv6 ? "[\($0.host)]" : $0.host } ?? "127.0.0.1"
            let sentBy = local.map { "\(host):\($0.port)" } ?? host
            let made = (head: "SIP/2.0/\(flow.transport.rawValue.uppercased()) \(sentBy);branch=", tail: ";rport;\(ProxyRules.viaMarkerParameter)=\(instanceID)")
            if texts.count < 64 { texts[key] = made }
            return made
        }
        request.headers.prepend(.via, text.head + branch + text.tail)
    }

    /// What the text around a Via's branch, or before a Record-Route entry's tokens, depends on
    /// besides them.
    private struct TextKey: Hashable {
        enum Kind: Hashable {
            case via, recordRoute
        }
        var kind: Kind
        var transport: SIPTransportKind
        var local: ListenPoint?
    }

    // MARK: Forwarding

    /// Where a request Rouse does not answer itself goes, once its own Route entries are popped.
    public enum Step: Sendable {
        /// Not inside a dialog Rouse record-routed: for Rouse itself, the call coordinator or an
        /// instance forward (`tokens.forwarded`). `request` has Rouse's Route entries popped, and
        /// no To tag unless it is an OPTIONS.
        case outsideDialog(SIPRequest, RouteTokens)
        /// Inside a dialog: answer with this status (481 when no Route of Rouse's names the dialog,
        /// 430 when its token names no flow to go on).
        case reply(status: Int, reason: String)
        /// Inside a dialog: forward `request` (Route popped, Rouse's credentials removed) to
        /// `target`; `fromCallee` says which end sent a BYE (nil when unknown).
        case forward(SIPRequest, to: FlowID, fromCallee: Bool?)
    }

    /// §16.4 and §16.12: where `request`, arrived on `flow`, goes. A request inside a dialog (To
    /// tag) follows the flow tokens of Rouse's Record-Route: from the device to the caller, any
    /// other to the device. An OPTIONS inside no dialog of Rouse's and with no user part is for
    /// Rouse itself (a keep-alive some phones send with a To tag).
    public func step(_ request: SIPRequest, arrivedOn flow: FlowID, listening: [ListenPoint]) -> Step {
        var request = request
        let tokens = popOwnRoutes(&request, listening: listening)
        guard request.to?.tag != nil else { return .outsideDialog(request, tokens) }
        guard tokens.popped else {
            if request.method == .options, request.uri.user == nil { return .outsideDialog(request, tokens) }
            return .reply(status: 481, reason: "Call/Transaction Does Not Exist")
        }
        guard let target = tokens.target(arrivedOn: flow) else { return .reply(status: 430, reason: "Flow Failed") }
        // The end beyond is a phone, not another proxy: credentials were meant for Rouse (§22.3),
        // as on the INVITE's branch copies.
        request.headers.remove(.proxyAuthorization)
        return .forward(request, to: target, fromCallee: request.method == .bye ? tokens.device.map { $0 == flow } : nil)
    }

    /// An ACK for a 2xx (§13.2.2.4, forwarded statelessly along Rouse's Route entries, §16.11): the
    /// ACK as it goes on and its flow, or nil when it names no flow of Rouse's or has no hops left
    /// (it is dropped: an ACK is never answered).
    public func ackStep(_ ack: SIPRequest, arrivedOn flow: FlowID, listening: [ListenPoint], branch: String) -> (SIPRequest, FlowID)? {
        var request = ack
        guard let target = popOwnRoutes(&request, listening: listening).target(arrivedOn: flow) else { return nil }
        let hops = request.maxForwards ?? ProxyRules.defaultMaxForwards
        guard hops > 0 else { return nil }
        request.headers.remove(.proxyAuthorization)
        request.headers.set(.maxForwards, String(hops - 1))
        addVia(to: &request, over: target, listening: listening, branch: branch)
        return (request, target)
    }

    /// The copy of `request` forwarded statefully over `target` (§16.6): Max-Forwards one less,
    /// Rouse's Record-Route when `recordRouteFrom` (the flow it arrived on) is given, and Rouse's
    /// Via; or the 483 it gets when Max-Forwards is 0 (§16.3 step 3).
    public func forwarded(
        _ request: SIPRequest, over target: FlowID, recordRouteFrom callerFlow: FlowID?, listening: [ListenPoint], branch: String
    ) -> Result<SIPRequest, ProxyRefusal> {
        if let tooMany = ProxyRules.tooManyHops(request) { return .failure(ProxyRefusal(response: tooMany)) }
        var outgoing = request
        outgoing.headers.set(.maxForwards, String((request.maxForwards ?? ProxyRules.defaultMaxForwards) - 1))
        if let callerFlow { addRecordRoutes(to: &outgoing, callerFlow: callerFlow, deviceFlow: target, listening: listening) }
        addVia(to: &outgoing, over: target, listening: listening, branch: branch)
        return .success(outgoing)
    }
}

/// The response a request gets instead of being forwarded (a 483, §16.3 step 3).
public struct ProxyRefusal: Error, Sendable {
    public let response: SIPResponse
}

/// The flow tokens found in Rouse's own Route entries of a request. A value.
public struct RouteTokens: Sendable {
    /// Whether any Route entry was Rouse's (and removed).
    public var popped = false
    public var caller: FlowID?
    public var device: FlowID?
    /// From another instance's Route: the binding it forwarded to, and its proof.
    public var forwarded: (binding: UUID, proof: String)?

    public init() {}

    /// Inside a dialog: a request from the device goes to the caller, any other to the device.
    public func target(arrivedOn flow: FlowID) -> FlowID? {
        guard let device else { return nil }
        if flow == device { return caller }
        return device
    }
}
