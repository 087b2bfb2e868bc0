import Dispatch
public import RouseVocabulary

/// Rouse's SIP sockets: UDP, TCP and TLS listen points served by one epoll thread that never blocks.
///
/// Thread-safe: every method may be called from any thread. Sockets, connections and TLS sessions are
/// owned by the loop thread; `send` hands the bytes over to it and returns at once.
///
/// Callbacks (`onPacket`, `onFlowClosed`, send completions) run on the loop thread, one at a time,
/// and must not block: hand work to another queue if it can wait on anything. They may call back
/// into the layer (`send` from `onPacket` is the usual case).
///
/// Inbound, UDP datagrams arrive whole; TCP/TLS streams are cut into messages by `SIPStreamFramer`
/// (a framing error closes the connection). RFC 5626 keep-alives are handled here: a CRLFCRLF ping on a
/// stream is answered with CRLF; a datagram of CRLFs only is dropped. Neither reaches `onPacket`.
///
/// Limits (`TransportLimits`): connections beyond `maxConnections` are accepted and closed at once;
/// a connection that receives nothing for `idleTimeout`, whose TLS handshake outlasts
/// `tlsHandshakeTimeout`, or whose peer leaves more than `maxWriteQueueBytes` unread is closed.
public final class SIPTransportLayer: Sendable {
    /// Called with the outcome of a send, on the loop thread: success once the bytes are all handed
    /// to the kernel (with the flow used, new for a connection just opened); failure otherwise.
    public typealias SendCompletion = @Sendable (Result<FlowID, SIPTransportError>) -> Void

    private enum State {
        case idle
        case running(EventLoop, TransportCore, [ListenPoint])
        case stopped
    }

    /// The listen points as configured (port 0 for any free port).
    public let listenPoints: [ListenPoint]
    private let tls: TLSConfiguration?
    private let limits: TransportLimits
    private let onPacket: @Sendable (InboundPacket) -> Void
    private let onFlowClosed: (@Sendable (FlowID, FlowCloseReason) -> Void)?
    private let state = Locked(State.idle)
    private let openConnections = OpenConnections()

    /// - Parameters:
    ///   - listen: the points to bind, exactly as listed.
    ///   - tls: certificate and key; required when a point is TLS, optional otherwise (outbound TLS
    ///     then runs without verification).
    ///   - onPacket: each message or datagram received, on the loop thread; must not block.
    ///   - onFlowClosed: each TCP/TLS connection that closed, with why, on the loop thread.
    public init(
        listen: [ListenPoint], tls: TLSConfiguration? = nil, limits: TransportLimits = TransportLimits(),
        onPacket: @escaping @Sendable (InboundPacket) -> Void,
        onFlowClosed: (@Sendable (FlowID, FlowCloseReason) -> Void)? = nil
    ) {
        self.listenPoints = listen
        self.tls = tls
        self.limits = limits
        self.onPacket = onPacket
        self.onFlowClosed = onFlowClosed
    }

    deinit {
        shutdown()
    }

    /// Binds every listen point and starts the loop thread. Throws `cannotListen` naming the point
    /// that failed (nothing stays bound then), `tlsSetup` for a bad certificate or key, and
    /// `alreadyStarted` when called twice. Blocks only for the binding.
    public func start() throws(SIPTransportError) {
        try state.withLock { (state: inout State) throws(SIPTransportError) in
            guard case .idle = state else { throw .alreadyStarted }
            var serverTLS: TLSContext?
            if let tls {
                serverTLS = try TLSContext.server(
                    certificatePath: tls.certificatePath, privateKeyPath: tls.privateKeyPath,
                    clientCertificateAuthorityPath: tls.clientCertificateAuthorityPath, requiresClientCertificate: tls.requiresClientCertificate)
            } else if let point = listenPoints.first(where: { $0.transport == .tls }) {
                throw .cannotListen(point, reason: "a TLS listen point needs a certificate and key")
            }
            let clientTLS = try TLSContext.client(
                verifiesPeer: tls?.verifiesOutboundPeers ?? false, trustedCertificatesPath: tls?.trustedCertificatesPath)
            let loop = try EventLoop()
            let core = TransportCore(
                loop: loop, limits: limits, serverTLS: serverTLS, clientTLS: clientTLS,
                openConnections: openConnections, onPacket: onPacket, onFlowClosed: onFlowClosed)
            var bound: [ListenPoint] = []
            for point in listenPoints {
                bound.append(try core.bind(point))
            }
            try loop.start()
            state = .running(loop, core, bound)
        }
    }

    /// The listen points with the ports actually bound; empty before `start()`.
    public var boundPoints: [ListenPoint] {
        state.withLock { state in
            if case .running(_, _, let bound) = state { return bound }
            return []
        }
    }

    /// Closes every socket and connection and waits for the loop thread to end. Idempotent; when
    /// called from a callback (on the loop thread) it returns without waiting.
    public func shutdown() {
        let running = state.withLock { (state: inout State) -> (EventLoop, TransportCore)? in
            defer { state = .stopped }
            if case .running(let loop, let core, _) = state { return (loop, core) }
            return nil
        }
        guard let (loop, core) = running else { return }
        loop.stop { core.shutDown() }
    }

    /// Sends `bytes` back over `flow`: the same UDP socket to the same peer, or the same TCP/TLS
    /// connection. Fails with `flowNotOpen` when the connection is gone. Returns at once.
    public func send(_ bytes: [UInt8], over flow: FlowID, completion: SendCompletion? = nil) {
        guard let (loop, core) = runningLoop() else {
            completion?(.failure(.notRunning))
            return
        }
        let accepted = loop.execute { core.send(bytes, over: flow, completion: completion) }
        if !accepted { completion?(.failure(.notRunning)) }
    }

    /// Sends `bytes` to `address`: UDP from the listening socket of its family; TCP/TLS over an open
    /// connection to that address, else over a new one (connected without blocking, the bytes wait
    /// for it). Returns at once.
    public func send(_ bytes: [UInt8], to address: SocketAddress, transport: SIPTransportKind, completion: SendCompletion? = nil) {
        guard let (loop, core) = runningLoop() else {
            completion?(.failure(.notRunning))
            return
        }
        let accepted = loop.execute { core.send(bytes, to: address, transport: transport, completion: completion) }
        if !accepted { completion?(.failure(.notRunning)) }
    }

    /// Loads the certificate and key again (after they were renewed), and the client CA file when
    /// one is configured, for new TLS connections; connections already open keep theirs. Throws
    /// `tlsSetup` when the files do not load, and then changes nothing.
    public func reloadTLS(certificatePath: String, privateKeyPath: String) throws(SIPTransportError) {
        let context = try TLSContext.server(
            certificatePath: certificatePath, privateKeyPath: privateKeyPath,
            clientCertificateAuthorityPath: tls?.clientCertificateAuthorityPath, requiresClientCertificate: tls?.requiresClientCertificate ?? false)
        guard let (loop, core) = runningLoop() else { throw .notRunning }
        _ = loop.execute { core.replaceServerTLS(context) }
    }

    /// The UDP flow from the bound UDP point `local` (or, when nil, the first of the peer's address
    /// family) to `peer`: how to send to a UDP peer that registered over that point, even after a
    /// restart. Nil when no such UDP point is bound.
    public func datagramFlow(from local: ListenPoint?, to peer: SocketAddress) -> FlowID? {
        let udp = boundPoints.filter { $0.transport == .udp }
        let index = local.map { point in udp.firstIndex(of: point) } ?? udp.firstIndex { $0.isIPv6 == peer.isIPv6 }
        guard let index else { return nil }
        return FlowID(.datagram(socket: index, peer: peer), transport: .udp)
    }

    /// The TCP/TLS flow to `address`: an open connection to it, else a new one, connected without
    /// blocking (what is sent over it waits for the connection). Returns at once; `completion` gets
    /// the flow on the loop thread once it is set up there, or nil when it cannot be (limits,
    /// shutdown, a UDP transport), and must not block.
    public func streamFlow(
        to address: SocketAddress, transport kind: SIPTransportKind, completion: @escaping @Sendable (FlowID?) -> Void
    ) {
        guard kind.isReliable, let (loop, core) = runningLoop() else { return completion(nil) }
        if !loop.execute({ completion(core.streamFlow(to: address, transport: kind)) }) { completion(nil) }
    }

    /// Whether `flow` can still carry messages: for TCP/TLS, whether its connection is open; for UDP,
    /// whether the layer is running.
    public func flowIsOpen(_ flow: FlowID) -> Bool {
        guard runningLoop() != nil else { return false }
        switch flow.key {
        case .datagram: return true
        case .connection(let number): return openConnections.contains(number)
        }
    }

    /// TCP and TLS connections open now (inbound and outbound).
    public var openConnectionCount: Int { openConnections.count }

    private func runningLoop() -> (EventLoop, TransportCore)? {
        state.withLock { state in
            if case .running(let loop, let core, _) = state { return (loop, core) }
            return nil
        }
    }
}
