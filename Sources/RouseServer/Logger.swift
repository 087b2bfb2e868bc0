import Crypto
import Foundation
import Glibc

/// How much Rouse logs.
public enum LogLevel: String, Sendable, CaseIterable, Comparable {
    case debug, info, warning, error

    var rank: Int {
        switch self {
        case .debug: return 0
        case .info: return 1
        case .warning: return 2
        case .error: return 3
        }
    }

    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rank < rhs.rank }
}

/// How a log line is written: `logfmt` (`key=value` pairs) or one JSON object.
public enum LogFormat: String, Sendable, CaseIterable {
    case logfmt, json
}

/// Writes one line per event to standard error with stable keys. Values are passed by the caller;
/// callers never pass secrets (passwords, keys, tokens in full). Thread-safe, and never blocks the
/// caller on the terminal or pipe: a line is handed to the sink's writer thread, which formats and
/// writes it (so the SIP loop, which logs each malformed datagram, never waits on standard error).
public struct Logger: Sendable {
    public let level: LogLevel
    public let format: LogFormat
    private let sink: LogSink

    public init(level: LogLevel = .info, format: LogFormat = .logfmt) {
        self.level = level
        self.format = format
        self.sink = LogSink.standardError
    }

    public func debug(_ event: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.debug, event, fields) }
    public func info(_ event: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.info, event, fields) }
    public func warning(_ event: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.warning, event, fields) }
    public func error(_ event: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.error, event, fields) }

    public func log(_ level: LogLevel, _ event: String, _ fields: KeyValuePairs<String, String>) {
        guard level >= self.level else { return }
        sink.enqueue(LogSink.Entry(time: Date(), level: level, event: event, fields: fields.map { ($0.key, $0.value) }, format: format))
    }

    /// Waits (at most `timeout` seconds) until every line logged so far is written: before the
    /// process exits.
    public func flush(timeout: TimeInterval = 5) {
        sink.flush(timeout: timeout)
    }

    /// One line in the logger's format.
    static func line(_ entry: LogSink.Entry) -> String {
        let time = timestamp(entry.time)
        var pairs: [(String, String)] = [("time", time), ("level", entry.level.rawValue), ("event", entry.event)]
        pairs.append(contentsOf: entry.fields)
        switch entry.format {
        case .logfmt:
            return pairs.map { "\($0.0)=\(Logger.logfmtValue($0.1))" }.joined(separator: " ")
        case .json:
            return "{" + pairs.map { "\(Logger.jsonString($0.0)):\(Logger.jsonString($0.1))" }.joined(separator: ",") + "}"
        }
    }

    /// `2026-12-01T12:45:38.017`, in UTC: what Foundation's ISO 8601 style writes, at a fraction
    /// of its cost (a flood of log lines is formatted on one thread).
    static func timestamp(_ date: Date) -> String {
        let milliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        var seconds = time_t(milliseconds / 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let millis = Int(milliseconds % 1000)
        let fraction = millis < 10 ? "00\(millis)" : millis < 100 ? "0\(millis)" : "\(millis)"
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)).\(fraction)"
    }

    static func logfmtValue(_ value: String) -> String {
        let needsQuotes = value.isEmpty || value.contains { $0 == " " || $0 == "=" || $0 == "\"" || $0.isNewline }
        guard needsQuotes else { return value }
        return jsonString(value)
    }

    static func jsonString(_ value: String) -> String { JSONString.quoted(value) }
}

/// The lines waiting for standard error and the thread that writes them (the one piece of state
/// every logger shares: one writer, so lines never interleave). At most `capacity` lines wait; past that new lines are dropped
/// and counted, and a `log.dropped` line says how many once there is room again: a flood of bad
/// datagrams never grows memory or stalls the SIP loop. @unchecked Sendable: `pending`,
/// `dropped`, `writing` are only touched under `condition`.
final class LogSink: @unchecked Sendable {
    /// A line as logged, formatted on the writer thread.
    struct Entry: Sendable {
        var time: Date
        var level: LogLevel
        var event: String
        var fields: [(String, String)]
        var format: LogFormat
    }

    /// The process's one sink.
    static let standardError = LogSink { FileHandle.standardError.write(Data($0.utf8)) }

    static let capacity = 65_536
    private let condition = NSCondition()
    private var pending: [Entry] = []
    private var dropped = 0
    /// The writer has taken lines it has not finished writing.
    private var writing = false

    private let write: @Sendable (String) -> Void

    /// - Parameter write: writes a batch of lines (on the writer thread).
    init(write: @escaping @Sendable (String) -> Void) {
        self.write = write
        let thread = Thread { [weak self] in self?.writeForever() }
        thread.name = "rouse.log"
        thread.start()
    }

    func enqueue(_ entry: Entry) {
        condition.lock()
        if pending.count >= Self.capacity {
            dropped += 1
        } else {
            pending.append(entry)
            condition.broadcast()
        }
        condition.unlock()
    }

    func flush(timeout: TimeInterval) {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        while !pending.isEmpty || writing || dropped > 0 {
            if !condition.wait(until: deadline) { break }
        }
        condition.unlock()
    }

    private func writeForever() {
        while true {
            condition.lock()
            while pending.isEmpty && dropped == 0 { condition.wait() }
            var batch = pending
            pending.removeAll(keepingCapacity: true)
            if dropped > 0 {
                batch.append(Entry(
                    time: Date(), level: .warning, event: "log.dropped", fields: [("lines", String(dropped))], format: batch.last?.format ?? .logfmt))
                dropped = 0
            }
            writing = true
            condition.unlock()
            var text = ""
            for entry in batch { text += Logger.line(entry) + "\n" }
            write(text)
            condition.lock()
            writing = false
            condition.broadcast()
            condition.unlock()
        }
    }
}
