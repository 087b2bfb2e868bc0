import CLibPQ
public import Crypto
import Glibc
import Synchronization

/// Statements sent to PostgreSQL by this process (`PostgresConnection.statementCount`).
let statementsSent = Atomic<Int>(0)

/// One connection to PostgreSQL through libpq. It owns its `PGconn` and closes it in `deinit`.
///
/// Threading: not thread-safe. A connection belongs to one owner (a worker thread of the storage
/// layer, or a command-line run); every call blocks that thread until PostgreSQL answers, so it must
/// never be used on the SIP event loop. Statements run only with bind parameters.
public final class PostgresConnection {
    /// The libpq handle; internal so the storage layer's own extensions (probing, LISTEN) reach it.
    let connection: OpaquePointer
    /// `host:port` (or the socket folder and port) this connection was opened to, for messages.
    public let endpoint: String
    /// The keys that seal and open the secret columns on this connection (`SealedSecrets`); nil:
    /// storing or reading a secret fails with a clear error.
    public var secrets: SecretSeal?
    /// The names of the statements prepared on this connection (`query(prepared:)`, `pipeline`).
    var prepared: Set<String> = []

    /// Connects with a libpq conninfo string or a `postgresql://` URL.
    /// - Parameter connectTimeout: seconds libpq waits for the server (its `connect_timeout`).
    public init(conninfo: String, connectTimeout: Int = 10) throws(PostgresError) {
        let endpoint = PostgresConnection.describeEndpoint(conninfo)
        self.endpoint = endpoint
        // Notices ("relation already exists, skipping") are not for Rouse's users: warnings and up
        // only. It, the TCP settings and `application_name` come before the conninfo (expanded
        // from `dbname`), so options given there win: an `application_name` in the database URL
        // tells instances apart in `pg_stat_activity`.
        let tcp = PostgresConnection.tcpSettings
        let keywords = ["options"] + tcp.map(\.keyword) + ["application_name", "dbname", "connect_timeout"]
        let values = ["-c client_min_messages=warning"] + tcp.map(\.value) + ["rouse", conninfo, String(connectTimeout)]
        let pointer: OpaquePointer? = withCStrings(keywords) { keys in
            withCStrings(values) { vals in
                PQconnectdbParams(keys, vals, 1)
            }
        }
        guard let pointer else {
            throw PostgresError(kind: .connection, message: "cannot connect to PostgreSQL at \(endpoint): out of memory")
        }
        guard PQstatus(pointer) == CONNECTION_OK else {
            let reason = PostgresConnection.firstLine(of: PQerrorMessage(pointer))
            PQfinish(pointer)
            throw PostgresError(kind: .connection, message: "cannot connect to PostgreSQL at \(endpoint): \(reason)")
        }
        self.connection = pointer
    }

    deinit {
        PQfinish(connection)
    }

    /// TCP keepalives and `tcp_user_timeout` (libpq ignores them on a Unix socket): a PostgreSQL
    /// that vanishes from the network (a partition, a host gone) is noticed in about 25 s when the
    /// connection is idle and 15 s while a statement waits for its answer, instead of never; the
    /// statement then fails and the worker connects again.
    static let tcpSettings: [(keyword: String, value: String)] = [
        ("keepalives", "1"), ("keepalives_idle", "10"), ("keepalives_interval", "5"), ("keepalives_count", "3"),
        ("tcp_user_timeout", "15000"),
    ]

    /// The value libpq uses for connection option `keyword` (from `PQconninfo`), for tests and
    /// diagnostics; nil when unset.
    public func option(_ keyword: String) -> String? {
        guard let options = PQconninfo(connection) else { return nil }
        defer { PQconninfoFree(options) }
        var index = 0
        while let name = options[index].keyword {
            if String(cString: name) == keyword { return options[index].val.map { String(cString: $0) } }
            index += 1
        }
        return nil
    }

    /// True while the connection is usable.
    public var isHealthy: Bool { PQstatus(connection) == CONNECTION_OK }

    /// Statements (and scripts) this process has sent to PostgreSQL over any connection: a round
    /// trip each, except those of one `pipeline`, which share one (`/metrics` shows it as
    /// `rouse_database_statements_total`). Thread-safe.
    public static var statementCount: Int { statementsSent.load(ordering: .relaxed) }

    /// Runs one statement with `$1…$n` bind parameters (text format; nil is SQL NULL).
    @discardableResult
    public func query(_ sql: String, _ parameters: [String?] = []) throws(PostgresError) -> PostgresRows {
        try query(sql, PostgresParameters(parameters))
    }

    /// Runs one statement with parameters already laid out as bytes (no copy per value).
    @discardableResult
    func query(_ sql: String, _ parameters: PostgresParameters) throws(PostgresError) -> PostgresRows {
        statementsSent.add(1, ordering: .relaxed)
        let result = parameters.withValuePointers { values, count in
            PQexecParams(connection, sql, count, nil, values, nil, nil, 0)
        }
        return try rows(of: result)
    }

    /// Runs the statement `sql` as a named prepared statement of this connection (prepared on its
    /// first use here, so PostgreSQL parses and plans it once per connection, not per call). For
    /// the hot, fixed statements of the writers; `name` must be unique per SQL text.
    @discardableResult
    func query(prepared name: StaticString, _ sql: String, _ parameters: PostgresParameters) throws(PostgresError) -> PostgresRows {
        let key = name.description
        if !prepared.contains(key) {
            statementsSent.add(1, ordering: .relaxed)
            _ = try rows(of: PQprepare(connection, key, sql, parameters.count, nil))
            prepared.insert(key)
        }
        statementsSent.add(1, ordering: .relaxed)
        let result = parameters.withValuePointers { values, count in
            PQexecPrepared(connection, key, count, values, nil, nil, 0)
        }
        do {
            return try rows(of: result)
        } catch where error.sqlState == "26000" {
            // PostgreSQL no longer knows the statement (a DISCARD ALL): prepared again, at once
            // outside a transaction, else on the next use (the transaction has failed anyway).
            prepared.remove(key)
            guard PQtransactionStatus(connection) == PQTRANS_IDLE else { throw error }
            return try query(prepared: name, sql, parameters)
        }
    }

    /// The rows of a result, or its error (the result is freed either way).
    func rows(of result: OpaquePointer?) throws(PostgresError) -> PostgresRows {
        let result = try succeeded(result)
        defer { PQclear(result) }
        return PostgresRows(result: result)
    }

    /// Runs one statement and hands its rows to `body` as they lie in libpq's result, without a
    /// copy or a String per value (a page of a million bindings at start-up); the result is freed
    /// when `body` returns, so nothing of `PostgresResultView` may outlive it.
    func query<T>(_ sql: String, _ parameters: PostgresParameters, reading body: (PostgresResultView) throws -> T) throws -> T {
        statementsSent.add(1, ordering: .relaxed)
        let result = try succeeded(
            parameters.withValuePointers { values, count in
                PQexecParams(connection, sql, count, nil, values, nil, nil, 0)
            })
        defer { PQclear(result) }
        return try body(PostgresResultView(result: result))
    }

    /// Sends one statement without waiting for its answer, which `receive(reading:)` reads: the
    /// caller works while PostgreSQL runs it (the start-up decodes a page of bindings while the
    /// next one is read). One statement at a time; the next `query` drops an answer not read.
    func send(_ sql: String, _ parameters: PostgresParameters) throws(PostgresError) {
        statementsSent.add(1, ordering: .relaxed)
        let sent = parameters.withValuePointers { values, count in
            PQsendQueryParams(connection, sql, count, nil, values, nil, nil, 0)
        }
        guard sent == 1 else {
            throw PostgresError(kind: .connection, message: "PostgreSQL at \(endpoint): cannot send a statement: \(lastErrorLine)")
        }
    }

    /// The answer of the statement `send` sent (blocking until it is in), handed to `body` as
    /// `query(_:_:reading:)` hands it.
    func receive<T>(reading body: (PostgresResultView) throws -> T) throws -> T {
        let first = PQgetResult(connection)
        // A statement's answer ends with a nil result.
        while let extra = PQgetResult(connection) { PQclear(extra) }
        let result = try succeeded(first)
        defer { PQclear(result) }
        return try body(PostgresResultView(result: result))
    }

    /// A result that succeeded, or its error (a failed one is freed). The caller frees the result.
    private func succeeded(_ result: OpaquePointer?) throws(PostgresError) -> OpaquePointer {
        guard let result else {
            throw PostgresError(kind: .query, message: "PostgreSQL at \(endpoint): \(PostgresConnection.firstLine(of: PQerrorMessage(connection)))")
        }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK:
            return result
        default:
            let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
            let message = PostgresConnection.firstLine(of: PQresultErrorMessage(result))
            PQclear(result)
            throw PostgresError(kind: .query, message: "PostgreSQL at \(endpoint): \(message)", sqlState: state)
        }
    }

    /// Runs a script of several statements without parameters (the simple query protocol). Only
    /// for fixed SQL written in Rouse's code, such as migrations; never for text built from input.
    public func runScript(_ sql: StaticString) throws(PostgresError) {
        try runScript(text: sql.description)
    }

    func runScript(text sql: String) throws(PostgresError) {
        statementsSent.add(1, ordering: .relaxed)
        guard let result = PQexec(connection, sql) else {
            throw PostgresError(kind: .query, message: "PostgreSQL at \(endpoint): \(PostgresConnection.firstLine(of: PQerrorMessage(connection)))")
        }
        defer { PQclear(result) }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
            let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
            let message = PostgresConnection.firstLine(of: PQresultErrorMessage(result))
            throw PostgresError(kind: .query, message: "PostgreSQL at \(endpoint): \(message)", sqlState: state)
        }
    }

    /// Runs `body` inside BEGIN … COMMIT, rolling back when it throws.
    public func transaction<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        try query("BEGIN")
        do {
            let value = try body(self)
            try query("COMMIT")
            return value
        } catch {
            _ = try? query("ROLLBACK")
            throw error
        }
    }

    /// `host:port` from a conninfo or URL, without user or password; libpq's defaults where absent.
    public static func describeEndpoint(_ conninfo: String) -> String {
        var errorMessage: UnsafeMutablePointer<CChar>? = nil
        guard let options = PQconninfoParse(conninfo, &errorMessage) else {
            if let errorMessage { PQfreemem(errorMessage) }
            return "(unparsable connection string)"
        }
        defer { PQconninfoFree(options) }
        var host: String? = nil
        var hostaddr: String? = nil
        var port: String? = nil
        var index = 0
        while let keyword = options[index].keyword {
            let name = String(cString: keyword)
            let value = options[index].val.map { String(cString: $0) }
            switch name {
            case "host": host = value
            case "hostaddr": hostaddr = value
            case "port": port = value
            default: break
            }
            index += 1
        }
        let shownHost = (host?.isEmpty == false ? host : nil) ?? hostaddr ?? "localhost"
        return "\(shownHost):\(port?.isEmpty == false ? port! : "5432")"
    }

    static func firstLine(of message: UnsafePointer<CChar>?) -> String {
        guard let message else { return "unknown error" }
        let text = String(cString: message)
        let line = text.split(whereSeparator: \.isNewline).first.map(String.init) ?? text
        return line.isEmpty ? "unknown error" : line
    }
}

/// The rows a statement returned, copied out of libpq's result (text format).
public struct PostgresRows: Sendable {
    public let columns: [String]
    public let rows: [[String?]]
    /// Rows the statement changed (INSERT/UPDATE/DELETE), or 0.
    public let affectedRows: Int

    init(result: OpaquePointer) {
        let columnCount = Int(PQnfields(result))
        let rowCount = Int(PQntuples(result))
        columns = (0..<columnCount).map { String(cString: PQfname(result, Int32($0))) }
        var rows: [[String?]] = []
        rows.reserveCapacity(rowCount)
        for row in 0..<rowCount {
            rows.append(
                (0..<columnCount).map { column in
                    PQgetisnull(result, Int32(row), Int32(column)) == 1
                        ? nil : String(cString: PQgetvalue(result, Int32(row), Int32(column)))
                })
        }
        self.rows = rows
        // Digits, or empty for a statement that changes no rows: read without a String.
        var affected = 0
        if var digit = PQcmdTuples(result) {
            while digit.pointee >= 0x30 && digit.pointee <= 0x39 {
                affected = affected * 10 + Int(digit.pointee - 0x30)
                digit += 1
            }
        }
        affectedRows = affected
    }

    public var count: Int { rows.count }
    public var isEmpty: Bool { rows.isEmpty }

    /// The value of the named column in a row.
    public func value(_ row: Int, _ column: String) -> String? {
        guard let index = columns.firstIndex(of: column) else { return nil }
        return rows[row][index]
    }
}

/// The rows of a result as libpq holds them (text format): each value's bytes, read in place.
/// Only valid inside `PostgresConnection.query(_:_:reading:)`'s body, which frees the result after.
///
/// Threading: read-only; several threads may read one view at once (libpq's result is not changed
/// by reading it).
struct PostgresResultView: @unchecked Sendable {
    // @unchecked: the result is only read, and outlives every use of the view (see above).
    private let result: OpaquePointer
    /// The rows and the columns of each.
    let count: Int
    let columnCount: Int

    fileprivate init(result: OpaquePointer) {
        self.result = result
        count = Int(PQntuples(result))
        columnCount = Int(PQnfields(result))
    }

    /// The bytes of one value, without its terminating NUL (which libpq keeps after them); nil
    /// for SQL NULL.
    func bytes(_ row: Int, _ column: Int) -> UnsafeBufferPointer<UInt8>? {
        guard PQgetisnull(result, Int32(row), Int32(column)) == 0, let value = PQgetvalue(result, Int32(row), Int32(column)) else {
            return nil
        }
        let length = Int(PQgetlength(result, Int32(row), Int32(column)))
        return UnsafeBufferPointer(start: UnsafeRawPointer(value).assumingMemoryBound(to: UInt8.self), count: length)
    }

    /// One value as a String; nil for SQL NULL.
    func string(_ row: Int, _ column: Int) -> String? {
        bytes(row, column).map { String(decoding: $0, as: UTF8.self) }
    }

    /// One value read as a number (Swift's own reading, correctly rounded, in any locale); nil for
    /// SQL NULL or text that is not wholly a number.
    func double(_ row: Int, _ column: Int) -> Double? {
        string(row, column).flatMap { Double($0) }
    }

    /// One value read as a whole number (`strtoll` on libpq's NUL-terminated text); nil for SQL
    /// NULL or text that is not wholly one.
    func integer(_ row: Int, _ column: Int) -> Int64? {
        guard PQgetisnull(result, Int32(row), Int32(column)) == 0, let text = PQgetvalue(result, Int32(row), Int32(column)) else {
            return nil
        }
        let length = Int(PQgetlength(result, Int32(row), Int32(column)))
        guard length > 0 else { return nil }
        var end: UnsafeMutablePointer<CChar>?
        let value = Int64(strtoll(text, &end, 10))
        return end == text + length ? value : nil
    }
}

private func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
    var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
    pointers.append(nil)
    defer { for pointer in pointers { free(pointer) } }
    return pointers.withUnsafeBufferPointer { buffer in
        buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: buffer.count) { body($0) }
    }
}
