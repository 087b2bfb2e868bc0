import SIPMessage
public import SIPTransaction
public import SIPTransport

/// What a `SIPService` runs with: where it listens, the names it answers to, TLS, the transport's
/// and the parser's limits, the transaction timers, the per-source rate limit and the name it gives
/// in Server headers, and how many loop threads serve SIP. RouseServer builds it from the configuration; a value, so any thread.
public struct SIPServiceSettings: Sendable {
    /// Where SIP is served.
    public var listen: [ListenPoint]
    /// Host names (besides the listening addresses and `localhost`) that name this server in a
    /// Request-URI.
    public var aliases: [String]
    /// The certificate and key of `tls:` listen points, and the client CAs; nil: no TLS.
    public var tls: TLSConfiguration?
    /// Connections, idle and handshake timeouts, and framing; `limits.framing` bounds the parser too.
    public var limits: TransportLimits
    /// RFC 3261 §17 timer bases.
    public var timers: TransactionTimers
    /// SIP messages one source address may send per second (bursts of twice that); 0 = no limit.
    public var rateLimit: Int
    /// The Server header of Rouse's own answers (`Rouse/<version>`).
    public var serverName: String
    /// The DNS servers that resolve outside routes' hops (RFC 3263); empty: /etc/resolv.conf's.
    public var dnsServers: [(ip: String, port: UInt16)]
    /// The transport's loop threads (`sip_threads`): each serves every listen point with a
    /// SO_REUSEPORT socket of its own; 1: one loop, as before.
    public var threads: Int

    public init(
        listen: [ListenPoint], aliases: [String] = [], tls: TLSConfiguration? = nil, limits: TransportLimits = TransportLimits(),
        timers: TransactionTimers = TransactionTimers(), rateLimit: Int = 0, serverName: String, dnsServers: [(ip: String, port: UInt16)] = [],
        threads: Int = 1
    ) {
        self.dnsServers = dnsServers
        self.threads = threads
        self.listen = listen
        self.aliases = aliases
        self.tls = tls
        self.limits = limits
        self.timers = timers
        self.rateLimit = rateLimit
        self.serverName = serverName
    }
}
