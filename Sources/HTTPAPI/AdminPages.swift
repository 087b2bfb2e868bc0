import Crypto
import Foundation
import HTTPServer
import Push
import Registrar
import RouseLog
import Storage

/// The admin HTML pages under `/admin/` (issue 7): sign-in with an administrator's credentials, a
/// session cookie backed by PostgreSQL (`admin_sessions`, so every instance accepts it), and the
/// pages: organisations and extensions, an extension's devices, posted tokens, recent pushes and
/// calls, Settings → Mobile push with a Test button per app, and calls with their journeys.
///
/// Server-rendered HTML with one style sheet and no script; every form is a plain POST carrying
/// the session's CSRF token. Everything shown is escaped (`HTML`), and no password, key or session
/// token is ever written into a page; a whole push token only into the page an administrator's
/// Show token asks for.
///
/// Threading: the handlers are async and never block: the session lookup (`AdminSessionCheck`),
/// the storage reads and writes and the PBKDF2 check at sign-in are awaited through the request's
/// `Store`; a test push awaits the push service.
public struct AdminPages: Sendable {
    /// Where the pages live; the session cookie is scoped to it.
    public static let base = "/admin"
    /// The cookie carrying the session token.
    static let sessionCookie = "rouse_admin_session"
    /// The cookie carrying the sign-in form's CSRF token (there is no session yet).
    static let signInCookie = "rouse_admin_signin"

    let reads: AdminReads
    /// Seconds a session lasts from sign-in (`admin_session_lifetime`).
    let sessionLifetime: TimeInterval
    /// Counts failed sign-ins per address, with SIP and the posting endpoint.
    let throttle: AuthFailureThrottle?
    let logger: Logger

    // MARK: - Sessions and forms

    /// A request of a signed-in administrator: the session, the form fields of a POST, and the
    /// request's storage.
    struct SignedIn: Sendable {
        let request: HTTPRequest
        let session: AdminSession
        let form: [String: String]
        var store: Store
        /// The path's parameters.
        var parameters: [String: String] = [:]

        /// A path parameter, or "".
        func parameter(_ name: String) -> String { parameters[name] ?? "" }

        /// A form field, or "".
        func field(_ name: String) -> String { form[name] ?? "" }
        /// A query argument, or "".
        func query(_ name: String) -> String { request.query[name] ?? "" }

        /// The same request with the route's whole deadline again (after a test push, to draw the page).
        func renewed() -> SignedIn {
            var page = self
            page.store = store.renewed()
            return page
        }
    }

    /// The signed-in request `AdminSessionCheck` let in.
    static func signedIn(_ context: APIContext) throws -> SignedIn {
        guard let page = context.signedIn else { throw HTTPError(redirect(base + "/sign-in")) }
        return page
    }

    /// A page handler of a signed-in request.
    typealias PageHandler = @Sendable (SignedIn) async throws -> HTTPResponse

    /// `handler` as a route's handler: it gets the request's `SignedIn`.
    static func page(_ handler: @escaping PageHandler) -> HTTPHandler<APIContext> {
        { _, context in
            var page = try signedIn(context)
            page.parameters = context.parameters
            return try await handler(page)
        }
    }

    /// The answer for an error of a signed-in page: a directory refusal as a page saying it,
    /// anything else (PostgreSQL failing or slow) as the 503 page.
    static func answer(for error: any Error, _ page: SignedIn) -> HTTPResponse {
        switch error {
        case let refusal as DirectoryError:
            switch refusal {
            case .noSuchDomain, .noSuchExtension: return notFoundPage(page, message: refusal.description)
            default: return problemPage(page, status: 400, message: refusal.description)
            }
        default:
            return unavailablePage(page.session)
        }
    }

    /// Whether `given` is `expected`, compared in constant time; false when missing.
    static func sameToken(_ given: String?, _ expected: String) -> Bool {
        guard let given, !given.isEmpty else { return false }
        return Digest.constantTimeEquals(Array(given.utf8), Array(expected.utf8))
    }

    /// The fields of an `application/x-www-form-urlencoded` body (a repeated one keeps its last value).
    static func formFields(_ body: Data) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in String(decoding: body, as: UTF8.self).split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decoded(_ text: Substring) -> String {
                String(text).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? ""
            }
            fields[decoded(parts[0])] = parts.count > 1 ? decoded(parts[1]) : ""
        }
        return fields
    }

    /// The request's cookies by name.
    static func cookies(_ request: HTTPRequest) -> [String: String] {
        var cookies: [String: String] = [:]
        for pair in (request.header("Cookie") ?? "").split(separator: ";") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            guard parts.count == 2 else { continue }
            cookies[parts[0].trimmingCharacters(in: .whitespaces)] = parts[1].trimmingCharacters(in: .whitespaces)
        }
        return cookies
    }

    /// True when the browser reached Rouse over TLS: through a proxy that says so with
    /// `X-Forwarded-Proto: https` (Rouse's own HTTP server speaks plain HTTP).
    static func isSecure(_ request: HTTPRequest) -> Bool {
        let first = request.header("X-Forwarded-Proto")?.split(separator: ",").first ?? ""
        return first.trimmingCharacters(in: .whitespaces).lowercased() == "https"
    }

    /// A cookie for the pages: HttpOnly, SameSite=Strict, Secure when the request came over TLS.
    static func cookie(_ name: String, _ value: String, path: String, maxAge: Int, secure: Bool) -> String {
        "\(name)=\(value); Path=\(path); Max-Age=\(maxAge); HttpOnly; SameSite=Strict" + (secure ? "; Secure" : "")
    }

    static let clearedSessionCookie = "\(sessionCookie)=; Path=\(base); Max-Age=0; HttpOnly; SameSite=Strict"

    // MARK: - Sign-in and sign-out

    /// `GET /admin/`, `/admin` and `/`: to the sign-in page.
    @Sendable static func toSignIn(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        redirect(base + "/sign-in")
    }

    /// `GET /admin/style.css`.
    @Sendable static func style(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        styleSheet
    }

    /// `GET /admin/{page}` that is no page: 404 for a signed-in administrator.
    @Sendable static func noSuchPage(_ page: SignedIn) async throws -> HTTPResponse {
        notFoundPage(page)
    }

    /// The sign-in form, with a fresh CSRF token in a short-lived cookie and in the form (there is
    /// no session to tie it to yet). A browser with a live session goes to the extensions.
    @Sendable func signInForm(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        if let token = Self.cookies(request)[Self.sessionCookie],
            let _ = try? await context.store().perform({ try AdminSessions.find(token: token, on: $0) })
        {
            return Self.redirect(Self.base + "/extensions")
        }
        let message: HTML
        if request.query["ended"] != nil {
            message = "<p class=\"notice\" id=\"notice\">Your session has ended. Sign in again.</p>"
        } else if request.query["signed-out"] != nil {
            message = "<p class=\"notice\" id=\"notice\">You have signed out.</p>"
        } else {
            message = .empty
        }
        return Self.signInPage(request, status: 200, message: message, name: "")
    }

    /// The sign-in page's 429 for an address blocked for failed credentials.
    static func throttledSignIn(_ request: HTTPRequest, _ seconds: Int) -> HTTPResponse {
        signInPage(
            request, status: 429,
            message: "<p class=\"error\" id=\"error\">Too many failed attempts from this address. Try again in \(seconds) s.</p>",
            name: "", headers: [("Retry-After", String(seconds))])
    }

    static func signInPage(_ request: HTTPRequest, status: Int, message: HTML, name: String, headers: [(String, String)] = []) -> HTTPResponse {
        let csrf = SecureRandom.hex(32)
        let body: HTML = """
            <main class="narrow">
            <h1>Sign in to Rouse</h1>
            \(message)
            <form method="post" action="\(base)/sign-in" class="card">
            <input type="hidden" name="csrf" value="\(csrf)">
            <div class="field"><label for="name">Admin name</label>
            <input id="name" name="name" type="text" autocomplete="username" required value="\(name)"></div>
            <div class="field"><label for="password">Password</label>
            <input id="password" name="password" type="password" autocomplete="current-password" required></div>
            <button type="submit" id="sign-in">Sign in</button>
            </form>
            <p class="hint">Administrators are made on the command line: <code>rouse admin add NAME</code>.</p>
            </main>
            """
        let cookie = Self.cookie(signInCookie, csrf, path: base + "/sign-in", maxAge: 3600, secure: isSecure(request))
        return html(status, document(title: "Sign in", body: body), headers: [("Set-Cookie", cookie)] + headers)
    }

    /// Checks the form's CSRF token against its cookie, then the credentials (PBKDF2, counted by
    /// the throttle when wrong); opens a session and sets its cookie.
    @Sendable func signIn(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let form = Self.formFields(request.body)
        let name = form["name"] ?? ""
        let password = form["password"] ?? ""
        guard let expected = Self.cookies(request)[Self.signInCookie], Self.sameToken(form["csrf"], expected) else {
            return Self.signInPage(
                request, status: 403,
                message: "<p class=\"error\" id=\"error\">The sign-in form was out of date. Please sign in again.</p>", name: name)
        }
        let lifetime = sessionLifetime
        let opened = try await context.store().perform { connection -> AdminSession? in
            guard try PostgresAdmins.verify(name: name, password: password, on: connection) else { return nil }
            return try AdminSessions.create(adminName: name, lifetime: lifetime, on: connection)
        }
        guard let session = opened else {
            if let address = request.remoteAddress { throttle?.recordFailure(address) }
            return Self.signInPage(
                request, status: 401, message: "<p class=\"error\" id=\"error\">Wrong admin name or password.</p>", name: name)
        }
        let secure = Self.isSecure(request)
        return Self.redirect(
            Self.base + "/extensions",
            headers: [
                ("Set-Cookie", Self.cookie(Self.sessionCookie, session.token, path: Self.base, maxAge: Int(lifetime), secure: secure)),
                ("Set-Cookie", Self.cookie(Self.signInCookie, "", path: Self.base + "/sign-in", maxAge: 0, secure: secure)),
            ])
    }

    /// Ends the session (in PostgreSQL, so on every instance) and clears its cookie.
    @Sendable static func signOut(_ page: SignedIn) async throws -> HTTPResponse {
        let token = page.session.token
        try await page.store.perform { try AdminSessions.remove(token: token, on: $0) }
        return redirect(base + "/sign-in?signed-out=1", headers: [("Set-Cookie", clearedSessionCookie)])
    }

    // MARK: - Answers

    /// A page: HTML with the headers every page carries (no caching, no framing, no script).
    static func html(_ status: Int, _ document: HTML, headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(
            status: status,
            headers: [
                ("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store"),
                ("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
                ("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"), ("Referrer-Policy", "same-origin"),
            ] + headers,
            body: Data(document.markup.utf8))
    }

    /// 303 See Other to `location` (a path of these pages).
    static func redirect(_ location: String, headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: 303, headers: [("Location", location), ("Cache-Control", "no-store")] + headers)
    }

    static func notFoundPage(_ page: SignedIn, message: String = "There is no such page.") -> HTTPResponse {
        problemPage(page, status: 404, message: message)
    }

    static func problemPage(_ page: SignedIn, status: Int, message: String) -> HTTPResponse {
        html(status, layout(page.session, title: "Not here", section: nil, body: "<h1>Not here</h1><p class=\"error\" id=\"error\">\(message)</p>"))
    }

    static func forbiddenPage(_ session: AdminSession) -> HTTPResponse {
        html(
            403,
            layout(
                session, title: "Refused", section: nil,
                body: """
                    <h1>Nothing was changed</h1>
                    <p class="error" id="error">This form did not carry this session's security token (it was out of date, or did not come from these pages). Go back, reload the page and try again.</p>
                    """))
    }

    static func unavailablePage(_ session: AdminSession? = nil) -> HTTPResponse {
        let body: HTML = "<h1>Database unavailable</h1><p class=\"error\" id=\"error\">The database is unavailable: it could not be reached, refused or did not answer in time. Nothing more is known here; try again in a moment.</p>"
        let retry = [("Retry-After", String(AdminAPI.retryAfterSeconds))]
        guard let session else { return html(503, document(title: "Database unavailable", body: "<main class=\"narrow\">\(body)</main>"), headers: retry) }
        return html(503, layout(session, title: "Database unavailable", section: nil, body: body), headers: retry)
    }
}

/// The admin pages' session: the cookie's session, looked up in PostgreSQL (so every instance
/// accepts it), goes into `context.signedIn`; without one a browser is sent to sign-in (nothing
/// changed). With `checkingForm`, a form without the session's CSRF token gets 403 and changes
/// nothing. Runs inside a `DatabaseDeadline` (a failed lookup is its 503 page); what the page's
/// handler throws (but an `HTTPError`) is answered by `AdminPages.answer(for:_:)`, in the
/// session's layout.
struct AdminSessionCheck: HTTPMiddleware {
    let checkingForm: Bool

    func handle(_ request: HTTPRequest, context: APIContext, next: HTTPNext<APIContext>) async throws -> HTTPResponse {
        let token = AdminPages.cookies(request)[AdminPages.sessionCookie]
        let store = try context.store()
        let found = try await token.asyncFlatMap { token in try await store.perform { try AdminSessions.find(token: token, on: $0) } }
        guard let session = found else {
            let target = AdminPages.base + "/sign-in" + (token == nil ? "" : "?ended=1")
            return AdminPages.redirect(target, headers: token == nil ? [] : [("Set-Cookie", AdminPages.clearedSessionCookie)])
        }
        let form = checkingForm ? AdminPages.formFields(request.body) : [:]
        if checkingForm, !AdminPages.sameToken(form["csrf"], session.csrfToken) {
            return AdminPages.forbiddenPage(session)
        }
        var context = context
        let page = AdminPages.SignedIn(request: request, session: session, form: form, store: store)
        context.signedIn = page
        do {
            return try await next(request, context)
        } catch let refusal as HTTPError {
            throw refusal
        } catch {
            return AdminPages.answer(for: error, page)
        }
    }
}

extension Optional {
    /// `flatMap` with an async transform.
    fileprivate func asyncFlatMap<T>(_ transform: (Wrapped) async throws -> T?) async rethrows -> T? {
        guard let self else { return nil }
        return try await transform(self)
    }
}
