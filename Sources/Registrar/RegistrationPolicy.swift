/// The registrar's limits on registration lifetimes and counts (decisions.md, "Settings and limits").
public struct RegistrationPolicy: Hashable, Sendable {
    public var defaultExpires: Int
    public var minExpires: Int
    public var maxExpires: Int
    /// Bounds for a binding with push channels: it must live long enough to be pushed.
    public var pushMinExpires: Int
    public var pushMaxExpires: Int
    public var maxBindingsPerExtension: Int
    /// The `+sip.pnsreg` value Rouse puts in Feature-Caps when a UA asks (RFC 8599 §5.3; above 120).
    public var bindingRefreshSeconds: Int
    /// The `Flow-Timer` of a 2xx that registers an RFC 5626 TCP/TLS flow with Rouse as its edge
    /// proxy: seconds between the phone's keep-alives; 0 sends none.
    public var flowTimer: Int

    public init(
        defaultExpires: Int = 3600, minExpires: Int = 60, maxExpires: Int = 86_400, pushMinExpires: Int = 240,
        pushMaxExpires: Int = 604_800, maxBindingsPerExtension: Int = 10, bindingRefreshSeconds: Int = 121, flowTimer: Int = 120
    ) {
        self.flowTimer = flowTimer
        self.defaultExpires = defaultExpires
        self.minExpires = minExpires
        self.maxExpires = maxExpires
        self.pushMinExpires = pushMinExpires
        self.pushMaxExpires = pushMaxExpires
        self.maxBindingsPerExtension = maxBindingsPerExtension
        self.bindingRefreshSeconds = bindingRefreshSeconds
    }
}
