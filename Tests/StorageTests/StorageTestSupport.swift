import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// A migrated test database with a directory of `domain` and extensions `1000…`.
final class MigratedDatabase {
    let database: TestDatabase
    let settings: PostgresSettings
    let directory: PostgresDirectory

    init(domain: String = "example.com", extensions: Int = 0) throws {
        database = try TestDatabase()
        settings = database.settings(connectTimeout: 5, statementTimeout: 10)
        try Migrator.migrate(try database.connect())
        directory = PostgresDirectory(settings: settings)
        if extensions > 0 {
            try directory.addDomain(domain)
            for number in 0..<extensions {
                try directory.addExtension(AddressOfRecord(number: String(1000 + number), domain: domain), password: "pw-\(number)")
            }
        }
    }

    func drop() { database.drop() }

    /// A started listener on `channels` that is listening already, and the channels it hears, in
    /// order; stop it when done.
    func listening(to channels: [String]) throws -> (PostgresNotificationListener, Collector<String>) {
        let heard = Collector<String>()
        let listening = DispatchSemaphore(value: 0)
        let listener = PostgresNotificationListener(settings: settings, channels: channels, onListening: { listening.signal() }) {
            heard.append($0.channel)
        }
        listener.start()
        guard listening.wait(timeout: .now() + 30) == .success else {
            listener.stop()
            throw ListenerNotListening()
        }
        return (listener, heard)
    }

    struct ListenerNotListening: Error {}
}

/// Collects results handed over on other threads.
final class Collector<T: Sendable>: @unchecked Sendable {
    // @unchecked: `items` is only touched under `lock`.
    private let lock = NSLock()
    private var items: [T] = []

    func append(_ item: T) {
        lock.lock()
        items.append(item)
        lock.unlock()
    }

    var all: [T] {
        lock.lock()
        defer { lock.unlock() }
        return items
    }

    /// Waits until at least `count` items arrived, up to `timeout`.
    func wait(for count: Int, timeout: TimeInterval = 30) -> [T] {
        let deadline = Date().addingTimeInterval(timeout)
        while all.count < count, Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        return all
    }
}

/// Waits until `condition` holds, up to `timeout`; throws, naming `what`, when it never does.
func waitUntil(_ what: String, timeout: TimeInterval = 30, _ condition: () throws -> Bool) throws {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if try condition() { return }
        Thread.sleep(forTimeInterval: 0.01)
    }
    throw WaitTimedOut(what: what)
}

struct WaitTimedOut: Error, CustomStringConvertible {
    let what: String
    var description: String { "timed out waiting until \(what)" }
}

/// Sessions waiting for a lock on `table` (another session holds it), read over `connection`.
func sessionsWaitingForALock(on table: String, _ connection: PostgresConnection) throws -> Int {
    let rows = try connection.query("SELECT count(*) AS n FROM pg_locks WHERE NOT granted AND relation = $1::regclass", [table])
    return Int(rows.value(0, "n") ?? "0") ?? 0
}

func makeBinding(
    _ aor: AddressOfRecord, id: UUID = UUID(), expiresIn: TimeInterval = 3600, channels: [PushChannel] = [],
    cseq: UInt32 = 1, now: Date = Date()
) -> Binding {
    Binding(
        id: id, aor: aor, contact: "<sip:\(aor.number)@192.0.2.7:5060;transport=tcp>;+sip.instance=\"<urn:uuid:x>\"",
        instance: "<urn:uuid:\(id.uuidString.lowercased())>", regID: 1, q: 0.5, callID: "call-\(id.uuidString)@phone",
        cseq: cseq, registeredAt: now, expiresAt: now.addingTimeInterval(expiresIn),
        path: ["<sip:proxy.example.net;lr>", "<sip:edge.example.net;lr;ob>"], userAgent: "Phone \"1\"/2.0",
        flow: BindingFlow(transport: .tcp, source: SocketAddress(parsing: "192.0.2.7:5060"), connectionID: FlowConnectionID("tcp-17"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "instance-a"),
        pushChannels: channels)
}

extension PostgresLocationStore {
    /// `apply`, waiting for the completion.
    func applyAndWait(_ changes: [BindingChange], timeout: TimeInterval = 30) throws {
        let done = Collector<Result<Void, any Error>>()
        apply(changes) { done.append($0) }
        guard let result = done.wait(for: 1, timeout: timeout).first else {
            throw PostgresError(kind: .unexpectedResult, message: "no completion within \(timeout) s")
        }
        try result.get()
    }
}

extension MigratedDatabase {
    /// A listener on `channels`, started and listening (stop it when done), and what it receives.
    func startListener(_ channels: [String]) -> (listener: PostgresNotificationListener, received: Collector<PostgresNotification>) {
        let received = Collector<PostgresNotification>()
        let listening = Collector<Bool>()
        let listener = PostgresNotificationListener(
            settings: settings, channels: channels, onListening: { listening.append(true) }, onNotification: { received.append($0) })
        listener.start()
        XCTAssertEqual(listening.wait(for: 1).count, 1, "the listener listens")
        return (listener, received)
    }
}
