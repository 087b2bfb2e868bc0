public import Foundation
public import RouseVocabulary
public import SIPMessage

/// What the registrar decided about one REGISTER.
public enum RegisterDecision: Sendable {
    /// Answer at once: a challenge, an error, or a query that changes nothing.
    case respond(SIPResponse)
    /// Make `changes` durable, then answer `response` (or 503 if the write fails, putting back
    /// `previous`); announce `events` once durable.
    /// `previous` holds each extension changed once (a list, not a dictionary: nearly always one).
    case commit(changes: [BindingChange], events: [BindingEvent], response: SIPResponse, previous: [(aor: AddressOfRecord, bindings: [Binding])])
}

/// The registrar's logic (RFC 3261 §10.3, RFC 5626, RFC 8599, RFC 3327) over an in-memory index of
/// bindings. A value with `mutating` methods that return decisions: it does no I/O, takes the time
/// as an argument, and is tested on literal REGISTER texts. Not thread-safe: one owner.
public struct RegistrarCore: Sendable {
    public var policy: RegistrationPolicy
    public var directory: DirectorySnapshot
    /// Push providers some push app serves: RFC 8599 §5.2 answers 555 for the others.
    public var supportedPushProviders: Set<PushProviderFamily>
    /// Rouse's VAPID public key (base64url) when web push is set up: `webpush` then needs no push
    /// app, and a 2xx to a REGISTER naming it carries the key as `+sip.vapid` (RFC 8599 §4.1.2, §5.3).
    public var vapidPublicKey: String?
    public let authenticator: DigestAuthenticator
    public var serverName: String
    /// Counts rejected credentials per source IP and refuses blocked sources before any digest
    /// work (503 with Retry-After: decisions.md, SIP's 429 means something else). Nil: no throttling.
    public var authFailureThrottle: AuthFailureThrottle?
    /// Wake credentials (`wake_credentials`): a woken app's first REGISTER may present the one its
    /// ring push carried instead of answering a challenge. Nil: the header is ignored.
    public var wakeCredentials: WakeCredentialGate?
    /// The reason phrase of the 503 a blocked source gets, which tells it apart from the 503 of a
    /// failed write in `SIPService`'s `rouse_register_total` (both carry a Retry-After).
    public static let throttledReasonPhrase = "Service Unavailable (too many failed attempts)"

    /// Live bindings by extension.
    public private(set) var bindings: [AddressOfRecord: [Binding]] = [:]
    /// Which bindings hold each push token (decisions.md: a token lives on one device of one
    /// extension; the flows of one RFC 5626 instance share it).
    private var tokenOwners: [PushTokenID: TokenOwners] = [:]
    private var bindingAOR: [UUID: AddressOfRecord] = [:]
    /// Every binding by expiry: `expire` takes what is due from it.
    private var expiryQueue = ExpiryQueue()
    /// The bindings a refresh push may be due for (push channels, no `+sip.pnsreg`), by expiry.
    private var refreshQueue = ExpiryQueue()
    /// The last Date header made and the second it is for (one a second, not one per 200).
    private var dateCache: (second: TimeInterval, text: String)?

    public init(
        policy: RegistrationPolicy, directory: DirectorySnapshot, supportedPushProviders: Set<PushProviderFamily>,
        authenticator: DigestAuthenticator, serverName: String
    ) {
        self.policy = policy
        self.directory = directory
        self.supportedPushProviders = supportedPushProviders
        self.authenticator = authenticator
        self.serverName = serverName
    }

    // MARK: The index

    /// Replaces the index with `loaded` (at start, from the location store).
    public mutating func load(_ loaded: [Binding]) {
        bindings = [:]
        tokenOwners = [:]
        bindingAOR = [:]
        expiryQueue = ExpiryQueue()
        refreshQueue = ExpiryQueue()
        for binding in loaded { insert(binding) }
    }

    /// Replaces one extension's bindings (another instance changed them, or a write failed).
    public mutating func replace(_ aor: AddressOfRecord, with replacement: [Binding]) {
        for binding in bindings[aor] ?? [] { removeFromIndex(binding) }
        // A stored list of distinct bindings of `aor` is kept as it is: no list built again binding
        // by binding (a million at start-up, each a heap block left behind).
        guard !replacement.isEmpty, replacement.allSatisfy({ $0.aor == aor }),
            replacement.count == 1 || Set(replacement.map(\.id)).count == replacement.count
        else {
            for binding in replacement { insert(binding) }
            return
        }
        bindings[aor] = replacement
        for position in replacement.indices { addToIndexes(replacement[position]) }
    }

    /// Room for `count` bindings in the indexes, made once before a load of that many.
    public mutating func reserveCapacity(_ count: Int) {
        bindings.reserveCapacity(count)
        bindingAOR.reserveCapacity(count)
    }

    /// Every live binding of an extension, highest q first.
    public func bindings(for aor: AddressOfRecord) -> [Binding] {
        (bindings[aor] ?? []).sorted { ($0.q ?? 1) > ($1.q ?? 1) }
    }

    public var bindingCount: Int { bindingAOR.count }

    private mutating func insert(_ binding: Binding) {
        bindings[binding.aor, default: []].removeAll { $0.id == binding.id }
        bindings[binding.aor, default: []].append(binding)
        addToIndexes(binding)
    }

    /// Indexes a binding already in its extension's list: by id, by push token, and by expiry.
    private mutating func addToIndexes(_ binding: Binding) {
        bindingAOR[binding.id] = binding.aor
        for channel in binding.pushChannels {
            tokenOwners[channel.tokenID, default: TokenOwners()].insert(binding.id)
        }
        enqueue(binding)
    }

    /// `removeFromIndex(old)` then `insert(new)` for a binding registered again (same id, same
    /// extension): without push channels it takes the same place at the end of its extension's list
    /// without the list and the id map being taken apart and built again.
    private mutating func reinsert(_ old: Binding, as new: Binding) {
        guard old.id == new.id, old.aor == new.aor, old.pushChannels.isEmpty, new.pushChannels.isEmpty else {
            removeFromIndex(old)
            insert(new)
            return
        }
        if !RegistrarCore.putLast(new, in: &bindings[new.aor, default: []]) { bindingAOR[new.id] = new.aor }
        enqueue(new)
    }

    /// Puts `binding` at the end of `list` in place of the entry with its id; says whether there was one.
    private static func putLast(_ binding: Binding, in list: inout [Binding]) -> Bool {
        guard let index = list.firstIndex(where: { $0.id == binding.id }) else {
            list.append(binding)
            return false
        }
        if index == list.count - 1 {
            list[index] = binding
        } else {
            list.remove(at: index)
            list.append(binding)
        }
        return true
    }

    /// Queues a binding just put in the index for its expiry (and refresh push).
    private mutating func enqueue(_ binding: Binding) {
        expiryQueue.insert(binding.id, due: binding.expiresAt)
        if RegistrarCore.wantsRefreshPush(binding) { refreshQueue.insert(binding.id, due: binding.expiresAt) }
        if expiryQueue.needsCompaction(live: bindingAOR.count) || refreshQueue.needsCompaction(live: bindingAOR.count) {
            compactQueues()
        }
    }

    /// Drops the queues' entries of earlier registrations (amortised O(1) per insert).
    private mutating func compactQueues() {
        var expiry = expiryQueue
        var refresh = refreshQueue
        expiryQueue = ExpiryQueue()
        refreshQueue = ExpiryQueue()
        if expiry.needsCompaction(live: bindingAOR.count) {
            expiry.compact { id, due in binding(withID: id)?.expiresAt == due }
        }
        if refresh.needsCompaction(live: bindingAOR.count) {
            refresh.compact { id, due in binding(withID: id).map { $0.expiresAt == due && RegistrarCore.wantsRefreshPush($0) } ?? false }
        }
        expiryQueue = expiry
        refreshQueue = refresh
    }

    /// A binding the UA does not refresh by itself and that has a channel to push: RFC 8599 §5.5.
    private static func wantsRefreshPush(_ binding: Binding) -> Bool {
        !binding.pushChannels.isEmpty && !binding.refreshesItself
    }

    private mutating func removeFromIndex(_ binding: Binding) {
        bindings[binding.aor]?.removeAll { $0.id == binding.id }
        if bindings[binding.aor]?.isEmpty == true { bindings[binding.aor] = nil }
        bindingAOR[binding.id] = nil
        for channel in binding.pushChannels {
            let key = channel.tokenID
            tokenOwners[key]?.remove(binding.id)
            if tokenOwners[key]?.isEmpty == true { tokenOwners[key] = nil }
        }
    }

    /// The live binding with this id, whichever extension holds it.
    public func binding(withID id: UUID) -> Binding? {
        guard let aor = bindingAOR[id] else { return nil }
        return bindings[aor]?.first { $0.id == id }
    }

    /// Removes every binding expired at `now`; returns what to make durable and announce. Takes
    /// only what is due from the expiry queue: O(expired · log n).
    public mutating func expire(now: Date) -> (changes: [BindingChange], events: [BindingEvent]) {
        var changes: [BindingChange] = []
        var events: [BindingEvent] = []
        for entry in expiryQueue.popDue(through: now) {
            // An entry left by an earlier registration of a binding since refreshed or removed.
            guard let binding = binding(withID: entry.id), binding.expiresAt == entry.due else { continue }
            removeFromIndex(binding)
            changes.append(.delete(binding, .expired))
            events.append(BindingEvent(kind: .expired, binding: binding))
        }
        return (changes, events)
    }

    /// The live push bindings expiring by `deadline` that need a refresh push (RFC 8599 §5.5),
    /// each registration handed out once: what is handed out leaves the refresh queue, and a
    /// binding comes back only when it is registered again. O(due · log n).
    public mutating func takeRefreshCandidates(expiringBy deadline: Date) -> [Binding] {
        refreshQueue.popDue(through: deadline).compactMap { entry in
            guard let binding = binding(withID: entry.id), binding.expiresAt == entry.due, RegistrarCore.wantsRefreshPush(binding)
            else { return nil }
            return binding
        }
    }

    // MARK: REGISTER

    /// Decides a REGISTER that arrived over `flow` at `now`.
    public mutating func register(_ request: SIPRequest, flow: BindingFlow, now: Date) -> RegisterDecision {
        register(request, to: request.to, flow: flow, now: now)
    }

    /// Decides a REGISTER whose To the caller has parsed already (`request.to`: the shard it was
    /// routed to read it), so it is not parsed twice.
    mutating func register(_ request: SIPRequest, to: SIPNameAddress?, flow: BindingFlow, now: Date) -> RegisterDecision {
        let sourceAddress = flow.source?.ip ?? ""
        if let throttle = authFailureThrottle, let left = throttle.isBlocked(sourceAddress, now: now) {
            var response = reply(request, 503, RegistrarCore.throttledReasonPhrase)
            response.headers.add(.retryAfter, String(max(1, Int(left.rounded(.up)))))
            return .respond(response)
        }
        guard let to, to.uri.scheme != .tel, let number = to.uri.user else {
            return .respond(reply(request, 404, "Not Found"))
        }
        let domain = RegistrarCore.lowercased(to.uri.host)
        guard directory.domains.contains(domain) else {
            return .respond(reply(request, 404, "Domain Not Served Here"))
        }
        let target = AddressOfRecord(number: PushParameters.unescape(number), domain: domain)

        // RFC 3261 §22: challenge, then check the answer.
        var credentials: DigestCredentials?
        for line in request.headers.lines(.authorization) {
            if let parsed = DigestCredentials(header: line), parsed.realmLowercasedEquals(domain) {
                credentials = parsed
                break
            }
        }
        // A woken app's wake credential stands in for digest, for its device's binding alone; a
        // wrong, used or expired one is no answer at all (docs/app-builders.md "Wake in one round trip").
        let woken = credentials == nil ? wakeCredentials?.spend(request, for: target, now: now) : nil
        if woken == nil {
            guard let credentials else { return .respond(challenge(request, realm: domain, stale: false, now: now)) }
            // The extensions alone are captured (a closure reading `self` may copy the whole core).
            let extensions = directory.extensions
            switch authenticator.verify(credentials, method: request.method.rawValue, realm: domain, now: now, lookup: { extensions[$0] }) {
            case .rejected:
                authFailureThrottle?.recordFailure(sourceAddress, now: now)  // only a present, wrong answer counts
                return .respond(challenge(request, realm: domain, stale: false, now: now))
            case .stale:
                return .respond(challenge(request, realm: domain, stale: true, now: now))
            case .authenticated(let authenticated):
                guard authenticated == target else {
                    return .respond(reply(request, 403, "Forbidden"))  // an extension registers only its own AOR
                }
            }
        } else if !request.headers.contains(.contact) || request.contacts?.contains(.wildcard) != false {
            return .respond(challenge(request, realm: domain, stale: false, now: now))  // a credential registers, never lists or removes
        }

        // Read once: each read of the request's Call-ID scans its headers, each CSeq parses.
        let callID = request.callID
        let cseqNumber = request.cseq?.number
        let toTag = RegistrarCore.tag(callID: callID, cseq: cseqNumber ?? 0)
        guard request.headers.contains(.contact) else {
            return .respond(
                okResponse(request, toTag: toTag, listing: bindings[target] ?? [], now: now, pushProviders: [], wantsRefresh: false, outbound: nil))
        }
        guard let contacts = request.contacts else { return .respond(reply(request, 400, "Invalid Contact header")) }
        let headerExpires = request.expires
        // The extension's bindings before this REGISTER: looked up once, then handed on.
        let before = bindings[target] ?? []
        let previous = [(aor: target, bindings: before)]

        if contacts.contains(.wildcard) {
            // RFC 3261 §10.3 step 6: `*` only alone and with Expires: 0.
            guard contacts.count == 1, headerExpires == 0 else {
                return .respond(reply(request, 400, "Invalid wildcard Contact"))
            }
            if before.contains(where: { $0.callID == callID && $0.cseq >= (cseqNumber ?? 0) }) {
                return .respond(reply(request, 400, "Invalid CSeq number"))
            }
            var changes: [BindingChange] = []
            var events: [BindingEvent] = []
            for binding in before {
                removeFromIndex(binding)
                changes.append(.delete(binding, .removed))
                events.append(BindingEvent(kind: .removed, binding: binding))
            }
            let response = okResponse(
                request, toTag: toTag, listing: bindings[target] ?? [], now: now, pushProviders: [], wantsRefresh: false, outbound: nil)
            return changes.isEmpty ? .respond(response) : .commit(changes: changes, events: events, response: response, previous: previous)
        }

        // Check every contact before changing anything, so a request is applied whole or not at all.
        struct Planned {
            let address: SIPNameAddress
            /// The URI as text (`SIPURI.description`): what is stored and what a refresh is matched by.
            let contact: String
            /// The binding it refers to, as found before anything changed.
            let existing: Binding?
            /// `+sip.pnsreg` offered (RFC 8599 §5.5).
            let refreshesItself: Bool
            let expires: Int
            let push: PushParameters?
            /// The reg-id of an RFC 5626 flow; nil when outbound does not apply to the Contact.
            let regID: Int?
        }
        // Read only when a Contact names a flow: most REGISTERs do not.
        lazy var outbound = OutboundRequest(request)
        var planned: [Planned] = []
        var pushProviders: [PushProvider] = []
        var wantsRefresh = false
        for contact in contacts {
            guard case .address(let address) = contact else { continue }
            if address.parameters.contains("expires"), address.expires == nil || address.expires! < 0 {
                return .respond(reply(request, 400, "Invalid Contact expires"))
            }
            let push: PushParameters?
            do {
                push = try PushParameters.parse(address)
            } catch {
                if case .unknownProvider = error { return .respond(reply(request, 555, nil)) }
                return .respond(reply(request, 400, error.description))
            }
            if let push {
                guard supports(push.provider.family) else {
                    return .respond(reply(request, 555, nil))  // RFC 8599 §5.2
                }
                pushProviders.append(push.provider)
            }
            let refreshesItself = address.parameters.contains("+sip.pnsreg") || address.uri.parameters.contains("+sip.pnsreg")
            if push != nil, refreshesItself { wantsRefresh = true }
            let hasChannels = !(push?.channels.isEmpty ?? true)
            var expires = address.expires ?? headerExpires ?? policy.defaultExpires
            if expires > 0 {
                let minimum = hasChannels ? max(policy.minExpires, policy.pushMinExpires) : policy.minExpires
                if expires < minimum {
                    var response = reply(request, 423, nil)
                    response.headers.add(.minExpires, String(minimum))
                    return .respond(response)
                }
                expires = min(expires, hasChannels ? policy.pushMaxExpires : policy.maxExpires)
            }
            // RFC 5626 §6: a Contact with +sip.instance and reg-id, in a REGISTER that supports
            // outbound, is a flow of its own; without outbound support its reg-id is ignored.
            var regID: Int?
            if address.instance != nil, address.parameters.contains("reg-id"), outbound.isSupported {
                guard let value = address.regID, (1...Int(Int32.max)).contains(value) else {
                    return .respond(reply(request, 400, "Invalid reg-id"))
                }
                guard outbound.edgeSupportsOutbound else { return .respond(reply(request, 439, nil)) }
                regID = value
            }
            let text = address.uri.description
            let existing = match(address, text: text, regID: regID, among: before)  // nothing has changed yet
            if let existing, existing.callID == callID, let cseq = cseqNumber, cseq <= existing.cseq {
                return .respond(reply(request, 400, "Invalid CSeq number"))
            }
            planned.append(
                Planned(
                    address: address, contact: text, existing: existing, refreshesItself: refreshesItself, expires: expires, push: push,
                    regID: regID))
        }
        // RFC 5626 §6: a REGISTER that registers a flow (reg-id) registers only that Contact.
        if planned.contains(where: { $0.regID != nil && $0.expires > 0 }), planned.count(where: { $0.expires > 0 }) > 1 {
            return .respond(reply(request, 400, "Only one Contact may register a flow (reg-id)"))
        }
        // More contacts in one REGISTER than an extension may hold: the cap below can only make room
        // among older bindings, so such a request is refused whole (and its 200 would be too long).
        if planned.count(where: { $0.expires > 0 }) > policy.maxBindingsPerExtension {
            return .respond(reply(request, 403, "Too Many Contacts"))
        }

        var changes: [BindingChange] = []
        var events: [BindingEvent] = []
        var touched: [UUID] = []
        var previousAll = previous
        let path = request.headers.values(.path)
        let userAgent = request.headers[.userAgent]
        for (offset, item) in planned.enumerated() {
            // Nothing has changed before the first: what the checks found still holds.
            let existing = offset == 0 ? item.existing : match(item.address, text: item.contact, regID: item.regID, among: bindings[target] ?? [])
            if item.expires == 0 {
                if let existing {
                    removeFromIndex(existing)
                    changes.append(.delete(existing, .removed))
                    events.append(BindingEvent(kind: .removed, binding: existing))
                }
                continue
            }
            let channels = item.push?.channels ?? []
            // Tokens live on one device: a token held elsewhere moves here (decisions.md). The
            // other flows of the same instance (RFC 5626 reg-ids) are that device and keep it.
            for channel in channels {
                let key = channel.tokenID
                for ownerID in tokenOwners[key]?.ids ?? [] where ownerID != existing?.id {
                    guard var owner = binding(withID: ownerID) else { continue }
                    if owner.aor == target, let instance = item.address.instance, owner.instance == instance { continue }
                    if !previousAll.contains(where: { $0.aor == owner.aor }) { previousAll.append((owner.aor, bindings[owner.aor] ?? [])) }
                    removeFromIndex(owner)
                    if owner.aor == target {
                        // A reinstall: the same token on a new binding replaces the older one.
                        changes.append(.delete(owner, .removed))
                        events.append(BindingEvent(kind: .removed, binding: owner))
                    } else {
                        owner.pushChannels.removeAll { $0.family == channel.family && $0.token == channel.token }
                        insert(owner)
                        changes.append(.save(owner))
                        events.append(BindingEvent(kind: .refreshed, binding: owner))
                    }
                }
            }
            let expiresAt = now.addingTimeInterval(TimeInterval(item.expires))
            let binding: Binding
            // Registered again with nothing but its CSeq and times moved, and no push channels
            // (their rows and dead marks would need writing): the store writes those alone.
            let onlyTimesMove: Bool
            if var moved = existing, channels.isEmpty, moved.pushChannels.isEmpty, moved.contact == item.contact,
                moved.callID == (callID ?? ""), moved.flow == flow, moved.instance == item.address.instance, moved.regID == item.regID,
                moved.q == item.address.q, moved.path == path, moved.userAgent == userAgent, moved.refreshesItself == item.refreshesItself,
                moved.aor == target
            {
                moved.cseq = cseqNumber ?? 0
                moved.registeredAt = now
                moved.expiresAt = expiresAt
                binding = moved
                onlyTimesMove = true
            } else {
                binding = Binding(
                    id: existing?.id ?? UUID(), aor: target, contact: item.contact,
                    instance: item.address.instance, regID: item.regID, q: item.address.q,
                    callID: callID ?? "", cseq: cseqNumber ?? 0, registeredAt: now,
                    expiresAt: expiresAt, path: path, userAgent: userAgent,
                    flow: flow, pushChannels: channels, refreshesItself: item.refreshesItself)
                onlyTimesMove = false
            }
            if let existing { reinsert(existing, as: binding) } else { insert(binding) }
            touched.append(binding.id)
            changes.append(onlyTimesMove ? .refresh(binding) : .save(binding))
            events.append(BindingEvent(kind: existing == nil ? .added : .refreshed, binding: binding))
        }

        // The cap: the oldest binding without an instance id makes room (decisions.md).
        var current = bindings[target] ?? []
        while current.count > policy.maxBindingsPerExtension {
            let candidates = current.filter { !touched.contains($0.id) }
            let pool = candidates.filter { $0.instance == nil }.isEmpty ? candidates : candidates.filter { $0.instance == nil }
            guard let oldest = pool.min(by: { $0.registeredAt < $1.registeredAt }) else { break }
            removeFromIndex(oldest)
            changes.append(.delete(oldest, .removed))
            events.append(BindingEvent(kind: .removed, binding: oldest))
            current = bindings[target] ?? []
        }

        if let woken, !woken.admits(changes, before: before) {
            // Beyond the device the credential names: undone, and the ordinary challenge.
            for (aor, list) in previousAll { replace(aor, with: list) }
            return .respond(challenge(request, realm: domain, stale: false, now: now))
        }

        let flowUse = planned.contains { $0.regID != nil } ? OutboundAnswer(isEdge: outbound.isFirstHop, transport: flow.transport) : nil
        let response = okResponse(
            request, toTag: toTag, listing: current, now: now, pushProviders: pushProviders, wantsRefresh: wantsRefresh, outbound: flowUse)
        if changes.isEmpty { return .respond(response) }
        return .commit(changes: changes, events: events, response: response, previous: previousAll)
    }

    /// The existing binding a Contact refers to: same `+sip.instance` and reg-id (RFC 5626 §6: one
    /// binding per flow of an instance, whatever the Call-ID or source port; `regID` nil when
    /// outbound does not apply, one binding per instance), else the same URI (RFC 3261 §19.1.4).
    /// `text` is `address.uri.description`; `list` the extension's bindings.
    func match(_ address: SIPNameAddress, text: String, regID: Int?, among list: [Binding]) -> Binding? {
        if let instance = address.instance {
            return list.first { $0.instance == instance && $0.regID == regID }
        }
        // A refresh sends the Contact it sent before: the same text is the same URI, with no parse.
        if let same = list.first(where: { $0.instance == nil && $0.contact == text }) { return same }
        let others = list.filter { $0.instance == nil }
        guard !others.isEmpty else { return nil }
        let key = RegistrarCore.comparisonKey(address.uri)
        return others.first { (try? SIPURI(parsing: $0.contact)).map(RegistrarCore.comparisonKey) == key }
    }

    /// The parts of a URI that RFC 3261 §19.1.4 compares: scheme, user, host (case-insensitive),
    /// port and the transport, user, method, ttl and maddr parameters.
    static func comparisonKey(_ uri: SIPURI) -> String {
        var key = "\(uri.scheme.rawValue):\(uri.user ?? "")@\(uri.host.lowercased()):\(uri.port.map(String.init) ?? "")"
        for name in ["transport", "user", "method", "ttl", "maddr"] {
            if let value = uri.parameters.value(name) { key += ";\(name)=\(value.lowercased())" }
        }
        return key
    }

    // MARK: Responses

    /// `toTag`: `tag(for: request)` when the caller has it already.
    func reply(_ request: SIPRequest, _ status: Int, _ reason: String?, toTag: String? = nil) -> SIPResponse {
        var response = SIPResponse(
            replyingTo: request, statusCode: status, reasonPhrase: reason, toTag: toTag ?? RegistrarCore.tag(for: request))
        response.headers.add(SIPHeader(.server, serverName, spelled: Spelling.server))
        return response
    }

    /// The 401 for a missing, wrong or stale answer. Wrong password and unknown extension go through
    /// the same path, so the two answers differ only in the nonce and what is echoed (decisions.md).
    func challenge(_ request: SIPRequest, realm: String, stale: Bool, now: Date) -> SIPResponse {
        var response = reply(request, 401, "Unauthorized")
        for value in authenticator.challenges(realm: realm, stale: stale, now: now) {
            response.headers.add(.wwwAuthenticate, value)
        }
        return response
    }

    /// 200 listing every current binding with its remaining lifetime (RFC 3261 §10.3 step 8), the
    /// Path received (RFC 3327 §5.3), Feature-Caps for push (RFC 8599 §5.3), and for a flow
    /// `Require: outbound` with, when Rouse is the edge proxy of a TCP/TLS flow, `Flow-Timer`
    /// (RFC 5626 §6, §5.4). `list`: the extension's bindings as they now are.
    mutating func okResponse(
        _ request: SIPRequest, toTag: String, listing list: [Binding], now: Date, pushProviders: [PushProvider], wantsRefresh: Bool,
        outbound: OutboundAnswer?
    ) -> SIPResponse {
        var response = reply(request, 200, "OK", toTag: toTag)
        if let outbound {
            response.headers.add(.require, "outbound")
            // UDP flows get none: without one a phone keeps a UDP flow alive every 24–29 s (RFC
            // 5626 §4.4.1), what NATs need; a longer Flow-Timer would let them forget the phone.
            if outbound.isEdge, outbound.transport != .udp, policy.flowTimer > 0 {
                response.headers.add(RegistrarCore.flowTimer, String(policy.flowTimer))
            }
        }
        // One binding (the usual case) needs no sorting: highest q first otherwise. Read in place
        // by index (a `for … in` copied each binding out of the list).
        let ordered = list.count <= 1 ? list : list.sorted(by: { ($0.q ?? 1) > ($1.q ?? 1) })
        for index in ordered.indices {
            response.headers.add(SIPHeader(.contact, RegistrarCore.contactValue(ordered[index], now: now), spelled: Spelling.contact))
        }
        for value in request.headers.lines(.path) { response.headers.add(.path, value) }
        var announced: Set<PushProviderFamily> = []
        for provider in pushProviders where supports(provider.family) && !announced.contains(provider.family) {
            announced.insert(provider.family)
            var value = "*;+sip.pns=\"\(provider.family.rawValue)\""
            if provider.family == .webpush, let vapidPublicKey { value += ";+sip.vapid=\"\(vapidPublicKey)\"" }
            if wantsRefresh { value += ";+sip.pnsreg=\"\(policy.bindingRefreshSeconds)\"" }
            response.headers.add(.featureCaps, value)
        }
        response.headers.add(SIPHeader(RegistrarCore.date, dateText(now), spelled: Spelling.date))
        return response
    }

    /// A binding as a 200 lists it (RFC 3261 §10.3 step 8): `<uri>;expires=N`, then q,
    /// `+sip.instance` and reg-id when it has them. `contact` is the URI as `SIPURI.description`
    /// wrote it when the binding was made. `<uri>;expires=N` is written as bytes straight into the
    /// String's storage (one allocation); the parameters only some bindings have are appended.
    static func contactValue(_ binding: Binding, now: Date) -> String {
        var contact = binding.contact
        let seconds = binding.remainingSeconds(at: now)  // never negative
        let extra = binding.instance.map { $0.utf8.count + 40 } ?? 0
        var value = contact.withUTF8 { uri in
            String(unsafeUninitializedCapacity: uri.count + 32 + extra) { out in
                var at = 0
                func put(_ byte: UInt8) {
                    out[at] = byte
                    at += 1
                }
                put(UInt8(ascii: "<"))
                if let base = uri.baseAddress, let start = out.baseAddress {
                    UnsafeMutableRawPointer(start + at).copyMemory(from: base, byteCount: uri.count)
                    at += uri.count
                }
                for byte in ">;expires=".utf8 { put(byte) }
                var divisor = 1
                while divisor <= seconds / 10 { divisor *= 10 }
                while divisor > 0 {
                    put(UInt8(ascii: "0") + UInt8(truncatingIfNeeded: seconds / divisor % 10))
                    divisor /= 10
                }
                return at
            }
        }
        if let q = binding.q {
            value.append(";q=")
            value.append(String(q))
        }
        if let instance = binding.instance {
            value.append(";+sip.instance=")
            value.append(SIPHeaderValueScanner.quote(instance))
        }
        if let regID = binding.regID {
            value.append(";reg-id=")
            value.append(String(regID))
        }
        return value
    }

    /// The Date header's value at `now`: made once a second (`httpDate`), then reused.
    private mutating func dateText(_ now: Date) -> String {
        let second = now.timeIntervalSince1970.rounded(.down)
        if let cached = dateCache, cached.second == second { return cached.text }
        let text = RegistrarCore.httpDate(now)
        dateCache = (second, text)
        return text
    }

    /// Whether Rouse can wake a device through `family`: a push app serves it, or (web push) the
    /// VAPID key is loaded.
    func supports(_ family: PushProviderFamily) -> Bool {
        supportedPushProviders.contains(family) || (family == .webpush && vapidPublicKey != nil)
    }

    /// A To tag that depends only on the request's Call-ID and CSeq (FNV-1a), so every instance
    /// and every restart answers a retransmission with the same tag.
    static func tag(for request: SIPRequest) -> String {
        tag(callID: request.callID, cseq: request.cseq?.number ?? 0)
    }

    /// `tag(for:)` of a request with this Call-ID and CSeq number: the hash of `"<call-id> <cseq>"`,
    /// its bytes fed one by one (no text is built; the Call-ID's read from its storage).
    static func tag(callID: String?, cseq: UInt32) -> String {
        var text = callID ?? ""
        var hash: UInt64 = text.withUTF8 { bytes in
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
            return hash
        }
        hash = (hash ^ UInt64(UInt8(ascii: " "))) &* 0x0000_0100_0000_01b3
        var divisor: UInt32 = 1
        while cseq / divisor >= 10 { divisor *= 10 }
        while divisor > 0 {
            hash = (hash ^ UInt64(UInt8(ascii: "0") + UInt8(cseq / divisor % 10))) &* 0x0000_0100_0000_01b3
            divisor /= 10
        }
        return String(hash, radix: 36)
    }

    /// `text.lowercased()`, without a new String when the text is ASCII with no capitals (a host
    /// as phones send it).
    static func lowercased(_ text: String) -> String {
        AddressOfRecord.isLowercaseASCII(text) ? text : text.lowercased()
    }

    /// An RFC 1123 date for the Date header (RFC 3261 §20.17), built by hand: a DateFormatter per
    /// response cost a third of the registrar's time.
    static func httpDate(_ date: Date) -> String {
        let seconds = Int64(date.timeIntervalSince1970.rounded(.down))
        var days = seconds / 86_400
        var remainder = seconds % 86_400
        if remainder < 0 {
            remainder += 86_400
            days -= 1
        }
        let weekday = Int((days % 7 + 11) % 7)  // 1970-01-01 was a Thursday
        // Civil date from days since the epoch (Howard Hinnant's algorithm).
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        let names = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(names[weekday]), \(two(day)) \(months[Int(month) - 1]) \(year) "
            + "\(two(remainder / 3600)):\(two(remainder % 3600 / 60)):\(two(remainder % 60)) GMT"
    }
}

extension RegistrarCore {
    /// `Flow-Timer` (RFC 5626 §5.4): how often, in seconds, the edge proxy wants a flow kept alive.
    static let flowTimer = SIPHeaderName("Flow-Timer")
    static let date = SIPHeaderName("Date")

    /// The names of the lines every answer carries as SIP writes them, looked up once.
    enum Spelling {
        static let server = SIPHeader(.server, "").name
        static let contact = SIPHeader(.contact, "").name
        static let date = SIPHeader(RegistrarCore.date, "").name
    }
}

/// The bindings holding one push token: nearly always one, kept inline (a Set per token would
/// cost each push binding a hundred bytes more). A value.
struct TokenOwners: Sendable {
    /// The first owner, inline; any others (the flows of one RFC 5626 instance) after it.
    private var first: UUID?
    private var others: [UUID] = []

    /// In the order they took the token.
    var ids: [UUID] { (first.map { [$0] } ?? []) + others }

    var isEmpty: Bool { first == nil && others.isEmpty }

    mutating func insert(_ id: UUID) {
        guard first != id, !others.contains(id) else { return }
        if first == nil { first = id } else { others.append(id) }
    }

    mutating func remove(_ id: UUID) {
        if first == id {
            first = others.isEmpty ? nil : others.removeFirst()
        } else {
            others.removeAll { $0 == id }
        }
    }
}

/// What a REGISTER says about RFC 5626 outbound as a whole (§6): whether the UA supports it, and
/// whether the hop before Rouse does. Pure; a value.
struct OutboundRequest {
    /// `outbound` in Supported or Require: the UA does outbound.
    let isSupported: Bool
    /// One Via: the UA sent the REGISTER to Rouse directly, so Rouse is its edge proxy.
    let isFirstHop: Bool
    /// Rouse is the first hop, or the edge proxy before it marked its Path with `ob` (§5.1): the
    /// flow can be used. Otherwise a reg-id gets 439 First Hop Lacks Outbound Support.
    let edgeSupportsOutbound: Bool

    init(_ request: SIPRequest) {
        let optionTags = (request.headers.values(.supported) + request.headers.values(.require)).map { $0.trimmingSIPWhitespace.lowercased() }
        isSupported = optionTags.contains("outbound")
        isFirstHop = request.headers.values(.via).count <= 1
        let firstPath = request.headers.values(.path).first.flatMap { try? SIPNameAddress(parsing: $0) }
        edgeSupportsOutbound = isFirstHop || firstPath?.uri.parameters.contains("ob") == true
    }
}

/// How a 2xx answers a REGISTER that registered a flow (RFC 5626 §6).
struct OutboundAnswer {
    /// Rouse is the UA's edge proxy (the first hop), which is who sends Flow-Timer.
    let isEdge: Bool
    let transport: SIPTransportKind
}
