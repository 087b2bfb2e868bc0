import Glibc
import SIPMessage

/// The TCP side of the load generators: a fixed set of non-blocking connections to one loopback
/// server, each cut into whole SIP messages by its own `SIPStreamFramer`. A request that the
/// kernel cannot take at once keeps its rest in the connection's queue, written before anything
/// else on that connection. A connection the server closed stays closed (its sends return false).
///
/// Threading: not thread-safe; meant for the one thread of a load generator. Owns its descriptors
/// until `close()`.
final class TCPLoadConnections {
    private struct Connection {
        var descriptor: Int32
        var localPort: UInt16
        var framer = SIPStreamFramer()
        var queued: [UInt8] = []
        var open = true
    }

    private var connections: [Connection] = []
    private var polls: [pollfd] = []
    private let readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 262_144, alignment: 8)
    /// Connections the server closed, or that broke.
    private(set) var closedByPeer = 0

    /// Opens `count` connections to `host:port` (blocking connects, then non-blocking sockets).
    init(host: String, port: UInt16, count: Int) throws(UDPLoadGenerator.Failure) {
        guard host == "127.0.0.1" else { throw .notLoopback(host) }
        do throws(UDPLoadGenerator.Failure) {
            for _ in 0..<max(count, 1) { connections.append(try Self.connect(host: host, port: port)) }
        } catch {
            for connection in connections { Glibc.close(connection.descriptor) }
            readBuffer.deallocate()
            throw error
        }
        polls = connections.map { pollfd(fd: $0.descriptor, events: Int16(POLLIN), revents: 0) }
    }

    deinit {
        close()
        readBuffer.deallocate()
    }

    var count: Int { connections.count }

    /// The local port of connection `index` (what its requests put in Via and Contact).
    func localPort(_ index: Int) -> UInt16 { connections[index].localPort }

    /// Writes `bytes` on connection `index`, queueing what the kernel does not take now; false
    /// when the connection is closed.
    func send(_ bytes: [UInt8], on index: Int) throws(UDPLoadGenerator.Failure) -> Bool {
        guard connections[index].open else { return false }
        if !connections[index].queued.isEmpty {
            connections[index].queued.append(contentsOf: bytes)
            try flush(index)
            return connections[index].open
        }
        let written = bytes.withUnsafeBytes { Glibc.send(connections[index].descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if written == bytes.count { return true }
        if written >= 0 {
            connections[index].queued.append(contentsOf: bytes[written...])
            return true
        }
        let code = errno
        if code == EAGAIN || code == EWOULDBLOCK || code == EINTR {
            connections[index].queued.append(contentsOf: bytes)
            return true
        }
        markClosed(index)
        return false
    }

    /// Reads what every connection has waiting and passes each whole message to `handle`; returns
    /// how many messages there were. Also writes queued bytes the kernel can now take.
    func receiveAvailable(_ handle: (UnsafeRawBufferPointer) -> Void) throws(UDPLoadGenerator.Failure) -> Int {
        try poll(milliseconds: 0)
        var messages = 0
        for index in connections.indices {
            let events = polls[index].revents
            if events & Int16(POLLOUT) != 0 { try flush(index) }
            guard events & Int16(POLLIN | POLLHUP | POLLERR) != 0, connections[index].open else { continue }
            while true {
                let length = recv(connections[index].descriptor, readBuffer.baseAddress, readBuffer.count, 0)
                if length > 0 {
                    connections[index].framer.append(UnsafeRawBufferPointer(rebasing: readBuffer[0..<length]))
                    continue
                }
                let code = errno
                if length < 0 && (code == EAGAIN || code == EWOULDBLOCK) { break }
                if length < 0 && code == EINTR { continue }
                markClosed(index)
                break
            }
            while true {
                let event: SIPStreamFramer.Event?
                do {
                    event = try connections[index].framer.next()
                } catch {
                    markClosed(index)
                    break
                }
                guard let event else { break }
                if case .message(let bytes) = event {
                    messages += 1
                    bytes.withUnsafeBytes { handle($0) }
                }
            }
        }
        return messages
    }

    /// Blocks until a connection has bytes to read (or can take queued bytes), or `milliseconds` pass.
    func waitReadable(milliseconds: Int32) throws(UDPLoadGenerator.Failure) {
        try poll(milliseconds: milliseconds)
    }

    func close() {
        for index in connections.indices where connections[index].descriptor >= 0 {
            Glibc.close(connections[index].descriptor)
            connections[index].descriptor = -1
            connections[index].open = false
        }
    }

    private func poll(milliseconds: Int32) throws(UDPLoadGenerator.Failure) {
        for index in polls.indices {
            polls[index].events = Int16(POLLIN) | (connections[index].queued.isEmpty ? 0 : Int16(POLLOUT))
            polls[index].revents = 0
            if !connections[index].open { polls[index].fd = -1 }
        }
        if Glibc.poll(&polls, nfds_t(polls.count), milliseconds) < 0 && errno != EINTR {
            throw .socket(call: "poll", errno: errno)
        }
    }

    private func flush(_ index: Int) throws(UDPLoadGenerator.Failure) {
        while connections[index].open && !connections[index].queued.isEmpty {
            let written = connections[index].queued.withUnsafeBytes {
                Glibc.send(connections[index].descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            if written > 0 {
                connections[index].queued.removeFirst(written)
                continue
            }
            let code = errno
            if written < 0 && (code == EAGAIN || code == EWOULDBLOCK) { return }
            if written < 0 && code == EINTR { continue }
            markClosed(index)
        }
    }

    private func markClosed(_ index: Int) {
        guard connections[index].open else { return }
        connections[index].open = false
        closedByPeer += 1
    }

    private static func connect(host: String, port: UInt16) throws(UDPLoadGenerator.Failure) -> Connection {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw .socket(call: "socket", errno: errno) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
            Glibc.close(descriptor)
            throw .notLoopback(host)
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            let code = errno
            Glibc.close(descriptor)
            throw .socket(call: "connect", errno: code)
        }
        var noDelay: Int32 = 1
        _ = setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &noDelay, socklen_t(MemoryLayout<Int32>.size))
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
        var local = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) } }
        return Connection(descriptor: descriptor, localPort: UInt16(bigEndian: local.sin_port))
    }
}
