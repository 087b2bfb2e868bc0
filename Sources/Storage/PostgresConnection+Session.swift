import CLibPQ
import Glibc

/// A notification received on a `LISTEN`ed channel. A value, safe to share.
public struct PostgresNotification: Hashable, Sendable {
    public let channel: String
    public let payload: String
    /// The server process that sent it (PostgreSQL's backend pid).
    public let senderProcessID: Int32

    public init(channel: String, payload: String, senderProcessID: Int32) {
        self.channel = channel
        self.payload = payload
        self.senderProcessID = senderProcessID
    }
}

extension PostgresConnection {
    /// Sets this session's statement deadline (PostgreSQL's `statement_timeout`); 0 means none.
    public func setStatementTimeout(seconds: Double) throws(PostgresError) {
        let milliseconds = max(0, Int((seconds * 1000).rounded(.up)))
        try query("SELECT set_config('statement_timeout', $1, false)", [String(milliseconds)])
    }

    /// Checks without blocking whether the server is still there: an idle connection whose server
    /// went away has an end-of-file waiting on its socket, which libpq only notices when it reads.
    /// Returns false when the connection is broken and must be replaced.
    public func probe() -> Bool {
        guard PQstatus(connection) == CONNECTION_OK else { return false }
        let socket = PQsocket(connection)
        guard socket >= 0 else { return false }
        // A server that ends the session sends an error message, then closes: read until the
        // socket has nothing more, so the end of file behind the message is seen too.
        for _ in 0..<8 {
            var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 0) > 0 else { break }
            if PQconsumeInput(connection) == 0 { return false }
        }
        return PQstatus(connection) == CONNECTION_OK
    }

    /// The socket libpq talks over, for `poll()` (−1 when there is none).
    var socketDescriptor: Int32 { PQsocket(connection) }

    /// Reads whatever the server sent without blocking; false when the connection is broken.
    func consumeInput() -> Bool {
        PQconsumeInput(connection) != 0 && PQstatus(connection) == CONNECTION_OK
    }

    /// The next notification libpq has buffered, or nil.
    func nextNotification() -> PostgresNotification? {
        guard let notify = PQnotifies(connection) else { return nil }
        defer { PQfreemem(notify) }
        return PostgresNotification(
            channel: String(cString: notify.pointee.relname),
            payload: notify.pointee.extra.map { String(cString: $0) } ?? "",
            senderProcessID: notify.pointee.be_pid)
    }

    /// The libpq message of the connection's last failure, first line only.
    var lastErrorLine: String { PostgresConnection.firstLine(of: PQerrorMessage(connection)) }
}
