import Foundation
import Glibc

/// A TCP relay between Rouse and the push stand-in that notes when bytes leave Rouse: Rouse is
/// pointed at the relay's port, the relay passes every byte both ways unchanged (TLS stays end to
/// end), and keeps the monotonic time and size of each chunk Rouse writes. With one call at a time,
/// the first large chunk after an INVITE is that call's push on the wire, with no stand-in work in
/// the figure.
///
/// Threading: one relay thread owns the sockets; the chunk log is read from any thread under a
/// lock. `stop()` ends the thread and closes everything.
final class PushWireTap: @unchecked Sendable {
    // @unchecked: `chunks` and `running` are only touched under `lock`; the sockets belong to the
    // relay thread once it runs.

    /// One write of Rouse's towards the stand-in, as the relay read it.
    struct Chunk: Sendable {
        var at: UInt64
        var bytes: Int
    }

    let port: UInt16
    private let upstreamPort: UInt16
    private let listener: Int32
    private let lock = NSLock()
    private var chunks: [Chunk] = []
    private var running = true
    private var thread: Thread?

    /// Listens on a free loopback port and relays each connection to `127.0.0.1:upstreamPort`.
    init(upstreamPort: UInt16) throws {
        self.upstreamPort = upstreamPort
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) } }
        guard descriptor >= 0, bound == 0, listen(descriptor, 16) == 0 else {
            close(descriptor)
            throw CallBenchmark.Failure(description: "the push wire tap cannot listen on loopback")
        }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) } }
        listener = descriptor
        port = UInt16(bigEndian: address.sin_port)
        let thread = Thread { [self] in relay() }
        thread.name = "rouse-bench push wire tap"
        self.thread = thread
        thread.start()
    }

    deinit {
        stop()
    }

    /// The first chunk of at least `minimumBytes` that Rouse wrote at or after `time` (monotonic
    /// nanoseconds), waiting up to `timeout` seconds for it.
    func firstChunk(after time: UInt64, minimumBytes: Int, timeout: TimeInterval) -> Chunk? {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            lock.lock()
            let found = chunks.first(where: { $0.at >= time && $0.bytes >= minimumBytes })
            lock.unlock()
            if let found { return found }
            guard Date() < deadline else { return nil }
            usleep(100)
        }
    }

    /// Every chunk Rouse wrote at or after `time`.
    func chunks(after time: UInt64) -> [Chunk] {
        lock.lock()
        defer { lock.unlock() }
        return chunks.filter { $0.at >= time }
    }

    func stop() {
        lock.lock()
        let wasRunning = running
        running = false
        lock.unlock()
        guard wasRunning else { return }
        while thread?.isFinished == false { usleep(1_000) }
        close(listener)
    }

    private var isRunning: Bool {
        lock.lock()
        defer { lock.unlock() }
        return running
    }

    /// Accepts connections and pumps bytes until stopped; every socket it opened is closed.
    private func relay() {
        // Pairs of (from Rouse, to the stand-in).
        var pairs: [(rouse: Int32, standIn: Int32)] = []
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: 65_536, alignment: 8)
        defer {
            buffer.deallocate()
            for pair in pairs {
                close(pair.rouse)
                close(pair.standIn)
            }
        }
        while isRunning {
            var polls = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0)]
            for pair in pairs {
                polls.append(pollfd(fd: pair.rouse, events: Int16(POLLIN), revents: 0))
                polls.append(pollfd(fd: pair.standIn, events: Int16(POLLIN), revents: 0))
            }
            guard poll(&polls, nfds_t(polls.count), 50) > 0 else { continue }
            let now = MonotonicClock.now()
            var closed: Set<Int> = []
            for (index, pair) in pairs.enumerated() {
                let fromRouse = polls[1 + index * 2].revents
                let fromStandIn = polls[2 + index * 2].revents
                if fromRouse & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                    let count = read(pair.rouse, buffer, 65_536)
                    if count > 0 {
                        lock.lock()
                        chunks.append(Chunk(at: now, bytes: count))
                        lock.unlock()
                        if !Self.writeAll(pair.standIn, buffer, count) { closed.insert(index) }
                    } else {
                        closed.insert(index)
                    }
                }
                if fromStandIn & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                    let count = read(pair.standIn, buffer, 65_536)
                    if count <= 0 || !Self.writeAll(pair.rouse, buffer, count) { closed.insert(index) }
                }
            }
            for index in closed.sorted(by: >) {
                close(pairs[index].rouse)
                close(pairs[index].standIn)
                pairs.remove(at: index)
            }
            // Accepted after the pairs polled above are served: `polls` has no entries for it yet.
            if polls[0].revents & Int16(POLLIN) != 0 {
                let accepted = accept(listener, nil, nil)
                if accepted >= 0 {
                    if let upstream = Self.connect(port: upstreamPort) {
                        var noDelay: Int32 = 1
                        _ = setsockopt(accepted, Int32(IPPROTO_TCP), TCP_NODELAY, &noDelay, socklen_t(MemoryLayout<Int32>.size))
                        pairs.append((accepted, upstream))
                    } else {
                        close(accepted)
                    }
                }
            }
        }
    }

    private static func writeAll(_ descriptor: Int32, _ bytes: UnsafeMutableRawPointer, _ count: Int) -> Bool {
        var offset = 0
        while offset < count {
            let written = write(descriptor, bytes + offset, count - offset)
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return false }
            offset += written
        }
        return true
    }

    private static func connect(port: UInt16) -> Int32? {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard descriptor >= 0, connected == 0 else {
            close(descriptor)
            return nil
        }
        var noDelay: Int32 = 1
        _ = setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &noDelay, socklen_t(MemoryLayout<Int32>.size))
        return descriptor
    }
}
