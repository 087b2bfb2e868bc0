import Crypto
import Foundation
import Glibc
import Synchronization

/// A `rouse` process the benchmark starts and measures: its output is collected, its CPU time and
/// resident memory are read from `/proc`, and it is stopped (SIGTERM, then SIGKILL) by `stop()` or
/// when the value goes away.
///
/// Threading: the output is collected on Foundation's pipe threads behind a lock; the rest is
/// meant for the one thread that runs the benchmark.
final class RouseChild {
    /// Why the process could not be started or did not come up.
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Output collected from both pipes.
    private final class Collected: @unchecked Sendable {
        // @unchecked: `text` is only touched under `lock`.
        private let lock = NSLock()
        private var text = ""
        func append(_ chunk: String) {
            lock.lock()
            text += chunk
            lock.unlock()
        }
        var all: String {
            lock.lock()
            defer { lock.unlock() }
            return text
        }
    }

    private let process = Process()
    private let output = Pipe()
    private let collected = Collected()

    /// Settings every Rouse the benchmark starts gets (e.g. `ROUSE_SIP_THREADS` from
    /// `--sip-threads`), under what a phase sets itself. Set once by `main` before any phase runs.
    private static let commonEnvironment = Mutex<[String: String]>([:])

    /// Adds `key` = `value` to what every Rouse started from now on gets.
    static func setCommonSetting(_ key: String, _ value: String) {
        commonEnvironment.withLock { $0[key] = value }
    }

    /// Starts `executable` with `arguments`; `environment` adds to (and replaces `ROUSE_*` of) this
    /// process's environment and `commonEnvironment`.
    init(executable: String, arguments: [String], environment: [String: String]) throws {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw Failure(description: "no rouse executable at \(executable) (build it with `swift build -c release --product rouse`)")
        }
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var merged = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("ROUSE_") }
        merged["ROUSE_SECRETS_KEY"] = BenchDirectory.secrets.current.hexText
        merged.merge(Self.commonEnvironment.withLock { $0 }) { $1 }
        merged.merge(environment) { $1 }
        process.environment = merged
        process.standardOutput = output
        process.standardError = output
        let collected = self.collected
        output.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if !data.isEmpty { collected.append(String(decoding: data, as: UTF8.self)) }
        }
        try process.run()
    }

    deinit {
        _ = stop()
    }

    var processIdentifier: Int32 { process.processIdentifier }
    var outputText: String { collected.all }

    /// The first output line containing `text`, waiting up to `timeout` seconds for it; nil when
    /// the process exits or the time passes first.
    func waitForLine(containing text: String, timeout: TimeInterval) -> String? {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let line = outputText.split(separator: "\n").first(where: { $0.contains(text) }) { return String(line) }
            guard process.isRunning, Date() < deadline else { return nil }
            Thread.sleep(forTimeInterval: 0.02)
        }
    }

    /// User plus system CPU time the process has used so far, in seconds (`/proc/PID/stat`).
    func cpuSeconds() -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/\(processIdentifier)/stat", encoding: .utf8),
            let closing = stat.lastIndex(of: ")")
        else { return nil }
        // After "pid (comm) ": state is field 3, utime field 14, stime field 15.
        let fields = stat[stat.index(after: closing)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Resident memory now, in bytes (`VmRSS` of `/proc/PID/status`).
    func residentBytes() -> Double? {
        guard let status = try? String(contentsOfFile: "/proc/\(processIdentifier)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        else { return nil }
        let parts = line.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count >= 2, let kilobytes = Double(parts[1]) else { return nil }
        return kilobytes * 1_024
    }

    /// Sends SIGTERM, waits up to 10 s, then SIGKILL; returns the exit status.
    @discardableResult
    func stop() -> Int32? {
        if process.isRunning {
            process.terminate()
            let deadline = Date().addingTimeInterval(10)
            while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }
        output.fileHandleForReading.readabilityHandler = nil
        return process.isRunning ? nil : process.terminationStatus
    }
}
