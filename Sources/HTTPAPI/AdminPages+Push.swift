import Foundation
import HTTPServer
import Push
import Registrar
import RouseLog
import RouseVocabulary
import Storage

/// Settings → Mobile push: the operator's push apps per platform, the forms to add and edit them
/// (keys write-only: a form never shows one, and an edit that pastes none keeps the stored key),
/// and the Test button that sends one push exactly as a call's ring push and shows the answer.
extension AdminPages {
    /// `GET /admin/push`: the apps by platform, each with its Test form and, after a test, its answer.
    func pushPage(
        _ page: SignedIn, testResults: [Int64: HTML] = [:], testForms: [Int64: FormState] = [:], problem: String? = nil,
        status: Int = 200
    ) async throws -> HTTPResponse {
        let apps = try await reads.pushApps(page.store)
        func section(_ kind: String, title: String, adding: String, none: String) -> HTML {
            let cards = apps.filter { $0.kind == kind }.map { app in
                Self.pushAppCard(app, page: page, result: testResults[app.id], form: testForms[app.id] ?? .blank)
            }
            return """
                <section id="\(kind)-apps">
                <h2>\(title)</h2>
                \(cards.isEmpty ? "<p class=\"muted\">\(none)</p>" : HTML(joining: cards))
                <p><a href="\(Self.base)/push/new?kind=\(kind)" id="add-\(kind)-app">\(adding)</a></p>
                </section>
                """
        }
        let body: HTML = """
            <h1>Settings → Mobile push</h1>
            \(Self.banner(notice: Self.notice(page), problem: problem))
            <p class="muted">The operator's apps: one app serves every organisation. A device is pushed through the app whose device parameter is its pn-param (or posted param); an app without one is its platform's default.</p>
            \(section("apns", title: "iPhone (APNs)", adding: "Add an iPhone app", none: "No iPhone app yet: calls cannot wake an iPhone."))
            \(section("fcm", title: "Android (FCM)", adding: "Add an Android app", none: "No Android app yet: calls cannot wake an Android phone."))
            """
        return Self.html(status, Self.layout(page.session, title: "Mobile push", section: .push, body: body))
    }

    /// One app: what it is (never its key), Edit, Remove, and the Test form with its last answer.
    static func pushAppCard(_ app: PostgresPushApps.Summary, page: SignedIn, result: HTML?, form: FormState) -> HTML {
        let csrf = csrfField(page.session)
        let path = "\(base)/push/\(app.id)"
        let answers: HTML = app.param.isEmpty ? "default app (devices with no pn-param, or one no other app answers to)" : "devices whose pn-param is <code>\(app.param)</code>"
        let environment: HTML
        switch app.environment {
        case "production": environment = "<dt>Environment</dt><dd>production only</dd>"
        case "sandbox": environment = "<dt>Environment</dt><dd>sandbox only (development builds)</dd>"
        default: environment = app.kind == "apns" ? "<dt>Environment</dt><dd>each device's pn-provider decides (apns: production, apns.dev: sandbox)</dd>" : .empty
        }
        let providerChoice: HTML = app.kind == "apns"
            ? """
                <div class="field"><label for="provider-\(app.id)">Send to</label><select id="provider-\(app.id)" name="provider">
                <option value="">as the app's environment says</option><option value="apns">Apple production (apns)</option>
                <option value="apns.dev">Apple sandbox (apns.dev)</option></select></div>
                """
            : .empty
        return """
            <article class="card" id="push-app-\(app.id)">
            <h3>#\(app.id) · \(app.details)</h3>
            <div class="device"><dl>
            <dt>Answers to</dt><dd>\(answers)</dd>
            \(environment)
            <dt>Key</dt><dd class="muted">stored, never shown</dd>
            <dt>Added</dt><dd>\(app.createdAt) UTC</dd>
            </dl></div>
            <form method="post" action="\(path)/test" class="inline" id="test-\(app.id)">\(csrf)
            \(field("token", label: "Device token to test", form: form, id: "token-\(app.id)", keepValue: false, required: true, extra: " autocomplete=\"off\" spellcheck=\"false\""))
            \(providerChoice)
            <button type="submit" id="test-button-\(app.id)">Test</button>
            </form>
            <small class="hint">One push goes out exactly as a call's ring push does: the app should wake; nothing rings.</small>
            \(result ?? .empty)
            <p><a href="\(path)/edit" id="edit-\(app.id)">Edit</a></p>
            <form method="post" action="\(path)/remove" class="inline" id="remove-\(app.id)">\(csrf)
            <label><input type="checkbox" name="confirm" value="yes" required> remove this app</label>
            <button type="submit" class="danger" id="remove-button-\(app.id)">Remove</button>
            </form>
            </article>
            """
    }

    /// A test push's answer in words, as the element `id`; `sent` says where it went.
    static func testResult(_ outcome: PushOutcome, id: String, sent: HTML = .empty) -> HTML {
        let headline: HTML
        switch outcome.result {
        case .accepted:
            headline = "<span class=\"badge accepted\">accepted</span> by the provider in \(milliseconds(outcome.latencyMilliseconds))"
        case .refused(let status, let reason, _):
            headline = "<span class=\"badge refused\">refused</span> \(status) <code>\(reason)</code> in \(milliseconds(outcome.latencyMilliseconds))"
        case .failed:
            headline = "<span class=\"badge failed\">failed</span>"
        }
        let dead: HTML = outcome.isDeadToken ? "<p>The token is now marked dead: calls will not push it until the app registers or posts it again.</p>" : .empty
        return """
            <div class="test-result" id="\(id)" role="status">
            <p>\(headline)</p>
            <p>\(outcome.explanation)</p>
            \(dead)\(sent)
            </div>
            """
    }

    /// The answer to a test push refused by `test_push_interval`, as the element `id`.
    static func limitedResult(retryAfterSeconds seconds: Int, interval: TimeInterval, id: String) -> HTML {
        """
        <div class="test-result" id="\(id)" role="status">
        <p><span class="badge refused">not sent</span> A test push went to this device less than \(duration(seconds: Int(interval.rounded(.up)))) ago.</p>
        <p>Try again in \(duration(seconds: seconds)): iOS stops delivering VoIP pushes to an app that gets too many, so test pushes to one device are spaced (<code>test_push_interval</code>).</p>
        </div>
        """
    }

    /// `response` with `Retry-After: seconds`.
    static func retryingAfter(_ seconds: Int, _ response: HTTPResponse) -> HTTPResponse {
        var response = response
        response.headers.append(("Retry-After", String(seconds)))
        return response
    }

    // MARK: - Adding and editing

    /// `GET /admin/push/new?kind=apns|fcm`.
    func newPushAppPage(_ page: SignedIn) async throws -> HTTPResponse {
        let kind = page.query("kind") == "fcm" ? "fcm" : "apns"
        return Self.pushAppForm(page, kind: kind, stored: nil, form: .blank)
    }

    /// `GET /admin/push/{id}/edit`.
    @Sendable func editPushAppPage(_ page: SignedIn) async throws -> HTTPResponse {
        guard let id = Self.appID(page), let app = try await page.store.perform({ try PostgresPushApps(connection: $0).app(id: id) })
        else { return Self.notFoundPage(page, message: "There is no such push app.") }
        var form = FormState(values: ["param": app.param])
        if case .apns(let apns) = app.credentials {
            form.values.merge(
                ["teamId": apns.teamID, "keyId": apns.keyID, "topic": apns.topic, "environment": apns.environment?.rawValue ?? ""]) { $1 }
        }
        return Self.pushAppForm(page, kind: app.kind, stored: app, form: form)
    }

    /// The form of an APNs or FCM app: new (`stored` nil) or an edit of `stored`, whose key is
    /// never written into the page.
    static func pushAppForm(_ page: SignedIn, kind: String, stored: PushApp?, form: FormState, status: Int = 200) -> HTTPResponse {
        let action = stored?.id.map { "\(base)/push/\($0)/edit" } ?? "\(base)/push/new"
        let title = (stored == nil ? "Add " : "Edit ") + (kind == "apns" ? "an iPhone app (APNs)" : "an Android app (FCM)")
        let fields: HTML
        if kind == "apns" {
            let chosen = form.value("environment")
            func option(_ value: String, _ label: String) -> HTML {
                "<option value=\"\(value)\"\(chosen == value ? HTML(" selected") : HTML.empty)>\(label)</option>"
            }
            let keyHint: HTML = stored == nil
                ? "Apple Developer → Keys: a key with Apple Push Notifications enabled, downloaded as a .p8. Paste its whole text."
                : "A key is stored; it is never shown. Paste a new .p8 only to replace it."
            fields = """
                \(field("teamId", label: "Team ID", form: form, hint: "10 characters, as in the Apple Developer account", required: true))
                \(field("keyId", label: "Key ID", form: form, hint: "10 characters, the key's id", required: true))
                \(field("topic", label: "Topic", form: form, hint: "the app's bundle id, or the bundle id with .voip (ring pushes go to the .voip topic)", required: true))
                <div class="field\(form.errors["environment"] == nil ? "" : " invalid")"><label for="environment">Environment</label>
                <select id="environment" name="environment">\(option("", "each device's pn-provider decides (apns or apns.dev)"))\(option("production", "production only"))\(option("sandbox", "sandbox only (development builds)"))</select>
                \(fieldError(form.errors["environment"], id: "environment"))</div>
                \(textArea("key", label: ".p8 key", form: form, hint: keyHint, placeholder: "-----BEGIN PRIVATE KEY-----"))
                \(field("param", label: "Device parameter (pn-param)", form: form, hint: "What the app puts in pn-param, e.g. TEAMID.com.example.app.voip. Empty: the default iPhone app."))
                """
        } else {
            var accountHint: HTML = "Firebase console → Project settings → Service accounts: a key of an account with the Firebase Cloud Messaging API role. Paste the whole JSON."
            if case .fcm(let account)? = stored?.credentials {
                accountHint = "Stored: project <code>\(account.projectID)</code> as <code>\(account.clientEmail)</code>; its key is never shown. Paste a new JSON only to replace it."
            }
            fields = """
                \(textArea("serviceAccount", label: "Service account JSON", form: form, hint: accountHint, placeholder: "{\"type\": \"service_account\", …}"))
                \(field("param", label: "Device parameter (pn-param)", form: form, hint: "What the app puts in pn-param (often the Firebase project). Empty: the default Android app."))
                """
        }
        let body: HTML = """
            <h1>\(title)</h1>
            \(banner(notice: nil, problem: form.problem))
            <form method="post" action="\(action)" class="card" id="push-app-form">\(csrfField(page.session))
            <input type="hidden" name="kind" value="\(kind)">
            \(fields)
            <button type="submit" id="save-push-app">\(stored == nil ? "Add app" : "Save")</button>
            <a href="\(base)/push">Cancel</a>
            </form>
            """
        return html(status, layout(page.session, title: title, section: .push, body: body))
    }

    /// `POST /admin/push/new`.
    func addPushApp(_ page: SignedIn) async throws -> HTTPResponse {
        let kind = page.field("kind") == "fcm" ? "fcm" : "apns"
        var form = Self.submitted(page)
        do {
            let app = try Self.pushApp(from: page, kind: kind, stored: nil)
            let (id, _) = try await page.store.perform { try PostgresPushApps(connection: $0).add(app) }
            return Self.done("/push", "push-app-added", subject: String(id))
        } catch let problem as PushAppError {
            form.errors[Self.formField(problem.field)] = Self.fieldMessage(problem)
            return Self.pushAppForm(page, kind: kind, stored: nil, form: form, status: 400)
        }
    }

    /// The `{id}` of a push app's path; nil when it is not a number.
    static func appID(_ page: SignedIn) -> Int64? { Int64(page.parameter("id")) }

    /// `POST /admin/push/{id}/edit`.
    @Sendable func editPushApp(_ page: SignedIn) async throws -> HTTPResponse {
        guard let id = Self.appID(page) else { return Self.notFoundPage(page) }
        guard let stored = try await page.store.perform({ try PostgresPushApps(connection: $0).app(id: id) }) else {
            return Self.notFoundPage(page, message: "There is no such push app.")
        }
        var form = Self.submitted(page)
        do {
            var app = try Self.pushApp(from: page, kind: stored.kind, stored: stored)
            app.id = id
            app.directBootOK = stored.directBootOK
            let edited = app
            guard try await page.store.perform({ try PostgresPushApps(connection: $0).update(edited) }) != nil else {
                return Self.notFoundPage(page, message: "There is no such push app.")
            }
            return Self.done("/push", "push-app-saved", subject: String(id))
        } catch let problem as PushAppError {
            form.errors[Self.formField(problem.field)] = Self.fieldMessage(problem)
            return Self.pushAppForm(page, kind: stored.kind, stored: stored, form: form, status: 400)
        }
    }

    /// `POST /admin/push/{id}/remove`.
    @Sendable func removePushApp(_ page: SignedIn) async throws -> HTTPResponse {
        guard let id = Self.appID(page) else { return Self.notFoundPage(page) }
        guard page.field("confirm") == "yes" else {
            return try await pushPage(page, problem: "Tick the box beside Remove to confirm.", status: 400)
        }
        guard try await page.store.perform({ try PostgresPushApps(connection: $0).remove(id: id) }) else {
            return Self.notFoundPage(page, message: "There is no such push app.")
        }
        return Self.done("/push", "push-app-removed", subject: String(id))
    }

    /// The non-secret fields as submitted, for showing the form again.
    static func submitted(_ page: SignedIn) -> FormState {
        FormState(values: page.form.filter { ["teamId", "keyId", "topic", "environment", "param"].contains($0.key) })
    }

    /// The app the form describes. Write-only keys: an empty key field (or service account) keeps
    /// the stored one.
    static func pushApp(from page: SignedIn, kind: String, stored: PushApp?) throws -> PushApp {
        let param = page.field("param").trimmingCharacters(in: .whitespaces)
        if kind == "apns" {
            var environment: APNsEnvironment? = nil
            let given = page.field("environment")
            if !given.isEmpty {
                guard let parsed = APNsEnvironment(rawValue: given) else {
                    throw PushAppError(field: "environment", problem: "must be production or sandbox")
                }
                environment = parsed
            }
            let pasted = page.field("key").replacingOccurrences(of: "\r\n", with: "\n").trimmingCharacters(in: .whitespacesAndNewlines)
            var key = pasted.isEmpty ? "" : pasted + "\n"
            if key.isEmpty, case .apns(let old)? = stored?.credentials { key = old.privateKeyPEM }
            guard !key.isEmpty else { throw PushAppError(field: "key", problem: "paste the .p8 key's text") }
            let credentials = APNsCredentials(
                teamID: page.field("teamId").trimmingCharacters(in: .whitespaces), keyID: page.field("keyId").trimmingCharacters(in: .whitespaces),
                topic: page.field("topic").trimmingCharacters(in: .whitespaces), privateKeyPEM: key, environment: environment)
            return PushApp(id: stored?.id, credentials: .apns(credentials), param: param)
        }
        let json = page.field("serviceAccount").trimmingCharacters(in: .whitespacesAndNewlines)
        if json.isEmpty, let stored {
            return PushApp(id: stored.id, credentials: stored.credentials, param: param)
        }
        guard !json.isEmpty else { throw PushAppError(field: "service_account", problem: "paste the service account JSON") }
        return PushApp(id: stored?.id, credentials: .fcm(try FCMServiceAccount(json: Array(json.utf8))), param: param)
    }

    /// The form field a validation problem belongs beside.
    static func formField(_ field: String) -> String {
        switch field {
        case "team_id": return "teamId"
        case "key_id": return "keyId"
        case "topic", "key", "param", "environment": return field
        default: return "serviceAccount"
        }
    }

    /// A validation problem as shown beside its field (a service account's own field named).
    static func fieldMessage(_ problem: PushAppError) -> String {
        switch problem.field {
        case "team_id", "key_id", "topic", "key", "param", "environment", "service_account": return problem.problem
        default: return "\(problem.field) \(problem.problem)"
        }
    }

    // MARK: - Test

    /// `POST /admin/push/{id}/test`: one push to the pasted token as a call would send it; the
    /// page comes back with the provider's answer beside the app.
    @Sendable func testPush(_ page: SignedIn) async throws -> HTTPResponse {
        guard let id = Self.appID(page) else { return Self.notFoundPage(page) }
        let token = page.field("token").filter { !$0.isWhitespace }
        var provider: PushProvider? = nil
        var problem: String? = nil
        if token.isEmpty || token.utf8.count > 4096 {
            problem = "paste the device's push token (as the extension's page or the app shows it)"
        }
        if !page.field("provider").isEmpty {
            if let parsed = PushProvider(rawValue: page.field("provider")), parsed.family == .apns {
                provider = parsed
            } else {
                problem = "choose Apple production or sandbox"
            }
        }
        if let problem {
            return try await pushPage(page, testForms: [id: FormState(errors: ["token": problem])], status: 400)
        }
        let answer = try await reads.sendTestPush(appID: id, token: token, provider: provider, page.store)
        if let answer { logger.testPush(admin: page.session.adminName, target: "push app #\(id)", token: PushRecord.shorten(token), outcome: answer.word) }
        let after = page.renewed()
        switch answer {
        case nil:
            return Self.notFoundPage(page, message: "There is no such push app.")
        case .sent(let outcome, _)?:
            return try await pushPage(after, testResults: [id: Self.testResult(outcome, id: "test-result-\(id)")])
        case .limited(let seconds)?:
            let result = Self.limitedResult(retryAfterSeconds: seconds, interval: reads.testPushInterval, id: "test-result-\(id)")
            return Self.retryingAfter(seconds, try await pushPage(after, testResults: [id: result], status: 429))
        }
    }
}
