import CallRouting
import Foundation
import HTTPServer
import Registrar
import SIPProxy
import Storage

/// An organisation's page: its outbound routes (pattern, hops, hop timeout, caller identity,
/// emergency flag, whether it has credentials; a route's password is never written into a page),
/// the form to add one and a Remove button per route, and its national numbers (the patterns the
/// class of service reads). An extension's class of service is set on the extension's page.
extension AdminPages {
    /// The path of an organisation's page.
    static func organisationPath(_ domain: String) -> String {
        base + "/organisations/" + HTML.urlComponent(domain)
    }

    /// The route form's fields, named as `RouteError` names them (so an error lands beside its
    /// field); the password is never written back.
    static let routeFormFields = ["name", "pattern", "hops", "position", "strip", "prepend", "hop_timeout", "caller_identity", "username", "emergency"]

    /// `GET /admin/organisations/{domain}`.
    func organisationPage(
        _ page: SignedIn, routeForm: FormState = .blank, patternsForm: FormState? = nil, problem: String? = nil, status: Int = 200
    ) async throws -> HTTPResponse {
        guard let domain = try? DirectoryError.parseDomain(page.parameter("domain")),
            try await page.store.directory({ try $0.listDomains() }).contains(where: { $0.domain == domain })
        else { return Self.notFoundPage(page, message: "There is no organisation \(page.parameter("domain")).") }
        let (routes, national) = try await page.store.perform { connection in
            (try PostgresRoutes(connection: connection).list(organisation: domain),
             try PostgresCallClasses(connection: connection).load(organisation: domain).national[domain] ?? [])
        }
        let csrf = Self.csrfField(page.session)
        let path = Self.organisationPath(domain)
        let rows = routes.map { Self.routeRow($0, path: path, csrf: csrf) }
        let patterns = patternsForm ?? FormState(values: ["patterns": national.map(\.description).joined(separator: "\n")])
        let patternsError = patterns.errors["patterns"]
        let emergencyChecked: HTML = routeForm.value("emergency") == "yes" ? " checked" : ""
        let body: HTML = """
            <h1>\(domain)</h1>
            \(Self.banner(notice: Self.notice(page), problem: problem))
            <p><a href="\(Self.base)/extensions?domain=\(HTML.urlComponent(domain))" id="extensions-of-organisation">Extensions of \(domain)</a></p>
            <section id="routes">
            <h2>Outbound routes</h2>
            <p class="muted">Calls from its extensions to numbers and other domains go out by the first route, in position order, whose pattern takes the dialled target. No route, no call. Every instance picks a change up at once.</p>
            \(Self.table(["Position", "Name", "Pattern", "Number sent", "Next hops", "Hop timeout", "Caller identity", "Emergency", "Credentials", ""], rows, empty: "No route: its extensions can call only other extensions.", id: "route-list"))
            <h2>Add a route</h2>
            <form method="post" action="\(path)/routes" id="add-route">\(csrf)
            \(Self.field("name", label: "Name", form: routeForm, id: "route-name", hint: "Letters, digits, -, _ and ., unique in the organisation.", required: true))
            \(Self.field("pattern", label: "Pattern", form: routeForm, id: "route-pattern", hint: "<code>prefix:0044</code> (empty prefix: every number), <code>regex:^(112|999)$</code> (the whole user part) or <code>domain:partner.example</code>.", required: true))
            \(Self.field("hops", label: "Next hops", form: routeForm, id: "route-hops", hint: "Tried in order, separated by commas: <code>trunk.example.net</code> (DNS NAPTR/SRV), <code>198.51.100.7:5080;transport=tcp</code>, <code>sips:sbc.example.net</code>.", required: true))
            \(Self.field("position", label: "Position", form: routeForm, id: "route-position", hint: "Empty: after the last route."))
            \(Self.field("strip", label: "Strip", form: routeForm, id: "route-strip", hint: "Characters taken off the front of the number before it goes out (empty: none)."))
            \(Self.field("prepend", label: "Prepend", form: routeForm, id: "route-prepend", hint: "Digits, +, * or # put in front after stripping."))
            \(Self.field("hop_timeout", label: "Hop timeout (ms)", form: routeForm, id: "route-hop-timeout", hint: "How long a silent hop is waited for before the next (empty: 4000)."))
            \(Self.field("caller_identity", label: "Caller identity", form: routeForm, id: "route-caller-identity", hint: "<code>asserted-identity</code> (empty: P-Asserted-Identity names the extension), <code>from:+442079460000</code> or <code>unchanged</code>."))
            \(Self.field("username", label: "Trunk username", form: routeForm, id: "route-username", hint: "With a password, Rouse answers the trunk's digest challenge. Empty: no credentials.", extra: " autocomplete=\"off\""))
            \(Self.field("password", label: "Trunk password", form: routeForm, type: "password", id: "route-password", hint: "Write-only: stored for the trunk, never shown again.", keepValue: false, extra: " autocomplete=\"new-password\""))
            <div class="field"><label><input type="checkbox" name="emergency" value="yes" id="route-emergency"\(emergencyChecked)> Emergency route: always goes out, whatever the caller's class of service</label></div>
            <button type="submit" id="add-route-button">Add route</button>
            </form>
            </section>
            <section id="national-numbers">
            <h2>National numbers</h2>
            <p class="muted">The outside targets that count as national for the class of service; every other one is international. An extension of class <code>internal</code> calls only extensions, <code>national</code> these too, <code>international</code> anything a route takes. Emergency routes always go out.</p>
            <form method="post" action="\(path)/national-patterns" id="national-patterns-form">\(csrf)
            <div class="field\(patternsError == nil ? "" : " invalid")"><label for="national-patterns">Patterns, one a line</label>
            <textarea id="national-patterns" name="patterns" rows="4" spellcheck="false" autocomplete="off" placeholder="regex:^0[1-9][0-9]{8}$"\(patternsError == nil ? HTML.empty : " aria-invalid=\"true\" aria-describedby=\"error-national-patterns\"")>\(patterns.value("patterns"))</textarea>
            \(Self.fieldError(patternsError, id: "national-patterns"))<small class="hint">Written as a route's pattern: <code>prefix:0</code>, <code>regex:^0[1-9][0-9]{8}$</code>. None: every outside call is international.</small></div>
            <button type="submit" id="save-national-patterns">Save national numbers</button>
            </form>
            </section>
            """
        return Self.html(status, Self.layout(page.session, title: domain, section: .extensions, body: body))
    }

    /// One route of the list, with its Remove button.
    static func routeRow(_ listed: PostgresRoutes.Listed, path: String, csrf: HTML) -> HTML {
        let route = listed.route
        let sent: HTML = route.strip == 0 && route.prepend.isEmpty
            ? "<span class=\"muted\">as dialled</span>"
            : "strip \(route.strip), prepend <code>\(route.prepend)</code>"
        let hops = HTML(joining: route.hops.map { hop -> HTML in "<code>\(hop.description)</code><br>" })
        let emergency: HTML = route.emergency ? "<span class=\"badge emergency\">emergency</span>" : "<span class=\"muted\">no</span>"
        let credentials: HTML
        if let username = route.username {
            credentials = "<code>\(username)</code>\(listed.hasPassword ? HTML(", password set") : HTML.empty)"
        } else {
            credentials = "<span class=\"muted\">none</span>"
        }
        return """
            <tr id="route-\(route.name)"><td class="num">\(route.position)</td><td>\(route.name)</td><td><code>\(route.pattern.description)</code></td>
            <td>\(sent)</td><td>\(hops)</td><td>\(HopFailover.seconds(route.hopTimeout))</td><td><code>\(route.callerIdentity.description)</code></td>
            <td>\(emergency)</td><td>\(credentials)</td>
            <td><form method="post" action="\(path)/routes/\(HTML.urlComponent(route.name))/remove" class="inline">\(csrf)
            <button type="submit" class="danger" id="remove-route-\(route.name)">Remove</button></form></td></tr>
            """
    }

    /// `POST /admin/organisations/{domain}/routes`.
    @Sendable func addRoute(_ page: SignedIn) async throws -> HTTPResponse {
        let domain = page.parameter("domain").lowercased()
        var form = FormState(values: page.form.filter { Self.routeFormFields.contains($0.key) })
        do {
            let draft = try Self.routeDraft(from: page, organisation: domain)
            _ = try await page.store.perform { try PostgresRoutes(connection: $0).add(draft) }
            return Self.done("/organisations/" + HTML.urlComponent(domain), "route-added", subject: draft.name)
        } catch let refusal as RouteError {
            if refusal.field == "organisation" { return Self.notFoundPage(page, message: "There is no organisation \(domain).") }
            form.errors[refusal.field] = refusal.problem
            return try await organisationPage(page, routeForm: form, problem: "The route was not added: \(refusal.description).", status: 400)
        }
    }

    /// The route the add form describes (not yet validated: storing it validates).
    static func routeDraft(from page: SignedIn, organisation: String) throws(RouteError) -> RouteDraft {
        func trimmed(_ name: String) -> String { page.field(name).trimmingCharacters(in: .whitespacesAndNewlines) }
        func number(_ name: String) throws(RouteError) -> Int? {
            let text = trimmed(name)
            guard !text.isEmpty else { return nil }
            guard let value = Int(text) else { throw RouteError(field: name, problem: "\"\(text)\" is not a whole number") }
            return value
        }
        let hops = page.field("hops").split(whereSeparator: { $0 == "," || $0.isNewline }).map { $0.trimmingCharacters(in: .whitespaces) }
        let username = trimmed("username")
        let password = page.field("password")
        let identity = trimmed("caller_identity")
        return RouteDraft(
            organisation: organisation, name: trimmed("name"), position: try number("position"), pattern: trimmed("pattern"),
            strip: try number("strip") ?? 0, prepend: trimmed("prepend"), hops: hops.filter { !$0.isEmpty },
            hopTimeoutMilliseconds: try number("hop_timeout") ?? 4000, username: username.isEmpty ? nil : username,
            password: password.isEmpty ? nil : password, callerIdentity: identity.isEmpty ? "asserted-identity" : identity,
            emergency: page.field("emergency") == "yes")
    }

    /// `POST /admin/organisations/{domain}/routes/{name}/remove`.
    @Sendable func removeRoute(_ page: SignedIn) async throws -> HTTPResponse {
        let domain = page.parameter("domain").lowercased()
        let name = page.parameter("name")
        guard try await page.store.perform({ try PostgresRoutes(connection: $0).remove(organisation: domain, name: name) }) else {
            return Self.notFoundPage(page, message: "\(domain) has no route named \(name).")
        }
        return Self.done("/organisations/" + HTML.urlComponent(domain), "route-removed", subject: name)
    }

    /// `POST /admin/organisations/{domain}/national-patterns`: one pattern a line.
    @Sendable func saveNationalPatterns(_ page: SignedIn) async throws -> HTTPResponse {
        let domain = page.parameter("domain").lowercased()
        let patterns = page.field("patterns").split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        do {
            try await page.store.perform { try PostgresCallClasses(connection: $0).setNationalPatterns(patterns, organisation: domain) }
            return Self.done("/organisations/" + HTML.urlComponent(domain), "national-patterns-saved", subject: domain)
        } catch let refusal as RouteError {
            if refusal.field == "organisation" { return Self.notFoundPage(page, message: "There is no organisation \(domain).") }
            let form = FormState(values: ["patterns": patterns.joined(separator: "\n")], errors: ["patterns": refusal.problem])
            return try await organisationPage(page, patternsForm: form, status: 400)
        }
    }

    // MARK: - An extension's class of service

    /// The Outside calls part of an extension's page: its class of service, and the form to change it.
    static func classOfServiceSection(_ detail: AdminReads.ExtensionDetail, path: String, csrf: HTML) -> HTML {
        let chosen = detail.classOfService?.rawValue ?? "default"
        let options: [(String, String)] = [
            ("default", "the instance's default (outside_call_class)"), ("internal", "internal: extensions only"),
            ("national", "national: extensions and national numbers"), ("international", "international: any number a route takes"),
        ]
        let choices = HTML(joining: options.map { value, label -> HTML in
            "<option value=\"\(value)\"\(chosen == value ? HTML(" selected") : HTML.empty)>\(label)</option>"
        })
        return """
            <section id="outside-calls">
            <h2>Outside calls</h2>
            <form method="post" action="\(path)/class-of-service" class="inline" id="class-of-service-form">\(csrf)
            <div class="field"><label for="class-of-service">Class of service</label><select id="class-of-service" name="class">\(choices)</select></div>
            <button type="submit" id="save-class-of-service">Save</button>
            </form>
            <p class="hint">Which numbers are national is set on <a href="\(organisationPath(detail.aor.domain))" id="organisation-of-extension">the organisation's page</a>. Emergency routes always go out, whatever the class.</p>
            </section>
            """
    }

    /// `POST /admin/extensions/{address}/class-of-service`.
    @Sendable func saveClassOfService(_ page: SignedIn) async throws -> HTTPResponse {
        let address = page.parameter("address")
        guard let aor = try? DirectoryError.parseAddress(address) else { return Self.notFoundPage(page) }
        let value: ClassOfService?
        do {
            value = try PostgresCallClasses.classOfService(named: page.field("class"))
        } catch {
            return try await extensionPage(page, address: address, problem: "Choose a class of service from the list.", status: 400)
        }
        do {
            try await page.store.perform { try PostgresCallClasses(connection: $0).setClass(value, number: aor.number, organisation: aor.domain) }
        } catch let refusal as RouteError {
            return Self.notFoundPage(page, message: refusal.problem)
        }
        return Self.redirect(Self.extensionPath(aor) + "?done=class-saved")
    }
}
