public import CallRouting
public import Crypto
import Foundation
public import Push
public import Registrar
public import RouseLog
public import SIPMessage
public import SIPTransport

/// Every setting `rouse serve` runs with, after the config file, the environment and the flags
/// have been merged and checked (ConfigurationLoader).
public struct RouseConfiguration: Sendable {
    /// libpq conninfo or `postgresql://` URL.
    public var databaseURL: String
    /// Where SIP is served.
    public var sipListen: [ListenPoint]
    /// PEM certificate chain and key for `tls:` listen points.
    public var tlsCertificatePath: String?
    public var tlsKeyPath: String?
    /// `host:port` of the HTTP API.
    public var httpListen: String
    /// Host names (besides the listening addresses and `localhost`) that name this server in a
    /// Request-URI.
    public var sipAliases: [String]
    public var logLevel: LogLevel
    public var logFormat: LogFormat
    public var parserLimits: SIPParserLimits
    public var tcpMaxConnections: Int
    public var tcpIdleTimeout: Duration
    public var tlsHandshakeTimeout: Duration
    /// RFC 3261 §17 timer bases.
    public var timerT1: Duration
    public var timerT2: Duration
    public var timerT4: Duration
    /// Seconds libpq waits for PostgreSQL at start.
    public var databaseConnectTimeout: Int
    /// Registration lifetimes (RFC 3261 §10.3; decisions.md).
    public var registrationDefaultExpires: Int
    public var registrationMinExpires: Int
    public var registrationMaxExpires: Int
    /// Bounds for bindings that carry push channels (apps ask for long registrations).
    public var pushBindingMinExpires: Int
    public var pushBindingMaxExpires: Int
    public var maxBindingsPerExtension: Int
    /// How long a digest nonce is good for before `stale=true`.
    public var nonceLifetime: Duration
    /// The digest algorithms REGISTER and INVITE challenges offer, most preferred first.
    public var digestAlgorithms: [Digest.Algorithm] = DigestAuthenticator.defaultAlgorithms
    /// Failed credentials (SIP and HTTP) one source address may have within `authFailureWindow`
    /// before it is refused for `authBlockDuration`.
    public var authFailureLimit: Int
    public var authFailureWindow: Duration
    public var authBlockDuration: Duration
    /// Push endpoints (tests point them at local stand-ins) and the deadline of each push request.
    public var apnsProductionURL: String
    public var apnsSandboxURL: String
    public var fcmURL: String
    /// Extra PEM CA file trusted for push requests.
    public var pushCAFile: String?
    public var pushTimeout: Duration
    /// The VAPID `sub` of web pushes (`mailto:` or `https:`); empty: `mailto:admin@` and the first
    /// organisation's domain (`localhost` without one).
    public var webPushContact: String = ""
    /// The push services web pushes may go to (host names, `*.domain`, or `*`).
    public var webPushAllowedHosts: [String] = WebPushHostPolicy.browserPushServices
    /// Calls (issue 6): the wake waits, the ring timeout, the cancel grace and trusted peers.
    public var wakeWait: Duration = .seconds(8)
    public var wakeWaitWithDeskPhone: Duration = .seconds(3)
    public var ringTimeout: Duration = .seconds(45)
    public var cancelGrace: Duration = .seconds(30)
    /// How long before a push binding expires its binding-refresh push goes (at least 120 s).
    public var bindingRefreshLead: Duration = .seconds(180)
    public var trustedPeers: [String] = []
    /// SIP messages one source address may send per second (bursts of twice that); 0 = no limit.
    public var sipRateLimit: Int = 0
    /// Reverse proxies in front of the HTTP API whose X-Forwarded-For is believed.
    public var httpTrustedProxies: [String] = []
    /// Push faults (issue 9): attempts per push on a transient failure, and the circuit breaker of
    /// a provider that keeps failing.
    public var pushAttempts: Int = 3
    public var pushBreakerFailures: Int = 5
    public var pushBreakerBackoff: Duration = .seconds(10)
    public var pushBreakerMaxBackoff: Duration = .seconds(300)
    /// HTTP requests one client address may make per second (bursts of twice that); 0 = no limit.
    public var httpRateLimit: Int = 0
    /// PEM CA file that client certificates of SIP TLS connections are checked against; nil: no
    /// client certificate is asked for.
    public var tlsClientCAPath: String?
    /// With `tlsClientCAPath`: refuse a TLS client without a certificate (else it is optional).
    public var tlsRequireClientCertificate: Bool = false
    /// How long a stopping Rouse lets calls still ringing finish before ending them.
    public var shutdownGrace: Duration = .seconds(10)
    /// How long an admin pages session lasts from sign-in.
    public var adminSessionLifetime: Duration = .seconds(12 * 3600)
    /// The `Flow-Timer` (seconds) of a 2xx that registers an RFC 5626 TCP/TLS flow; 0: none.
    public var flowTimer: Int = 120
    /// Least time between two test pushes to one device token (admin pages, admin API, `rouse push test`).
    public var testPushInterval: Duration = .seconds(30)
    /// Calls to the outside (issue 19): the class of service of an extension without its own,
    /// the toll-fraud limits (0: none), and the DNS servers that resolve route hops.
    public var outsideCallClass: ClassOfService = .national
    public var outsideCallLimits = OutsideCallLimits()
    public var dnsServers: [(ip: String, port: UInt16)] = []
    /// Gateway mode: the PBX of each organisation whose extensions Rouse registers upstream.
    public var gatewayPBXs: [UpstreamPBX] = []
    /// The expiry Rouse asks the PBX for (it refreshes at half of what is granted).
    public var gatewayRegisterExpires: Int = 600
    /// Call forwarding: whether a 603 Decline counts as busy, and how many diversions an INVITE
    /// may have had already and still be diverted (the loop guard).
    public var declineIsBusy: Bool = true
    public var maxDiversions: Int = 5
    /// Stale devices (issue 20): unanswered ring pushes and the silence before a device is no
    /// longer pushed; and how long push records and call journeys are kept.
    public var staleAfterPushes: Int = 3
    public var staleAfter: Duration = .seconds(7 * 24 * 3600)
    public var historyRetention: Duration = .seconds(90 * 24 * 3600)
    /// The keys that seal secrets at rest (`secrets_key_file` or `ROUSE_SECRETS_KEY`); nil when
    /// neither is given, which `rouse serve` refuses.
    public var secrets: SecretSeal?
    /// Ring pushes carry a one-time wake credential the woken app's REGISTER may present instead
    /// of answering a challenge (docs/app-builders.md "Wake in one round trip").
    public var wakeCredentials: Bool = false
    /// The HTTP(S) proxy every push goes through (`push_proxy`); nil: none.
    public var pushProxy: PushProxy?
    /// SIP loop threads, registrar shards and call-coordinator shards (`sip_threads`); 0: one per core.
    public var sipThreads: Int = 0
}

extension RouseConfiguration {
    /// The `Flow-Timer` Rouse sends: `flowTimer`, but never more than four fifths of
    /// `tcpIdleTimeout` (at least 1 s), so a phone that keeps alive at 80–100 % of it (RFC 5626
    /// §4.4.1) is never closed as idle. 0 when `flowTimer` is 0.
    public var effectiveFlowTimer: Int {
        guard flowTimer > 0 else { return 0 }
        let idleSeconds = Int(tcpIdleTimeout.components.seconds)
        return min(flowTimer, max(1, idleSeconds * 4 / 5))
    }

    /// The SIP loop threads (and registrar and call shards) Rouse runs: `sipThreads`, or the cores this
    /// process may run on when it is 0.
    public var effectiveSIPThreads: Int {
        sipThreads > 0 ? sipThreads : max(1, ProcessInfo.processInfo.activeProcessorCount)
    }
}

/// One documented setting: its config-file key (flat snake_case), environment variable
/// (`ROUSE_` + upper case) and flag (`--key-with-dashes`), default and meaning.
public struct SettingDescription: Sendable {
    public let key: String
    public let defaultValue: String
    public let meaning: String

    public var environmentVariable: String { "ROUSE_" + key.uppercased() }
    public var flag: String { "--" + key.replacingOccurrences(of: "_", with: "-") }
}

extension RouseConfiguration {
    /// Every setting, in the order `rouse serve --help` lists them.
    public static let settings: [SettingDescription] = [
        .init(key: "database_url", defaultValue: "host=/var/run/postgresql dbname=rouse",
              meaning: "PostgreSQL to use: a libpq conninfo string or a postgresql:// URL"),
        .init(key: "sip_listen", defaultValue: "udp:127.0.0.1:5060,tcp:127.0.0.1:5060",
              meaning: "where SIP is served: a comma list of transport:host:port (udp, tcp, tls; IPv6 as [::1])"),
        .init(key: "tls_cert", defaultValue: "", meaning: "PEM certificate (chain) for tls: listen points"),
        .init(key: "tls_key", defaultValue: "", meaning: "PEM private key for tls: listen points"),
        .init(key: "tls_client_ca", defaultValue: "",
              meaning: "PEM CA file: TLS clients are asked for a certificate, and one they present must be signed by it; empty: no client certificate is asked for"),
        .init(key: "tls_require_client_cert", defaultValue: "false",
              meaning: "with tls_client_ca: refuse TLS clients without a certificate (false: a certificate is optional)"),
        .init(key: "http_listen", defaultValue: "127.0.0.1:8080", meaning: "host:port of the HTTP API"),
        .init(key: "sip_aliases", defaultValue: "",
              meaning: "comma list of host names that also name this server in a Request-URI"),
        .init(key: "log_level", defaultValue: "info", meaning: "debug, info, warning or error"),
        .init(key: "log_format", defaultValue: "logfmt", meaning: "logfmt or json: one line per event"),
        .init(key: "sip_max_message_bytes", defaultValue: "65536", meaning: "largest SIP message accepted"),
        .init(key: "sip_max_headers", defaultValue: "256", meaning: "most header lines in one SIP message"),
        .init(key: "sip_max_line_bytes", defaultValue: "8192", meaning: "longest header line accepted"),
        .init(key: "tcp_max_connections", defaultValue: "10000",
              meaning: "most open TCP and TLS connections; more are refused"),
        .init(key: "tcp_idle_timeout", defaultValue: "600",
              meaning: "seconds a TCP/TLS connection may stay silent before it is closed"),
        .init(key: "tls_handshake_timeout", defaultValue: "10",
              meaning: "seconds a TLS client has to finish its handshake"),
        .init(key: "sip_t1", defaultValue: "0.5", meaning: "RFC 3261 timer T1 in seconds (round-trip estimate)"),
        .init(key: "sip_t2", defaultValue: "4", meaning: "RFC 3261 timer T2 in seconds"),
        .init(key: "sip_t4", defaultValue: "5", meaning: "RFC 3261 timer T4 in seconds"),
        .init(key: "database_connect_timeout", defaultValue: "10",
              meaning: "seconds to wait for PostgreSQL at start"),
        .init(key: "registration_default_expires", defaultValue: "3600",
              meaning: "seconds a registration lasts when the phone names no expiry"),
        .init(key: "registration_min_expires", defaultValue: "60",
              meaning: "shortest registration accepted; shorter ones get 423 with Min-Expires"),
        .init(key: "registration_max_expires", defaultValue: "86400",
              meaning: "longest registration granted; longer requests are granted this"),
        .init(key: "push_binding_min_expires", defaultValue: "240",
              meaning: "shortest registration accepted for a binding with push parameters (RFC 8599 §5.5)"),
        .init(key: "push_binding_max_expires", defaultValue: "604800",
              meaning: "longest registration granted to a binding with push parameters"),
        .init(key: "max_bindings_per_extension", defaultValue: "10",
              meaning: "most registered contacts per extension; the oldest without an instance id makes room"),
        .init(key: "nonce_lifetime", defaultValue: "300",
              meaning: "seconds a digest nonce is valid before the phone is told stale=true"),
        .init(key: "digest_algorithms", defaultValue: "MD5",
              meaning: "digest algorithms a 401/407 challenge offers, most preferred first, one challenge header each: MD5, SHA-256 or both (SHA-256,MD5); SIPp 3.6.1 and libre-based phones (baresip) fail on any challenge that includes SHA-256"),
        .init(key: "auth_failure_limit", defaultValue: "20",
              meaning: "failed credentials (SIP REGISTER and HTTP) one source address may have within auth_failure_window before it is blocked"),
        .init(key: "auth_failure_window", defaultValue: "60",
              meaning: "seconds over which failed credentials are counted"),
        .init(key: "auth_block_duration", defaultValue: "300",
              meaning: "seconds a blocked source gets 503 (SIP) or 429 (HTTP) with Retry-After"),
        .init(key: "apns_production_url", defaultValue: "https://api.push.apple.com",
              meaning: "base URL of Apple's production push host"),
        .init(key: "apns_sandbox_url", defaultValue: "https://api.sandbox.push.apple.com",
              meaning: "base URL of Apple's sandbox push host (development builds)"),
        .init(key: "fcm_url", defaultValue: "https://fcm.googleapis.com",
              meaning: "base URL of Firebase Cloud Messaging (HTTP v1); the token URL comes from the service account"),
        .init(key: "push_ca_file", defaultValue: "",
              meaning: "extra PEM CA file to trust for push requests (test stand-ins)"),
        .init(key: "push_timeout", defaultValue: "5",
              meaning: "seconds one push request may take, connect included"),
        .init(key: "push_attempts", defaultValue: "3",
              meaning: "attempts of one push when the provider fails for now (refused or lost connection, 500, 503, 429 with a short Retry-After), never past the push's deadline"),
        .init(key: "push_breaker_failures", defaultValue: "5",
              meaning: "pushes in a row failing for the provider's sake (no connection, no answer, 5xx) after which that provider host is backed off for the push app"),
        .init(key: "push_breaker_backoff", defaultValue: "10",
              meaning: "seconds a backed-off provider's pushes fail at once before one is let through as a probe; doubled after each failed probe"),
        .init(key: "push_breaker_max_backoff", defaultValue: "300",
              meaning: "longest back-off of a provider that keeps failing"),
        .init(key: "webpush_contact", defaultValue: "",
              meaning: "the contact web push services see in Rouse's VAPID token (sub): a mailto: or https: URI; empty means mailto:admin@ and the first organisation's domain"),
        .init(key: "webpush_allowed_hosts", defaultValue: "fcm.googleapis.com,android.googleapis.com,*.push.services.mozilla.com,*.notify.windows.com,*.push.apple.com",
              meaning: "push services web pushes may be sent to: host names, *.domain for a domain's hosts, or * for any (an endpoint comes from an app)"),
        .init(key: "wake_wait", defaultValue: "8",
              meaning: "seconds a call waits for a woken app to register again when nothing else can ring"),
        .init(key: "wake_wait_with_desk_phone", defaultValue: "3",
              meaning: "seconds a call waits for a woken app when a desk phone (a device that needs no push) is registered"),
        .init(key: "ring_timeout", defaultValue: "45",
              meaning: "seconds a call may ring before it ends with 480 (also sent in the ring push)"),
        .init(key: "cancel_grace", defaultValue: "30",
              meaning: "seconds after a call ended in which a woken iPhone known only by its VoIP token still gets the INVITE and a CANCEL"),
        .init(key: "binding_refresh_lead", defaultValue: "180",
              meaning: "seconds before a push binding expires that its app gets a binding-refresh push (RFC 8599 §5.5) unless it offered +sip.pnsreg; at least 120"),
        .init(key: "shutdown_grace", defaultValue: "10",
              meaning: "seconds a stopping Rouse (SIGTERM) lets calls still ringing finish before it ends them"),
        .init(key: "sip_rate_limit", defaultValue: "0",
              meaning: "SIP messages one source address may send per second (bursts of twice that); more are dropped unread; 0 means no limit"),
        .init(key: "http_rate_limit", defaultValue: "0",
              meaning: "HTTP requests one client address may make per second (bursts of twice that); more get 429 with Retry-After; 0 means no limit"),
        .init(key: "http_trusted_proxies", defaultValue: "",
              meaning: "comma list of IP addresses and CIDR blocks of reverse proxies (nginx) in front of the HTTP API; their X-Forwarded-For names the client the throttle counts"),
        .init(key: "trusted_peers", defaultValue: "",
              meaning: "comma list of IP addresses and CIDR blocks (trunks, peers) whose INVITEs need no digest authentication"),
        .init(key: "admin_session_lifetime", defaultValue: "12h",
              meaning: "how long an admin pages session lasts from sign-in; then the admin signs in again"),
        .init(key: "flow_timer", defaultValue: "120",
              meaning: "seconds between keep-alives a phone registering an RFC 5626 TCP/TLS flow is told to send (Flow-Timer); never more than four fifths of tcp_idle_timeout; 0 sends no Flow-Timer"),
        .init(key: "test_push_interval", defaultValue: "30",
              meaning: "seconds that must pass between two test pushes to one device token (admin pages, admin API, rouse push test); only pushes the provider accepted count, across every instance"),
        .init(key: "outside_call_class", defaultValue: "national",
              meaning: "class of service of an extension without its own: internal (extensions and emergency routes only), national or international"),
        .init(key: "outside_calls_per_extension", defaultValue: "4",
              meaning: "outside calls one extension may have in progress at once; 0 means no limit (emergency routes are never limited)"),
        .init(key: "outside_calls_per_hour_per_extension", defaultValue: "60",
              meaning: "outside calls one extension may start in an hour; 0 means no limit"),
        .init(key: "outside_calls_per_organisation", defaultValue: "0",
              meaning: "outside calls one organisation may have in progress at once; 0 means no limit"),
        .init(key: "outside_calls_per_hour_per_organisation", defaultValue: "0",
              meaning: "outside calls one organisation may start in an hour; 0 means no limit"),
        .init(key: "outside_call_surge_factor", defaultValue: "4",
              meaning: "an extension's outside calls surge when the last hour has at least 10 and this many times its hourly average of the day before (metric rouse_outside_call_surging_extensions, log call.outside_surge)"),
        .init(key: "dns_servers", defaultValue: "",
              meaning: "comma list of ip or ip:port DNS servers that resolve outbound route hops (RFC 3263 NAPTR, SRV, A/AAAA); empty means those of /etc/resolv.conf"),
        .init(key: "gateway_pbx", defaultValue: "",
              meaning: "gateway mode: comma list of organisation=host:port;transport=udp|tcp[;domain=…][;user=…;password=…][;path], the PBX (an IP address) at which each extension of the organisation with a live binding is registered with a Contact of Rouse's"),
        .init(key: "gateway_register_expires", defaultValue: "600",
              meaning: "seconds of upstream registration Rouse asks the PBX for; it refreshes at half of what the PBX grants"),
        .init(key: "decline_is_busy", defaultValue: "true",
              meaning: "whether a 603 Decline counts as busy for an extension's busy forwarding (rouse extension forward --busy); false: only 486 and 600 do"),
        .init(key: "max_diversions", defaultValue: "5",
              meaning: "an INVITE already diverted this many times (its History-Info and Diversion entries) is not forwarded again and ends as it would have (the loop guard); 0 forwards no call"),
        .init(key: "stale_after_pushes", defaultValue: "3",
              meaning: "ring pushes in a row, each accepted by the provider and each call outlasting the wake wait, with no sign of life from the device (no REGISTER, no post, no use of the call token) before it may be stale"),
        .init(key: "stale_after", defaultValue: "7d",
              meaning: "how long a device must also have shown no sign of life before it is stale; a stale device is not pushed until it registers or posts its token again"),
        .init(key: "history_retention", defaultValue: "90d",
              meaning: "how long push records and calls (with their journeys) are kept; older ones are deleted in small batches by one instance at a time"),
        .init(key: "secrets_key_file", defaultValue: "",
              meaning: "file holding the key that seals secrets in PostgreSQL (32 random bytes as 64 hex digits or base64, mode 0600; more lines: older keys that still open); or the key itself in ROUSE_SECRETS_KEY. rouse serve refuses to start without one"),
        .init(key: "wake_credentials", defaultValue: "false",
              meaning: "whether each ring push carries a one-time wake credential (wake_credential) that the woken app's REGISTER presents in X-Rouse-Wake to be answered 200 without the digest challenge; good once, for that device, until the wake wait ends"),
        .init(key: "push_proxy", defaultValue: "",
              meaning: "HTTP proxy every push goes through (APNs, FCM and its token fetch, web push), tunnelled with CONNECT: http://[user:password@]host:port or https://…; the password is never shown; empty means none"),
        .init(key: "sip_threads", defaultValue: "0",
              meaning: "SIP threads: epoll loops (each with its own SO_REUSEPORT socket on every listen point) registrar shards and call shards; 0 means one per core, 1 keeps a single loop, registrar queue and call queue"),
    ]
}
