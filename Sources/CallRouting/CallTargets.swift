public import Foundation
public import Registrar
public import RouseVocabulary

/// A push token an app posted for its extension over HTTP (product.md "By posting its token"), as
/// a call sees it: one more way to wake a device of the callee.
public struct PostedToken: Sendable, Hashable {
    public var channel: PushChannel
    /// The app's optional device id, which pairs an iPhone's VoIP and regular tokens.
    public var deviceID: String?

    public init(channel: PushChannel, deviceID: String? = nil) {
        self.channel = channel
        self.deviceID = deviceID
    }
}

/// How a binding can be reached now, from the SIP side's point of view.
public enum BindingReach: Sendable, Hashable {
    /// Over an open TCP/TLS connection (or through the instance that holds it): the device is awake.
    case connected
    /// Over UDP: reachable if the app still listens, which a sleeping app does not.
    case datagram
    /// Its connection is gone: only a fresh REGISTER makes it reachable.
    case gone
}

/// One device of the callee that can be woken: pushed once per call, whatever number of bindings
/// or posted tokens name it (product.md "One call, one ring push per device").
public struct WakeDevice: Sendable, Hashable {
    /// The ring channel's token: the device's identity for this call.
    public var id: PushTokenID
    /// The channel the ring push goes to (an APNs VoIP token, an FCM token).
    public var ringChannel: PushChannel
    /// Where a cancel push can go: the FCM token itself, or an iPhone's regular (non-VoIP) token.
    /// Nil for an iPhone known only by its VoIP token (product.md: never a second VoIP push).
    public var cancelChannel: PushChannel?
    /// `+sip.instance` of its bindings, when they carry one.
    public var instance: String?
    /// Every token the device is known by (matching a fresh REGISTER).
    public var tokens: Set<PushTokenID>
    /// Its bindings when the call arrived.
    public var bindingIDs: [UUID]
    /// Known only through a posted token: any new binding of the extension is taken as its return.
    public var isPostedOnly: Bool
    /// As people know it: the user agent, or the platform.
    public var name: String

    public init(
        id: PushTokenID, ringChannel: PushChannel, cancelChannel: PushChannel?, instance: String?, tokens: Set<PushTokenID>,
        bindingIDs: [UUID], isPostedOnly: Bool, name: String
    ) {
        self.id = id
        self.ringChannel = ringChannel
        self.cancelChannel = cancelChannel
        self.instance = instance
        self.tokens = tokens
        self.bindingIDs = bindingIDs
        self.isPostedOnly = isPostedOnly
        self.name = name
    }

    /// Whether `binding` is this device back (protocol.md "Matching the woken device"):
    /// `+sip.instance` first, then a push token, and for a device known only by a posted token,
    /// any binding.
    public func matches(_ binding: Binding) -> Bool {
        if let instance, let other = binding.instance { return instance == other }
        if binding.pushChannels.contains(where: { tokens.contains($0.tokenID) }) { return true }
        return isPostedOnly
    }
}

/// Who a call goes to, worked out from the callee's bindings and posted tokens when the INVITE
/// arrives (product.md "What happens on a call", decisions.md "The call"). Pure; a value.
public struct CallTargets: Sendable {
    /// Devices to push, once each.
    public var devices: [WakeDevice]
    /// Push bindings whose connection is still open: they are awake, so they ring at once (and
    /// are pushed as well).
    public var awake: [Binding]
    /// Reachable bindings that need no push (desk phones, and push bindings whose every token is
    /// dead): they ring when the wait ends, or at once when there is nothing to wake.
    public var deskPhones: [Binding]
    /// UDP push bindings: forked to at the end of the wait, or on their fresh REGISTER if earlier.
    public var atWaitEnd: [Binding]
    /// A reachable binding that needs no push is registered (the 3 s wait applies).
    public var hasDeskPhone: Bool
    /// Devices left out because their ring token is stale (`DeviceStaleness`): not pushed until
    /// they show life again; the journey names them.
    public var staleDevices: [WakeDevice] = []

    /// - Parameters:
    ///   - deadTokens: tokens a provider called dead (not pushed until registered again).
    ///   - staleTokens: tokens of stale devices: left out like dead ones, and listed in
    ///     `staleDevices`.
    ///   - reach: how each binding can be reached now.
    public init(
        bindings: [Binding], posted: [PostedToken], deadTokens: Set<PushTokenID>, staleTokens: Set<PushTokenID> = [],
        reach: (Binding) -> BindingReach
    ) {
        self.init(bindings: bindings, posted: posted, leavingOut: deadTokens.union(staleTokens), reach: reach)
        guard !staleTokens.subtracting(deadTokens).isEmpty else { return }
        let kept = devices.flatMap(\.tokens)
        staleDevices = CallTargets(bindings: bindings, posted: posted, leavingOut: deadTokens, reach: reach).devices.filter { device in
            staleTokens.contains(device.id) && !kept.contains(device.id)
        }
    }

    private init(bindings: [Binding], posted: [PostedToken], leavingOut deadTokens: Set<PushTokenID>, reach: (Binding) -> BindingReach) {
        var devices: [WakeDevice] = []
        var awake: [Binding] = []
        var deskPhones: [Binding] = []
        var atWaitEnd: [Binding] = []
        var hasDeskPhone = false
        func live(_ channel: PushChannel) -> Bool { !deadTokens.contains(channel.tokenID) }

        // RFC 5626 §5.3: one flow per device. The bindings of one `+sip.instance` are its flows
        // (reg-ids); the call uses the best of them, and the device is pushed when none is left.
        for flows in Self.flowsByDevice(bindings, reach: reach) {
            let best = flows[0]
            // The newest registration that can ring by push says the device's channels.
            let pushing = flows.sorted { $0.binding.registeredAt > $1.binding.registeredAt }.lazy
                .compactMap { flow -> (binding: Binding, channels: [PushChannel], ring: PushChannel)? in
                    let channels = flow.binding.pushChannels.filter(live)
                    return channels.first { $0.kind != .remote }.map { (flow.binding, channels, $0) }
                }.first
            guard let (pushing, channels, ring) = pushing else {
                if best.reach != .gone {
                    deskPhones.append(best.binding)
                    // A binding with push channels, all dead or unusable, is still a device that
                    // needs a push: only one without any push channel is a desk phone.
                    if flows.allSatisfy({ $0.binding.pushChannels.isEmpty }) { hasDeskPhone = true }
                }
                continue
            }
            switch best.reach {
            case .connected: awake.append(best.binding)
            case .datagram: atWaitEnd.append(best.binding)
            case .gone: break
            }
            let cancel = ring.family != .apns ? ring : channels.first { $0.kind == .remote }
            let tokens = Set(flows.flatMap { $0.binding.pushChannels.filter(live) }.map(\.tokenID))
            let members = Set(flows.map(\.binding.id))
            let ids = bindings.map(\.id).filter(members.contains)
            if let index = devices.firstIndex(where: { device in
                device.id == ring.tokenID || (device.instance != nil && device.instance == pushing.instance)
            }) {
                devices[index].bindingIDs.append(contentsOf: ids)
                devices[index].tokens.formUnion(tokens)
                if devices[index].cancelChannel == nil { devices[index].cancelChannel = cancel }
                continue
            }
            devices.append(WakeDevice(
                id: ring.tokenID, ringChannel: ring, cancelChannel: cancel, instance: pushing.instance, tokens: tokens,
                bindingIDs: ids, isPostedOnly: false, name: Self.name(of: pushing, ring: ring)))
        }

        let livePosted = posted.filter { live($0.channel) }
        for token in livePosted where token.channel.kind != .remote {
            let key = token.channel.tokenID
            if devices.contains(where: { $0.tokens.contains(key) }) { continue }
            let cancel = token.channel.family != .apns ? token.channel : Self.pairedRemote(of: token, among: livePosted)
            devices.append(WakeDevice(
                id: key, ringChannel: token.channel, cancelChannel: cancel, instance: nil, tokens: [key], bindingIDs: [],
                isPostedOnly: true,
                name: token.channel.family == .apns ? "iPhone (posted token)"
                    : token.channel.family == .fcm ? "Android (posted token)" : "Browser (posted subscription)"))
        }
        // A posted regular iPhone token of the same app lets a registered VoIP-only device be
        // stopped without a second VoIP push.
        for index in devices.indices where devices[index].cancelChannel == nil && devices[index].ringChannel.family == .apns {
            let ring = PostedToken(channel: devices[index].ringChannel)
            devices[index].cancelChannel = Self.pairedRemote(of: ring, among: livePosted)
        }
        self.devices = devices
        self.awake = awake
        self.deskPhones = deskPhones
        self.atWaitEnd = atWaitEnd
        self.hasDeskPhone = hasDeskPhone
    }

    /// The callee's bindings as devices, each with its flows best first (RFC 5626 §5.3): the
    /// bindings of one `+sip.instance` are the flows of one device, a binding without one is a
    /// device of its own. Best first: an open connection, then UDP, then a flow that is gone; among
    /// equals the most recently registered. Devices keep the order of `bindings` (highest q first).
    public static func flowsByDevice(_ bindings: [Binding], reach: (Binding) -> BindingReach) -> [[(binding: Binding, reach: BindingReach)]] {
        var groups: [[(binding: Binding, reach: BindingReach)]] = []
        var groupOfInstance: [String: Int] = [:]
        for binding in bindings {
            let flow = (binding: binding, reach: reach(binding))
            if let instance = binding.instance, let index = groupOfInstance[instance] {
                groups[index].append(flow)
            } else {
                if let instance = binding.instance { groupOfInstance[instance] = groups.count }
                groups.append([flow])
            }
        }
        func rank(_ reach: BindingReach) -> Int {
            switch reach {
            case .connected: return 0
            case .datagram: return 1
            case .gone: return 2
            }
        }
        return groups.map { flows in
            flows.sorted { rank($0.reach) != rank($1.reach) ? rank($0.reach) < rank($1.reach) : $0.binding.registeredAt > $1.binding.registeredAt }
        }
    }

    /// decisions.md: an iPhone's VoIP and regular tokens pair by device id when given, else by
    /// (extension, bundle id).
    static func pairedRemote(of voip: PostedToken, among posted: [PostedToken]) -> PushChannel? {
        let remotes = posted.filter { $0.channel.family == .apns && $0.channel.kind == .remote }
        if let id = voip.deviceID, let paired = remotes.first(where: { $0.deviceID == id }) { return paired.channel }
        let bundle = bundleID(voip.channel.param)
        return remotes.first { bundleID($0.channel.param) == bundle }?.channel
    }

    /// `TEAMID.com.example.app.voip` → `com.example.app`; nil stays nil (the default app).
    static func bundleID(_ param: String?) -> String? {
        guard var value = param, !value.isEmpty else { return nil }
        for suffix in [".voip", ".remote"] where value.hasSuffix(suffix) { value.removeLast(suffix.count) }
        if let ampersand = value.firstIndex(of: "&") { value = String(value[..<ampersand]) }
        let parts = value.split(separator: ".")
        if parts.count > 3, parts[0].count == 10, parts[0].allSatisfy({ $0.isUppercase || $0.isNumber }) {
            value = parts.dropFirst().joined(separator: ".")
        }
        return value
    }

    static func name(of binding: Binding, ring: PushChannel) -> String {
        if let agent = binding.userAgent, !agent.isEmpty { return agent }
        return ring.family == .apns ? "iPhone" : ring.family == .fcm ? "Android phone" : "Browser"
    }
}
