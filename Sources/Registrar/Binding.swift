import Foundation
import RouseVocabulary
import SIPMessage

/// The flow a REGISTER arrived over (RFC 5626 §3): requests to the binding must leave the same way,
/// since a phone behind NAT can be reached no other way.
public struct BindingFlow: Hashable, Sendable {
    /// `udp`, `tcp` or `tls`.
    public var transport: String
    /// The address and port the REGISTER came from (`192.0.2.7:5060`, `[2001:db8::7]:5060`).
    public var source: String
    /// The transport's identifier of the connection (or UDP socket and peer) on the instance that
    /// holds it.
    public var connectionID: String
    /// The listen point it arrived on (`udp:127.0.0.1:5060`).
    public var localPoint: String
    /// Which Rouse instance holds the connection.
    public var instanceID: String

    public init(transport: String, source: String, connectionID: String, localPoint: String, instanceID: String) {
        self.transport = transport
        self.source = source
        self.connectionID = connectionID
        self.localPoint = localPoint
        self.instanceID = instanceID
    }
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
