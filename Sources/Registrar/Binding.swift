public import Foundation
public import RouseVocabulary
import SIPMessage
import Synchronization

/// Text that many bindings hold alike (domains, user agents, the instance id read back with each
/// stored binding), kept once: a string of over 15 bytes is a heap allocation of its own in every
/// binding that holds a copy made from different bytes. Up to `limit` distinct texts are kept (a
/// REGISTER's User-Agent is the sender's to choose); past that, text passes through unshared.
/// Thread-safe behind a mutex.
package enum SharedText {
    private static let table = Mutex<Set<String>>([])
    static let limit = 4_096

    /// `text`, or the equal text already kept.
    package static func shared(_ text: String) -> String {
        guard text.utf8.count > 15 else { return text }  // held inline: nothing to share
        return table.withLock { table in
            if let kept = table.firstIndex(of: text) { return table[kept] }
            if table.count < limit { table.insert(text) }
            return text
        }
    }
}

/// The flow a REGISTER arrived over (RFC 5626 §3): requests to the binding must leave the same way,
/// since a phone behind NAT can be reached no other way. Typed: its text forms are read once, when
/// a binding is loaded (`init(storedTransport:…)`), not on every reachability check. (The stored
/// properties are declared widest first, which packs the value into 80 bytes.)
public struct BindingFlow: Hashable, Sendable {
    /// The transport's name of the connection (or UDP socket and peer) on the instance that holds it.
    public var connectionID: FlowConnectionID
    /// Which Rouse instance holds the connection.
    public var instanceID: String
    /// The address and port the REGISTER came from; nil when the transport did not say.
    public var source: SocketAddress?
    /// The address and port of the listen point it arrived on (of `transport`); nil when unknown.
    public var local: SocketAddress?
    public var transport: SIPTransportKind

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
            instanceID: SharedText.shared(instanceID))
    }

    /// The source as stored: `192.0.2.7:5060`, `[2001:db8::7]:5060`, or empty when unknown.
    public var sourceText: String { source?.description ?? "" }

    /// The listen point as stored, in `ListenPoint`'s form: `udp:127.0.0.1:5060`, or empty when unknown.
    public var localPointText: String { local.map { "\(transport.rawValue):\($0)" } ?? "" }
}

/// One registered Contact of an extension (RFC 3261 §10.3), with what Rouse needs to reach it: its
/// flow, its Path, and the push channels it can be woken through.
///
/// Compact, since an instance holds a million of them: what every binding has is inline (200
/// bytes); what only some have (`+sip.instance`, reg-id, q, Path, push channels, `+sip.pnsreg`) is
/// in one shared, immutable box, absent when none is set; the domain and User-Agent are shared
/// with the other bindings that name the same (`SharedText`).
public struct Binding: Hashable, Sendable, Identifiable {
    public var id: UUID
    public var aor: AddressOfRecord {
        didSet { aor = Binding.sharingDomain(aor) }
    }
    /// The Contact URI as the UA sent it, parameters included.
    public var contact: String
    public var callID: String
    public var userAgent: String? {
        didSet { userAgent = userAgent.map(SharedText.shared) }
    }
    public var registeredAt: Date
    public var expiresAt: Date
    public var flow: BindingFlow
    public var cseq: UInt32
    private var extras: Extras?

    /// What only some bindings have, kept out of line. Immutable: a change makes a new box.
    private final class Extras: Hashable, Sendable {
        let instance: String?
        let regID: Int?
        let q: Double?
        let path: [String]
        let pushChannels: [PushChannel]
        let refreshesItself: Bool

        /// Nil when every field has its default (the box would hold nothing).
        static func make(
            instance: String?, regID: Int?, q: Double?, path: [String], pushChannels: [PushChannel], refreshesItself: Bool
        ) -> Extras? {
            guard instance != nil || regID != nil || q != nil || !path.isEmpty || !pushChannels.isEmpty || refreshesItself else { return nil }
            return Extras(instance: instance, regID: regID, q: q, path: path, pushChannels: pushChannels, refreshesItself: refreshesItself)
        }

        private init(instance: String?, regID: Int?, q: Double?, path: [String], pushChannels: [PushChannel], refreshesItself: Bool) {
            self.instance = instance
            self.regID = regID
            self.q = q
            self.path = path
            self.pushChannels = pushChannels
            self.refreshesItself = refreshesItself
        }

        static func == (lhs: Extras, rhs: Extras) -> Bool {
            lhs === rhs
                || (lhs.instance == rhs.instance && lhs.regID == rhs.regID && lhs.q == rhs.q && lhs.path == rhs.path
                    && lhs.pushChannels == rhs.pushChannels && lhs.refreshesItself == rhs.refreshesItself)
        }

        func hash(into hasher: inout Hasher) {
            hasher.combine(instance)
            hasher.combine(regID)
            hasher.combine(q)
            hasher.combine(path)
            hasher.combine(pushChannels)
            hasher.combine(refreshesItself)
        }
    }

    /// Replaces the box with one where `change` has been made.
    private mutating func changeExtras(
        _ change: (inout (instance: String?, regID: Int?, q: Double?, path: [String], pushChannels: [PushChannel], refreshesItself: Bool)) -> Void
    ) {
        var fields = (instance: instance, regID: regID, q: q, path: path, pushChannels: pushChannels, refreshesItself: refreshesItself)
        change(&fields)
        extras = Extras.make(
            instance: fields.instance, regID: fields.regID, q: fields.q, path: fields.path, pushChannels: fields.pushChannels,
            refreshesItself: fields.refreshesItself)
    }

    /// `+sip.instance` (RFC 5626 §4.1), the device's identity when present.
    public var instance: String? {
        get { extras?.instance }
        set { changeExtras { $0.instance = newValue } }
    }
    public var regID: Int? {
        get { extras?.regID }
        set { changeExtras { $0.regID = newValue } }
    }
    public var q: Double? {
        get { extras?.q }
        set { changeExtras { $0.q = newValue } }
    }
    /// Path header values (RFC 3327), in order.
    public var path: [String] {
        get { extras?.path ?? [] }
        set { changeExtras { $0.path = newValue } }
    }
    public var pushChannels: [PushChannel] {
        get { extras?.pushChannels ?? [] }
        set { changeExtras { $0.pushChannels = newValue } }
    }
    /// The UA offered `+sip.pnsreg` (RFC 8599 §5.5): it refreshes its binding on its own, so it
    /// gets no binding-refresh push. Kept in memory only; after a restart it reads false.
    public var refreshesItself: Bool {
        get { extras?.refreshesItself ?? false }
        set { changeExtras { $0.refreshesItself = newValue } }
    }

    public init(
        id: UUID = UUID(), aor: AddressOfRecord, contact: String, instance: String? = nil, regID: Int? = nil,
        q: Double? = nil, callID: String, cseq: UInt32, registeredAt: Date, expiresAt: Date, path: [String] = [],
        userAgent: String? = nil, flow: BindingFlow, pushChannels: [PushChannel] = [], refreshesItself: Bool = false
    ) {
        self.id = id
        self.aor = Binding.sharingDomain(aor)
        self.contact = contact
        self.callID = callID
        self.userAgent = userAgent.map(SharedText.shared)
        self.registeredAt = registeredAt
        self.expiresAt = expiresAt
        self.flow = flow
        self.cseq = cseq
        self.extras = Extras.make(
            instance: instance, regID: regID, q: q, path: path, pushChannels: pushChannels, refreshesItself: refreshesItself)
    }

    /// `aor` with its domain's text shared with the other bindings of the domain.
    private static func sharingDomain(_ aor: AddressOfRecord) -> AddressOfRecord {
        let domain = SharedText.shared(aor.domain)
        return domain.utf8.count > 15 ? AddressOfRecord(number: aor.number, domain: domain) : aor
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
