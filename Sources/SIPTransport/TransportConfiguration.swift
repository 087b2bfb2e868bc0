public import SIPMessage

/// Certificate and key for TLS listen points, and how outbound TLS connections check their peer.
/// A value type, safe to share between threads.
public struct TLSConfiguration: Hashable, Sendable {
    /// PEM file with the server certificate (followed by its chain, if any).
    public var certificatePath: String
    /// PEM file with the private key of the certificate.
    public var privateKeyPath: String
    /// Whether outbound connections verify the server's certificate and that it names the IP
    /// address connected to. Off by default for now: phones that accept connections present
    /// certificates no public CA signed, so outbound TLS is encrypted but not authenticated.
    public var verifiesOutboundPeers: Bool
    /// PEM file of trusted CAs for outbound verification; nil uses OpenSSL's default locations.
    public var trustedCertificatesPath: String?
    /// PEM file of the CAs inbound clients' certificates must chain to (settings `tls_client_ca`);
    /// when set, a listen point asks every client for a certificate and refuses one that does not
    /// verify. nil: no certificate is asked for.
    public var clientCertificateAuthorityPath: String?
    /// With `clientCertificateAuthorityPath`: a client without a certificate is refused too
    /// (`tls_require_client_cert`); otherwise its certificate is optional.
    public var requiresClientCertificate: Bool

    public init(
        certificatePath: String, privateKeyPath: String, verifiesOutboundPeers: Bool = false,
        trustedCertificatesPath: String? = nil, clientCertificateAuthorityPath: String? = nil, requiresClientCertificate: Bool = false
    ) {
        self.certificatePath = certificatePath
        self.privateKeyPath = privateKeyPath
        self.verifiesOutboundPeers = verifiesOutboundPeers
        self.trustedCertificatesPath = trustedCertificatesPath
        self.clientCertificateAuthorityPath = clientCertificateAuthorityPath
        self.requiresClientCertificate = requiresClientCertificate
    }
}

/// Bounds that keep a peer from holding memory, descriptors or connections forever. A value type,
/// safe to share between threads.
public struct TransportLimits: Hashable, Sendable {
    /// TCP and TLS connections, inbound and outbound together. Beyond it an accepted connection is
    /// closed at once and an outbound send fails with `tooManyConnections`.
    public var maxConnections: Int
    /// A TCP/TLS connection on which nothing is received for this long is closed (RFC 5626
    /// keep-alives count as traffic).
    public var idleTimeout: Duration
    /// The TLS handshake of an accepted connection must finish within this.
    public var tlsHandshakeTimeout: Duration
    /// An outbound connect, and its TLS handshake, must finish within this.
    public var connectTimeout: Duration
    /// Bytes waiting to be written on one connection; a peer that lets more pile up is dropped.
    public var maxWriteQueueBytes: Int
    /// Framing bounds for TCP/TLS streams (largest message); also the largest UDP datagram taken.
    public var framing: SIPParserLimits

    public init(
        maxConnections: Int = 4096, idleTimeout: Duration = .seconds(600),
        tlsHandshakeTimeout: Duration = .seconds(10), connectTimeout: Duration = .seconds(10),
        maxWriteQueueBytes: Int = 1 << 20, framing: SIPParserLimits = .default
    ) {
        self.maxConnections = maxConnections
        self.idleTimeout = idleTimeout
        self.tlsHandshakeTimeout = tlsHandshakeTimeout
        self.connectTimeout = connectTimeout
        self.maxWriteQueueBytes = maxWriteQueueBytes
        self.framing = framing
    }
}
