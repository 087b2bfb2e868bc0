import Dispatch
public import RouseVocabulary

/// Rouse's SIP sockets: UDP, TCP and TLS listen points served by one or more epoll threads ("loops")
/// that never block.
///
/// Thread-safe: every method may be called from any thread. Each loop owns its sockets, connections
/// and TLS sessions; `send` hands the bytes over to the loop that owns the flow and returns at once.
///
/// With several loops (`loops` > 1, the `sip_threads` setting), every listen point is bound once per
/// loop with SO_REUSEPORT: the kernel spreads UDP datagrams over the loops' sockets by the peer's
/// address and accepted TCP/TLS connections over their listeners, and each connection stays on the
/// loop that accepted (or opened) it. A UDP send goes out on the loop picked by its peer's address,
/// so what is sent to one peer leaves in the order it was sent. With one loop nothing is shared and
/// SO_REUSEPORT is not set.
///
/// Callbacks (`onPacket`, `onFlowClosed`, send completions) run on the loop thread of the flow, one
/// at a time per loop, and must not block: hand work to another queue if it can wait on anything.
/// With several loops they run on several threads at once. They may call back into the layer (`send`
/// from `onPacket` is the usual case).
///
/// Inbound, UDP datagrams arrive whole; TCP/TLS streams are cut into messages by `SIPStreamFramer`
/// (a framing error closes the connection). RFC 5626 keep-alives are handled here: a CRLFCRLF ping on a
/// stream is answered with CRLF; a datagram of CRLFs only is dropped. Neither reaches `onPacket`.
///
/// Limits (`TransportLimits`): connections beyond `maxConnections` (over every loop) are accepted and
/// closed at once; a connection that receives nothing for `idleTimeout`, whose TLS handshake outlasts
/// `tlsHandshakeTimeout`, or whose peer leaves more than `maxWriteQueueBytes` unread is closed.
public final class SIPTransportLayer: Sendable {
    /// Called with the outcome of a send, on the loop thread: success once the bytes are all handed
    /// to the kernel (with the flow used, new for a connection just opened); failure otherwise.
    public typealias SendCompletion = @Sendable (Result<FlowID, SIPTransportError>) -> Void

    /// One loop and the sockets it owns.
    private struct Shard {
        let loop: EventLoop
        let core: TransportCore
    }

    private enum State {
        case idle
        case running([Shard], [ListenPoint])
        case stopped
    }

    /// The listen points as configured (port 0 for any free port).
    public let listenPoints: [ListenPoint]
    /// How many loop threads serve the listen points.
    public let loopCount: Int
    private let tls: TLSConfiguration?
    private let limits: TransportLimits
    private let onPacket: @Sendable (InboundPacket) -> Void
    private let onFlowClosed: (@Sendable (FlowID, FlowCloseReason) -> Void)?
    private let state = Locked(State.idle)
    private let openConnections = OpenConnections()
    /// Every loop's UDP sockets, while running: datagrams are sent on the caller's thread.
    private let datagrams = DatagramSockets()

    /// - Parameters:
    ///   - listen: the points to bind, exactly as listed.
    ///   - tls: certificate and key; required when a point is TLS, optional otherwise (outbound TLS
    ///     then runs without verification).
    ///   - loops: loop threads (at least 1); each binds every listen point with SO_REUSEPORT when
    ///     there are several.
    ///   - onPacket: each message or datagram received, on the loop thread; must not block.
    ///   - onFlowClosed: each TCP/TLS connection that closed, with why, on the loop thread.
    public init(
        listen: [ListenPoint], tls: TLSConfiguration? = nil, limits: TransportLimits = TransportLimits(), loops: Int = 1,
        onPacket: @escaping @Sendable (InboundPacket) -> Void,
        onFlowClosed: (@Sendable (FlowID, FlowCloseReason) -> Void)? = nil
    ) {
        self.listenPoints = listen
        self.tls = tls
        self.limits = limits
        self.loopCount = max(1, loops)
        self.onPacket = onPacket
        self.onFlowClosed = onFlowClosed
    }

    deinit {
        shutdown()
    }

    /// Binds every listen point and starts the loop threads. Throws `cannotListen` naming the point
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
            // A port 0 probed free can be taken by someone else before the loops bind it: try again.
            var attempt = 1
            while true {
                do throws(SIPTransportError) {
                    let (shards, bound) = try bindShards(serverTLS: serverTLS, clientTLS: clientTLS)
                    try startLoops(shards)
                    datagrams.open(shards.map(\.core.datagramSockets))
                    state = .running(shards, bound)
                    return
                } catch {
                    guard attempt < 3, loopCount > 1, case .cannotListen(let point, _) = error, listenPoints.contains(where: {
                        $0.port == 0 && $0.transport == point.transport && $0.host == point.host
                    }) else { throw error }
                    attempt += 1
                }
            }
        }
    }

    /// A core per loop, each with every listen point bound (with SO_REUSEPORT on the port probed
    /// first when there are several loops); the points with their bound ports.
    private func bindShards(serverTLS: TLSContext?, clientTLS: TLSContext) throws(SIPTransportError) -> ([Shard], [ListenPoint]) {
        var shards: [Shard] = []
        for index in 0..<loopCount {
            let loop = try EventLoop()
            shards.append(Shard(loop: loop, core: TransportCore(
                loop: loop, shard: index, of: loopCount, limits: limits, serverTLS: serverTLS, clientTLS: clientTLS,
                openConnections: openConnections, onPacket: onPacket, onFlowClosed: onFlowClosed)))
        }
        var bound: [ListenPoint] = []
        for point in listenPoints {
            guard loopCount > 1 else {
                bound.append(try shards[0].core.bind(point))
                continue
            }
            var shared = point
            shared.port = try TransportCore.probePort(point)
            for shard in shards { _ = try shard.core.bind(shared, reusePort: true) }
            bound.append(shared)
        }
        return (shards, bound)
    }

    /// Starts every loop thread; when one cannot start, stops those already started.
    private func startLoops(_ shards: [Shard]) throws(SIPTransportError) {
        for (index, shard) in shards.enumerated() {
            do {
                try shard.loop.start()
            } catch {
                for started in shards[..<index] { started.loop.stop { started.core.shutDown() } }
                throw error
            }
        }
    }

    /// The listen points with the ports actually bound; empty before `start()`.
    public var boundPoints: [ListenPoint] {
        state.withLock { state in
            if case .running(_, let bound) = state { return bound }
            return []
        }
    }

    /// Closes every socket and connection and waits for the loop threads to end. Idempotent; when
    /// called from a callback (on a loop thread) it waits for the other loops but not its own.
    public func shutdown() {
        let running = state.withLock { (state: inout State) -> [Shard]? in
            defer { state = .stopped }
            if case .running(let shards, _) = state { return shards }
            return nil
        }
        guard let shards = running else { return }
        datagrams.close()
        let current = shards.first { $0.loop.inLoopThread }
        for shard in shards where shard.loop !== current?.loop {
            shard.loop.stop { shard.core.shutDown() }
        }
        if let current { current.loop.stop { current.core.shutDown() } }
    }

    /// Sends `bytes` back over `flow`: the same UDP socket to the same peer, or the same TCP/TLS
    /// connection. Fails with `flowNotOpen` when the connection is gone. Returns at once: a
    /// datagram is sent on the caller's thread (`completion` runs there), a connection's bytes on
    /// its loop (`completion` runs on the loop thread).
    public func send(_ bytes: [UInt8], over flow: FlowID, completion: SendCompletion? = nil) {
        switch flow.key {
        case .datagram(let socket, let peer):
            let result = flow.transport == .udp
                ? datagrams.send(bytes, loop: shardIndex(of: flow), socket: socket, to: peer) ?? .failure(.notRunning)
                : .failure(.flowNotOpen(flow))
            completion?(result)
        case .connection(let number):
            let shard = runningShards().map { $0[shardIndex(of: flow)] }
            let accepted = shard.map { shard in
                shard.loop.execute { shard.core.send(bytes, overConnection: number, transport: flow.transport, completion: completion) }
            } ?? false
            if !accepted { completion?(.failure(.notRunning)) }
        }
    }

    /// Sends `bytes` to `address`: UDP from the listening socket of its family, on the caller's
    /// thread; TCP/TLS over an open connection to that address, else over a new one (connected
    /// without blocking, the bytes wait for it), on its loop. Returns at once.
    public func send(_ bytes: [UInt8], to address: SocketAddress, transport: SIPTransportKind, completion: SendCompletion? = nil) {
        let index = shardIndex(to: address, transport: transport)
        guard transport.isReliable else {
            completion?(datagrams.send(bytes, loop: index, to: address) ?? .failure(.notRunning))
            return
        }
        let shard = runningShards().map { $0[index] }
        let accepted = shard.map { shard in
            shard.loop.execute { shard.core.send(bytes, to: address, transport: transport, completion: completion) }
        } ?? false
        if !accepted { completion?(.failure(.notRunning)) }
    }

    /// Loads the certificate and key again (after they were renewed), and the client CA file when
    /// one is configured, for new TLS connections; connections already open keep theirs. Throws
    /// `tlsSetup` when the files do not load, and then changes nothing.
    public func reloadTLS(certificatePath: String, privateKeyPath: String) throws(SIPTransportError) {
        let context = try TLSContext.server(
            certificatePath: certificatePath, privateKeyPath: privateKeyPath,
            clientCertificateAuthorityPath: tls?.clientCertificateAuthorityPath, requiresClientCertificate: tls?.requiresClientCertificate ?? false)
        guard let shards = runningShards() else { throw .notRunning }
        for shard in shards { _ = shard.loop.execute { shard.core.replaceServerTLS(context) } }
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
        guard kind.isReliable, let shards = runningShards() else { return completion(nil) }
        let shard = shards[shardIndex(to: address, transport: kind)]
        if !shard.loop.execute({ completion(shard.core.streamFlow(to: address, transport: kind)) }) { completion(nil) }
    }

    /// Whether `flow` can still carry messages: for TCP/TLS, whether its connection is open; for UDP,
    /// whether the layer is running.
    public func flowIsOpen(_ flow: FlowID) -> Bool {
        guard runningShards() != nil else { return false }
        switch flow.key {
        case .datagram: return true
        case .connection(let number): return openConnections.contains(number)
        }
    }

    /// TCP and TLS connections open now (inbound and outbound).
    public var openConnectionCount: Int { openConnections.count }

    private func runningShards() -> [Shard]? {
        state.withLock { state in
            if case .running(let shards, _) = state { return shards }
            return nil
        }
    }

    /// The loop that owns `flow`: a connection's is in its number; a UDP flow's is picked by its peer.
    private func shardIndex(of flow: FlowID) -> Int {
        guard loopCount > 1 else { return 0 }
        switch flow.key {
        case .datagram(_, let peer): return shardIndex(forPeer: peer)
        case .connection(let number): return Int(number % UInt64(loopCount))
        }
    }

    /// The loop for a send to `address`: the owner of the last connection open to it, else the one
    /// its address picks (which opens the connection).
    private func shardIndex(to address: SocketAddress, transport: SIPTransportKind) -> Int {
        guard loopCount > 1 else { return 0 }
        if transport.isReliable, let number = openConnections.latest(to: RemoteKey(transport: transport, address: address)) {
            return Int(number % UInt64(loopCount))
        }
        return shardIndex(forPeer: address)
    }

    private func shardIndex(forPeer peer: SocketAddress) -> Int {
        Int(UInt(bitPattern: peer.hashValue) % UInt(loopCount))
    }
}
