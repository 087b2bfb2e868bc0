import CallRouting
import Foundation
public import HTTPServer
import Registrar
import Storage

/// What Rouse's middleware adds to a request on its way to a handler: the path's parameters, who
/// authenticated (an extension, an administrator, an admin pages session, a call token), and the
/// storage the request may use until its deadline. A value, made fresh for every request.
public struct APIContext: HTTPRequestContext {
    public var parameters: [String: String] = [:]
    /// The extension whose HTTP Basic credentials came (`ExtensionAuthentication`).
    var extensionUser: AddressOfRecord?
    /// The administrator whose HTTP Basic credentials came (`AdminAuthentication`).
    var adminName: String?
    /// The admin pages' session and form (`AdminSessionCheck`).
    var signedIn: AdminPages.SignedIn?
    /// The call token's claims (`CallTokenAuthentication`).
    var callClaims: CallTokenClaims?
    /// PostgreSQL until the request's deadline (`DatabaseDeadline`); nil on a route without one.
    var storage: Store?

    public init() {}

    /// The request's storage; a route that reaches PostgreSQL without a `DatabaseDeadline` is a
    /// programming error, answered 500.
    func store() throws -> Store {
        guard let storage else { throw HTTPError(.error(500, code: "internal_error", message: "the request could not be handled")) }
        return storage
    }
}

/// PostgreSQL as a request sees it: jobs on the worker pool, awaited, each bounded by what is left
/// of the request's deadline (a job not started by then never runs). Past the deadline a job
/// throws `StorageDeadlinePassed`.
///
/// Threading: a value; `perform` suspends the task and never blocks a thread. `directory` runs
/// `PostgresDirectory`'s blocking calls on a queue of its own (never an HTTP or cooperative thread).
struct Store: Sendable {
    let pool: PostgresWorkerPool
    /// The route's deadline, in seconds from the request's start.
    let seconds: Double
    let deadline: Date

    init(pool: PostgresWorkerPool, seconds: Double) {
        self.pool = pool
        self.seconds = seconds
        deadline = Date().addingTimeInterval(seconds)
    }

    /// Seconds left until the deadline (0 once passed).
    var remaining: Double { max(0, deadline.timeIntervalSinceNow) }

    /// The same storage with the route's whole deadline again from now: for what must still be
    /// written after a slow step that is not PostgreSQL's (a test push's record, after the push).
    func renewed() -> Store {
        Store(pool: pool, seconds: seconds)
    }

    /// Runs `job` on a worker of the pool.
    func perform<T: Sendable>(_ job: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        try await bounded { try await pool.perform(within: $0, job) }
    }

    /// `body` given the seconds left (for the pool's group commit, `pool.groupCommit`); a failure
    /// past the deadline becomes `StorageDeadlinePassed`.
    func bounded<T: Sendable>(_ body: (Double) async throws -> T) async throws -> T {
        do {
            return try await body(remaining)
        } catch let error as PostgresError where deadline.timeIntervalSinceNow <= 0 {
            throw StorageDeadlinePassed(cause: error)
        }
    }

    /// Runs `body` with the directory on the pool (each of its calls waits for a worker, at most
    /// until the deadline), on the directory queue; resumes with its value or error.
    func directory<T: Sendable>(_ body: @escaping @Sendable (PostgresDirectory) throws -> T) async throws -> T {
        let directory = PostgresDirectory(pool: pool, waitDeadline: remaining)
        let deadline = self.deadline
        return try await withCheckedThrowingContinuation { continuation in
            Self.directoryQueue.async {
                do {
                    continuation.resume(returning: try body(directory))
                } catch let error as PostgresError where deadline.timeIntervalSinceNow <= 0 {
                    continuation.resume(throwing: StorageDeadlinePassed(cause: error))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    /// Where the directory's blocking calls wait for their worker.
    private static let directoryQueue = DispatchQueue(label: "rouse.http.directory", attributes: .concurrent)
}

/// A storage job that did not end by its request's deadline.
struct StorageDeadlinePassed: Error {
    let cause: PostgresError
}

/// Gives the request `Store` access until `seconds` from now, and answers a storage failure (or
/// any error the handler throws that is not an `HTTPError`) with `answer`: the route's 503, or
/// for the admin routes their refusals too. The deadline is the request's: a job not started by
/// then never runs, and one that outlasts it is answered 503 without waiting for it.
struct DatabaseDeadline: HTTPMiddleware {
    let pool: PostgresWorkerPool
    let seconds: Double
    let answer: @Sendable (any Error) -> HTTPResponse

    func handle(_ request: HTTPRequest, context: APIContext, next: HTTPNext<APIContext>) async throws -> HTTPResponse {
        var context = context
        context.storage = Store(pool: pool, seconds: seconds)
        do {
            return try await next(request, context)
        } catch let refusal as HTTPError {
            throw refusal
        } catch {
            return answer(error)
        }
    }
}

/// Refuses an address the `AuthFailureThrottle` blocks (too many failed credentials, with SIP and
/// the other HTTP routes) before its credentials are looked at: `refusal` says how, given the
/// whole seconds left (JSON 429 on the API, the sign-in page on the admin pages).
struct FailureThrottleCheck: HTTPMiddleware {
    let throttle: AuthFailureThrottle?
    let refusal: @Sendable (HTTPRequest, Int) -> HTTPResponse

    /// The API's 429: `too_many_failures` with `Retry-After`.
    static func json(_ request: HTTPRequest, _ seconds: Int) -> HTTPResponse {
        .error(
            429, code: "too_many_failures", message: "too many failed credentials from this address; try again in \(seconds) s",
            headers: [("Retry-After", String(seconds))])
    }

    func handle(_ request: HTTPRequest, context: APIContext, next: HTTPNext<APIContext>) async throws -> HTTPResponse {
        if let throttle, let address = request.remoteAddress, let left = throttle.isBlocked(address) {
            return refusal(request, max(1, Int(left.rounded(.up))))
        }
        return try await next(request, context)
    }
}

/// HTTP Basic credentials (`user:password`), or nil when the header is missing or malformed.
func basicCredentials(_ request: HTTPRequest) -> (user: String, password: String)? {
    guard let header = request.header("Authorization"), header.count > 6, header.prefix(6).lowercased() == "basic ",
        let decoded = Data(base64Encoded: String(header.dropFirst(6)).trimmingCharacters(in: .whitespaces)),
        let text = String(data: decoded, encoding: .utf8), let colon = text.firstIndex(of: ":")
    else { return nil }
    return (String(text[..<colon]), String(text[text.index(after: colon)...]))
}

/// An extension's HTTP Basic credentials (`number@domain` and its SIP password), checked against
/// the in-memory directory: the extension goes into `context.extensionUser`; anything else is the
/// one 401 (the same for a wrong password, an unknown extension or no header, at the same hash
/// cost), counted against the address.
struct ExtensionAuthentication: HTTPMiddleware {
    let directory: any ExtensionDirectory
    let throttle: AuthFailureThrottle?

    /// The one 401: the same status, headers and body whatever was wrong.
    static let unauthorized = HTTPResponse.error(
        401, code: "unauthorized", message: "the credentials are not those of an extension",
        headers: [("WWW-Authenticate", "Basic realm=\"rouse\"")])

    func handle(_ request: HTTPRequest, context: APIContext, next: HTTPNext<APIContext>) async throws -> HTTPResponse {
        let (user, password) = basicCredentials(request) ?? ("", "")
        // The hash work runs whatever the header held, so every refusal costs the same.
        guard let aor = directory.verify(user: user, password: password) else {
            if let address = request.remoteAddress { throttle?.recordFailure(address) }
            return Self.unauthorized
        }
        var context = context
        context.extensionUser = aor
        return try await next(request, context)
    }
}

/// An administrator's HTTP Basic credentials (`rouse admin add`), checked against PostgreSQL
/// (PBKDF2, remembered a minute by the `AdminSessionCache`): the name goes into
/// `context.adminName`. Wrong credentials are the one 401, counted against the address; a
/// database failure is not a wrong password (it throws, so `DatabaseDeadline` answers 503, and
/// nothing is counted: phones behind the same NAT share the address). Runs inside a
/// `DatabaseDeadline`.
struct AdminAuthentication: HTTPMiddleware {
    let sessions: AdminSessionCache
    let throttle: AuthFailureThrottle?

    /// The one 401 of the admin API.
    static let unauthorized = HTTPResponse.error(
        401, code: "unauthorized", message: "admin credentials are required",
        headers: [("WWW-Authenticate", "Basic realm=\"rouse-admin\"")])

    func handle(_ request: HTTPRequest, context: APIContext, next: HTTPNext<APIContext>) async throws -> HTTPResponse {
        guard let (name, password) = basicCredentials(request) else { return Self.unauthorized }
        let key = AdminSessionCache.key(name: name, password: password)
        if !sessions.contains(key) {
            guard try await context.store().perform({ try PostgresAdmins.verify(name: name, password: password, on: $0) }) else {
                if let address = request.remoteAddress { throttle?.recordFailure(address) }
                return Self.unauthorized
            }
            sessions.insert(key)
        }
        var context = context
        context.adminName = name
        return try await next(request, context)
    }
}
