import Crypto
public import Foundation
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

/// One event as logged: its name, its fields (the logger's metadata first), when and how loud.
public struct LogEntry: Sendable {
    public var time: Date
    public var level: LogLevel
    public var event: String
    public var fields: [(String, String)]

    public init(time: Date, level: LogLevel, event: String, fields: [(String, String)]) {
        self.time = time
        self.level = level
        self.event = event
        self.fields = fields
    }
}

/// Where a logger's entries go. `write` is called on the logging thread (the SIP loop, a queue, an
/// HTTP worker) and must not block it.
public protocol LogHandler: Sendable {
    func write(_ entry: LogEntry)
    /// Waits (at most `timeout` seconds) until what was written so far is out.
    func flush(timeout: TimeInterval)
}

/// The logger every layer takes, in swift-log's shape: a value with a level and metadata that is
/// cheap to copy and to pass; messages and fields are `@autoclosure`s, built only when the level
/// lets the entry through. Values are passed by the caller, who never passes secrets (passwords,
/// keys, tokens in full). Thread-safe (a value over a `Sendable` handler); the process's handler
/// (`standardError`) never blocks the caller on the terminal or pipe: a line is handed to the
/// sink's writer thread, which formats and writes it (so the SIP loop, which logs each malformed
/// datagram, never waits on standard error).
public struct Logger: Sendable {
    public var level: LogLevel
    /// Fields every entry of this logger carries before its own (`call=…` for one call's lines).
    public var metadata: [(String, String)]
    private let handler: (any LogHandler)?

    /// Writes to the process's standard error in `format`.
    public init(level: LogLevel = .info, format: LogFormat = .logfmt) {
        self.init(level: level, handler: StandardErrorLogHandler(format: format))
    }

    public init(level: LogLevel, handler: any LogHandler) {
        self.level = level
        self.metadata = []
        self.handler = handler
    }

    private init(discarding: Void) {
        self.level = .error
        self.metadata = []
        self.handler = nil
    }

    /// A logger that writes nothing: the default of a library used without one.
    public static let discarding = Logger(discarding: ())

    /// This logger with `fields` added to every entry's metadata.
    public func with(_ fields: KeyValuePairs<String, String>) -> Logger {
        var copy = self
        copy.metadata.append(contentsOf: fields.map { ($0.key, $0.value) })
        return copy
    }

    public func debug(_ event: @autoclosure () -> String, _ fields: @autoclosure () -> KeyValuePairs<String, String> = [:]) {
        log(.debug, event(), fields())
    }

    public func info(_ event: @autoclosure () -> String, _ fields: @autoclosure () -> KeyValuePairs<String, String> = [:]) {
        log(.info, event(), fields())
    }

    public func warning(_ event: @autoclosure () -> String, _ fields: @autoclosure () -> KeyValuePairs<String, String> = [:]) {
        log(.warning, event(), fields())
    }

    public func error(_ event: @autoclosure () -> String, _ fields: @autoclosure () -> KeyValuePairs<String, String> = [:]) {
        log(.error, event(), fields())
    }

    public func log(_ level: LogLevel, _ event: @autoclosure () -> String, _ fields: @autoclosure () -> KeyValuePairs<String, String>) {
        guard let handler, level >= self.level else { return }
        handler.write(LogEntry(time: Date(), level: level, event: event(), fields: metadata + fields().map { ($0.key, $0.value) }))
    }

    /// Waits (at most `timeout` seconds) until every line logged so far is written: before the
    /// process exits.
    public func flush(timeout: TimeInterval = 5) {
        handler?.flush(timeout: timeout)
    }

    /// One line in `format`.
    static func line(_ entry: LogEntry, format: LogFormat) -> String {
        let time = timestamp(entry.time)
        var pairs: [(String, String)] = [("time", time), ("level", entry.level.rawValue), ("event", entry.event)]
        pairs.append(contentsOf: entry.fields)
        switch format {
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


/// The process's standard error, in one format, through the one `LogSink`.
public struct StandardErrorLogHandler: LogHandler {
    public let format: LogFormat

    public init(format: LogFormat) { self.format = format }

    public func write(_ entry: LogEntry) { LogSink.standardError.enqueue(LogSink.Entry(entry: entry, format: format)) }

    public func flush(timeout: TimeInterval) { LogSink.standardError.flush(timeout: timeout) }
}

/// The lines waiting for standard error and the thread that writes them (the one piece of state
/// every logger shares: one writer, so lines never interleave). At most `capacity` lines wait; past that new lines are dropped
/// and counted, and a `log.dropped` line says how many once there is room again: a flood of bad
/// datagrams never grows memory or stalls the SIP loop. @unchecked Sendable: `pending`,
/// `dropped`, `writing` are only touched under `condition`.
final class LogSink: @unchecked Sendable {
    /// A line as logged, formatted on the writer thread.
    struct Entry: Sendable {
        var entry: LogEntry
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
                    entry: LogEntry(time: Date(), level: .warning, event: "log.dropped", fields: [("lines", String(dropped))]),
                    format: batch.last?.format ?? .logfmt))
                dropped = 0
            }
            writing = true
            condition.unlock()
            var text = ""
            for line in batch { text += Logger.line(line.entry, format: line.format) + "\n" }
            write(text)
            condition.lock()
            writing = false
            condition.broadcast()
            condition.unlock()
        }
    }
}
