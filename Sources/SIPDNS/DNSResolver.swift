import Dispatch
public import Foundation
import Glibc
import RouseVocabulary

/// What one question came back with.
public enum DNSLookupResult: Sendable, Hashable {
    /// The records of the answer and additional sections (empty: the name has no such record).
    case records([DNSRecord])
    /// NXDOMAIN.
    case noSuchName
    /// No server answered in time, or each answered with an error: in words, for journeys and logs.
    case failed(String)

    public var records: [DNSRecord] {
        if case .records(let records) = self { return records }
        return []
    }
}

/// A stub resolver for Rouse's own lookups (RFC 3263 next hops): asks the configured servers (by
/// default those of /etc/resolv.conf) over UDP, again over TCP when the answer is truncated, with a
/// deadline per attempt, and keeps answers for their TTL (capped at `maximumCacheAge`). Each lookup
/// blocks a thread of its own queue, never the caller's: `lookUp` and `locate` are async. Thread-safe:
/// the cache is only touched under `lock`.
public final class DNSResolver: @unchecked Sendable {
    public let servers: [(ip: String, port: UInt16)]
    public let timeout: Duration
    public let attempts: Int
    public let maximumCacheAge: TimeInterval
    private let queue = DispatchQueue(label: "rouse.dns", attributes: .concurrent)
    private let lock = NSLock()
    private var cache: [DNSQuestion: (result: DNSLookupResult, until: Date)] = [:]
    private let cacheLimit = 10_000

    /// - Parameters:
    ///   - servers: name servers to ask, in order; an empty list uses /etc/resolv.conf's.
    ///   - timeout: how long one attempt at one server waits.
    ///   - attempts: how many times each server is tried.
    public init(servers: [(ip: String, port: UInt16)] = [], timeout: Duration = .seconds(2), attempts: Int = 2, maximumCacheAge: TimeInterval = 300) {
        self.servers = servers.isEmpty ? DNSResolver.systemServers() : servers
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.maximumCacheAge = maximumCacheAge
    }

    /// The `nameserver` lines of a resolv.conf (port 53), 127.0.0.1 when there are none (as glibc does).
    public static func systemServers(resolvConf path: String = "/etc/resolv.conf") -> [(ip: String, port: UInt16)] {
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        var servers: [(ip: String, port: UInt16)] = []
        for line in text.split(whereSeparator: \.isNewline) {
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            if words.count >= 2, words[0] == "nameserver" {
                let ip = String(words[1].split(separator: "%").first ?? words[1])
                servers.append((ip, 53))
            }
        }
        return servers.isEmpty ? [("127.0.0.1", 53)] : servers
    }

    /// Asks `question`, from the cache when an answer is still fresh.
    public func lookUp(_ question: DNSQuestion) async -> DNSLookupResult {
        if let cached = lock.withLock({ cache[question] }), cached.until > Date() { return cached.result }
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<(DNSLookupResult, UInt32), Never>) in
            queue.async { continuation.resume(returning: self.ask(question)) }
        }
        let age: TimeInterval
        switch result.0 {
        case .records: age = min(maximumCacheAge, TimeInterval(result.1))
        case .noSuchName: age = min(maximumCacheAge, 30)
        case .failed: age = 0
        }
        if age > 0 {
            lock.withLock {
                if cache.count >= cacheLimit { cache.removeAll(keepingCapacity: true) }
                cache[question] = (result.0, Date().addingTimeInterval(age))
            }
        }
        return result.0
    }

    /// The same question asked on the caller's thread, past the cache, blocking until the answer
    /// or the deadline (tests waiting for a server; never on the SIP path, which uses `lookUp`).
    public func lookUpNow(_ question: DNSQuestion) -> DNSLookupResult { ask(question).0 }

    /// What resolving `target` went through: every question with its answer, then the hops.
    public struct Location: Sendable, Hashable {
        public var hops: [ResolvedHop]
        public var lookups: [(question: DNSQuestion, result: DNSLookupResult)]

        public static func == (lhs: Location, rhs: Location) -> Bool {
            lhs.hops == rhs.hops && lhs.lookups.map(\.question) == rhs.lookups.map(\.question)
                && lhs.lookups.map(\.result) == rhs.lookups.map(\.result)
        }

        public func hash(into hasher: inout Hasher) { hasher.combine(hops) }
    }

    /// RFC 3263 §4 for `target`: the hops to try, in order (`SIPServerLocator` decides, this asks).
    public func locate(_ target: SIPServerTarget, supported: [SIPHopTransport] = SIPHopTransport.allCases) async -> Location {
        var locator = SIPServerLocator(target: target, supported: supported, seed: UInt64.random(in: 0...UInt64.max))
        var lookups: [(question: DNSQuestion, result: DNSLookupResult)] = []
        var action = locator.start()
        while true {
            switch action {
            case .located(let hops):
                return Location(hops: hops, lookups: lookups)
            case .lookUp(let questions):
                let results = await withTaskGroup(of: (Int, DNSLookupResult).self) { group in
                    for (index, question) in questions.enumerated() {
                        group.addTask { (index, await self.lookUp(question)) }
                    }
                    var results = [DNSLookupResult](repeating: .records([]), count: questions.count)
                    for await (index, result) in group { results[index] = result }
                    return results
                }
                var next: SIPServerLocator.Action?
                for (question, result) in zip(questions, results) {
                    lookups.append((question, result))
                    if let step = locator.answer(question, records: result.records) { next = step }
                }
                guard let next else { return Location(hops: [], lookups: lookups) }
                action = next
            }
        }
    }

    // MARK: - The blocking part, on `queue`

    /// Each server in turn, `attempts` rounds; the answer and its smallest TTL.
    private func ask(_ question: DNSQuestion) -> (DNSLookupResult, UInt32) {
        var failure = "no name server configured"
        for _ in 0..<attempts {
            for server in servers {
                let id = UInt16.random(in: 0...UInt16.max)
                let query = DNSMessage.query(id: id, question)
                do {
                    var message = try exchange(query, id: id, question: question, server: server, stream: false)
                    if message.truncated {
                        message = try exchange(query, id: id, question: question, server: server, stream: true)
                    }
                    switch message.responseCode {
                    case .noError:
                        let records = message.answers + message.additional
                        let ttl = records.filter { $0.type != nil }.map(\.ttl).min() ?? 60
                        return (.records(records.filter { $0.type != nil }), ttl)
                    case .nameError:
                        return (.noSuchName, 30)
                    default:
                        failure = "\(server.ip) answered \(message.responseCode)"
                    }
                } catch {
                    failure = "\(server.ip): \(error)"
                }
            }
        }
        return (.failed(failure), 0)
    }

    /// Why an exchange with one server failed.
    enum ExchangeError: Error, CustomStringConvertible {
        case socket(String)
        case timedOut
        case unreadable(DNSParseError)

        var description: String {
            switch self {
            case .socket(let reason): return reason
            case .timedOut: return "no answer in time"
            case .unreadable(let error): return "unreadable answer: \(error)"
            }
        }
    }

    /// One query to one server over UDP (or TCP, two-byte length prefix, RFC 1035 §4.2.2); answers
    /// with another id or question are ignored (RFC 5452), until the deadline.
    private func exchange(_ query: [UInt8], id: UInt16, question: DNSQuestion, server: (ip: String, port: UInt16), stream: Bool) throws(ExchangeError) -> DNSMessage {
        let deadline = ContinuousClock.now + timeout
        var storage = sockaddr_storage()
        let length = DNSResolver.socketAddress(server.ip, server.port, into: &storage)
        guard length > 0 else { throw .socket("\(server.ip) is not an IP address") }
        let fd = socket(Int32(storage.ss_family), Int32(stream ? SOCK_STREAM.rawValue : SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw .socket("socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let connected = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, length) }
        }
        if connected != 0 && errno != EINPROGRESS { throw .socket("connect: \(String(cString: strerror(errno)))") }
        var outgoing = query
        if stream {
            outgoing = [UInt8(query.count >> 8), UInt8(query.count & 0xFF)] + query
            try wait(fd, for: Int16(POLLOUT), until: deadline)
        }
        var sent = 0
        while sent < outgoing.count {
            let written = outgoing[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written < 0 {
                guard errno == EAGAIN || errno == EINTR else { throw .socket("send: \(String(cString: strerror(errno)))") }
                try wait(fd, for: Int16(POLLOUT), until: deadline)
                continue
            }
            sent += written
        }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_535)
        while true {
            try wait(fd, for: Int16(POLLIN), until: deadline)
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count < 0 {
                guard errno == EAGAIN || errno == EINTR else { throw .socket("recv: \(String(cString: strerror(errno)))") }
                continue
            }
            if stream {
                guard count > 0 else { throw .socket("the server closed the connection") }
                received.append(contentsOf: buffer[0..<count])
                guard received.count >= 2 else { continue }
                let size = Int(received[0]) << 8 | Int(received[1])
                guard received.count >= size + 2 else { continue }
                received = Array(received[2..<(size + 2)])
            } else {
                received = Array(buffer[0..<count])
            }
            let message: DNSMessage
            do {
                message = try DNSMessage(parsing: received)
            } catch {
                if stream { throw .unreadable(error) }
                continue
            }
            if message.id == id, message.questions.first == question { return message }
            if stream { throw .socket("the answer was for another question") }
            received = []
        }
    }

    private func wait(_ fd: Int32, for events: Int16, until deadline: ContinuousClock.Instant) throws(ExchangeError) {
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { throw .timedOut }
            let milliseconds = Int32(min(left.wholeMilliseconds + 1, 60_000))
            var descriptor = pollfd(fd: fd, events: events, revents: 0)
            let ready = poll(&descriptor, 1, milliseconds)
            if ready > 0 { return }
            if ready < 0 && errno != EINTR { throw .socket("poll: \(String(cString: strerror(errno)))") }
        }
    }

    /// Fills `storage` for an IPv4 or IPv6 literal; the address length, 0 when `ip` is not one.
    static func socketAddress(_ ip: String, _ port: UInt16, into storage: inout sockaddr_storage) -> socklen_t {
        if ip.contains(":") {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = port.bigEndian
            guard inet_pton(AF_INET6, ip, &address.sin6_addr) == 1 else { return 0 }
            withUnsafeMutableBytes(of: &storage) { target in withUnsafeBytes(of: address) { target.copyMemory(from: $0) } }
            return socklen_t(MemoryLayout<sockaddr_in6>.size)
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard inet_pton(AF_INET, ip, &address.sin_addr) == 1 else { return 0 }
        withUnsafeMutableBytes(of: &storage) { target in withUnsafeBytes(of: address) { target.copyMemory(from: $0) } }
        return socklen_t(MemoryLayout<sockaddr_in>.size)
    }
}
