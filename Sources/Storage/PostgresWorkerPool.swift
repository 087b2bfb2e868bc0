import Dispatch
import Foundation
public import Crypto

/// How to reach PostgreSQL and how long any wait on it may last. A value, safe to share;
/// `connect()` blocks the calling thread.
public struct PostgresSettings: Sendable {
    /// A libpq conninfo string or `postgresql://` URL.
    public var conninfo: String
    /// Seconds libpq waits to connect (its `connect_timeout`).
    public var connectTimeout: Int
    /// Seconds one statement may run before PostgreSQL cancels it (`statement_timeout`).
    public var statementTimeout: Double
    /// The keys that seal and open the secret columns (`SealedSecrets`); nil: a secret can be
    /// neither stored nor read through these settings' connections.
    public var secrets: SecretSeal?

    public init(conninfo: String, connectTimeout: Int = 10, statementTimeout: Double = 10, secrets: SecretSeal? = nil) {
        self.conninfo = conninfo
        self.connectTimeout = connectTimeout
        self.statementTimeout = statementTimeout
        self.secrets = secrets
    }

    /// Opens a connection with the statement deadline and the secrets keys set.
    public func connect() throws(PostgresError) -> PostgresConnection {
        let connection = try PostgresConnection(conninfo: conninfo, connectTimeout: connectTimeout)
        connection.secrets = secrets
        try connection.setStatementTimeout(seconds: statementTimeout)
        return connection
    }
}

/// A fixed set of threads, each owning one `PostgresConnection`, that run blocking database jobs
/// so that no libpq call ever runs on the SIP event loop or the cooperative pool.
///
/// Threading: `submit`, `perform` and `shutdown` may be called from any thread; `submit` never
/// blocks. Jobs run one at a time per worker thread, in submission order across the pool, and
/// get that thread's connection, which they must not keep or hand elsewhere. Completions run on
/// the worker thread that ran the job, so they must be short and must not wait for the pool.
/// `run` blocks the caller until the job is done and must never be called on the SIP path nor
/// from inside a job (it would wait for itself).
///
/// Connections open lazily, carry the statement deadline of `settings`, and are replaced when
/// found broken (before a job, by a non-blocking probe; after a failed job, by their status).
/// A job that failed because its connection broke gets that error; it is not retried, since it
/// may have had effects. The worker threads keep the pool alive until `shutdown()`.
public final class PostgresWorkerPool: @unchecked Sendable {
    // @unchecked: `jobs`, `accepting`, `liveThreads` and `groupLane` are only touched under `condition`; each
    // connection lives in one worker thread's local variable and never leaves it.
    private typealias Job = @Sendable (Result<PostgresConnection, PostgresError>) -> Void

    public let settings: PostgresSettings
    public let threadCount: Int
    private let condition = NSCondition()
    private var jobs: [Job] = []
    private var jobHead = 0
    private var accepting = true
    private var liveThreads = 0
    private var groupLane: PostgresGroupCommit?
    private let threadName: String

    /// Starts `threads` workers (at least one). No connection opens until a job needs it.
    public init(settings: PostgresSettings, threads: Int = 2, name: String = "rouse-postgres") {
        self.settings = settings
        self.threadCount = max(1, threads)
        threadName = name
        liveThreads = threadCount
        for index in 0..<threadCount {
            let thread = Thread { [self] in workerLoop() }
            thread.name = "\(name)-\(index)"
            thread.start()
        }
    }

    /// Queues `job`; `completion` gets its value or error on the worker thread. After `shutdown`
    /// the completion gets an error at once (on a Dispatch queue, never inside this call).
    public func submit<T>(
        _ job: @escaping @Sendable (PostgresConnection) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        let wrapped: Job = { connection in
            switch connection {
            case .failure(let error):
                completion(.failure(error))
            case .success(let connection):
                let result: Result<T, any Error>
                do { result = .success(try job(connection)) } catch { result = .failure(error) }
                completion(result)
            }
        }
        condition.lock()
        guard accepting else {
            condition.unlock()
            DispatchQueue.global().async { completion(.failure(PostgresError.poolStopped)) }
            return
        }
        jobs.append(wrapped)
        condition.signal()
        condition.unlock()
    }

    /// Runs `job` on a worker and waits for it. Blocking: see the threading contract.
    public func run<T: Sendable>(_ job: @escaping @Sendable (PostgresConnection) throws -> T) throws -> T {
        let done = DispatchSemaphore(value: 0)
        let box = ResultBox<T>()
        submit(job) { result in
            box.set(result)
            done.signal()
        }
        done.wait()
        return try box.get()
    }

    /// Runs `job` on a worker and waits for it at most `seconds` (queueing, connecting and the job
    /// together); past that it throws `PostgresError.deadlinePassed`. A job that has not started by
    /// then never runs; one already running goes on to its end (each statement bounded by the
    /// statement deadline) and its answer is dropped. Blocking: see the threading contract.
    public func run<T: Sendable>(within seconds: Double, _ job: @escaping @Sendable (PostgresConnection) throws -> T) throws -> T {
        let done = DispatchSemaphore(value: 0)
        let box = ResultBox<T>()
        let start = StartClaim()
        submit({ connection in
            guard start.claim() else { throw PostgresError.deadlinePassed(seconds) }
            return try job(connection)
        }) { result in
            box.set(result)
            done.signal()
        }
        if done.wait(timeout: .now() + max(0, seconds)) == .timedOut {
            start.abandon()
            throw PostgresError.deadlinePassed(seconds)
        }
        return try box.get()
    }

    /// Runs `job` on a worker and resumes when it is done, without blocking a cooperative thread.
    public func perform<T: Sendable>(_ job: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            submit(job) { continuation.resume(with: $0) }
        }
    }

    /// `perform`, waiting at most `seconds` (queueing, connecting and the job together); past that
    /// it throws `PostgresError.deadlinePassed`, as `run(within:)` does, without blocking a thread.
    public func perform<T: Sendable>(within seconds: Double, _ job: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        let start = StartClaim()
        let once = ResumeOnce<T>()
        return try await withCheckedThrowingContinuation { continuation in
            once.set(continuation)
            submit({ connection in
                guard start.claim() else { throw PostgresError.deadlinePassed(seconds) }
                return try job(connection)
            }) { once.resume(with: $0) }
            DispatchQueue.global().asyncAfter(deadline: .now() + max(0, seconds)) {
                start.abandon()
                once.resume(with: .failure(PostgresError.deadlinePassed(seconds)))
            }
        }
    }

    /// The pool's group commit, for small writes many callers make at once (one transaction, sent
    /// as one pipeline, for a burst of them): started on first use with the pool's settings, its
    /// lanes on threads and connections of their own, and shut down with the pool.
    public var groupCommit: PostgresGroupCommit {
        condition.lock()
        defer { condition.unlock() }
        if let groupLane { return groupLane }
        let lane = PostgresGroupCommit(settings: settings, name: "\(threadName)-group")
        groupLane = lane
        return lane
    }

    /// Stops taking jobs, lets the queued ones finish, closes the connections and waits for the
    /// threads to end (and the group commit's). Must not be called from a job or completion.
    public func shutdown() {
        condition.lock()
        accepting = false
        condition.broadcast()
        while liveThreads > 0 { condition.wait() }
        let lane = groupLane
        condition.unlock()
        lane?.shutdown()
    }

    private func nextJob() -> Job? {
        condition.lock()
        defer { condition.unlock() }
        while jobHead == jobs.count && accepting { condition.wait() }
        guard jobHead < jobs.count else { return nil }
        let job = jobs[jobHead]
        jobHead += 1
        if jobHead == jobs.count {
            jobs.removeAll(keepingCapacity: true)
            jobHead = 0
        } else if jobHead > 1024 {
            jobs.removeFirst(jobHead)
            jobHead = 0
        }
        return job
    }

    private func workerLoop() {
        var connection: PostgresConnection? = nil
        while let job = nextJob() {
            if let current = connection, !current.probe() { connection = nil }
            if connection == nil {
                do { connection = try settings.connect() } catch { job(.failure(error)) }
            }
            guard let current = connection else { continue }
            job(.success(current))
            if !current.isHealthy { connection = nil }
        }
        connection = nil
        condition.lock()
        liveThreads -= 1
        condition.broadcast()
        condition.unlock()
    }
}

/// A result handed from a worker thread to a waiting caller.
final class ResultBox<T: Sendable>: @unchecked Sendable {
    // @unchecked: `result` is only touched under `lock`.
    private let lock = NSLock()
    private var result: Result<T, any Error>? = nil

    func set(_ value: Result<T, any Error>) {
        lock.lock()
        result = value
        lock.unlock()
    }

    func get() throws -> T {
        lock.lock()
        defer { lock.unlock() }
        guard let result else { throw PostgresError.poolStopped }
        return try result.get()
    }
}

/// Whether a bounded job started before its caller stopped waiting: whichever of `claim` (the
/// worker) and `abandon` (the caller) comes first wins. Thread-safe.
/// Resumes a continuation once: with the job's result or the deadline's error, whichever comes
/// first. @unchecked Sendable: both fields only touched under `lock`.
final class ResumeOnce<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var continuation: CheckedContinuation<T, any Error>?
    private var pending: Result<T, any Error>?

    func set(_ continuation: CheckedContinuation<T, any Error>) {
        let early = lock.withLock { () -> Result<T, any Error>? in
            guard let pending else {
                self.continuation = continuation
                return nil
            }
            self.pending = nil
            return pending
        }
        if let early { continuation.resume(with: early) }
    }

    func resume(with result: Result<T, any Error>) {
        let waiting = lock.withLock { () -> CheckedContinuation<T, any Error>? in
            defer { continuation = nil }
            if continuation == nil, pending == nil { pending = result }
            return continuation
        }
        waiting?.resume(with: result)
    }
}

final class StartClaim: @unchecked Sendable {
    // @unchecked: `state` is only touched under `lock`.
    private let lock = NSLock()
    private var state = 0  // 0 waiting, 1 started, 2 abandoned

    /// The worker's claim: true when the caller still waits, and the job may run.
    func claim() -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if state == 0 { state = 1 }
        return state == 1
    }

    /// The caller's, when it stops waiting: a job not started yet never will.
    func abandon() {
        lock.lock()
        if state == 0 { state = 2 }
        lock.unlock()
    }
}

extension PostgresError {
    /// The caller of `PostgresWorkerPool.run(within:)` stopped waiting after `seconds`.
    public static func deadlinePassed(_ seconds: Double) -> PostgresError {
        PostgresError(kind: .connection, message: "PostgreSQL did not answer within \(seconds) s")
    }

    /// A job offered to a pool or store that has been shut down.
    static var poolStopped: PostgresError {
        PostgresError(kind: .connection, message: "PostgreSQL worker pool is shut down")
    }
}
