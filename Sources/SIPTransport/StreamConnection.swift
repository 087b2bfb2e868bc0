import CLinuxShims
import Glibc
import RouseVocabulary
import SIPMessage

/// One TCP or TLS connection: its socket, framer, TLS session, write queue and deadlines. Not
/// thread-safe: owned by the event loop thread through `TransportCore`.
final class StreamConnection {
    enum Phase {
        case connecting
        case handshaking
        case open
        case closed
    }

    private struct PendingWrite {
        var bytes: [UInt8]
        var offset = 0
        var completion: SIPTransportLayer.SendCompletion?
    }

    let number: UInt64
    let flow: FlowID
    let remote: SocketAddress
    private(set) var local: ListenPoint
    let isOutbound: Bool
    private(set) var phase: Phase
    private unowned let core: TransportCore
    private let socket: Socket
    private var token: UInt64 = 0
    private var tls: TLSSession?
    private var framer: SIPStreamFramer
    /// Encrypted (or plain TCP) bytes for the socket, from `writeHead` on.
    private var writes: [PendingWrite] = []
    private var writeHead = 0
    private var queuedBytes = 0
    /// Plaintext accepted before the connection is open (connecting, handshaking).
    private var held: [PendingWrite] = []
    private var heldBytes = 0
    private var watchingWrites = false
    private var lastReceived = ContinuousClock.now
    private var idleTimer: UInt64?
    private var deadlineTimer: UInt64?

    init(
        number: UInt64, transport: SIPTransportKind, socket: Socket, remote: SocketAddress, local: ListenPoint,
        isOutbound: Bool, phase: Phase, tls: TLSSession?, core: TransportCore
    ) {
        self.number = number
        self.flow = FlowID(.connection(number), transport: transport)
        self.socket = socket
        self.remote = remote
        self.local = local
        self.isOutbound = isOutbound
        self.phase = phase
        self.tls = tls
        self.core = core
        self.framer = SIPStreamFramer(limits: core.limits.framing)
    }

    var transport: SIPTransportKind { flow.transport }

    /// Registers with the loop and arms the deadlines; the connection is live afterwards.
    func activate() throws(SIPTransportError) {
        let interest = phase == .connecting ? Interest.write : Interest.read
        token = try core.loop.register(fd: socket.fd, events: interest) { [unowned self] events in
            handle(events)
        }
        watchingWrites = phase == .connecting
        armIdleTimer(after: core.limits.idleTimeout)
        switch phase {
        case .connecting:
            armDeadline(after: core.limits.connectTimeout)
        case .handshaking:
            armDeadline(after: isOutbound ? core.limits.connectTimeout : core.limits.tlsHandshakeTimeout)
            if isOutbound { advanceHandshake() }
        case .open, .closed:
            break
        }
    }

    // MARK: writing

    /// Queues one message (or a keep-alive pong); `completion` runs once it is all handed to the kernel.
    func write(_ bytes: [UInt8], completion: SIPTransportLayer.SendCompletion?) {
        switch phase {
        case .closed:
            completion?(.failure(.flowNotOpen(flow)))
        case .connecting, .handshaking:
            guard heldBytes + bytes.count <= core.limits.maxWriteQueueBytes else {
                completion?(.failure(.connectionClosed(flow, .writeQueueFull)))
                close(.writeQueueFull)
                return
            }
            held.append(PendingWrite(bytes: bytes, completion: completion))
            heldBytes += bytes.count
        case .open:
            if let tls {
                do {
                    try tls.write(bytes)
                } catch {
                    completion?(.failure(.connectionClosed(flow, .tlsError(error.description))))
                    close(.tlsError(error.description))
                    return
                }
                queue(tls.takeOutput(), completion: completion)
            } else {
                queue(bytes, completion: completion)
            }
        }
    }

    private func queue(_ bytes: [UInt8], completion: SIPTransportLayer.SendCompletion?) {
        guard queuedBytes + bytes.count <= core.limits.maxWriteQueueBytes else {
            completion?(.failure(.connectionClosed(flow, .writeQueueFull)))
            close(.writeQueueFull)
            return
        }
        writes.append(PendingWrite(bytes: bytes, completion: completion))
        queuedBytes += bytes.count
        flush()
    }

    /// Sends TLS records OpenSSL produced (handshake messages, alerts).
    private func flushTLSOutput() {
        guard let tls, phase != .closed else { return }
        let output = tls.takeOutput()
        if !output.isEmpty { queue(output, completion: nil) }
    }

    private func flush() {
        while writeHead < writes.count, phase != .closed {
            let result = writes[writeHead].bytes.withUnsafeBytes { bytes in
                let offset = writes[writeHead].offset
                return Glibc.send(socket.fd, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            }
            if result < 0 {
                let code = errno
                if code == EINTR { continue }
                if code == EAGAIN || code == EWOULDBLOCK { break }
                close(code == EPIPE || code == ECONNRESET ? .peerClosed : .ioError("send: \(errnoText(code))"))
                return
            }
            writes[writeHead].offset += result
            queuedBytes -= result
            if writes[writeHead].offset == writes[writeHead].bytes.count {
                let completion = writes[writeHead].completion
                writes[writeHead] = PendingWrite(bytes: [])
                writeHead += 1
                completion?(.success(flow))
            }
        }
        guard phase != .closed else { return }
        if writeHead == writes.count {
            writes.removeAll(keepingCapacity: true)
            writeHead = 0
        } else if writeHead > 64, writeHead * 2 > writes.count {
            writes.removeFirst(writeHead)
            writeHead = 0
        }
        setWatchingWrites(writeHead < writes.count)
    }

    private func setWatchingWrites(_ watch: Bool) {
        guard watch != watchingWrites, phase != .closed else { return }
        watchingWrites = watch
        core.loop.modify(fd: socket.fd, token: token, events: watch ? Interest.readWrite : Interest.read)
    }

    // MARK: events

    private func handle(_ events: UInt32) {
        if phase == .connecting {
            if events & (Interest.write | Interest.closedOrError) != 0 { finishConnect() }
            return
        }
        if events & (EPOLLIN.rawValue | Interest.closedOrError) != 0 { readable() }
        if phase != .closed, events & Interest.write != 0 { flush() }
    }

    private func finishConnect() {
        let code = socket.pendingError()
        guard code == 0 else {
            close(.connectFailed(errnoText(code)))
            return
        }
        if let address = socket.localAddress() {
            local = core.localPoint(for: transport, connectedFrom: address)
        }
        watchingWrites = false
        core.loop.modify(fd: socket.fd, token: token, events: Interest.read)
        if tls != nil {
            phase = .handshaking
            advanceHandshake()
        } else {
            becomeOpen()
        }
    }

    private func becomeOpen() {
        phase = .open
        lastReceived = .now
        if let deadlineTimer { core.loop.cancelTimer(deadlineTimer) }
        deadlineTimer = nil
        let pending = held
        held = []
        heldBytes = 0
        for write in pending {
            self.write(write.bytes, completion: write.completion)
        }
    }

    private func advanceHandshake() {
        guard let tls else { return }
        switch tls.handshake() {
        case .done:
            flushTLSOutput()
            if phase != .closed { becomeOpen() }
        case .needMoreInput:
            flushTLSOutput()
        case .failed(let reason):
            flushTLSOutput()
            close(.tlsError(reason))
        }
    }

    private func readable() {
        let buffer = core.readBuffer
        let count = Glibc.recv(socket.fd, buffer.baseAddress, buffer.count, 0)
        if count < 0 {
            let code = errno
            if code == EAGAIN || code == EWOULDBLOCK || code == EINTR { return }
            close(code == ECONNRESET ? .peerClosed : .ioError("recv: \(errnoText(code))"))
            return
        }
        if count == 0 {
            close(.peerClosed)
            return
        }
        let received = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
        guard let tls else {
            frame(received)
            return
        }
        tls.feed(received)
        if phase == .handshaking {
            advanceHandshake()
            guard phase == .open else { return }
        }
        while phase == .open {
            switch tls.read() {
            case .data(let plaintext):
                plaintext.withUnsafeBytes { frame($0) }
            case .needMoreInput:
                flushTLSOutput()
                return
            case .closed:
                close(.peerClosed)
                return
            case .failed(let reason):
                close(.tlsError(reason))
                return
            }
        }
    }

    /// Cuts plaintext into messages, answering keep-alive pings (RFC 5626 §3.5.1). The idle clock
    /// restarts only on a whole message or ping (or when nothing partial is left), so a peer that
    /// trickles a message a byte at a time (slowloris) is still closed after `idleTimeout`.
    private func frame(_ bytes: UnsafeRawBufferPointer) {
        framer.append(bytes)
        defer { if framer.bufferedByteCount == 0 { lastReceived = .now } }
        while phase == .open {
            let event: SIPStreamFramer.Event?
            do {
                event = try framer.next()
            } catch {
                close(.framingError(error.description))
                return
            }
            switch event {
            case .message(let message):
                lastReceived = .now
                core.deliver(message, from: self)
            case .keepAlivePing:
                lastReceived = .now
                write([0x0D, 0x0A], completion: nil)
            case nil:
                return
            }
        }
    }

    // MARK: deadlines

    private func armIdleTimer(after delay: Duration) {
        idleTimer = core.loop.schedule(after: delay) { [unowned self] in
            idleTimer = nil
            let quietFor = lastReceived.duration(to: .now)
            if quietFor >= core.limits.idleTimeout {
                close(.idleTimeout)
            } else {
                armIdleTimer(after: core.limits.idleTimeout - quietFor)
            }
        }
    }

    private func armDeadline(after delay: Duration) {
        deadlineTimer = core.loop.schedule(after: delay) { [unowned self] in
            deadlineTimer = nil
            if phase == .connecting || phase == .handshaking { close(.handshakeTimeout) }
        }
    }

    // MARK: closing

    /// Closes the socket, fails every write not yet sent and tells the core. Idempotent.
    func close(_ reason: FlowCloseReason) {
        guard phase != .closed else { return }
        let wasOpen = phase == .open
        phase = .closed
        if let idleTimer { core.loop.cancelTimer(idleTimer) }
        if let deadlineTimer { core.loop.cancelTimer(deadlineTimer) }
        idleTimer = nil
        deadlineTimer = nil
        if wasOpen, let tls, reason == .idleTimeout || reason == .shutdown {
            tls.close()
            let alert = tls.takeOutput()
            alert.withUnsafeBytes { _ = Glibc.send(socket.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
        }
        if token != 0 { core.loop.deregister(fd: socket.fd, token: token) }
        socket.close()
        tls = nil
        let failed = writes[writeHead...].compactMap(\.completion) + held.compactMap(\.completion)
        writes = []
        held = []
        queuedBytes = 0
        heldBytes = 0
        core.connectionClosed(self, reason: reason)
        for completion in failed {
            completion(.failure(.connectionClosed(flow, reason)))
        }
    }
}
