import Foundation
import HTTPServer
import Storage

/// The frame every admin page shares (head, navigation, sign-out), its style sheet, form fields
/// with their errors beside them, and how times and durations read.
extension AdminPages {
    /// The page sections of the navigation.
    enum Section: String, Sendable {
        case extensions, calls, push
    }

    /// A whole document around `body` (which brings its own `<main>`).
    static func document(title: String, body: HTML) -> HTML {
        """
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>\(title) · Rouse</title>
        <link rel="stylesheet" href="\(base)/style.css">
        </head>
        <body>
        \(body)
        </body>
        </html>

        """
    }

    /// A signed-in page: the header with the navigation and the sign-out button, then `body`.
    static func layout(_ session: AdminSession, title: String, section: Section?, body: HTML) -> HTML {
        func link(_ target: Section, _ path: String, _ label: HTML) -> HTML {
            let current: HTML = target == section ? " aria-current=\"page\"" : ""
            return "<a href=\"\(base)\(path)\"\(current) id=\"nav-\(target.rawValue)\">\(label)</a>"
        }
        return document(
            title: title,
            body: """
                <header class="top">
                <a class="brand" href="\(base)/extensions">Rouse</a>
                <nav>
                \(link(.extensions, "/extensions", "Extensions"))
                \(link(.calls, "/calls", "Calls"))
                \(link(.push, "/push", "Settings → Mobile push"))
                </nav>
                <form method="post" action="\(base)/sign-out" class="sign-out">
                \(csrfField(session))
                <span class="who">\(session.adminName)</span>
                <button type="submit" id="sign-out" class="link">Sign out</button>
                </form>
                </header>
                <main>
                \(body)
                </main>
                """)
    }

    /// The hidden field every form of a signed-in page carries.
    static func csrfField(_ session: AdminSession) -> HTML {
        "<input type=\"hidden\" name=\"csrf\" value=\"\(session.csrfToken)\">"
    }

    /// What a form showed and what was wrong with it, field by field (for showing it again).
    struct FormState: Sendable {
        var values: [String: String] = [:]
        var errors: [String: String] = [:]
        /// A problem with the whole form rather than one field.
        var problem: String?

        static let blank = FormState()

        func value(_ name: String) -> String { values[name] ?? "" }
    }

    /// A labelled input with its error beside it. `id` defaults to the name; secrets (passwords,
    /// keys, tokens) pass `keepValue: false` so what was typed is never written back.
    static func field(
        _ name: String, label: String, form: FormState, type: String = "text", id: String? = nil, hint: HTML = .empty,
        keepValue: Bool = true, required: Bool = false, extra: HTML = .empty
    ) -> HTML {
        let id = id ?? name
        let error = form.errors[name]
        let value: HTML = keepValue ? " value=\"\(form.value(name))\"" : ""
        let requiredAttribute: HTML = required ? " required" : ""
        let described: HTML = error == nil ? "" : " aria-invalid=\"true\" aria-describedby=\"error-\(id)\""
        return """
            <div class="field\(error == nil ? "" : " invalid")">
            <label for="\(id)">\(label)</label>
            <input id="\(id)" name="\(name)" type="\(type)"\(value)\(requiredAttribute)\(described)\(extra)>
            \(fieldError(error, id: id))\(hint.markup.isEmpty ? HTML.empty : "<small class=\"hint\">\(hint)</small>")
            </div>
            """
    }

    /// A labelled text area (pasted keys and service accounts), never refilled.
    static func textArea(_ name: String, label: String, form: FormState, id: String? = nil, hint: HTML = .empty, placeholder: String = "") -> HTML {
        let id = id ?? name
        let error = form.errors[name]
        let described: HTML = error == nil ? "" : " aria-invalid=\"true\" aria-describedby=\"error-\(id)\""
        return """
            <div class="field\(error == nil ? "" : " invalid")">
            <label for="\(id)">\(label)</label>
            <textarea id="\(id)" name="\(name)" rows="6" spellcheck="false" autocomplete="off" placeholder="\(placeholder)"\(described)></textarea>
            \(fieldError(error, id: id))\(hint.markup.isEmpty ? HTML.empty : "<small class=\"hint\">\(hint)</small>")
            </div>
            """
    }

    /// A table of `rows` under `headers` (scrolling sideways on a narrow screen), or the
    /// `empty` sentence when there are none.
    static func table(_ headers: [String], _ rows: [HTML], empty: String, id: String? = nil) -> HTML {
        guard !rows.isEmpty else { return "<p class=\"muted\">\(empty)</p>" }
        let cells = headers.map { header -> HTML in "<th>\(header)</th>" }
        let identity: HTML = id.map { " id=\"\($0)\"" } ?? ""
        return "<div class=\"scroll\"><table\(identity)><thead><tr>\(cells)</tr></thead><tbody>\(rows)</tbody></table></div>"
    }

    static func fieldError(_ error: String?, id: String) -> HTML {
        guard let error else { return .empty }
        return "<span class=\"field-error\" id=\"error-\(id)\">\(error)</span>"
    }

    /// A notice after a change, or a form's problem, or nothing.
    static func banner(notice: String?, problem: String?) -> HTML {
        var pieces: [HTML] = []
        if let notice { pieces.append("<p class=\"notice\" id=\"notice\">\(notice)</p>") }
        if let problem { pieces.append("<p class=\"error\" id=\"error\">\(problem)</p>") }
        return HTML(joining: pieces)
    }

    // MARK: - Times

    /// A moment as the pages show it: `2026-11-29 10:00:04 UTC`.
    static func time(_ date: Date) -> String {
        String(MillisecondTime.string(date).prefix(19)).replacingOccurrences(of: "T", with: " ") + " UTC"
    }

    /// A moment to the millisecond, for a journey's timeline: `10:00:04.210`.
    static func clock(_ date: Date) -> String {
        String(MillisecondTime.string(date).dropFirst(11).prefix(12))
    }

    /// Seconds as people read them: `45 s`, `9 min 41 s`, `2 h 5 min`, `3 d 4 h`.
    static func duration(seconds: Int) -> String {
        switch seconds {
        case ..<60: return "\(max(0, seconds)) s"
        case ..<3600: return "\(seconds / 60) min" + (seconds % 60 == 0 ? "" : " \(seconds % 60) s")
        case ..<86400: return "\(seconds / 3600) h" + ((seconds % 3600) / 60 == 0 ? "" : " \((seconds % 3600) / 60) min")
        default: return "\(seconds / 86400) d" + ((seconds % 86400) / 3600 == 0 ? "" : " \((seconds % 86400) / 3600) h")
        }
    }

    /// Milliseconds as people read them: `182 ms`, `1.9 s`.
    static func milliseconds(_ ms: Int) -> String {
        ms < 1000 ? "\(ms) ms" : String(format: "%.1f s", Double(ms) / 1000)
    }

    // MARK: - The style sheet

    /// `GET /admin/style.css`: the one style sheet, readable on a laptop and a phone.
    static let styleSheet = HTTPResponse(
        status: 200, headers: [("Content-Type", "text/css; charset=utf-8"), ("Cache-Control", "max-age=3600")],
        body: Data(css.utf8))

    static let css = """
        :root { --ink: #1d2430; --muted: #5b6675; --line: #d9dee5; --accent: #0b5cad; --ok: #17663a; --bad: #a32020;
          --warn: #8a5a00; --paper: #ffffff; --wash: #f4f6f9; }
        * { box-sizing: border-box; }
        body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink); background: var(--wash); }
        a { color: var(--accent); }
        code, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 0.92em; overflow-wrap: anywhere; }
        header.top { display: flex; flex-wrap: wrap; align-items: center; gap: 0.5rem 1.25rem; padding: 0.6rem 1rem;
          background: var(--ink); color: #fff; }
        header.top a { color: #fff; text-decoration: none; }
        header.top .brand { font-weight: 700; letter-spacing: 0.02em; }
        header.top nav { display: flex; flex-wrap: wrap; gap: 0.25rem 1rem; flex: 1; }
        header.top nav a { padding: 0.15rem 0; border-bottom: 2px solid transparent; }
        header.top nav a[aria-current="page"] { border-bottom-color: #fff; }
        header.top .sign-out { display: flex; align-items: center; gap: 0.5rem; margin: 0; }
        header.top .who { color: #c9d2de; }
        button.link { background: none; border: 1px solid #8593a6; color: #fff; padding: 0.2rem 0.6rem; }
        main { max-width: 72rem; margin: 0 auto; padding: 1rem; }
        main.narrow { max-width: 26rem; padding-top: 3rem; }
        h1 { font-size: 1.5rem; margin: 0.5rem 0 1rem; overflow-wrap: anywhere; }
        h2 { font-size: 1.15rem; margin: 1.75rem 0 0.5rem; }
        section > h2:first-child, .card > h3:first-child { margin-top: 0; }
        section, .card { background: var(--paper); border: 1px solid var(--line); border-radius: 6px; padding: 0.75rem 1rem; margin: 0 0 1rem; }
        .scroll { overflow-x: auto; }
        table { border-collapse: collapse; width: 100%; }
        th, td { text-align: left; vertical-align: top; padding: 0.4rem 0.5rem; border-bottom: 1px solid var(--line); }
        th { font-weight: 600; color: var(--muted); font-size: 0.85rem; white-space: nowrap; }
        td.num { text-align: right; white-space: nowrap; }
        .muted, .hint { color: var(--muted); }
        small.hint { display: block; font-size: 0.85rem; }
        .field { margin: 0 0 0.75rem; }
        .field label { display: block; font-weight: 600; margin-bottom: 0.2rem; }
        input[type=text], input[type=password], input[type=search], select, textarea { width: 100%; max-width: 36rem; padding: 0.4rem 0.5rem;
          border: 1px solid #b8c1cc; border-radius: 4px; font: inherit; background: #fff; }
        textarea { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 0.85rem; }
        .invalid input, .invalid textarea, .invalid select { border-color: var(--bad); }
        .field-error { display: block; color: var(--bad); font-size: 0.9rem; margin-top: 0.2rem; }
        button { font: inherit; padding: 0.4rem 0.9rem; border-radius: 4px; border: 1px solid var(--accent); background: var(--accent); color: #fff; cursor: pointer; }
        button.secondary { background: #fff; color: var(--accent); }
        button.danger { background: #fff; color: var(--bad); border-color: var(--bad); }
        form.inline { display: flex; flex-wrap: wrap; gap: 0.5rem; align-items: flex-end; margin: 0.25rem 0; }
        form.inline .field { margin: 0; flex: 1 1 12rem; max-width: 36rem; }
        .notice { background: #e7f4ec; border: 1px solid #b5dcc3; padding: 0.5rem 0.75rem; border-radius: 4px; }
        .error { background: #fbeaea; border: 1px solid #eab8b8; padding: 0.5rem 0.75rem; border-radius: 4px; color: var(--bad); }
        .badge { display: inline-block; padding: 0 0.45rem; border-radius: 999px; font-size: 0.85rem; font-weight: 600; white-space: nowrap; }
        .badge.accepted, .badge.alive, .badge.answered, .badge.woke { background: #e3f2e8; color: var(--ok); }
        .badge.refused, .badge.dead, .badge.failed, .badge.missed { background: #f8e1e1; color: var(--bad); }
        .badge.emergency { background: #f8e1e1; color: var(--bad); }
        .badge.diverted { background: #e4edf9; color: var(--accent); }
        .badge.no-wake, .badge.stale, .badge.unanswered, .badge.late, .badge.canceled, .badge.pending { background: #fbf0d9; color: var(--warn); }
        .device { border-top: 1px solid var(--line); padding: 0.6rem 0; }
        .device:first-of-type { border-top: none; }
        .device dl { display: grid; grid-template-columns: max-content 1fr; gap: 0.15rem 0.75rem; margin: 0; }
        .device dt { color: var(--muted); }
        .device dd { margin: 0; overflow-wrap: anywhere; }
        .pn { margin: 0.4rem 0 0 0; padding: 0.4rem 0.6rem; background: var(--wash); border-radius: 4px; }
        .pn span { display: inline-block; max-width: 100%; margin-right: 1rem; }
        .test-result { margin-top: 0.5rem; }
        .device-actions { display: flex; flex-wrap: wrap; gap: 0.5rem; align-items: center; margin-top: 0.4rem; }
        .device-actions form.inline { margin: 0; }
        .device-actions button { padding: 0.2rem 0.6rem; font-size: 0.9rem; }
        textarea.whole-token { max-width: 48rem; overflow-wrap: anywhere; }
        ol.timeline { list-style: none; margin: 0; padding: 0 0 0 1rem; border-left: 3px solid var(--line); }
        ol.timeline li { position: relative; padding: 0.3rem 0 0.5rem 0.5rem; }
        ol.timeline li::before { content: ""; position: absolute; left: -1.45rem; top: 0.65rem; width: 0.7rem; height: 0.7rem;
          border-radius: 50%; background: var(--muted); }
        ol.timeline li.push::before { background: var(--accent); }
        ol.timeline li.branch::before { background: #6b4fbb; }
        ol.timeline li.answer::before { background: var(--ok); }
        ol.timeline li.end::before { background: var(--ink); }
        ol.timeline time { display: inline-block; min-width: 6.5rem; color: var(--muted); font-family: ui-monospace, Menlo, monospace; font-size: 0.85rem; }
        .pager { margin-top: 0.75rem; }
        @media (max-width: 40rem) {
          body { font-size: 14px; }
          main { padding: 0.6rem; }
          th, td { padding: 0.35rem 0.3rem; }
          .device dl { grid-template-columns: 1fr; }
          .device dt { margin-top: 0.3rem; }
        }

        """
}
