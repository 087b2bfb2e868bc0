import CLibPQ
import Synchronization

/// One statement of a pipeline (`PostgresConnection.pipeline`): the named prepared statement
/// `name` (prepared on its first use on a connection, as `query(prepared:)` does) or, without a
/// name, a one-off statement; with its bind parameters. A value.
struct PostgresStatement {
    var name: StaticString?
    var sql: String
    var parameters: PostgresParameters

    init(prepared name: StaticString? = nil, _ sql: String, _ parameters: PostgresParameters = PostgresParameters()) {
        self.name = name
        self.sql = sql
        self.parameters = parameters
    }

    static let begin = PostgresStatement("BEGIN")
    static let commit = PostgresStatement("COMMIT")
}

/// What a pipeline's statements returned: the rows of each one up to the first that failed, and
/// that one's failure (PostgreSQL skips every statement after it). A value.
struct PipelineResults {
    /// The rows of the statements that ran, in order: all of them when `failure` is nil.
    var rows: [PostgresRows] = []
    /// The statement that failed (its index) and its error.
    var failure: (index: Int, error: PostgresError)?
}

extension PostgresConnection {
    /// Runs one statement (prepared or not) on its own.
    @discardableResult
    func query(_ statement: PostgresStatement) throws(PostgresError) -> PostgresRows {
        if let name = statement.name { return try query(prepared: name, statement.sql, statement.parameters) }
        return try query(statement.sql, statement.parameters)
    }

    /// Sends every statement at once in libpq's pipeline mode, with one Sync after the last, and
    /// reads their answers: one round trip for all of them. Without a BEGIN among them the
    /// statements are one implicit transaction, committed at the Sync (or rolled back there when
    /// one failed); with BEGIN and COMMIT sent as statements, once a statement fails PostgreSQL
    /// skips the rest up to the Sync and the transaction the pipeline began is left failed: the
    /// caller rolls it back. Throws only when the connection itself fails (then nothing is known
    /// of what ran).
    ///
    /// Blocking, as every call of the connection is; the connection is in the usual mode again
    /// when this returns. The answers of one pipeline must fit in the sockets' buffers while it is
    /// being sent (libpq sends in blocking mode): a few hundred small rows, as the writers send.
    func pipeline(_ statements: [PostgresStatement]) throws(PostgresError) -> PipelineResults {
        guard PQenterPipelineMode(connection) == 1 else { throw failure("cannot enter pipeline mode") }
        // Each answer to read belongs to a statement (its index), or to the preparation of the
        // statement's name before it (`preparing`).
        var pending: [(index: Int, preparing: String?)] = []
        pending.reserveCapacity(statements.count + 2)
        var preparing: Set<String> = []
        var sendFailed = false
        for (index, statement) in statements.enumerated() {
            let sent: Int32
            if let name = statement.name {
                let key = name.description
                if !prepared.contains(key) && !preparing.contains(key) {
                    guard PQsendPrepare(connection, key, statement.sql, statement.parameters.count, nil) == 1 else {
                        sendFailed = true
                        break
                    }
                    preparing.insert(key)
                    pending.append((index, key))
                }
                sent = statement.parameters.withValuePointers { values, count in
                    PQsendQueryPrepared(connection, key, count, values, nil, nil, 0)
                }
            } else {
                sent = statement.parameters.withValuePointers { values, count in
                    PQsendQueryParams(connection, statement.sql, count, nil, values, nil, nil, 0)
                }
            }
            guard sent == 1 else {
                sendFailed = true
                break
            }
            pending.append((index, nil))
        }
        // After a failed send the Sync still goes (when it can), so what was sent is answered and read.
        if PQpipelineSync(connection) != 1 || sendFailed {
            let error = failure("cannot send a pipeline")
            discardPipeline()
            throw error
        }
        statementsSent.add(pending.count, ordering: .relaxed)

        var results = PipelineResults()
        results.rows.reserveCapacity(statements.count)
        for entry in pending {
            guard let first = PQgetResult(connection) else {
                let error = failure("lost the answer of a pipeline")
                discardPipeline()
                throw error
            }
            // Each statement's answer ends with a nil result.
            while let extra = PQgetResult(connection) { PQclear(extra) }
            guard results.failure == nil, PQresultStatus(first) != PGRES_PIPELINE_ABORTED else {
                PQclear(first)
                continue
            }
            do throws(PostgresError) {
                let answer = try rows(of: first)
                if let key = entry.preparing {
                    prepared.insert(key)
                } else {
                    results.rows.append(answer)
                }
            } catch {
                // PostgreSQL no longer knows the statement (a DISCARD ALL): prepared again on its next use.
                if error.sqlState == "26000", let name = statements[entry.index].name { prepared.remove(name.description) }
                results.failure = (entry.index, error)
            }
        }
        // The Sync's own answer, then the usual mode again. Without a BEGIN the statements up to
        // the Sync are one implicit transaction, committed there: a failure of that commit (a
        // deferred trigger or constraint) comes as an error before the Sync's answer, and is the
        // pipeline's failure (index `statements.count`, past the last statement).
        // That error's answer ends with a nil result, as a statement's does.
        var endsAnswer = false
        while true {
            guard let sync = PQgetResult(connection) else {
                if endsAnswer {
                    endsAnswer = false
                    continue
                }
                let error = failure("lost the end of a pipeline")
                discardPipeline()
                throw error
            }
            if PQresultStatus(sync) == PGRES_PIPELINE_SYNC {
                PQclear(sync)
                break
            }
            endsAnswer = true
            do throws(PostgresError) {
                _ = try rows(of: sync)
            } catch {
                if results.failure == nil { results.failure = (statements.count, error) }
            }
        }
        guard PQexitPipelineMode(connection) == 1 else {
            let error = failure("cannot leave pipeline mode")
            discardPipeline()
            throw error
        }
        return results
    }

    /// A connection failure with libpq's message.
    private func failure(_ what: String) -> PostgresError {
        PostgresError(kind: .connection, message: "PostgreSQL at \(endpoint): \(what): \(lastErrorLine)")
    }

    /// After a failure inside a pipeline: reads and drops what is left, then leaves pipeline mode
    /// (a broken connection stays broken and is replaced by its owner).
    private func discardPipeline() {
        var empty = 0
        while empty < 2, PQstatus(connection) == CONNECTION_OK {
            if let result = PQgetResult(connection) {
                let done = PQresultStatus(result) == PGRES_PIPELINE_SYNC
                PQclear(result)
                empty = done ? 2 : 0
            } else {
                empty += 1
            }
        }
        PQexitPipelineMode(connection)
    }
}
