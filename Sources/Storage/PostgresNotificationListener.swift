import Foundation
import Glibc

/// Receives PostgreSQL notifications (`LISTEN`) on a connection and thread of its own.
///
/// Threading: `start` and `stop` may be called from any thread except the listener's own (so not
/// from its closures). The thread waits in `poll()` on the connection's socket and a wake-up pipe,
/// reads with `PQconsumeInput` and hands each notification to `onNotification` on the listener
/// thread, in arrival order: keep it short and hop to your own queue. A lost connection is
/// reopened with growing delays (0.1 s doubling up to `maxReconnectDelay`); `onListening` runs
/// after each successful `LISTEN` (the first and every reconnect), since notifications sent while
/// the connection was down are lost and the owner should reload what it caches. An idle
/// connection is checked with `SELECT 1` every `keepaliveInterval` so a silent loss is noticed.
public final class PostgresNotificationListener: @unchecked Sendable {
    // @unchecked: `running`, `finished` and `thread` are only touched under `condition`; the
    // connection is a local of the listener thread; the pipe descriptors are fixed after init.
    public let settings: PostgresSettings
    public let channels: [String]
    public let maxReconnectDelay: Double
    public let keepaliveInterval: Double
    private let onNotification: @Sendable (PostgresNotification) -> Void
    private let onListening: @Sendable () -> Void
    private let condition = NSCondition()
    private var running = false
    private var finished = true
    private let wakeRead: Int32
    private let wakeWrite: Int32

    /// - Parameter channels: channel names (lower-case letters, digits and `_`, starting with a
    ///   letter or `_`); anything else is a programming error.
    public init(
        settings: PostgresSettings, channels: [String], maxReconnectDelay: Double = 5, keepaliveInterval: Double = 30,
        onListening: @escaping @Sendable () -> Void = {},
        onNotification: @escaping @Sendable (PostgresNotification) -> Void
    ) {
        for channel in channels {
            precondition(Self.isValidChannel(channel), "invalid notification channel name")
        }
        self.settings = settings
        self.channels = channels
        self.maxReconnectDelay = maxReconnectDelay
        self.keepaliveInterval = keepaliveInterval
        self.onListening = onListening
        self.onNotification = onNotification
        var descriptors: [Int32] = [-1, -1]
        let made = pipe(&descriptors)
        precondition(made == 0, "cannot create the listener's wake-up pipe")
        for descriptor in descriptors {
            _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
            _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
        }
        wakeRead = descriptors[0]
        wakeWrite = descriptors[1]
    }

    deinit {
        close(wakeRead)
        close(wakeWrite)
    }

    static func isValidChannel(_ name: String) -> Bool {
        guard let first = name.utf8.first, name.utf8.count <= 63 else { return false }
        let isStart: (UInt8) -> Bool = { ($0 >= 0x61 && $0 <= 0x7A) || $0 == UInt8(ascii: "_") }
        return isStart(first) && name.utf8.allSatisfy { isStart($0) || ($0 >= 0x30 && $0 <= 0x39) }
    }

    /// Starts the listener thread (once; later calls do nothing while it runs).
    public func start() {
        condition.lock()
        defer { condition.unlock() }
        guard !running && finished else { return }
        running = true
        finished = false
        let thread = Thread { [self] in listenLoop() }
        thread.name = "rouse-postgres-listen"
        thread.start()
    }

    /// Stops listening, closes the connection and waits for the thread to end.
    public func stop() {
        condition.lock()
        running = false
        condition.unlock()
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
        condition.lock()
        while !finished { condition.wait() }
        condition.unlock()
        drainWakePipe()
    }

    private var isRunning: Bool {
        condition.lock()
        defer { condition.unlock() }
        return running
    }

    private func listenLoop() {
        var delay = 0.1
        while isRunning {
            if let connection = try? openListening() {
                delay = 0.1
                onListening()
                serve(connection)
            } else {
                waitForWake(seconds: delay)
                delay = min(maxReconnectDelay, delay * 2)
            }
        }
        condition.lock()
        finished = true
        condition.broadcast()
        condition.unlock()
    }

    private func openListening() throws -> PostgresConnection {
        let connection = try settings.connect()
        for channel in channels {
            // LISTEN takes an identifier, not a parameter; the name was checked in init.
            try connection.query("LISTEN \"\(channel)\"")
        }
        return connection
    }

    /// Delivers notifications until the connection breaks or the listener stops.
    private func serve(_ connection: PostgresConnection) {
        var lastTraffic = Date()
        while isRunning {
            let socket = connection.socketDescriptor
            guard socket >= 0 else { return }
            var descriptors = [
                pollfd(fd: socket, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
            ]
            let waitMilliseconds = Int32(max(10, min(keepaliveInterval, 1_000_000) * 1000))
            let ready = poll(&descriptors, 2, waitMilliseconds)
            if ready < 0 {
                if errno == EINTR { continue }
                return
            }
            if descriptors[1].revents != 0 { drainWakePipe() }
            if ready == 0 || Date().timeIntervalSince(lastTraffic) >= keepaliveInterval {
                guard (try? connection.query("SELECT 1")) != nil else { return }
                lastTraffic = Date()
            }
            if descriptors[0].revents != 0 {
                guard connection.consumeInput() else { return }
                lastTraffic = Date()
            }
            while let notification = connection.nextNotification() {
                onNotification(notification)
            }
        }
    }

    private func waitForWake(seconds: Double) {
        var descriptor = pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)
        _ = poll(&descriptor, 1, Int32(seconds * 1000))
        drainWakePipe()
    }

    private func drainWakePipe() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(wakeRead, &buffer, buffer.count) > 0 {}
    }
}
