import Crypto
import Dispatch
import Foundation
import Push
import Registrar
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
/// Threading: the handlers run on the HTTP server's threads and never block: each request's
/// work (the session lookup, the storage reads and writes, the PBKDF2 check at sign-in) runs on a
/// queue of its own and answers through the responder; a test push awaits the push service in a
/// task.
public struct AdminPages: Sendable {
    /// Where the pages live; the session cookie is scoped to it.
    public static let base = "/admin"
    /// The cookie carrying the session token.
    static let sessionCookie = "rouse_admin_session"
    /// The cookie carrying the sign-in form's CSRF token (there is no session yet).
    static let signInCookie = "rouse_admin_signin"

    let reads: AdminReads
    let sessionLifetime: TimeInterval
    let throttle: AuthFailureThrottle?
    let log: @Sendable (HTTPAPIEvent) -> Void
    let queue = DispatchQueue(label: "rouse.http.admin-pages", attributes: .concurrent)

    /// - Parameter sessionLifetime: seconds a session lasts from sign-in (`admin_session_lifetime`).
    /// - Parameter throttle: counts failed sign-ins per address, with SIP and the posting endpoint;
    ///   a blocked address gets 429.
    /// - Parameter pusher: the instance's push service, which a device's Test push goes through.
    /// - Parameter testPushInterval: seconds between two test pushes to one device token.
    /// - Parameter log: gets the test pushes and the tokens shown, by whom (never a whole token).
    /// - Parameter databaseDeadline: seconds a request waits for one database job before it gets
    ///   the 503 page saying the database is unavailable.
    public init(
        pool: PostgresWorkerPool, pushSettings: PushSettings = PushSettings(), sessionLifetime: TimeInterval = 12 * 3600,
        throttle: AuthFailureThrottle? = nil, pusher: PushService? = nil, testPushInterval: TimeInterval = 30,
        databaseDeadline: Double = AdminAPI.defaultDatabaseDeadline, log: @escaping @Sendable (HTTPAPIEvent) -> Void = { _ in }
    ) {
        self.reads = AdminReads(
            pool: pool, pushSettings: pushSettings, pusher: pusher, testPushInterval: testPushInterval, databaseDeadline: databaseDeadline)
        self.sessionLifetime = sessionLifetime
        self.throttle = throttle
        self.log = log
    }

    var pool: PostgresWorkerPool { reads.pool }

    /// Adds every page to `router`.
    public func register(on router: inout HTTPRouter) {
        let b = Self.base
        router.add("GET", "/") { _, respond in respond(Self.redirect(b + "/sign-in")) }
        router.add("GET", b) { _, respond in respond(Self.redirect(b + "/sign-in")) }
        router.add("GET", b + "/") { _, respond in respond(Self.redirect(b + "/sign-in")) }
        router.add("GET", b + "/style.css") { _, respond in respond(Self.styleSheet) }
        router.add("GET", b + "/sign-in") { request, respond in signInForm(request, respond) }
        router.add("POST", b + "/sign-in") { request, respond in signIn(request, respond) }
        router.add("POST", b + "/sign-out") { request, respond in signOut(request, respond) }
        router.add("GET", prefix: b + "/") { request, _, respond in
            page(request, respond) { page in Self.notFoundPage(page) }
        }

        router.add("GET", b + "/extensions") { request, respond in page(request, respond) { try extensionsPage($0) } }
        router.add("POST", b + "/organisations") { request, respond in form(request, respond) { try addOrganisation($0) } }
        router.add("POST", b + "/organisations/remove") { request, respond in form(request, respond) { try removeOrganisation($0) } }
        router.add("POST", b + "/extensions") { request, respond in form(request, respond) { try addExtension($0) } }
        router.add("GET", prefix: b + "/extensions/") { request, rest, respond in
            page(request, respond) { try extensionPage($0, address: rest) }
        }
        router.add("POST", prefix: b + "/extensions/") { request, rest, respond in
            session(request, respond, checkingForm: true) { page in extensionAction(page, rest, respond) }
        }

        router.add("GET", b + "/push") { request, respond in page(request, respond) { try pushPage($0) } }
        router.add("GET", b + "/push/new") { request, respond in page(request, respond) { try newPushAppPage($0) } }
        router.add("POST", b + "/push/new") { request, respond in form(request, respond) { try addPushApp($0) } }
        router.add("GET", prefix: b + "/push/") { request, rest, respond in
            page(request, respond) { try editPushAppPage($0, rest) }
        }
        router.add("POST", prefix: b + "/push/") { request, rest, respond in
            session(request, respond, checkingForm: true) { page in pushAppAction(page, rest, respond) }
        }

        router.add("GET", b + "/calls") { request, respond in page(request, respond) { try callsPage($0) } }
        router.add("GET", prefix: b + "/calls/") { request, rest, respond in page(request, respond) { try journeyPage($0, rest) } }
    }

    // MARK: - Sessions and forms

    /// A request of a signed-in administrator: the session, and the form fields of a POST.
    struct SignedIn: Sendable {
        let request: HTTPRequest
        let session: AdminSession
        let form: [String: String]

        /// A form field, or "".
        func field(_ name: String) -> String { form[name] ?? "" }
        /// A query argument, or "".
        func query(_ name: String) -> String { request.query[name] ?? "" }
    }

    /// Runs `then` on the pages' queue with the request's live session; without one, a GET is
    /// sent to sign-in and a POST too (nothing changed). With `checkingForm`, a form without the
    /// session's CSRF token gets 403 and changes nothing.
    func session(
        _ request: HTTPRequest, _ respond: HTTPResponder, checkingForm: Bool = false,
        then: @escaping @Sendable (SignedIn) -> Void
    ) {
        let token = Self.cookies(request)[Self.sessionCookie]
        queue.async {
            let found: AdminSession?
            do {
                found = try token.flatMap { token in try reads.run { try AdminSessions.find(token: token, on: $0) } }
            } catch {
                respond(Self.unavailablePage())
                return
            }
            guard let session = found else {
                let target = Self.base + "/sign-in" + (token == nil ? "" : "?ended=1")
                respond(Self.redirect(target, headers: token == nil ? [] : [("Set-Cookie", Self.clearedSessionCookie)]))
                return
            }
            let form = checkingForm ? Self.formFields(request.body) : [:]
            if checkingForm, !Self.sameToken(form["csrf"], session.csrfToken) {
                respond(Self.forbiddenPage(session))
                return
            }
            then(SignedIn(request: request, session: session, form: form))
        }
    }

    /// A GET page: `render` on the queue, its storage errors as a 503 page.
    func page(_ request: HTTPRequest, _ respond: HTTPResponder, _ render: @escaping @Sendable (SignedIn) throws -> HTTPResponse) {
        session(request, respond) { page in respond(Self.answer(page, render)) }
    }

    /// A POST form: checked for its CSRF token, then `handle` on the queue.
    func form(_ request: HTTPRequest, _ respond: HTTPResponder, _ handle: @escaping @Sendable (SignedIn) throws -> HTTPResponse) {
        session(request, respond, checkingForm: true) { page in respond(Self.answer(page, handle)) }
    }

    static func answer(_ page: SignedIn, _ render: (SignedIn) throws -> HTTPResponse) -> HTTPResponse {
        do {
            return try render(page)
        } catch let refusal as DirectoryError {
            switch refusal {
            case .noSuchDomain, .noSuchExtension: return notFoundPage(page, message: refusal.description)
            default: return problemPage(page, status: 400, message: refusal.description)
            }
        } catch {
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

    /// The sign-in form, with a fresh CSRF token in a short-lived cookie and in the form (there is
    /// no session to tie it to yet). A browser with a live session goes to the extensions.
    func signInForm(_ request: HTTPRequest, _ respond: HTTPResponder) {
        let token = Self.cookies(request)[Self.sessionCookie]
        queue.async {
            if let token, let _ = try? reads.run({ try AdminSessions.find(token: token, on: $0) }) {
                respond(Self.redirect(Self.base + "/extensions"))
                return
            }
            let message: HTML
            if request.query["ended"] != nil {
                message = "<p class=\"notice\" id=\"notice\">Your session has ended. Sign in again.</p>"
            } else if request.query["signed-out"] != nil {
                message = "<p class=\"notice\" id=\"notice\">You have signed out.</p>"
            } else {
                message = .empty
            }
            respond(Self.signInPage(request, status: 200, message: message, name: ""))
        }
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
    func signIn(_ request: HTTPRequest, _ respond: HTTPResponder) {
        if let throttle, let address = request.remoteAddress, let left = throttle.isBlocked(address) {
            let seconds = max(1, Int(left.rounded(.up)))
            respond(
                Self.signInPage(
                    request, status: 429,
                    message: "<p class=\"error\" id=\"error\">Too many failed attempts from this address. Try again in \(seconds) s.</p>",
                    name: "", headers: [("Retry-After", String(seconds))]))
            return
        }
        let form = Self.formFields(request.body)
        let name = form["name"] ?? ""
        let password = form["password"] ?? ""
        guard let expected = Self.cookies(request)[Self.signInCookie], Self.sameToken(form["csrf"], expected) else {
            respond(
                Self.signInPage(
                    request, status: 403,
                    message: "<p class=\"error\" id=\"error\">The sign-in form was out of date. Please sign in again.</p>", name: name))
            return
        }
        let lifetime = sessionLifetime
        queue.async {
            let opened: AdminSession?
            do {
                opened = try reads.run { connection -> AdminSession? in
                    guard try PostgresAdmins.verify(name: name, password: password, on: connection) else { return nil }
                    return try AdminSessions.create(adminName: name, lifetime: lifetime, on: connection)
                }
            } catch {
                respond(Self.unavailablePage())
                return
            }
            guard let session = opened else {
                if let address = request.remoteAddress { throttle?.recordFailure(address) }
                respond(
                    Self.signInPage(
                        request, status: 401, message: "<p class=\"error\" id=\"error\">Wrong admin name or password.</p>", name: name))
                return
            }
            let secure = Self.isSecure(request)
            respond(
                Self.redirect(
                    Self.base + "/extensions",
                    headers: [
                        ("Set-Cookie", Self.cookie(Self.sessionCookie, session.token, path: Self.base, maxAge: Int(lifetime), secure: secure)),
                        ("Set-Cookie", Self.cookie(Self.signInCookie, "", path: Self.base + "/sign-in", maxAge: 0, secure: secure)),
                    ]))
        }
    }

    /// Ends the session (in PostgreSQL, so on every instance) and clears its cookie.
    func signOut(_ request: HTTPRequest, _ respond: HTTPResponder) {
        session(request, respond, checkingForm: true) { page in
            do {
                try reads.run { try AdminSessions.remove(token: page.session.token, on: $0) }
            } catch {
                respond(Self.unavailablePage(page.session))
                return
            }
            respond(Self.redirect(Self.base + "/sign-in?signed-out=1", headers: [("Set-Cookie", Self.clearedSessionCookie)]))
        }
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
