import Glibc

/// Rouse's own SIP load generator: sends OPTIONS requests over one non-blocking UDP socket to a
/// loopback target, keeps a window of requests in flight (or releases them at a fixed rate),
/// matches each response to its request by Call-ID and Via branch, and measures round trips.
///
/// A run is bounded both by a request count and by a sending time; after sending stops it waits
/// for the requests still in flight, each for at most `timeout`. The generator never
/// retransmits: a request unanswered after `timeout` counts as timed out.
///
/// Threading: `run()` blocks the calling thread for the whole run and uses no other thread. A
/// value may be run several times; each run opens and closes its own socket.
struct UDPLoadGenerator {
    /// How requests are released.
    enum Pacing: Sendable {
        /// Closed loop: keep this many requests unanswered at all times.
        case window(Int)
        /// Open loop: release requests at this many per second, whatever the answers, with at most
        /// `maxInFlight` unanswered. Requests due are released on 1 ms ticks (the resolution of
        /// `poll`), so at high rates they leave in small bursts.
        case rate(perSecond: Double, maxInFlight: Int)
    }

    /// What to send, where, and for how long.
    struct Configuration: Sendable {
        /// `127.0.0.1` or `::1`: the generator refuses any other address.
        var host: String
        var port: UInt16
        var pacing: Pacing = .window(64)
        /// At most this many requests are sent.
        var maxRequests: Int = 1_000_000
        /// No request is sent after this much time from the start.
        var duration: Duration = .seconds(3)
        /// A request unanswered for this long counts as timed out.
        var timeout: Duration = .seconds(2)
    }

    /// Why a run could not take place.
    enum Failure: Error, CustomStringConvertible {
        /// The target is not a loopback address.
        case notLoopback(String)
        /// A socket call failed; `errno` at the time.
        case socket(call: String, errno: Int32)

        var description: String {
            switch self {
            case .notLoopback(let host): "load generator target \(host) is not 127.0.0.1 or ::1"
            case .socket(let call, let code): "\(call): \(String(cString: strerror(code)))"
            }
        }
    }

    let configuration: Configuration

    init(configuration: Configuration) throws(Failure) {
        guard configuration.host == "127.0.0.1" || configuration.host == "::1" else {
            throw .notLoopback(configuration.host)
        }
        self.configuration = configuration
    }

    /// Sends the requests, collects the answers and returns what was measured.
    func run() throws(Failure) -> LoadReport {
        let socket = try UDPSocket(connectingTo: configuration.host, port: configuration.port)
        defer { socket.close() }
        var run = LoadRun(configuration: configuration, socket: socket)
        return try run.execute()
    }
}

/// What one run of `UDPLoadGenerator` measured.
struct LoadReport: Sendable {
    /// Requests sent.
    var sent = 0
    /// Requests answered 200.
    var succeeded = 0
    /// Requests answered with a final status other than 200.
    var failed = 0
    /// Requests unanswered after the timeout.
    var timedOut = 0
    /// Datagrams that matched no request in flight (late, duplicated or foreign answers).
    var unmatched = 0
    /// Datagrams the socket refused to send (kept out of `sent`).
    var sendErrors = 0
    /// From the first request sent to the last final answer received.
    var seconds = 0.0
    /// Round-trip time of every request answered with a final status, in nanoseconds, ascending.
    var latencies: [UInt64] = []

    /// Final answers (any status) per second.
    var roundTripsPerSecond: Double { seconds > 0 ? Double(succeeded + failed) / seconds : 0 }

    /// The round-trip time, in microseconds, that `fraction` (0...1) of the answered requests did
    /// not exceed; nil when nothing was answered.
    func latencyMicroseconds(atPercentile fraction: Double) -> Double? {
        guard !latencies.isEmpty else { return nil }
        let rank = Int((fraction * Double(latencies.count)).rounded(.up))
        let index = min(max(rank - 1, 0), latencies.count - 1)
        return Double(latencies[index]) / 1_000
    }
}

/// The state of one run: the requests sent, their send times and fates. Not thread-safe; lives
/// for one `UDPLoadGenerator.run()`.
private struct LoadRun {
    /// What became of a request.
    enum Fate: UInt8 {
        case inFlight, answered, timedOut
    }

    let configuration: UDPLoadGenerator.Configuration
    let socket: UDPSocket
    let template: OptionsTemplate
    /// Indexed by sequence number (a request's position in sending order).
    var sentAt: [UInt64] = []
    var fates: [Fate] = []
    /// Every request before this sequence number has been answered or has timed out.
    var oldestUnresolved = 0
    var inFlight = 0
    var report = LoadReport()
    var lastAnswerAt: UInt64 = 0
    var sendBuffer: [UInt8] = []

    init(configuration: UDPLoadGenerator.Configuration, socket: UDPSocket) {
        self.configuration = configuration
        self.socket = socket
        self.template = OptionsTemplate(
            targetHost: configuration.host, targetPort: configuration.port,
            localHost: configuration.host, localPort: socket.localPort)
        let expected = min(configuration.maxRequests, 1 << 20)
        sentAt.reserveCapacity(expected)
        fates.reserveCapacity(expected)
        report.latencies.reserveCapacity(expected)
        sendBuffer.reserveCapacity(1_024)
    }

    mutating func execute() throws(UDPLoadGenerator.Failure) -> LoadReport {
        let timeout = Self.nanoseconds(configuration.timeout)
        let start = MonotonicClock.now()
        let sendUntil = start &+ Self.nanoseconds(configuration.duration)
        lastAnswerAt = start
        let receiveBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 8)
        defer { receiveBuffer.deallocate() }

        while true {
            let now = MonotonicClock.now()
            let sending = sentAt.count < configuration.maxRequests && now < sendUntil
            if !sending && inFlight == 0 { break }

            var nextWake = now &+ timeout
            var blocked = false
            if sending {
                switch configuration.pacing {
                case .window(let size):
                    while inFlight < max(size, 1) && sentAt.count < configuration.maxRequests {
                        guard try send() else {
                            blocked = true
                            nextWake = now &+ 1_000_000
                            break
                        }
                    }
                    blocked = blocked || inFlight >= max(size, 1)
                case .rate(let perSecond, let maxInFlight):
                    let interval = 1e9 / max(perSecond, 1e-3)
                    var due = start &+ UInt64(Double(sentAt.count) * interval)
                    while due <= now && inFlight < max(maxInFlight, 1) && sentAt.count < configuration.maxRequests {
                        guard try send() else {
                            nextWake = now &+ 1_000_000
                            break
                        }
                        due = start &+ UInt64(Double(sentAt.count) * interval)
                    }
                    nextWake = min(nextWake, due)
                    blocked = true
                }
                nextWake = min(nextWake, sendUntil)
            }

            let received = try receiveAvailable(into: receiveBuffer)
            let afterReceiving = MonotonicClock.now()
            expire(before: afterReceiving, timeout: timeout)
            if let oldest = oldestInFlightSentAt() { nextWake = min(nextWake, oldest &+ timeout) }

            // Wait only when there is nothing to do until an answer arrives or a deadline passes;
            // at least 1 ms, so a full socket buffer or in-flight cap does not spin.
            if received == 0 && (blocked || !sending) && (sending || inFlight > 0) {
                let wait = nextWake > afterReceiving ? nextWake - afterReceiving : 0
                try socket.waitReadable(milliseconds: Int32(min(max((wait + 999_999) / 1_000_000, 1), 1_000)))
            }
        }

        report.sent = sentAt.count
        report.seconds = Double(max(lastAnswerAt, start) - start) / 1e9
        report.latencies.sort()
        return report
    }

    /// Sends the next request; false, counting a send error and consuming no sequence number,
    /// when the socket could not take it for now.
    private mutating func send() throws(UDPLoadGenerator.Failure) -> Bool {
        let sequence = sentAt.count
        template.render(sequence: sequence, into: &sendBuffer)
        let sentTime = MonotonicClock.now()
        guard try socket.send(sendBuffer) else {
            report.sendErrors += 1
            return false
        }
        sentAt.append(sentTime)
        fates.append(.inFlight)
        inFlight += 1
        return true
    }

    /// Reads every datagram waiting on the socket; returns how many there were.
    private mutating func receiveAvailable(into buffer: UnsafeMutableRawBufferPointer) throws(UDPLoadGenerator.Failure) -> Int {
        var count = 0
        while let length = try socket.receive(into: buffer) {
            count += 1
            handle(UnsafeRawBufferPointer(rebasing: buffer[0..<length]), at: MonotonicClock.now())
        }
        return count
    }

    private mutating func handle(_ datagram: UnsafeRawBufferPointer, at now: UInt64) {
        guard let answer = template.match(datagram), answer.sequence < fates.count,
            fates[answer.sequence] == .inFlight
        else {
            report.unmatched += 1
            return
        }
        guard answer.status >= 200 else { return }
        fates[answer.sequence] = .answered
        inFlight -= 1
        if answer.status == 200 { report.succeeded += 1 } else { report.failed += 1 }
        report.latencies.append(now - sentAt[answer.sequence])
        lastAnswerAt = now
        advanceOldest()
    }

    private mutating func expire(before now: UInt64, timeout: UInt64) {
        while oldestUnresolved < fates.count {
            if fates[oldestUnresolved] == .inFlight {
                guard sentAt[oldestUnresolved] &+ timeout <= now else { return }
                fates[oldestUnresolved] = .timedOut
                inFlight -= 1
                report.timedOut += 1
            }
            oldestUnresolved += 1
        }
    }

    private mutating func advanceOldest() {
        while oldestUnresolved < fates.count && fates[oldestUnresolved] != .inFlight { oldestUnresolved += 1 }
    }

    private func oldestInFlightSentAt() -> UInt64? {
        oldestUnresolved < fates.count ? sentAt[oldestUnresolved] : nil
    }

    private static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(max(seconds, 0)) * 1_000_000_000 + UInt64(max(attoseconds, 0) / 1_000_000_000)
    }
}

/// Builds the OPTIONS requests of one run and recognises their answers. Each request carries a
/// run identifier and its sequence number in both its Call-ID and its Via branch, so answers to
/// another run (or to nothing) are told apart from ours.
private struct OptionsTemplate {
    /// An answer recognised as being to one of this run's requests.
    struct Answer {
        var sequence: Int
        var status: Int
    }

    let head: [UInt8]
    let middle: [UInt8]
    let tail: [UInt8]
    let callIDPrefix: [UInt8]
    let branchMarker: [UInt8]

    static let callIDHeader = Array("\r\ncall-id:".utf8)
    static let compactCallIDHeader = Array("\r\ni:".utf8)

    init(targetHost: String, targetPort: UInt16, localHost: String, localPort: UInt16) {
        func hostPort(_ host: String, _ port: UInt16) -> String {
            host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        }
        var generator = SystemRandomNumberGenerator()
        let run = String(generator.next() as UInt64, radix: 36)
        let target = hostPort(targetHost, targetPort)
        let targetName = targetHost.contains(":") ? "[\(targetHost)]" : targetHost
        head = Array(
            "OPTIONS sip:\(target) SIP/2.0\r\nVia: SIP/2.0/UDP \(hostPort(localHost, localPort));rport;branch=z9hG4bK.rb\(run)-"
                .utf8)
        middle = Array(
            "\r\nMax-Forwards: 70\r\nFrom: <sip:rouse-bench@\(targetName)>;tag=\(run)\r\nTo: <sip:\(targetName)>\r\nCall-ID: rb\(run)-"
                .utf8)
        tail = Array(
            "@rouse-bench\r\nCSeq: 1 OPTIONS\r\nAccept: application/sdp\r\nUser-Agent: rouse-bench\r\nContent-Length: 0\r\n\r\n"
                .utf8)
        callIDPrefix = Array("rb\(run)-".utf8)
        branchMarker = Array("branch=z9hG4bK.rb\(run)-".utf8)
    }

    /// Writes request number `sequence` into `buffer`, replacing its contents.
    func render(sequence: Int, into buffer: inout [UInt8]) {
        buffer.removeAll(keepingCapacity: true)
        buffer.append(contentsOf: head)
        Self.appendDecimal(sequence, to: &buffer)
        buffer.append(contentsOf: middle)
        Self.appendDecimal(sequence, to: &buffer)
        buffer.append(contentsOf: tail)
    }

    /// The sequence number and status of a response to one of this run's requests: its status
    /// line well formed, its Call-ID ours, and its Via branch naming the same request.
    func match(_ datagram: UnsafeRawBufferPointer) -> Answer? {
        let statusLine = Array("SIP/2.0 ".utf8)
        guard datagram.count > 12, datagram.starts(with: statusLine) else { return nil }
        var status = 0
        for offset in 8..<11 {
            let digit = datagram[offset]
            guard digit >= UInt8(ascii: "0") && digit <= UInt8(ascii: "9") else { return nil }
            status = status * 10 + Int(digit - UInt8(ascii: "0"))
        }

        guard
            let header = Self.find(Self.callIDHeader, in: datagram, caseInsensitive: true)
                ?? Self.find(Self.compactCallIDHeader, in: datagram, caseInsensitive: true)
        else { return nil }
        var index = header.upperBound
        while index < datagram.count && (datagram[index] == UInt8(ascii: " ") || datagram[index] == UInt8(ascii: "\t")) {
            index += 1
        }
        guard datagram.count - index > callIDPrefix.count,
            UnsafeRawBufferPointer(rebasing: datagram[index..<(index + callIDPrefix.count)]).elementsEqual(callIDPrefix),
            let callSequence = Self.decimal(in: datagram, from: index + callIDPrefix.count)
        else { return nil }

        guard let branch = Self.find(branchMarker, in: datagram, caseInsensitive: false),
            let branchSequence = Self.decimal(in: datagram, from: branch.upperBound),
            branchSequence == callSequence
        else { return nil }
        return Answer(sequence: callSequence, status: status)
    }

    private static func appendDecimal(_ value: Int, to buffer: inout [UInt8]) {
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var remaining = value
        var count = 0
        withUnsafeMutableBytes(of: &digits) { slots in
            repeat {
                slots[count] = UInt8(ascii: "0") + UInt8(remaining % 10)
                remaining /= 10
                count += 1
            } while remaining > 0
            for position in stride(from: count - 1, through: 0, by: -1) { buffer.append(slots[position]) }
        }
    }

    /// The non-negative decimal number starting at `start`, if at least one digit is there.
    private static func decimal(in bytes: UnsafeRawBufferPointer, from start: Int) -> Int? {
        var index = start
        var value = 0
        while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9"),
            index - start < 18
        {
            value = value * 10 + Int(bytes[index] - UInt8(ascii: "0"))
            index += 1
        }
        return index > start ? value : nil
    }

    /// The first occurrence of `needle` (lower-case when `caseInsensitive`) in `haystack`.
    private static func find(_ needle: [UInt8], in haystack: UnsafeRawBufferPointer, caseInsensitive: Bool) -> Range<Int>? {
        guard !needle.isEmpty, haystack.count >= needle.count else { return nil }
        for start in 0...(haystack.count - needle.count) {
            var matched = true
            for offset in 0..<needle.count {
                var byte = haystack[start + offset]
                if caseInsensitive && byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") { byte |= 0x20 }
                if byte != needle[offset] {
                    matched = false
                    break
                }
            }
            if matched { return start..<(start + needle.count) }
        }
        return nil
    }
}

/// A non-blocking UDP socket connected to one loopback peer (so the kernel delivers only that
/// peer's datagrams). Owns its descriptor until `close()`. Not thread-safe.
struct UDPSocket {
    let descriptor: Int32
    let localPort: UInt16

    init(connectingTo host: String, port: UInt16) throws(UDPLoadGenerator.Failure) {
        let isIPv6 = host.contains(":")
        let family = isIPv6 ? AF_INET6 : AF_INET
        let descriptor = Glibc.socket(family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard descriptor >= 0 else { throw .socket(call: "socket", errno: errno) }
        do throws(UDPLoadGenerator.Failure) {
            // Room for a burst of answers while the generator is busy sending.
            var bufferSize: Int32 = 4 << 20
            _ = setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &bufferSize, socklen_t(MemoryLayout<Int32>.size))
            _ = setsockopt(descriptor, SOL_SOCKET, SO_SNDBUF, &bufferSize, socklen_t(MemoryLayout<Int32>.size))

            var storage = sockaddr_storage()
            let length: socklen_t
            if isIPv6 {
                var address = sockaddr_in6()
                address.sin6_family = sa_family_t(AF_INET6)
                address.sin6_port = port.bigEndian
                guard inet_pton(AF_INET6, host, &address.sin6_addr) == 1 else { throw .notLoopback(host) }
                withUnsafeBytes(of: address) { source in
                    withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: source) }
                }
                length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            } else {
                var address = sockaddr_in()
                address.sin_family = sa_family_t(AF_INET)
                address.sin_port = port.bigEndian
                guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { throw .notLoopback(host) }
                withUnsafeBytes(of: address) { source in
                    withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: source) }
                }
                length = socklen_t(MemoryLayout<sockaddr_in>.size)
            }
            let connected = withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, length) }
            }
            guard connected == 0 else { throw .socket(call: "connect", errno: errno) }

            var local = sockaddr_storage()
            var localLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let named = withUnsafeMutablePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &localLength) }
            }
            guard named == 0 else { throw .socket(call: "getsockname", errno: errno) }
            self.localPort = withUnsafeBytes(of: local) { raw in
                isIPv6
                    ? UInt16(bigEndian: raw.loadUnaligned(fromByteOffset: MemoryLayout<sockaddr_in6>.offset(of: \.sin6_port)!, as: UInt16.self))
                    : UInt16(bigEndian: raw.loadUnaligned(fromByteOffset: MemoryLayout<sockaddr_in>.offset(of: \.sin_port)!, as: UInt16.self))
            }
        } catch {
            Glibc.close(descriptor)
            throw error
        }
        self.descriptor = descriptor
    }

    /// Sends one datagram; false when the socket's buffer is full (EAGAIN) or the peer refused it
    /// (ECONNREFUSED from an earlier ICMP error), so the caller may try again later.
    func send(_ bytes: [UInt8]) throws(UDPLoadGenerator.Failure) -> Bool {
        let written = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, 0) }
        if written >= 0 { return true }
        let code = errno
        if code == EAGAIN || code == EWOULDBLOCK || code == ECONNREFUSED || code == ENOBUFS || code == EINTR {
            return false
        }
        throw .socket(call: "send", errno: code)
    }

    /// Reads one waiting datagram; nil when none is waiting.
    func receive(into buffer: UnsafeMutableRawBufferPointer) throws(UDPLoadGenerator.Failure) -> Int? {
        while true {
            let length = recv(descriptor, buffer.baseAddress, buffer.count, 0)
            if length >= 0 { return length }
            let code = errno
            if code == EINTR || code == ECONNREFUSED { continue }
            if code == EAGAIN || code == EWOULDBLOCK { return nil }
            throw .socket(call: "recv", errno: code)
        }
    }

    /// Blocks until a datagram is waiting or `milliseconds` pass.
    func waitReadable(milliseconds: Int32) throws(UDPLoadGenerator.Failure) {
        var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        if poll(&entry, 1, milliseconds) < 0 && errno != EINTR { throw .socket(call: "poll", errno: errno) }
    }

    func close() {
        _ = Glibc.close(descriptor)
    }
}

/// Nanoseconds of CLOCK_MONOTONIC: cheap enough to read around every datagram.
enum MonotonicClock {
    static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
