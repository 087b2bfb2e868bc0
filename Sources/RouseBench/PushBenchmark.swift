import Foundation
import Push
import Registrar
import RouseTestSupport

#if canImport(Glibc)
import Glibc
import RouseVocabulary
#endif

/// VoIP ring pushes from Rouse's `PushService` to the APNs stand-in (`Tests/PushStandIns/standin.py`,
/// HTTP/2 over TLS on loopback, checking every JWT signature), through the real libcurl path.
///
/// After a short unreported warm-up (the connection, the TLS handshake and the provider token are
/// made there), three measured passes, each bounded in count and in time:
/// 1. throughput: `pushes` pushes with up to `window` in flight over one HTTP/2 connection
///    (checked in the stand-in's request log), reporting pushes/s, end-to-end latency (from
///    calling `sendRing` to its outcome), the CPU Rouse spent per push and the stand-in's CPU;
/// 2. added latency: `sequentialPushes` pushes one at a time, reporting Rouse's own share (below);
/// 3. the stand-in's own limit: the same number of requests from the `curl` tool with the same
///    window (`curl --parallel`, one multiplexed connection), so the report can tell whether the
///    first figure is Rouse's limit or the stand-in's.
///
/// Rouse's added latency of one push is the time from calling `PushService.sendRing` to the moment
/// libcurl is about to write the request to the already open connection (`HTTP2Timing.sent`: the
/// start of the `curl_multi_perform` that ran it plus libcurl's `CURLINFO_PRETRANSFER_TIME_T`). It
/// covers choosing the app, building the payload and the APNs request, the cached JWT, the header
/// list, queueing to the HTTP/2 thread and waking it, the easy handle's setup and libcurl's own
/// work up to the write. It leaves out the network, the stand-in and the way back. The figures split
/// it at `HTTP2Timing.submitted` (`push_layer`) and `HTTP2Timing.started` (`thread_handoff`, then
/// `libcurl`), and give the round trip beside it.
///
/// Blocks the calling thread; the pushes run on Swift's concurrency pool and the client's HTTP/2
/// thread, the stand-in in its own Python process, all sharing the machine's cores.
enum PushBenchmark {
    /// What to measure.
    struct Settings: Sendable {
        /// Pushes in the throughput pass, and its window.
        var pushes = 5_000
        var window = 100
        /// Time limit of the throughput pass (no new push starts after it).
        var seconds = 10.0
        /// Pushes in the one-at-a-time pass, and its time limit.
        var sequentialPushes = 1_000
        var sequentialSeconds = 5.0
    }

    /// Why the benchmark could not run.
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static let teamID = "BENCH12345"
    static let keyID = "BENCHKEY01"
    static let bundleID = "com.example.bench"

    /// Runs the passes and returns their figures, printing a summary line for each.
    static func run(_ settings: Settings) throws(Failure) -> [BenchFigure] {
        let key: APNsTestKey
        let standIn: PushStandIn
        do {
            key = try PushStandIn.makeAPNsKey()
            standIn = try PushStandIn.apns(keys: [keyID: key.keyPath], teamID: teamID, topics: [bundleID])
        } catch {
            throw Failure(description: "push benchmark: cannot start the APNs stand-in: \(error)")
        }
        defer {
            standIn.stop()
            key.remove()
        }
        let standInPID = processID(withArgument: standIn.stateDirectory)

        let timings = TimingLog(limit: settings.pushes + settings.sequentialPushes + 1_000)
        HTTP2Client.observeTimings { timings.add($0) }
        defer { HTTP2Client.observeTimings(nil) }

        let credentials = APNsCredentials(
            teamID: teamID, keyID: keyID, topic: bundleID, privateKeyPEM: key.privateKeyPEM, environment: .production)
        let service = PushService(
            settings: PushSettings(
                apns: APNsEndpoints(production: standIn.baseURL, sandbox: "https://127.0.0.1:1"),
                caFile: standIn.caFile, timeout: .seconds(5)),
            apps: [PushApp(id: 1, credentials: .apns(credentials))])
        let pusher = Pusher(service: service)

        // Warm-up: the connection, the JWT, and every code path once.
        let warmUp = blocking {
            var samples = [await pusher.push(0)]
            samples += await pusher.window(first: 1, count: 200, window: 20, deadline: .now + .seconds(10))
            return samples
        }
        if let refused = warmUp.first(where: { !$0.accepted }) {
            throw Failure(description: "push benchmark: a warm-up push failed: \(refused.outcome)")
        }
        var figures: [BenchFigure] = []

        // 1. Throughput over one connection.
        let loggedBefore = (try? standIn.requests().count) ?? 0
        let timingsBefore = timings.count
        let standInCPUBefore = standInPID.flatMap(cpuSeconds(ofProcess:))
        let ownCPUBefore = ownCPUSeconds()
        let samples = blocking {
            await pusher.window(
                first: 1_000, count: settings.pushes, window: settings.window,
                deadline: .now + .milliseconds(Int64(settings.seconds * 1_000)))
        }
        let ownCPU = ownCPUSeconds() - ownCPUBefore
        let standInCPU = standInCPUBefore.flatMap { before in standInPID.flatMap(cpuSeconds(ofProcess:)).map { $0 - before } }
        let wall = seconds(samples.map(\.end).max()! - samples.map(\.start).min()!)
        let phaseTimings = timings.slice(from: timingsBefore)
        let logged = (try? standIn.requests()) ?? []
        let phaseRequests = logged.count > loggedBefore ? Array(logged[loggedBefore...]) : []
        let connections = Set(phaseRequests.map(\.connection))
        let accepted = samples.filter(\.accepted).count
        let name = "push.apns.window\(settings.window)"
        let rate = Double(samples.count) / wall
        let latencies = samples.map { microseconds($0.end - $0.start) }
        let handoff = phaseTimings.map { microseconds($0.sent - $0.submitted) }
        figures += [
            BenchFigure(name: name + ".pushes_per_second", value: rate, unit: "pushes/s"),
            BenchFigure(name: name + ".latency_p50", value: percentile(latencies, 0.5), unit: "µs"),
            BenchFigure(name: name + ".latency_p99", value: percentile(latencies, 0.99), unit: "µs"),
            BenchFigure(name: name + ".http2_queue_to_wire_p50", value: percentile(handoff, 0.5), unit: "µs"),
            BenchFigure(name: name + ".http2_queue_to_wire_p99", value: percentile(handoff, 0.99), unit: "µs"),
            BenchFigure(name: name + ".pushes", value: Double(samples.count), unit: "pushes"),
            BenchFigure(name: name + ".not_accepted", value: Double(samples.count - accepted), unit: "pushes"),
            BenchFigure(name: name + ".connections", value: Double(connections.count), unit: "connections"),
            BenchFigure(name: name + ".rouse_cpu_per_push", value: ownCPU / Double(samples.count) * 1e6, unit: "µs"),
            BenchFigure(name: name + ".standin_cpu", value: standInCPU.map { $0 / wall * 100 } ?? .nan, unit: "% of a core"),
        ]
        print(
            "\(name): \(Int(rate.rounded())) pushes/s over \(connections.count) connection(s) "
                + "(stand-in log: \(phaseRequests.count) requests), latency p50 \(format(percentile(latencies, 0.5))) µs, "
                + "p99 \(format(percentile(latencies, 0.99))) µs; \(samples.count) pushes, \(samples.count - accepted) not accepted; "
                + "Rouse CPU \(format(ownCPU / Double(samples.count) * 1e6)) µs/push, stand-in CPU "
                + (standInCPU.map { "\(Int(($0 / wall * 100).rounded())) %" } ?? "unknown"))
        if let refused = samples.first(where: { !$0.accepted }) { print("  first push not accepted: \(refused.outcome)") }

        // 2. Rouse's added latency, one push at a time.
        let sequential = blocking {
            await pusher.sequential(
                first: 100_000, count: settings.sequentialPushes, timings: timings,
                deadline: .now + .milliseconds(Int64(settings.sequentialSeconds * 1_000)))
        }
        let added = sequential.map { microseconds($0.timing.sent - $0.start) }
        let pushLayer = sequential.map { microseconds($0.timing.submitted - $0.start) }
        let wakeUp = sequential.map { microseconds($0.timing.started - $0.timing.submitted) }
        let curl = sequential.map { microseconds($0.timing.sent - $0.timing.started) }
        let roundTrip = sequential.map { microseconds($0.end - $0.start) }
        let sequentialName = "push.apns.sequential"
        figures += [
            BenchFigure(name: sequentialName + ".added_latency_p50", value: percentile(added, 0.5), unit: "µs"),
            BenchFigure(name: sequentialName + ".added_latency_p99", value: percentile(added, 0.99), unit: "µs"),
            BenchFigure(name: sequentialName + ".added.push_layer_p50", value: percentile(pushLayer, 0.5), unit: "µs"),
            BenchFigure(name: sequentialName + ".added.push_layer_p99", value: percentile(pushLayer, 0.99), unit: "µs"),
            BenchFigure(name: sequentialName + ".added.thread_handoff_p50", value: percentile(wakeUp, 0.5), unit: "µs"),
            BenchFigure(name: sequentialName + ".added.thread_handoff_p99", value: percentile(wakeUp, 0.99), unit: "µs"),
            BenchFigure(name: sequentialName + ".added.libcurl_p50", value: percentile(curl, 0.5), unit: "µs"),
            BenchFigure(name: sequentialName + ".added.libcurl_p99", value: percentile(curl, 0.99), unit: "µs"),
            BenchFigure(name: sequentialName + ".round_trip_p50", value: percentile(roundTrip, 0.5), unit: "µs"),
            BenchFigure(name: sequentialName + ".round_trip_p99", value: percentile(roundTrip, 0.99), unit: "µs"),
            BenchFigure(name: sequentialName + ".pushes", value: Double(sequential.count), unit: "pushes"),
        ]
        print(
            "\(sequentialName): Rouse's added latency (sendRing → request on the wire) p50 \(format(percentile(added, 0.5))) µs, "
                + "p99 \(format(percentile(added, 0.99))) µs, max \(format(added.max() ?? .nan)) µs "
                + "(push layer p50 \(format(percentile(pushLayer, 0.5))), thread hand-off \(format(percentile(wakeUp, 0.5))), "
                + "libcurl \(format(percentile(curl, 0.5))) µs); round trip p50 \(format(percentile(roundTrip, 0.5))) µs, "
                + "p99 \(format(percentile(roundTrip, 0.99))) µs; \(sequential.count) pushes")

        // 3. The stand-in's own limit, driven by the curl tool with the same window.
        let jwt = logged.last?.headers["authorization"].map { String($0.dropFirst("bearer ".count)) }
        if let jwt {
            figures += standInLimit(standIn: standIn, pid: standInPID, jwt: jwt, count: settings.pushes, window: settings.window)
        } else {
            print("push.standin: skipped (no logged request to take the provider token from)")
        }
        return figures
    }

    /// `curl --parallel` with `window` transfers in flight, `count` VoIP pushes to the stand-in,
    /// at most 60 s; the rate is counted from the stand-in's own receive times (curl's start and
    /// TLS handshake left out).
    private static func standInLimit(standIn: PushStandIn, pid: Int32?, jwt: String, count: Int, window: Int) -> [BenchFigure] {
        let name = "push.standin.curl_window\(window)"
        let loggedBefore = (try? standIn.requests().count) ?? 0
        let count = min(max(count, 2), 89_999)
        // Tokens of 64 hex digits: 59 fixed, then five decimal digits from curl's URL glob.
        let url = standIn.baseURL + "/3/device/cc" + String(repeating: "0", count: 57) + "[10000-\(10_000 + count - 1)]"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [
            "curl", "--silent", "--http2", "--parallel", "--parallel-max", String(min(window, 300)),
            "--cacert", standIn.caFile, "--max-time", "10",
            "--header", "authorization: bearer \(jwt)", "--header", "apns-topic: \(bundleID).voip",
            "--header", "apns-push-type: voip", "--header", "apns-priority: 10", "--header", "apns-expiration: 0",
            "--header", "content-type: application/json", "--data-binary", #"{"aps":{}}"#,
            "--write-out", "%{http_code}\\n", url,
        ]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        let cpuBefore = pid.flatMap(cpuSeconds(ofProcess:))
        do {
            try process.run()
        } catch {
            print("\(name): skipped (cannot run curl: \(error))")
            return []
        }
        let watchdog = DispatchWorkItem { if process.isRunning { process.terminate() } }
        DispatchQueue.global().asyncAfter(deadline: .now() + 60, execute: watchdog)
        let statuses = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        watchdog.cancel()
        let logged = (try? standIn.requests()) ?? []
        let requests = logged.count > loggedBefore ? Array(logged[loggedBefore...]) : []
        let ok = String(decoding: statuses, as: UTF8.self).split(separator: "\n").filter { $0 == "200" }.count
        guard requests.count >= 2, let first = requests.first?.time, let last = requests.last?.time, last > first else {
            print("\(name): curl exited with \(process.terminationStatus) after \(requests.count) requests; no figure")
            return []
        }
        let span = last - first
        let rate = Double(requests.count - 1) / span
        let cpu = cpuBefore.flatMap { before in pid.flatMap(cpuSeconds(ofProcess:)).map { ($0 - before) / span * 100 } }
        let connections = Set(requests.map(\.connection)).count
        print(
            "\(name): the stand-in took \(Int(rate.rounded())) requests/s from curl over \(connections) connection(s); "
                + "\(requests.count) requests, \(ok) answered 200; stand-in CPU "
                + (cpu.map { "\(Int($0.rounded())) %" } ?? "unknown"))
        return [
            BenchFigure(name: name + ".requests_per_second", value: rate, unit: "requests/s"),
            BenchFigure(name: name + ".requests", value: Double(requests.count), unit: "requests"),
            BenchFigure(name: name + ".answered_200", value: Double(ok), unit: "requests"),
            BenchFigure(name: name + ".connections", value: Double(connections), unit: "connections"),
            BenchFigure(name: name + ".standin_cpu", value: cpu ?? .nan, unit: "% of a core"),
        ]
    }

    // MARK: Measuring

    /// One push: its outcome and when `sendRing` was called and returned.
    struct Sample: Sendable {
        var accepted: Bool
        var outcome: String
        var start: ContinuousClock.Instant
        var end: ContinuousClock.Instant
    }

    /// One push of the sequential pass, with its HTTP/2 client timing.
    struct TimedSample: Sendable {
        var start: ContinuousClock.Instant
        var end: ContinuousClock.Instant
        var timing: HTTP2Timing
    }

    /// Sends numbered ring pushes, each to its own token and call. Thread-safe.
    struct Pusher: Sendable {
        let service: PushService

        func push(_ number: Int) async -> Sample {
            let hex = String(number, radix: 16)
            let token = "be" + String(repeating: "0", count: max(62 - hex.count, 0)) + hex
            let call = CallPushContent(
                callID: "bench-\(number)@127.0.0.1", callerNumber: "1001", callerName: "Bench", calleeNumber: "1002",
                ringTimeoutSeconds: 30)
            let channel = PushChannel(provider: .apns, token: token, param: nil, kind: .voip)
            let expiresAt = Date(timeIntervalSinceNow: 30)
            let start = ContinuousClock.now
            let outcome = await service.sendRing(call, to: channel, expiresAt: expiresAt)
            let end = ContinuousClock.now
            return Sample(accepted: outcome.isAccepted, outcome: "\(outcome.result)", start: start, end: end)
        }

        /// Pushes `first..<first+count` with up to `window` in flight; none starts after `deadline`.
        func window(first: Int, count: Int, window: Int, deadline: ContinuousClock.Instant) async -> [Sample] {
            await withTaskGroup(of: Sample.self) { group in
                var started = 0
                var samples: [Sample] = []
                samples.reserveCapacity(count)
                while started < min(window, count) {
                    let number = first + started
                    group.addTask { await push(number) }
                    started += 1
                }
                while let sample = await group.next() {
                    samples.append(sample)
                    if started < count && ContinuousClock.now < deadline {
                        let number = first + started
                        group.addTask { await push(number) }
                        started += 1
                    }
                }
                return samples
            }
        }

        /// Pushes one at a time, pairing each with the timing its HTTP/2 request reported.
        func sequential(first: Int, count: Int, timings: TimingLog, deadline: ContinuousClock.Instant) async -> [TimedSample] {
            var samples: [TimedSample] = []
            samples.reserveCapacity(count)
            for number in first..<(first + count) where ContinuousClock.now < deadline {
                let sample = await push(number)
                // The timing is reported before the answer is handed back, so it is there already.
                guard sample.accepted, let timing = timings.last, timing.submitted >= sample.start else { continue }
                samples.append(TimedSample(start: sample.start, end: sample.end, timing: timing))
            }
            return samples
        }
    }

    /// The `HTTP2Timing`s the clients reported, up to `limit` of them. Thread-safe (a lock).
    final class TimingLog: @unchecked Sendable {
        private let lock = NSLock()
        private var timings: [HTTP2Timing] = []
        private let limit: Int

        init(limit: Int) {
            self.limit = limit
            timings.reserveCapacity(limit)
        }

        func add(_ timing: HTTP2Timing) {
            lock.lock()
            if timings.count < limit { timings.append(timing) }
            lock.unlock()
        }

        var count: Int {
            lock.lock()
            defer { lock.unlock() }
            return timings.count
        }

        var last: HTTP2Timing? {
            lock.lock()
            defer { lock.unlock() }
            return timings.last
        }

        func slice(from start: Int) -> [HTTP2Timing] {
            lock.lock()
            defer { lock.unlock() }
            return start < timings.count ? Array(timings[start...]) : []
        }
    }

    /// Runs `body` on the concurrency pool and blocks the calling thread until it returns.
    private static func blocking<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
        let box = ResultBox<T>()
        let done = DispatchSemaphore(value: 0)
        Task.detached {
            box.value = await body()
            done.signal()
        }
        done.wait()
        return box.value!
    }

    /// Hands a result from a task to the thread waiting for it (a semaphore orders the accesses).
    private final class ResultBox<T: Sendable>: @unchecked Sendable {
        var value: T?
    }

    /// The value below which `fraction` of `values` lie (nearest rank); NaN for none.
    static func percentile(_ values: [Double], _ fraction: Double) -> Double {
        guard !values.isEmpty else { return .nan }
        let sorted = values.sorted()
        let rank = Int((fraction * Double(sorted.count)).rounded(.up))
        return sorted[min(max(rank - 1, 0), sorted.count - 1)]
    }

    static func microseconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) * 1e6 + Double(attoseconds) / 1e12
    }

    static func seconds(_ duration: Duration) -> Double { microseconds(duration) / 1e6 }

    static func format(_ value: Double) -> String {
        value.isFinite ? String(format: "%.1f", value) : "-"
    }

    /// User plus system CPU seconds of this process so far.
    static func ownCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
    }

    /// User plus system CPU seconds of a process so far (`/proc/<pid>/stat`); nil when unreadable.
    static func cpuSeconds(ofProcess pid: Int32) -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")")
        else { return nil }
        // After "pid (comm)": state is field 3, utime 14 and stime 15.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The process whose command line holds `argument` (the stand-in, by its state directory).
    static func processID(withArgument argument: String) -> Int32? {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return nil }
        for entry in entries {
            guard let pid = Int32(entry), let data = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline") else { continue }
            let arguments = data.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
            if arguments.contains(where: { $0.hasSuffix("standin.py") }) && arguments.contains(argument) { return pid }
        }
        return nil
    }
}
