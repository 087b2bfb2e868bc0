import CLinuxShims
import Glibc
import RouseVocabulary
import SIPMessage

/// A TCP/TLS peer: the transport and the remote address of a connection.
struct RemoteKey: Hashable, Sendable {
    let transport: SIPTransportKind
    let address: SocketAddress
}

/// The TCP/TLS connections currently open on every loop of a layer, by number and by peer, readable
/// from any thread (which loop owns a connection is in its number: `SIPTransportLayer.shardIndex`).
/// Thread-safe (a lock); written by the loop threads as connections open and close.
final class OpenConnections: Sendable {
    private struct Table {
        var remotes: [UInt64: RemoteKey] = [:]
        var byRemote: [RemoteKey: [UInt64]] = [:]
    }

    private let table = Locked(Table())

    func insert(_ number: UInt64, remote: RemoteKey) {
        table.withLock { table in
            table.remotes[number] = remote
            table.byRemote[remote, default: []].append(number)
        }
    }

    func remove(_ number: UInt64) {
        table.withLock { table in
            guard let remote = table.remotes.removeValue(forKey: number) else { return }
            table.byRemote[remote]?.removeAll { $0 == number }
            if table.byRemote[remote]?.isEmpty == true { table.byRemote[remote] = nil }
        }
    }

    func contains(_ number: UInt64) -> Bool { table.withLock { $0.remotes[number] != nil } }
    var count: Int { table.withLock { $0.remotes.count } }

    /// The connection to `remote` opened last, on whichever loop.
    func latest(to remote: RemoteKey) -> UInt64? { table.withLock { $0.byRemote[remote]?.last } }
}

/// The sockets of one loop of a running `SIPTransportLayer`: its UDP sockets (one per UDP listen point,
/// sharing the port with the other loops' through SO_REUSEPORT when there are several), its TCP/TLS
/// listeners and the connections it accepted or opened. Confined to its event loop thread once
/// `SIPTransportLayer.start()` has handed it over.
final class TransportCore: @unchecked Sendable {
    // @unchecked Sendable: built on the starting thread before the loop thread exists, then touched only
    // on the loop thread (the layer reaches it through `EventLoop.execute`). `openConnections` is a
    // thread-safe registry of its own.
    struct UDPSocket {
        let point: ListenPoint
        let socket: Socket
    }

    struct StreamListener {
        let point: ListenPoint
        let socket: Socket
        var token: UInt64 = 0
    }

    let loop: EventLoop
    let limits: TransportLimits
    let readBuffer: UnsafeMutableRawBufferPointer
    private let onPacket: @Sendable (InboundPacket) -> Void
    private let onFlowClosed: (@Sendable (FlowID, FlowCloseReason) -> Void)?
    /// Replaced by `replaceServerTLS` (SIGHUP); connections already open keep their sessions.
    private var serverTLS: TLSContext?
    private let clientTLS: TLSContext
    private let openConnections: OpenConnections
    private(set) var udpSockets: [UDPSocket] = []
    private var listeners: [StreamListener] = []
    private var connections: [UInt64: StreamConnection] = [:]
    /// Connection numbers are `shard + k × shardCount` (k from 1), so the number names its loop.
    private let shardCount: UInt64
    private var nextConnectionNumber: UInt64
    private var isShutDown = false
    /// The UDP peers' addresses already read (no `inet_ntop` per datagram).
    private var peers = PeerAddressCache()

    init(
        loop: EventLoop, shard: Int = 0, of shardCount: Int = 1, limits: TransportLimits, serverTLS: TLSContext?, clientTLS: TLSContext,
        openConnections: OpenConnections, onPacket: @escaping @Sendable (InboundPacket) -> Void,
        onFlowClosed: (@Sendable (FlowID, FlowCloseReason) -> Void)?
    ) {
        self.loop = loop
        self.shardCount = UInt64(shardCount)
        nextConnectionNumber = UInt64(shard + shardCount)
        self.limits = limits
        self.serverTLS = serverTLS
        self.clientTLS = clientTLS
        self.openConnections = openConnections
        self.onPacket = onPacket
        self.onFlowClosed = onFlowClosed
        readBuffer = .allocate(byteCount: 65_536 + 1, alignment: 8)
    }

    deinit {
        readBuffer.deallocate()
    }

    // MARK: binding (on the starting thread, before the loop runs)

    /// Binds `point` and registers it with the loop; returns the point with its bound port.
    /// `reusePort`: SO_REUSEPORT, so each loop binds a socket of its own to the same port.
    func bind(_ point: ListenPoint, reusePort: Bool = false) throws(SIPTransportError) -> ListenPoint {
        func failure(_ reason: String) -> SIPTransportError { .cannotListen(point, reason: reason) }
        let (socket, boundPoint) = try TransportCore.boundSocket(point, reusePort: reusePort)
        if point.transport != .udp {
            guard Glibc.listen(socket.fd, 1024) == 0 else { throw failure(errnoText()) }
        }
        if point.transport == .udp {
            let index = udpSockets.count
            do {
                _ = try loop.register(fd: socket.fd, events: EPOLLIN.rawValue) { [unowned self] _ in
                    receiveDatagrams(on: index)
                }
            } catch {
                throw failure(error.description)
            }
            udpSockets.append(UDPSocket(point: boundPoint, socket: socket))
        } else {
            let index = listeners.count
            listeners.append(StreamListener(point: boundPoint, socket: socket))
            do {
                listeners[index].token = try loop.register(fd: socket.fd, events: EPOLLIN.rawValue) { [unowned self] _ in
                    acceptConnections(on: index)
                }
            } catch {
                listeners.removeLast()
                throw failure(error.description)
            }
        }
        return boundPoint
    }

    /// The port `point` binds to (the kernel's choice for port 0), from a socket bound without
    /// SO_REUSEPORT and closed at once: the loops' SO_REUSEPORT sockets then share that port, and a
    /// port another process holds (even another Rouse, whose sockets have SO_REUSEPORT too) fails
    /// here, as it does with one loop.
    static func probePort(_ point: ListenPoint) throws(SIPTransportError) -> UInt16 {
        let (socket, bound) = try boundSocket(point, reusePort: false)
        socket.close()
        return bound.port
    }

    /// A socket bound to `point` (not yet listening), and the point with the port bound.
    private static func boundSocket(_ point: ListenPoint, reusePort: Bool) throws(SIPTransportError) -> (Socket, ListenPoint) {
        func failure(_ reason: String) -> SIPTransportError { .cannotListen(point, reason: reason) }
        let address: SocketAddress
        do {
            address = try SocketAddress(ip: point.host, port: point.port)
        } catch {
            throw failure("\"\(point.host)\" is not an IP address")
        }
        let socket: Socket
        do {
            socket = try Socket(family: address.family, type: point.transport == .udp ? SOCK_DGRAM : SOCK_STREAM)
        } catch {
            throw failure(error.description)
        }
        if address.isIPv6 { socket.setOption(level: Int32(IPPROTO_IPV6), name: IPV6_V6ONLY, value: 1) }
        if point.transport != .udp { socket.setOption(level: SOL_SOCKET, name: SO_REUSEADDR, value: 1) }
        if reusePort { socket.setOption(level: SOL_SOCKET, name: SO_REUSEPORT, value: 1) }
        if point.transport == .udp {
            // Bursts of REGISTERs from thousands of phones overflow the default ~200 KiB receive
            // buffer and are dropped by the kernel; 8 MiB rides them out. SO_RCVBUFFORCE passes the
            // net.core.rmem_max cap when Rouse may (CAP_NET_ADMIN); otherwise SO_RCVBUF takes what
            // the cap allows.
            socket.setOption(level: SOL_SOCKET, name: SO_RCVBUF, value: 8 << 20)
            socket.setOption(level: SOL_SOCKET, name: SO_RCVBUFFORCE, value: 8 << 20)
        }
        let bound = address.withSockAddr { Glibc.bind(socket.fd, $0, $1) }
        guard bound == 0 else { throw failure(errnoText()) }
        guard let actual = socket.localAddress() else { throw failure("getsockname: \(errnoText())") }
        return (socket, ListenPoint(transport: point.transport, host: point.host, port: actual.port))
    }

    // MARK: UDP

    private func receiveDatagrams(on index: Int) {
        let udp = udpSockets[index]
        for _ in 0..<64 {
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let count = withUnsafeMutablePointer(to: &storage) { raw in
                raw.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.recvfrom(udp.socket.fd, readBuffer.baseAddress, readBuffer.count, Int32(MSG_TRUNC), $0, &length)
                }
            }
            if count < 0 {
                if errno == EINTR { continue }
                return
            }
            // Oversized (or truncated) datagrams are dropped; so are empty ones and RFC 5626 CRLF keep-alives.
            guard count > 0, count <= limits.framing.maxMessageBytes, count < readBuffer.count else { continue }
            let bytes = [UInt8](UnsafeRawBufferPointer(rebasing: readBuffer[0..<count]))
            guard bytes.contains(where: { $0 != 0x0D && $0 != 0x0A }) else { continue }
            guard let source = peers.address(of: &storage) else { continue }
            // RFC 5626 §8: a STUN Binding request on the SIP port is a keep-alive, answered here.
            if STUNMessage.looksLikeSTUN(bytes) {
                if let answer = STUNKeepAliveResponder.response(to: bytes, fromIP: source.ipBytes, port: source.port) {
                    _ = DatagramSockets.send(answer, fd: udpSockets[index].socket.fd, socket: index, to: source)
                }
                continue
            }
            let flow = FlowID(.datagram(socket: index, peer: source), transport: .udp)
            onPacket(InboundPacket(bytes: bytes, flow: flow, transport: .udp, source: source, local: udp.point))
        }
    }

    /// Its UDP sockets, for `DatagramSockets`: the layer sends datagrams from any thread.
    var datagramSockets: [DatagramSockets.Socket] {
        udpSockets.map { DatagramSockets.Socket(fd: $0.socket.fd, isIPv6: $0.point.isIPv6) }
    }

    // MARK: TCP and TLS

    private func acceptConnections(on index: Int) {
        let listener = listeners[index]
        for _ in 0..<64 {
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let fd = withUnsafeMutablePointer(to: &storage) { raw in
                raw.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.accept(listener.socket.fd, $0, &length)
                }
            }
            if fd < 0 {
                let code = errno
                if code == EINTR || code == ECONNABORTED { continue }
                if code == EMFILE || code == ENFILE || code == ENOBUFS || code == ENOMEM {
                    pauseAccepting(on: index)
                }
                return
            }
            let socket = Socket(fd: fd)
            socket.makeNonBlockingAndCloseOnExec()
            guard openConnections.count < limits.maxConnections, !isShutDown, let remote = SocketAddress(storage: storage) else {
                continue  // refused: `socket` closes on release
            }
            socket.setOption(level: Int32(IPPROTO_TCP), name: TCP_NODELAY, value: 1)
            var session: TLSSession?
            if listener.point.transport == .tls {
                guard let serverTLS, let made = try? TLSSession(context: serverTLS, isServer: true, peerIP: nil) else { continue }
                session = made
            }
            let connection = StreamConnection(
                number: takeConnectionNumber(), transport: listener.point.transport, socket: socket, remote: remote,
                local: listener.point, isOutbound: false, phase: session == nil ? .open : .handshaking, tls: session,
                core: self)
            add(connection)
        }
    }

    /// Out of descriptors: stop accepting for a moment instead of spinning on a readable listener.
    private func pauseAccepting(on index: Int) {
        let listener = listeners[index]
        loop.modify(fd: listener.socket.fd, token: listener.token, events: 0)
        _ = loop.schedule(after: .milliseconds(100)) { [unowned self] in
            guard !isShutDown else { return }
            loop.modify(fd: listener.socket.fd, token: listener.token, events: EPOLLIN.rawValue)
        }
    }

    private func takeConnectionNumber() -> UInt64 {
        defer { nextConnectionNumber += shardCount }
        return nextConnectionNumber
    }

    private func add(_ connection: StreamConnection) {
        connections[connection.number] = connection
        openConnections.insert(connection.number, remote: RemoteKey(transport: connection.transport, address: connection.remote))
        do {
            try connection.activate()
        } catch {
            connection.close(.ioError(error.description))
        }
    }

    /// Opens a connection to `remote` (non-blocking connect); writes wait until it is open.
    private func connect(to remote: SocketAddress, transport: SIPTransportKind) -> Result<StreamConnection, SIPTransportError> {
        guard openConnections.count < limits.maxConnections else { return .failure(.tooManyConnections) }
        let socket: Socket
        do {
            socket = try Socket(family: remote.family, type: SOCK_STREAM)
        } catch {
            return .failure(error)
        }
        socket.setOption(level: Int32(IPPROTO_TCP), name: TCP_NODELAY, value: 1)
        var session: TLSSession?
        if transport == .tls {
            do {
                session = try TLSSession(context: clientTLS, isServer: false, peerIP: remote.ip)
            } catch {
                return .failure(error)
            }
        }
        var result: Int32
        repeat {
            result = remote.withSockAddr { Glibc.connect(socket.fd, $0, $1) }
        } while result != 0 && errno == EINTR
        let phase: StreamConnection.Phase
        if result == 0 {
            phase = session == nil ? .open : .handshaking
        } else if errno == EINPROGRESS {
            phase = .connecting
        } else {
            return .failure(.io("connect \(remote): \(errnoText())"))
        }
        let local = socket.localAddress().map { localPoint(for: transport, connectedFrom: $0) }
            ?? ListenPoint(transport: transport, host: remote.isIPv6 ? "::" : "0.0.0.0", port: 0)
        let connection = StreamConnection(
            number: takeConnectionNumber(), transport: transport, socket: socket, remote: remote, local: local,
            isOutbound: true, phase: phase, tls: session, core: self)
        add(connection)
        return .success(connection)
    }

    /// New TLS connections use `context` from now on. Loop thread.
    func replaceServerTLS(_ context: TLSContext) {
        serverTLS = context
    }

    /// The flow of an open connection to `remote`, else of a new one (connecting without blocking;
    /// what is sent waits for the connection). Loop thread.
    func streamFlow(to remote: SocketAddress, transport: SIPTransportKind) -> FlowID? {
        guard !isShutDown else { return nil }
        if let connection = openConnection(to: remote, transport: transport) { return connection.flow }
        guard case .success(let connection) = connect(to: remote, transport: transport) else { return nil }
        return connection.flow
    }

    /// This loop's open connection to `remote` opened last (nil when the last one lives on another loop).
    private func openConnection(to remote: SocketAddress, transport: SIPTransportKind) -> StreamConnection? {
        openConnections.latest(to: RemoteKey(transport: transport, address: remote)).flatMap { connections[$0] }
    }

    /// The listen point an outbound connection's traffic is reported on: the listener of the same
    /// transport and family, else the connection's own local address.
    func localPoint(for transport: SIPTransportKind, connectedFrom address: SocketAddress) -> ListenPoint {
        if let listener = listeners.first(where: { $0.point.transport == transport && $0.point.isIPv6 == address.isIPv6 }) {
            return listener.point
        }
        return ListenPoint(transport: transport, host: address.ip, port: address.port)
    }

    func deliver(_ message: [UInt8], from connection: StreamConnection) {
        onPacket(InboundPacket(
            bytes: message, flow: connection.flow, transport: connection.transport, source: connection.remote,
            local: connection.local))
    }

    func connectionClosed(_ connection: StreamConnection, reason: FlowCloseReason) {
        connections[connection.number] = nil
        openConnections.remove(connection.number)
        onFlowClosed?(connection.flow, reason)
    }

    // MARK: sending (loop thread)

    /// Sends over TCP/TLS connection `number` (UDP flows are sent by `DatagramSockets`, off the loop).
    func send(_ bytes: [UInt8], overConnection number: UInt64, transport: SIPTransportKind, completion: SIPTransportLayer.SendCompletion?) {
        guard !isShutDown else {
            completion?(.failure(.notRunning))
            return
        }
        guard let connection = connections[number], connection.transport == transport else {
            completion?(.failure(.flowNotOpen(FlowID(.connection(number), transport: transport))))
            return
        }
        connection.write(bytes, completion: completion)
    }

    /// Sends over an open TCP/TLS connection to `address`, else over a new one.
    func send(_ bytes: [UInt8], to address: SocketAddress, transport: SIPTransportKind, completion: SIPTransportLayer.SendCompletion?) {
        guard !isShutDown else {
            completion?(.failure(.notRunning))
            return
        }
        if let connection = openConnection(to: address, transport: transport) {
            connection.write(bytes, completion: completion)
            return
        }
        switch connect(to: address, transport: transport) {
        case .success(let connection):
            connection.write(bytes, completion: completion)
        case .failure(let error):
            completion?(.failure(error))
        }
    }

    /// Closes every connection and socket (loop thread, as the loop stops).
    func shutDown() {
        isShutDown = true
        for connection in Array(connections.values) { connection.close(.shutdown) }
        for listener in listeners {
            loop.deregister(fd: listener.socket.fd, token: listener.token)
            listener.socket.close()
        }
        for udp in udpSockets { udp.socket.close() }
    }
}
