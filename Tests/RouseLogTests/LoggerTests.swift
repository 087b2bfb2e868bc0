import Foundation
import XCTest

@testable import RouseLog

/// The log sink writes on its own thread: a caller never waits on standard error, and a flood
/// past the sink's capacity is dropped and counted, never buffered without end.
final class LoggerTests: XCTestCase {
    func testLinesAreWrittenInOrderOffTheCallersThreadAndAFloodIsCountedNotKept() throws {
        let output = Output()
        let writing = DispatchSemaphore(value: 0)
        let gate = DispatchSemaphore(value: 0)
        let sink = LogSink { text in
            writing.signal()
            gate.wait()
            output.append(text, thread: Thread.current)
        }
        func log(_ index: Int) {
            sink.enqueue(LogSink.Entry(entry: LogEntry(time: Date(), level: .info, event: "sip.malformed", fields: [("n", String(index))]), format: .logfmt))
        }
        // The writer is stuck on a slow terminal with the first line: logging still returns at once.
        log(0)
        XCTAssertEqual(writing.wait(timeout: .now() + 30), .success)
        let extra = 25
        for index in 1...(LogSink.capacity + extra) { log(index) }
        for _ in 0..<3 { gate.signal() }
        sink.flush(timeout: 60)
        let lines = output.text.split(separator: "\n")
        XCTAssertFalse(output.threads.contains(Thread.current), "written by the sink's own thread")
        let kept = lines.filter { $0.contains("event=sip.malformed") }.map { String($0.split(separator: "=").last ?? "") }
        XCTAssertEqual(kept, (0...LogSink.capacity).map(String.init), "the first line and a full buffer, in the order logged")
        XCTAssertEqual(lines.last.map(String.init)?.hasSuffix("level=warning event=log.dropped lines=\(extra)"), true, "\(lines.last ?? "")")
    }

    func testTimestampsAreISO8601InUTCToTheMillisecond() {
        let expected: [(TimeInterval, String)] = [
            (0, "1970-01-01T00:00:00.000"), (951_782_400.25, "2000-02-29T00:00:00.250"), (1_800_000_000.5, "2027-01-15T08:00:00.500"),
            (1_798_761_599.875, "2026-12-31T23:59:59.875"),
        ]
        for (seconds, text) in expected {
            let date = Date(timeIntervalSince1970: seconds)
            XCTAssertEqual(Logger.timestamp(date), text)
            XCTAssertEqual(Logger.timestamp(date), date.formatted(.iso8601.year().month().day().time(includingFractionalSeconds: true)))
        }
    }

    /// What a library sees: a value with a level and metadata; below the level nothing is built.
    func testMetadataComesFirstAndMessagesBelowTheLevelAreNeverBuilt() {
        let handler = Collected()
        let logger = Logger(level: .info, handler: handler).with(["call": "c1"])
        let built = Counter()
        logger.debug({ built.bump(); return "call.detail" }(), ["n": "1"])
        logger.info("call.started", ["callee": "alice"])
        logger.error("call.failed", [:])
        XCTAssertEqual(built.count, 0, "a debug event was built at level info")
        XCTAssertEqual(handler.entries.map(\.event), ["call.started", "call.failed"])
        XCTAssertEqual(handler.entries.first?.fields.map { "\($0.0)=\($0.1)" }, ["call=c1", "callee=alice"])
        XCTAssertEqual(Logger.line(handler.entries[0], format: .json).dropFirst(34), #""level":"info","event":"call.started","call":"c1","callee":"alice"}"#)
        Logger.discarding.error({ built.bump(); return "never" }())
        XCTAssertEqual(built.count, 0, "the discarding logger built an event")
    }

    final class Collected: LogHandler, @unchecked Sendable {
        // @unchecked: `kept` only touched under `lock`.
        private let lock = NSLock()
        private var kept: [LogEntry] = []
        func write(_ entry: LogEntry) { lock.withLock { kept.append(entry) } }
        func flush(timeout: TimeInterval) {}
        var entries: [LogEntry] { lock.withLock { kept } }
    }

    final class Counter: @unchecked Sendable {
        // @unchecked: `value` only touched under `lock`.
        private let lock = NSLock()
        private var value = 0
        func bump() { lock.withLock { value += 1 } }
        var count: Int { lock.withLock { value } }
    }

    final class Output: @unchecked Sendable {
        // @unchecked: both fields only touched under `lock`.
        private let lock = NSLock()
        private var written = ""
        private var writers: [Thread] = []

        func append(_ text: String, thread: Thread) {
            lock.withLock {
                written += text
                writers.append(thread)
            }
        }

        var text: String { lock.withLock { written } }
        var threads: [Thread] { lock.withLock { writers } }
    }
}
