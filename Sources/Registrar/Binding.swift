public import Foundation
public import RouseVocabulary
import SIPMessage

/// The flow a REGISTER arrived over (RFC 5626 §3): requests to the binding must leave the same way,
/// since a phone behind NAT can be reached no other way. Typed: its text forms are read once, when
/// a binding is loaded (`init(storedTransport:…)`), not on every reachability check.
public struct BindingFlow: Hashable, Sendable {
    public var transport: SIPTransportKind
    /// The address and port the REGISTER came from; nil when the transport did not say.
    public var source: SocketAddress?
    /// The transport's name of the connection (or UDP socket and peer) on the instance that holds it.
    public var connectionID: FlowConnectionID
    /// The address and port of the listen point it arrived on (of `transport`); nil when unknown.
    public var local: SocketAddress?
    /// Which Rouse instance holds the connection.
    public var instanceID: String

    public init(
        transport: SIPTransportKind, source: SocketAddress?, connectionID: FlowConnectionID, local: SocketAddress?, instanceID: String
    ) {
        self.transport = transport
        self.source = source
        self.connectionID = connectionID
        self.local = local
        self.instanceID = instanceID
    }

    /// Reads the stored text forms (`sourceText`, `localPointText`); nil when `storedTransport` is
    /// not `udp`, `tcp` or `tls`. A source or listen point that does not read is unknown (nil).
    public init?(storedTransport: String, source: String, connectionID: String, localPoint: String, instanceID: String) {
        guard let transport = SIPTransportKind(rawValue: storedTransport) else { return nil }
        let prefix = "\(transport.rawValue):"
        let local = localPoint.hasPrefix(prefix) ? SocketAddress(parsing: String(localPoint.dropFirst(prefix.count))) : nil
        self.init(
            transport: transport, source: SocketAddress(parsing: source), connectionID: FlowConnectionID(connectionID), local: local,
            instanceID: instanceID)
    }

    /// The source as stored: `192.0.2.7:5060`, `[2001:db8::7]:5060`, or empty when unknown.
    public var sourceText: String { source?.description ?? "" }

    /// The listen point as stored, in `ListenPoint`'s form: `udp:127.0.0.1:5060`, or empty when unknown.
    public var localPointText: String { local.map { "\(transport.rawValue):\($0)" } ?? "" }
}

/// One registered Contact of an extension (RFC 3261 §10.3), with what Rouse needs to reach it: its
/// flow, its Path, and the push channels it can be woken through.
public struct Binding: Hashable, Sendable, Identifiable {
    public var id: UUID
    public var aor: AddressOfRecord
    /// The Contact URI as the UA sent it, parameters included.
    public var contact: String
    /// `+sip.instance` (RFC 5626 §4.1), the device's identity when present.
    public var instance: String?
    public var regID: Int?
    public var q: Double?
    public var callID: String
    public var cseq: UInt32
    public var registeredAt: Date
    public var expiresAt: Date
    /// Path header values (RFC 3327), in order.
    public var path: [String]
    public var userAgent: String?
    public var flow: BindingFlow
    public var pushChannels: [PushChannel]
    /// The UA offered `+sip.pnsreg` (RFC 8599 §5.5): it refreshes its binding on its own, so it
    /// gets no binding-refresh push. Kept in memory only; after a restart it reads false.
    public var refreshesItself: Bool

    public init(
        id: UUID = UUID(), aor: AddressOfRecord, contact: String, instance: String? = nil, regID: Int? = nil,
        q: Double? = nil, callID: String, cseq: UInt32, registeredAt: Date, expiresAt: Date, path: [String] = [],
        userAgent: String? = nil, flow: BindingFlow, pushChannels: [PushChannel] = [], refreshesItself: Bool = false
    ) {
        self.id = id
        self.refreshesItself = refreshesItself
        self.aor = aor
        self.contact = contact
        self.instance = instance
        self.regID = regID
        self.q = q
        self.callID = callID
        self.cseq = cseq
        self.registeredAt = registeredAt
        self.expiresAt = expiresAt
        self.path = path
        self.userAgent = userAgent
        self.flow = flow
        self.pushChannels = pushChannels
    }

    /// Seconds left until expiry at `now` (0 once expired).
    public func remainingSeconds(at now: Date) -> Int {
        max(0, Int(expiresAt.timeIntervalSince(now).rounded(.down)))
    }
}

extension Binding {
    /// The Contact as shown to people: push tokens in `pn-prid`/`pn-tok` shortened to their first
    /// 8 and last 4 characters (the whole token is a credential of sorts: it can wake the phone).
    public var contactForDisplay: String {
        guard var uri = try? SIPURI(parsing: contact) else { return contact }
        for name in ["pn-prid", "pn-tok"] {
            if let value = uri.parameters.value(name) { uri.parameters.set(name, Binding.shortenedToken(value)) }
        }
        return uri.description
    }

    /// A token as shown to people: its first 8 and last 4 characters.
    public static func shortenedToken(_ token: String) -> String {
        let characters = Array(token)
        guard characters.count > 12 else { return String(characters.prefix(characters.count / 2)) + "…" }
        return String(characters.prefix(8)) + "…" + String(characters.suffix(4))
    }
}
