import Crypto
import Dispatch
import Foundation
import Glibc
import RouseVocabulary
import SIPTransport
import Storage

/// `POST /api/v1/push/register` (docs/http-api.md) against a real `rouse serve` and PostgreSQL
/// over HTTP/1.1 keep-alive on loopback: posts per second and their latency, each post carrying
/// HTTP Basic credentials that Rouse checks, and then whether that load slows SIP.
///
/// It creates `extensions` extensions in the database it is given (bind-parameter SQL, as the
/// REGISTER phase does), starts `rouse serve` with SIP on `udp:127.0.0.1:0` and HTTP on
/// `127.0.0.1:0`, and then:
/// 1. first posts: every extension posts its token once (each a stored row); reported, as is the
///    settle time after it;
/// 2. posting load: `connections` keep-alive connections each send posts back to back, cycling
///    through the extensions (each re-posting its own token: a durable refresh), for `seconds` or
///    `maxRequests` posts, with `rouse`'s CPU time over it; then the same from `wideConnections`
///    connections (the few connections' rate is bounded by their latency, not by Rouse);
/// 3. idle SIP: OPTIONS over UDP, one at a time (window 1), for `sipSeconds`;
/// 4. SIP under posts: the posting load again, for `sipSeconds` + 1, and the same OPTIONS
///    window-1 load against the same `rouse` while it runs, so that its latency can be set beside
///    the idle one (and the posting rate beside the one without SIP).
///
/// The client is the benchmark's own (`PostingLoad`): blocking sockets, one thread per
/// connection, requests prepared in advance. It shares the machine's cores with `rouse` and
/// PostgreSQL, as the SIP load generator does. Blocks the calling thread throughout.
enum PostingBenchmark {
    /// What to run.
    struct Settings {
        /// libpq conninfo of a database the benchmark may fill (`make bench` makes a fresh one).
        var databaseURL: String
        /// The `rouse` executable.
        var rouseExecutable: String
        /// Extensions whose credentials and tokens the posts cycle through.
        var extensions = 1_000
        /// Length of the measured posting load, in seconds.
        var seconds = 5.0
        /// Keep-alive connections, each with one post in flight.
        var connections = 8
        /// Connections of the wide pass (`posting.keepalive_wide`), as many as the REGISTER and
        /// call phases keep in flight.
        var wideConnections = 64
        /// Upper bound on the posts of the measured load.
        var maxRequests = 1_000_000
        /// Length of each OPTIONS window-1 measurement, in seconds.
        var sipSeconds = 2.0
    }

    /// Why the benchmark could not run.
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static let domain = "posting.bench.rouse.test"
    static let password = "bench-posting-secret"

    /// Runs the passes and returns their figures.
    static func run(_ settings: Settings) throws -> [BenchFigure] {
        let numbers = (0..<settings.extensions).map { String(30_000_000 + $0) }
        let setupStart = Date()
        try BenchDirectory.prepare(settings.databaseURL, domain: domain, password: password, numbers: numbers)
        progress("posting: \(numbers.count) extensions created in \(String(format: "%.1f", Date().timeIntervalSince(setupStart))) s")

        let rouse = try RouseChild(
            executable: settings.rouseExecutable, arguments: ["serve"],
            environment: [
                "ROUSE_DATABASE_URL": settings.databaseURL,
                "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0",
                "ROUSE_HTTP_LISTEN": "127.0.0.1:0",
                "ROUSE_LOG_LEVEL": "warning",
            ])
        defer { rouse.stop() }
        guard let httpLine = rouse.waitForLine(containing: "serving HTTP on ", timeout: 120),
            let sipLine = rouse.waitForLine(containing: "serving SIP on ", timeout: 1)
        else {
            throw Failure(description: "rouse serve did not start:\n\(rouse.outputText)")
        }
        let points = (sipLine.components(separatedBy: "serving SIP on ").last ?? "").components(separatedBy: ", ")
            .compactMap { try? ListenPoint(parsing: $0) }
        guard let sip = points.first(where: { $0.transport == .udp }) else {
            throw Failure(description: "rouse serve named no UDP listen point: \(sipLine)")
        }
        let httpAddress = (httpLine.components(separatedBy: "serving HTTP on ").last ?? "")
            .trimmingCharacters(in: .whitespaces)
        guard let colon = httpAddress.lastIndex(of: ":"), let httpPort = UInt16(httpAddress[httpAddress.index(after: colon)...]),
            httpAddress[..<colon] == "127.0.0.1"
        else {
            throw Failure(description: "rouse serve named no loopback HTTP address: \(httpLine)")
        }
        progress("posting: rouse serve up, HTTP on 127.0.0.1:\(httpPort), SIP on \(sip)")

        let requests = numbers.map { request(number: $0, port: httpPort) }
        func post(_ maxRequests: Int, for seconds: Double, connections: Int? = nil) throws -> LoadReport {
            do {
                return try PostingLoad(
                    configuration: .init(
                        host: "127.0.0.1", port: httpPort, connections: connections ?? settings.connections, requests: requests,
                        maxRequests: maxRequests, duration: seconds)
                ).run()
            } catch {
                throw Failure(description: "posting load: \(error)")
            }
        }
        func options(for seconds: Double) throws -> LoadReport {
            do {
                return try UDPLoadGenerator(
                    configuration: .init(
                        host: sip.host, port: sip.port, pacing: .window(1), maxRequests: 5_000_000,
                        duration: .milliseconds(Int64((seconds * 1_000).rounded()))
                    )
                ).run()
            } catch {
                throw Failure(description: "OPTIONS load: \(error)")
            }
        }

        var figures: [BenchFigure] = []
        let first = try post(numbers.count, for: 60)
        figures += describe(first, as: "posting.first_posts", unit: "POST/s", cpu: nil)
        guard first.succeeded > 0 else {
            throw Failure(description: "no post was stored; rouse said:\n\(rouse.outputText.suffix(2_000))")
        }

        let cpuBefore = rouse.cpuSeconds() ?? .nan
        let posting = try post(settings.maxRequests, for: max(settings.seconds, 0.5))
        let cpu = (rouse.cpuSeconds() ?? .nan) - cpuBefore
        figures += describe(posting, as: "posting.keepalive", unit: "POST/s", cpu: cpu)

        // With one post in flight per connection, a few connections cap the rate at connections ÷
        // latency (a commit's WAL flush and all) whatever the server could do: the same load from
        // `wideConnections` connections (many phones posting at once) says what Rouse passes.
        let wideCPUBefore = rouse.cpuSeconds() ?? .nan
        let wide = try post(settings.maxRequests, for: max(settings.seconds, 0.5), connections: settings.wideConnections)
        let wideCPU = (rouse.cpuSeconds() ?? .nan) - wideCPUBefore
        figures += describe(wide, as: "posting.keepalive_wide", unit: "POST/s", cpu: wideCPU)

        let sipSeconds = max(settings.sipSeconds, 0.2)
        Thread.sleep(forTimeInterval: 1)
        _ = try options(for: 0.3)
        let idle = try options(for: sipSeconds)
        figures += describe(idle, as: "posting.sip_idle.options_window1", unit: "round trips/s", cpu: nil)

        // The posting load runs on its own threads; the OPTIONS window starts once it is going and
        // ends before it does, so every OPTIONS shares the machine with posts in flight.
        let postSeconds = sipSeconds + 1
        let loadDone = DispatchSemaphore(value: 0)
        let outcome = Outcome()
        let connections = settings.connections
        let maxRequests = settings.maxRequests
        let port = httpPort
        Thread.detachNewThread {
            do {
                outcome.report = try PostingLoad(
                    configuration: .init(
                        host: "127.0.0.1", port: port, connections: connections, requests: requests,
                        maxRequests: maxRequests, duration: postSeconds)
                ).run()
            } catch {
                outcome.error = "\(error)"
            }
            loadDone.signal()
        }
        Thread.sleep(forTimeInterval: 0.4)
        let loaded = try options(for: sipSeconds)
        loadDone.wait()
        guard let beside = outcome.report else {
            throw Failure(description: "posting load: \(outcome.error ?? "no report")")
        }
        figures += describe(beside, as: "posting.with_sip", unit: "POST/s", cpu: nil)
        figures += describe(loaded, as: "posting.sip_loaded.options_window1", unit: "round trips/s", cpu: nil)
        if let idleP99 = idle.latencyMicroseconds(atPercentile: 0.99),
            let loadedP99 = loaded.latencyMicroseconds(atPercentile: 0.99),
            let idleP50 = idle.latencyMicroseconds(atPercentile: 0.5),
            let loadedP50 = loaded.latencyMicroseconds(atPercentile: 0.5)
        {
            progress(
                "posting: SIP OPTIONS window 1, idle vs under \(Int(beside.roundTripsPerSecond.rounded())) POST/s:"
                    + " p50 \(Int(idleP50.rounded())) → \(Int(loadedP50.rounded())) µs,"
                    + " p99 \(Int(idleP99.rounded())) → \(Int(loadedP99.rounded())) µs")
        }

        let status = rouse.stop()
        if status != 0 {
            progress("posting: rouse serve exited with status \(status.map(String.init) ?? "unknown")")
        }
        return figures
    }

    /// The result of the load that runs beside the SIP measurement.
    private final class Outcome: @unchecked Sendable {
        // @unchecked: written by the load's thread before it signals, read after the wait.
        var report: LoadReport?
        var error: String?
    }

    /// One post as sent: credentials of `number` and its own Android token.
    static func request(number: String, port: UInt16) -> [UInt8] {
        let user = "\(number)@\(domain)"
        let credentials = Data("\(user):\(password)".utf8).base64EncodedString()
        let body = #"{"token":"bench-fcm-token-\#(number)","sipUser":"\#(user)","platform":"android"}"#
        let head =
            "POST \(PostingLoad.path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nAuthorization: Basic \(credentials)\r\n"
            + "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n"
        return Array((head + body).utf8)
    }

    /// The figures of one pass, and a one-line summary of it on standard output; `cpu` is the
    /// `rouse` process's CPU seconds over the pass, when measured.
    private static func describe(_ report: LoadReport, as name: String, unit: String, cpu: Double?) -> [BenchFigure] {
        var figures = [BenchFigure(name: name + ".rate", value: report.roundTripsPerSecond, unit: unit)]
        var summary = "\(name): \(Int(report.roundTripsPerSecond.rounded())) \(unit)"
        for (label, fraction) in [("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)] {
            if let microseconds = report.latencyMicroseconds(atPercentile: fraction) {
                figures.append(BenchFigure(name: "\(name).latency_\(label)", value: microseconds, unit: "µs"))
                summary += ", \(label) \(Int(microseconds.rounded())) µs"
            }
        }
        if let cpu {
            let answered = report.succeeded + report.failed
            let perThousand = answered > 0 ? cpu / Double(answered) * 1_000 : .nan
            figures.append(BenchFigure(name: name + ".rouse_cpu_per_1000", value: perThousand, unit: "CPU s"))
            summary += "; rouse \(String(format: "%.3f", perThousand)) CPU s per 1000"
        }
        figures.append(BenchFigure(name: name + ".sent", value: Double(report.sent), unit: "requests"))
        figures.append(BenchFigure(name: name + ".non_200", value: Double(report.failed), unit: "requests"))
        figures.append(BenchFigure(name: name + ".unanswered", value: Double(report.timedOut), unit: "requests"))
        summary += "; \(report.sent) sent, \(report.succeeded) ok, \(report.failed) non-200, \(report.timedOut) unanswered"
        progress(summary)
        return figures
    }
}

/// HTTP/1.1 keep-alive load on loopback: `connections` TCP connections, each on its own thread
/// sending prepared requests back to back (one in flight per connection), until `maxRequests` in
/// all or `duration` seconds. A connection the server closes (or that fails) is reopened; an
/// answer not read within 5 s counts as unanswered.
///
/// The result is a `LoadReport`: `succeeded` counts 200s, `failed` other statuses, `timedOut`
/// requests without an answer; `latencies` (ascending) covers every answer.
struct PostingLoad {
    static let path = "/api/v1/push/register"

    /// What to send and for how long.
    struct Configuration: Sendable {
        var host: String
        var port: UInt16
        var connections: Int
        /// Whole requests; connection `c` sends `requests[c]`, `requests[c + connections]`, … in turn.
        var requests: [[UInt8]]
        var maxRequests: Int
        var duration: Double
    }

    /// Why the load could not run.
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    let configuration: Configuration

    init(configuration: Configuration) throws {
        guard configuration.host == "127.0.0.1" else {
            throw Failure(description: "load target \(configuration.host) is not 127.0.0.1")
        }
        guard !configuration.requests.isEmpty, configuration.connections > 0 else {
            throw Failure(description: "nothing to send")
        }
        self.configuration = configuration
    }

    /// Runs the connections to the end and merges their results.
    func run() throws -> LoadReport {
        let connections = min(configuration.connections, max(configuration.maxRequests, 1))
        let workers = (0..<connections).map { index in
            let quota = configuration.maxRequests / connections + (index < configuration.maxRequests % connections ? 1 : 0)
            return Connection(configuration: configuration, first: index, stride: connections, quota: quota)
        }
        let group = DispatchGroup()
        let start = MonotonicClock.now()
        for worker in workers {
            group.enter()
            Thread.detachNewThread {
                worker.run()
                group.leave()
            }
        }
        group.wait()
        var report = LoadReport()
        report.seconds = Double(MonotonicClock.now() - start) / 1e9
        for worker in workers {
            report.sent += worker.report.sent
            report.succeeded += worker.report.succeeded
            report.failed += worker.report.failed
            report.timedOut += worker.report.timedOut
            report.latencies += worker.report.latencies
        }
        report.latencies.sort()
        if report.sent == 0, let problem = workers.compactMap(\.problem).first {
            throw Failure(description: problem)
        }
        return report
    }

    /// One connection's thread and what it measured.
    private final class Connection: @unchecked Sendable {
        // @unchecked: `report` and `problem` are written by the connection's own thread only,
        // and read after `run()` has returned (the group's wait orders them).
        let configuration: Configuration
        let first: Int
        let stride: Int
        let quota: Int
        var report = LoadReport()
        var problem: String?
        private var pending: [UInt8] = []

        init(configuration: Configuration, first: Int, stride: Int, quota: Int) {
            self.configuration = configuration
            self.first = first
            self.stride = stride
            self.quota = quota
        }

        func run() {
            let deadline = MonotonicClock.now() &+ UInt64(configuration.duration * 1e9)
            let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 16_384, alignment: 8)
            defer { chunk.deallocate() }
            report.latencies.reserveCapacity(min(quota, 1 << 18))
            var socket: Int32 = -1
            defer { if socket >= 0 { close(socket) } }
            var index = first
            var failures = 0
            while report.sent < quota && MonotonicClock.now() < deadline && failures < 100 {
                if socket < 0 {
                    socket = connect()
                    pending.removeAll(keepingCapacity: true)
                    if socket < 0 {
                        failures += 1
                        continue
                    }
                }
                let request = configuration.requests[index % configuration.requests.count]
                index += stride
                report.sent += 1
                let sentAt = MonotonicClock.now()
                guard send(request, on: socket), let answer = receiveAnswer(on: socket, chunk: chunk) else {
                    report.timedOut += 1
                    failures += 1
                    close(socket)
                    socket = -1
                    continue
                }
                report.latencies.append(MonotonicClock.now() - sentAt)
                if answer.status == 200 { report.succeeded += 1 } else { report.failed += 1 }
                if answer.closes {
                    close(socket)
                    socket = -1
                }
            }
        }

        /// A connected socket with TCP_NODELAY and a 5 s receive timeout, or -1 (with `problem` set).
        private func connect() -> Int32 {
            let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard socket >= 0 else {
                problem = "socket: \(String(cString: strerror(errno)))"
                return -1
            }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = configuration.port.bigEndian
            inet_pton(AF_INET, configuration.host, &address.sin_addr)
            var time = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
            var one: Int32 = 1
            setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard connected == 0 else {
                problem = "connect to \(configuration.host):\(configuration.port): \(String(cString: strerror(errno)))"
                close(socket)
                return -1
            }
            return socket
        }

        private func send(_ bytes: [UInt8], on socket: Int32) -> Bool {
            bytes.withUnsafeBytes { raw in
                var offset = 0
                while offset < raw.count {
                    let written = Glibc.send(socket, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                    if written < 0 && errno == EINTR { continue }
                    guard written > 0 else { return false }
                    offset += written
                }
                return true
            }
        }

        /// Reads one whole answer (head, then `Content-Length` bytes of body); nil when the
        /// connection fails, closes or times out first.
        private func receiveAnswer(on socket: Int32, chunk: UnsafeMutableRawBufferPointer) -> (status: Int, closes: Bool)? {
            var headEnd: Int? = nil
            var scanned = 0
            var status = 0
            var bodyLength = 0
            var closes = false
            while true {
                if headEnd == nil, let end = Self.headEnd(in: pending, from: scanned) {
                    headEnd = end
                    let head = String(decoding: pending[..<end], as: UTF8.self).lowercased()
                    let lines = head.split(separator: "\r\n")
                    let statusParts = lines.first?.split(separator: " ") ?? []
                    status = statusParts.count > 1 ? Int(statusParts[1]) ?? 0 : 0
                    for line in lines.dropFirst() {
                        if line.hasPrefix("content-length:") {
                            bodyLength = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) ?? 0
                        } else if line.hasPrefix("connection:") && line.contains("close") {
                            closes = true
                        }
                    }
                }
                if let end = headEnd, pending.count >= end + bodyLength {
                    pending.removeFirst(end + bodyLength)
                    return (status, closes)
                }
                if headEnd == nil { scanned = max(pending.count - 3, 0) }
                let received = recv(socket, chunk.baseAddress, chunk.count, 0)
                if received < 0 && errno == EINTR { continue }
                guard received > 0 else { return nil }
                pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: chunk[..<received]))
            }
        }

        /// The index just past the blank line ending the head, searching from `start`.
        private static func headEnd(in bytes: [UInt8], from start: Int) -> Int? {
            guard bytes.count >= 4 else { return nil }
            var index = start
            while index + 3 < bytes.count {
                if bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13 && bytes[index + 3] == 10 {
                    return index + 4
                }
                index += 1
            }
            return nil
        }
    }
}
