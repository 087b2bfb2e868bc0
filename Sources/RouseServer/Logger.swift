import Crypto
import Foundation

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
/// callers never pass secrets (passwords, keys, tokens in full). Thread-safe: a lock serialises
/// writes so lines from different threads never interleave.
public struct Logger: Sendable {
    public let level: LogLevel
    public let format: LogFormat
    private let sink: LogSink

    public init(level: LogLevel = .info, format: LogFormat = .logfmt) {
        self.level = level
        self.format = format
        self.sink = LogSink()
    }

    public func debug(_ event: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.debug, event, fields) }
    public func info(_ event: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.info, event, fields) }
    public func warning(_ event: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.warning, event, fields) }
    public func error(_ event: String, _ fields: KeyValuePairs<String, String> = [:]) { log(.error, event, fields) }

    public func log(_ level: LogLevel, _ event: String, _ fields: KeyValuePairs<String, String>) {
        guard level >= self.level else { return }
        let time = Date().formatted(.iso8601.year().month().day().time(includingFractionalSeconds: true))
        var pairs: [(String, String)] = [("time", time), ("level", level.rawValue), ("event", event)]
        pairs.append(contentsOf: fields.map { ($0.key, $0.value) })
        let line: String
        switch format {
        case .logfmt:
            line = pairs.map { "\($0.0)=\(Logger.logfmtValue($0.1))" }.joined(separator: " ")
        case .json:
            line = "{" + pairs.map { "\(Logger.jsonString($0.0)):\(Logger.jsonString($0.1))" }.joined(separator: ",") + "}"
        }
        sink.write(line + "\n")
    }

    static func logfmtValue(_ value: String) -> String {
        let needsQuotes = value.isEmpty || value.contains { $0 == " " || $0 == "=" || $0 == "\"" || $0.isNewline }
        guard needsQuotes else { return value }
        return jsonString(value)
    }

    static func jsonString(_ value: String) -> String { JSONString.quoted(value) }
}

/// Standard error behind a lock (the one piece of state loggers share).
final class LogSink: @unchecked Sendable {
    // @unchecked: every access to the file handle happens under `lock`.
    private let lock = NSLock()

    func write(_ line: String) {
        lock.lock()
        defer { lock.unlock() }
        FileHandle.standardError.write(Data(line.utf8))
    }
}
