import CallRouting
import Foundation
import HTTPServer
import Push
import Registrar
import RouseVocabulary
import Storage

/// Organisations and extensions (list with search, add, change display name or password, remove)
/// and an extension's page: its devices with their pn-* values, what can wake it by push, its recent
/// pushes and its recent calls.
extension AdminPages {
    /// Extensions listed per page.
    static let extensionsPerPage = 100

    /// What a change done on another page says once the browser is back (Post/Redirect/Get).
    static func notice(_ page: SignedIn) -> String? {
        let subject = page.query("subject")
        switch page.query("done") {
        case "organisation-added": return "Organisation \(subject) added."
        case "organisation-removed": return "Organisation \(subject) removed."
        case "extension-added": return "Extension \(subject) added. Phones register with its number, domain and password."
        case "extension-removed": return "Extension \(subject) removed, with its registrations and posted tokens."
        case "password-changed": return "Password changed. Phones must register with the new one."
        case "name-saved": return "Display name saved. The next call's ring push carries it."
        case "push-app-added": return "Push app #\(subject) added."
        case "push-app-saved": return "Push app #\(subject) saved."
        case "push-app-removed": return "Push app #\(subject) removed."
        case "route-added": return "Route \(subject) added. Every instance uses it at once."
        case "route-removed": return "Route \(subject) removed."
        case "national-patterns-saved": return "National numbers of \(subject) saved."
        case "class-saved": return "Class of service saved."
        default: return nil
        }
    }

    /// Where to go after a change: `path` with a notice of what was done.
    static func done(_ path: String, _ what: String, subject: String) -> HTTPResponse {
        redirect(base + path + "?done=" + what + "&subject=" + HTML.urlComponent(subject))
    }

    // MARK: - The list

    /// The toll-fraud warning: extensions whose outside calls jumped (nothing when none did).
    static func surgeWarning(_ surges: [(caller: AddressOfRecord, lastHour: Int)]) -> HTML {
        guard !surges.isEmpty else { return "" }
        let items = surges.map { surge -> HTML in
            "<li><a href=\"\(extensionPath(surge.caller))\">\(surge.caller.description)</a>: \(surge.lastHour) outside calls in the last hour</li>"
        }
        return """
            <div class="error" id="outside-call-surge" role="alert"><p><strong>Outside calls jumped</strong> (toll fraud?): far more than
            these extensions' usual, as this instance counts them. Check them, lower their class of service, or change their passwords.</p>
            <ul>\(HTML(joining: items))</ul></div>
            """
    }

    /// `GET /admin/extensions`: organisations, then the extensions matching `search` (and
    /// `domain`), 100 at a time from `offset`, with the forms to add either.
    func extensionsPage(
        _ page: SignedIn, organisationForm: FormState = .blank, extensionForm: FormState = .blank, problem: String? = nil,
        status: Int = 200
    ) async throws -> HTTPResponse {
        let search = page.query("search")
        let domain = page.query("domain")
        let offset = max(0, Int(page.query("offset")) ?? 0)
        let organisations = try await page.store.directory { try $0.listDomains() }
        let chosenDomain = organisations.contains { $0.domain == domain.lowercased() } ? domain.lowercased() : ""
        let found = try await reads.extensions(domain: chosenDomain.isEmpty ? nil : chosenDomain, search: search, page.store)
        let shown = found.dropFirst(offset).prefix(Self.extensionsPerPage)
        let csrf = Self.csrfField(page.session)

        let organisationRows = organisations.map { organisation -> HTML in
            """
            <tr><td><a href="\(Self.base)/extensions?domain=\(HTML.urlComponent(organisation.domain))">\(organisation.domain)</a></td>
            <td class="num">\(organisation.extensionCount)</td><td>\(Self.time(organisation.createdAt))</td>
            <td><a href="\(Self.organisationPath(organisation.domain))" id="organisation-page-\(organisation.domain)">Routes and calling</a></td>
            <td><form method="post" action="\(Self.base)/organisations/remove" class="inline">\(csrf)
            <input type="hidden" name="domain" value="\(organisation.domain)">
            <button type="submit" class="danger" id="remove-organisation-\(organisation.domain)">Remove</button></form></td></tr>
            """
        }
        let domainOptions = organisations.map { organisation -> HTML in
            let selected: HTML = organisation.domain == chosenDomain ? " selected" : ""
            return "<option value=\"\(organisation.domain)\"\(selected)>\(organisation.domain)</option>"
        }
        let extensionRows = shown.map { item -> HTML in
            """
            <tr><td><a href="\(Self.extensionPath(item.aor))">\(item.aor.description)</a></td>
            <td>\(item.displayName ?? "")</td><td class="num">\(item.liveBindingCount)</td><td>\(Self.time(item.createdAt))</td><td>\(Self.time(item.updatedAt))</td></tr>
            """
        }
        var pager: [HTML] = []
        func pageLink(_ newOffset: Int, _ label: String, id: String) -> HTML {
            let query = "?search=\(HTML.urlComponent(search))&domain=\(HTML.urlComponent(chosenDomain))&offset=\(newOffset)"
            return "<a href=\"\(Self.base)/extensions\(query)\" id=\"\(id)\">\(label)</a> "
        }
        if offset > 0 { pager.append(pageLink(max(0, offset - Self.extensionsPerPage), "← Previous", id: "previous-page")) }
        if offset + Self.extensionsPerPage < found.count { pager.append(pageLink(offset + Self.extensionsPerPage, "Next →", id: "next-page")) }
        let range: HTML = found.isEmpty
            ? "No extension matches."
            : "\(offset + 1)–\(offset + shown.count) of \(found.count)"

        let body: HTML = """
            <h1>Organisations and extensions</h1>
            \(Self.banner(notice: Self.notice(page), problem: problem))
            \(Self.surgeWarning(reads.outsideCallSurges()))
            <section id="organisations">
            <h2>Organisations</h2>
            \(Self.table(["Domain", "Extensions", "Added", "Outside calls", ""], organisationRows, empty: "No organisation yet. An organisation is a SIP domain; its extensions register as number@domain.", id: "organisation-list"))
            <form method="post" action="\(Self.base)/organisations" class="inline" id="add-organisation">\(csrf)
            \(Self.field("domain", label: "New organisation (domain)", form: organisationForm, id: "new-domain", required: true, extra: " placeholder=\"example.com\""))
            <button type="submit" id="add-organisation-button">Add organisation</button>
            </form>
            </section>
            <section id="extensions">
            <h2>Extensions</h2>
            <form method="get" action="\(Self.base)/extensions" class="inline" id="search-extensions">
            <div class="field"><label for="search">Search</label><input id="search" name="search" type="search" value="\(search)" placeholder="part of number@domain"></div>
            <div class="field"><label for="domain-filter">Organisation</label><select id="domain-filter" name="domain"><option value="">every organisation</option>\(domainOptions)</select></div>
            <button type="submit" class="secondary" id="search-button">Search</button>
            </form>
            <p class="muted">\(range)</p>
            \(Self.table(["Extension", "Name", "Devices registered", "Added", "Changed"], extensionRows, empty: "", id: "extension-list"))
            <p class="pager">\(pager)</p>
            <h2>Add an extension</h2>
            <form method="post" action="\(Self.base)/extensions" id="add-extension">\(csrf)
            \(Self.field("address", label: "Address (number@domain)", form: extensionForm, id: "new-address", required: true, extra: " placeholder=\"1001@example.com\" autocomplete=\"off\""))
            \(Self.field("displayName", label: "Display name (optional)", form: extensionForm, id: "new-display-name", hint: Self.displayNameHint, extra: " placeholder=\"Alice Example\" maxlength=\"\(DirectoryError.displayNameLimit)\""))
            \(Self.field("password", label: "SIP password", form: extensionForm, type: "password", id: "new-password", hint: "The phone authenticates with it; it is stored only as digest hashes and never shown again.", keepValue: false, required: true, extra: " autocomplete=\"new-password\""))
            <button type="submit" id="add-extension-button">Add extension</button>
            </form>
            </section>
            """
        return Self.html(status, Self.layout(page.session, title: "Extensions", section: .extensions, body: body))
    }

    /// What the display name fields say it is for.
    static let displayNameHint: HTML = "What the phones it calls show, and the ring push's <code>callee_name</code>; at most 64 characters."

    /// The path of an extension's page.
    static func extensionPath(_ aor: AddressOfRecord) -> String {
        base + "/extensions/" + HTML.urlComponent(aor.description)
    }

    /// `POST /admin/organisations`.
    func addOrganisation(_ page: SignedIn) async throws -> HTTPResponse {
        let domain = page.field("domain").trimmingCharacters(in: .whitespaces)
        do {
            let added = try await page.store.directory { try $0.addDomain(domain) }
            return Self.done("/extensions", "organisation-added", subject: added)
        } catch let refusal as DirectoryError {
            let form = FormState(values: ["domain": domain], errors: ["domain": refusal.description])
            return try await extensionsPage(page, organisationForm: form, status: 400)
        }
    }

    /// `POST /admin/organisations/remove`: refused while it has extensions.
    func removeOrganisation(_ page: SignedIn) async throws -> HTTPResponse {
        let domain = page.field("domain")
        do {
            try await page.store.directory { try $0.removeDomain(domain) }
            return Self.done("/extensions", "organisation-removed", subject: domain.lowercased())
        } catch let refusal as DirectoryError {
            return try await extensionsPage(page, problem: "Not removed: \(refusal.description).", status: 409)
        }
    }

    /// `POST /admin/extensions`.
    func addExtension(_ page: SignedIn) async throws -> HTTPResponse {
        let address = page.field("address").trimmingCharacters(in: .whitespaces)
        let name = page.field("displayName")
        var form = FormState(values: ["address": address, "displayName": name])
        do {
            let aor = try DirectoryError.parseAddress(address)
            try await page.store.directory { try $0.addExtension(aor, password: page.field("password"), displayName: name) }
            return Self.done("/extensions", "extension-added", subject: aor.description)
        } catch let refusal as DirectoryError {
            switch refusal {
            case .invalidPassword: form.errors["password"] = refusal.description
            case .invalidDisplayName: form.errors["displayName"] = refusal.description
            case .noSuchDomain(let domain): form.errors["address"] = "there is no organisation \(domain); add it above first"
            default: form.errors["address"] = refusal.description
            }
            return try await extensionsPage(page, extensionForm: form, status: 400)
        }
    }

    // MARK: - One extension

    /// `GET /admin/extensions/{address}`.
    /// - Parameter deviceResults: a device's Test push answer, by device id, shown beside it.
    func extensionPage(
        _ page: SignedIn, address: String, passwordForm: FormState = .blank, nameForm: FormState? = nil, problem: String? = nil,
        status: Int = 200, deviceResults: [String: HTML] = [:]
    ) async throws -> HTTPResponse {
        guard let aor = try? DirectoryError.parseAddress(address) else { return Self.notFoundPage(page, message: "There is no extension \(address).") }
        let detail = try await reads.extensionDetail(aor, page.store)
        let csrf = Self.csrfField(page.session)
        let path = Self.extensionPath(aor)

        let devices = detail.bindings.map { binding in
            Self.device(binding, detail: detail, page: page, results: deviceResults)
        }
        let posted = detail.postedTokens.map { token -> HTML in
            let device = AdminReads.Device(token)
            let result: HTML = deviceResults[device.id].map { "<tr class=\"result\"><td colspan=\"7\">\($0)</td></tr>" } ?? .empty
            return """
                <tr id="device-\(device.id)"><td>\(AdminAPI.platform(token.channel.provider))</td><td><code>\(Binding.shortenedToken(token.channel.token))</code></td>
                <td>\(token.channel.param.map { HTML("<code>\($0)</code>") } ?? "<span class=\"muted\">default app</span>")</td>
                <td>\(token.channel.kind.rawValue)</td><td>\(Self.time(token.postedAt))</td>
                <td>\(Self.tokenState(token.channel, detail: detail, dead: "dead", alive: "alive"))</td>
                <td>\(Self.deviceActions(device, path: path, page: page))</td></tr>
                \(result)
                """
        }
        let pushes = detail.recentPushes.map(Self.pushRow)
        let calls = detail.recentCalls.map { Self.callRow($0, showCallee: false) }

        let body: HTML = """
            <h1>\(aor.description)\(detail.displayName.map { HTML(" <span class=\"muted\" id=\"display-name\">\($0)</span>") } ?? .empty)</h1>
            \(Self.banner(notice: Self.notice(page), problem: problem))
            <p><a href="\(Self.base)/calls?extension=\(HTML.urlComponent(aor.description))" id="calls-of-extension">Every call of this extension</a></p>
            <section id="devices">
            <h2>Devices</h2>
            \(devices.isEmpty ? "<p class=\"muted\">No device is registered now.</p>" : HTML(joining: devices))
            </section>
            <section id="posted-tokens">
            <h2>Can be woken by push</h2>
            <p class="muted">Tokens the app posted (<code>POST /api/v1/push/register</code>); a call pushes them besides the registered devices.</p>
            \(Self.table(["Platform", "Token", "Param", "Kind", "Posted", "State", ""], posted, empty: "No token posted."))
            </section>
            <section id="recent-pushes">
            <h2>Recent pushes</h2>
            \(keptFor)
            \(Self.table(["Time", "Device", "Provider", "Outcome", "Reason", "Latency", "Woke in time"], pushes, empty: "No push yet."))
            </section>
            <section id="recent-calls">
            <h2>Recent calls</h2>
            \(Self.table(Self.callHeaders(showCallee: false), calls, empty: "No call yet."))
            </section>
            \(Self.classOfServiceSection(detail, path: path, csrf: csrf))
            <section id="manage">
            <h2>Display name</h2>
            <form method="post" action="\(path)/display-name" id="change-display-name">\(csrf)
            \(Self.field("displayName", label: "Display name", form: nameForm ?? FormState(values: ["displayName": detail.displayName ?? ""]), id: "changed-display-name", hint: "\(Self.displayNameHint) Empty: none.", extra: " maxlength=\"\(DirectoryError.displayNameLimit)\""))
            <button type="submit" id="change-display-name-button">Save display name</button>
            </form>
            <h2>Change password</h2>
            <form method="post" action="\(path)/password" id="change-password">\(csrf)
            \(Self.field("password", label: "New SIP password", form: passwordForm, type: "password", id: "changed-password", keepValue: false, required: true, extra: " autocomplete=\"new-password\""))
            <button type="submit" id="change-password-button">Change password</button>
            </form>
            <h2>Remove</h2>
            <form method="post" action="\(path)/remove" id="remove-extension">\(csrf)
            <div class="field"><label><input type="checkbox" name="confirm" value="yes" required id="confirm-remove"> Remove \(aor.description), its registrations and its posted tokens</label></div>
            <button type="submit" class="danger" id="remove-extension-button">Remove extension</button>
            </form>
            </section>
            """
        return Self.html(status, Self.layout(page.session, title: aor.description, section: .extensions, body: body))
    }

    /// One registered device: contact, user agent, transport and source, expiry, the pn-* values
    /// it registered with (tokens shortened), its Test push and Show token buttons and the last
    /// test's answer.
    static func device(_ binding: Binding, detail: AdminReads.ExtensionDetail, page: SignedIn, results: [String: HTML]) -> HTML {
        let device = AdminReads.Device(binding)
        let channels = binding.pushChannels.map { channel -> HTML in
            return """
                <div class="pn"><span>pn-provider <code>\(channel.provider.rawValue)</code></span>
                <span>pn-prid <code>\(Binding.shortenedToken(channel.token))</code></span>
                <span>pn-param \(channel.param.map { HTML("<code>\($0)</code>") } ?? "<span class=\"muted\">none</span>")</span>
                <span>\(channel.kind.rawValue)</span> \(Self.tokenState(channel, detail: detail, dead: "token dead", alive: "token alive"))</div>
                """
        }
        let push: HTML = channels.isEmpty
            ? "<div class=\"pn muted\">No push parameters: rung over SIP while it stays registered (a desk phone, or an app that keeps its connection).</div>"
            : HTML(joining: channels)
        return """
            <div class="device" id="device-\(device.id)">
            <dl>
            <dt>Contact</dt><dd><code>\(binding.contactForDisplay)</code></dd>
            <dt>User agent</dt><dd>\(binding.userAgent ?? "—")</dd>
            <dt>Transport and source</dt><dd>\(binding.flow.transport.rawValue.uppercased()) from <code>\(binding.flow.sourceText)</code></dd>
            <dt>Expires in</dt><dd>\(Self.duration(seconds: binding.remainingSeconds(at: detail.now)))</dd>
            </dl>
            \(push)
            \(deviceActions(device, path: extensionPath(detail.aor), page: page))
            \(results[device.id] ?? .empty)
            </div>
            """
    }

    /// A row of Recent pushes: an accepted push whose device did not come back in time reads
    /// "no re-register in time".
    static func pushRow(_ record: PushRecord) -> HTML {
        let wake = record.wake
        let outcome: String
        let reason: String
        if record.outcomeKind == .accepted, wake == .notInTime {
            outcome = "no re-register in time"
            reason = "the provider accepted the push, but the app did not register again within the wait (it took longer, or may not run in the background on that phone)"
        } else {
            outcome = record.outcome
            reason = record.outcomeKind == .refused ? "\(record.reason ?? "refused"): \(record.explanation)" : record.explanation
        }
        let badge = outcome == "no re-register in time" ? "no-wake" : outcome
        let woke: HTML
        switch wake {
        case nil: woke = "<span class=\"muted\">—</span>"
        case .woke?: woke = "<span class=\"badge woke\">\(wake?.words ?? "")</span>"
        case .late?: woke = "<span class=\"badge late\">\(wake?.words ?? "")</span>"
        case .notInTime?: woke = "<span class=\"badge no-wake\">no</span>"
        case let other?: woke = "\(other.words)"
        }
        return """
            <tr><td>\(time(record.createdAt))</td><td>\(record.device ?? "—")</td><td>\(record.provider.rawValue)</td>
            <td><span class="badge \(badge)">\(outcome)</span></td><td>\(reason)</td>
            <td class="num">\(milliseconds(record.latencyMilliseconds))</td><td>\(woke)</td></tr>
            """
    }

    /// `POST /admin/extensions/{address}/password`.
    @Sendable func changePassword(_ page: SignedIn) async throws -> HTTPResponse {
        let address = page.parameter("address")
        guard let aor = try? DirectoryError.parseAddress(address) else { return Self.notFoundPage(page) }
        do {
            let password = page.field("password")
            try await page.store.directory { try $0.changePassword(aor, password: password) }
        } catch let refusal as DirectoryError {
            guard case .invalidPassword = refusal else { throw refusal }
            let form = FormState(errors: ["password": refusal.description])
            return try await extensionPage(page, address: address, passwordForm: form, status: 400)
        }
        return Self.redirect(Self.extensionPath(aor) + "?done=password-changed")
    }

    /// `POST /admin/extensions/{address}/display-name`: empty removes it.
    @Sendable func saveDisplayName(_ page: SignedIn) async throws -> HTTPResponse {
        let address = page.parameter("address")
        guard let aor = try? DirectoryError.parseAddress(address) else { return Self.notFoundPage(page) }
        let name = page.field("displayName")
        do {
            try await page.store.directory { try $0.setDisplayName(aor, name) }
        } catch let refusal as DirectoryError {
            guard case .invalidDisplayName = refusal else { throw refusal }
            let form = FormState(values: ["displayName": name], errors: ["displayName": refusal.description])
            return try await extensionPage(page, address: address, nameForm: form, status: 400)
        }
        return Self.redirect(Self.extensionPath(aor) + "?done=name-saved")
    }

    /// `POST /admin/extensions/{address}/remove`.
    @Sendable func removeExtension(_ page: SignedIn) async throws -> HTTPResponse {
        let address = page.parameter("address")
        guard let aor = try? DirectoryError.parseAddress(address) else { return Self.notFoundPage(page) }
        guard page.field("confirm") == "yes" else {
            return try await extensionPage(page, address: address, problem: "Tick the box to confirm the removal.", status: 400)
        }
        try await page.store.directory { try $0.removeExtension(aor) }
        return Self.done("/extensions", "extension-removed", subject: aor.description)
    }
}
