import CallRouting
import Foundation
import HTTPServer
import Push
import Registrar
import RouseVocabulary
import Storage

/// Calls: the latest calls, of one extension when asked, and a call's journey as a timeline
/// (arrival, each push and its outcome, the wait, each branch and its answers, the answer, the end).
extension AdminPages {
    /// Calls listed per page.
    static let callsPerPage = 50

    /// The column titles of a call list.
    static func callHeaders(showCallee: Bool) -> [String] {
        ["Started"] + (showCallee ? ["Extension"] : []) + ["Caller", "Outcome", "Answer", "Ringing", ""]
    }

    /// One call in a list, linking to its journey.
    static func callRow(_ call: CallJourney, showCallee: Bool) -> HTML {
        let callee: HTML = showCallee ? "<td><a href=\"\(extensionPath(call.callee))\">\(call.callee.description)</a></td>" : .empty
        let caller: HTML = call.callerName.map { name -> HTML in "\(name) <code>\(call.caller)</code>" } ?? "<code>\(call.caller)</code>"
        return """
            <tr><td>\(time(call.startedAt))</td>\(callee)<td>\(caller)</td>
            <td>\(outcomeBadges(call))</td>
            <td>\(answer(call))</td><td class="num">\(call.ringMilliseconds.map(milliseconds) ?? "—")</td>
            <td><a href="\(base)/calls/\(call.id.uuidString.lowercased())" class="journey-link">Journey</a></td></tr>
            """
    }

    /// The outcome as a badge, and a "missed" badge when the extension was told of a missed call.
    static func outcomeBadges(_ call: CallJourney) -> HTML {
        let missed: HTML = call.missed ? " <span class=\"badge missed\">missed</span>" : .empty
        return "<span class=\"badge \(call.outcome.rawValue)\">\(call.outcome.rawValue)</span>\(missed)"
    }

    /// What the caller got, in words: "200, answered by iPhone (apns)", "480 no device woke in time".
    static func answer(_ call: CallJourney) -> String {
        guard let status = call.finalStatus else { return call.outcome == .ringing ? "still ringing" : "—" }
        if let answeredBy = call.answeredBy, call.outcome == .answered { return "\(status), answered by \(answeredBy)" }
        return "\(status) \(call.reason ?? "")"
    }

    /// `GET /admin/calls?extension=&before=`: the latest calls, 50 at a time.
    func callsPage(_ page: SignedIn) async throws -> HTTPResponse {
        let text = page.query("extension").trimmingCharacters(in: .whitespaces)
        var form = FormState(values: ["extension": text])
        var aor: AddressOfRecord? = nil
        if !text.isEmpty {
            if let parsed = AddressOfRecord(parsing: text) {
                aor = parsed
            } else {
                form.errors["extension"] = "an extension's address is number@domain"
            }
        }
        let before = MillisecondTime.date(page.query("before"))
        var calls: [CallJourney] = []
        var next: Date? = nil
        if form.errors.isEmpty {
            (calls, next) = try await reads.calls(of: aor, limit: Self.callsPerPage, before: before, page.store)
        }
        let rows = calls.map { Self.callRow($0, showCallee: true) }
        let older: HTML = next.map { cursor -> HTML in
            let query = "?extension=\(HTML.urlComponent(text))&before=\(HTML.urlComponent(MillisecondTime.string(cursor)))"
            return "<p class=\"pager\"><a href=\"\(Self.base)/calls\(query)\" id=\"older-calls\">Older calls →</a></p>"
        } ?? .empty
        let body: HTML = """
            <h1>Calls</h1>
            <section id="calls">
            \(keptFor)
            <form method="get" action="\(Self.base)/calls" class="inline" id="filter-calls">
            \(Self.field("extension", label: "Extension", form: form, id: "call-extension", extra: " placeholder=\"1001@example.com\""))
            <button type="submit" class="secondary" id="filter-button">Show</button>
            </form>
            \(Self.table(Self.callHeaders(showCallee: true), rows, empty: aor == nil ? "No call yet." : "No call for this extension.", id: "call-list"))
            \(older)
            </section>
            """
        return Self.html(form.errors.isEmpty ? 200 : 400, Self.layout(page.session, title: "Calls", section: .calls, body: body))
    }

    /// `GET /admin/calls/{id}`: the call's summary and its journey as a timeline.
    func journeyPage(_ page: SignedIn) async throws -> HTTPResponse {
        let rest = page.parameter("id")
        guard let id = UUID(uuidString: rest), let call = try await reads.journey(id: id, page.store) else {
            return Self.notFoundPage(page, message: "There is no such call.")
        }
        let summary: HTML = """
            <div class="device"><dl>
            <dt>Extension</dt><dd><a href="\(Self.extensionPath(call.callee))">\(call.callee.description)</a></dd>
            <dt>Caller</dt><dd>\(call.callerName.map { "\($0) " } ?? "")<code>\(call.caller)</code></dd>
            <dt>Came in</dt><dd>\(call.transport.uppercased()) from <code>\(call.source)</code>, on instance <code>\(call.instanceID)</code></dd>
            <dt>Started</dt><dd>\(Self.time(call.startedAt))</dd>
            <dt>Outcome</dt><dd>\(Self.outcomeBadges(call)) \(Self.answer(call))</dd>
            <dt>Ringing</dt><dd>\(call.ringMilliseconds.map(Self.milliseconds) ?? "—")</dd>
            <dt>Call-ID</dt><dd><code>\(call.callID)</code></dd>
            </dl></div>
            """
        let body: HTML = """
            <h1>Call to \(call.callee.description)</h1>
            <section id="call-summary">\(summary)</section>
            <section id="journey">
            <h2>Journey</h2>
            <ol class="timeline">\(Self.timeline(call))</ol>
            </section>
            """
        return Self.html(200, Self.layout(page.session, title: "Call journey", section: .calls, body: body))
    }

    /// The journey's moments in time order: its events, each push with its outcome and wake, each
    /// branch with the answers it got and why it was cancelled.
    static func timeline(_ call: CallJourney) -> [HTML] {
        var moments: [(at: Date, kind: String, text: HTML)] = call.events.map { event -> (at: Date, kind: String, text: HTML) in
            (event.at, eventKind(event.text), HTML(text: event.text))
        }
        for push in call.pushes {
            var line: HTML = "\(push.line)"
            if push.outcomeKind == .accepted, push.wake == .notInTime { line = "\(push.line) <span class=\"badge no-wake\">no re-register in time</span>" }
            moments.append((push.sentAt, "push", line))
        }
        for branch in call.branches {
            let late: HTML = branch.isLateFork ? " (late fork: the app came back while the call rang)" : ""
            moments.append((branch.startedAt, "branch", "rang \(branch.device) at <code>\(branch.target)</code> over \(branch.transport)\(late)"))
            for response in branch.responses {
                moments.append((response.at, response.status >= 200 && response.status < 300 ? "answer" : "branch", "\(branch.device) answered \(response.status) \(response.reason)"))
            }
            if let reason = branch.canceledBecause {
                moments.append((branch.endedAt ?? branch.startedAt, "branch", "cancelled on \(branch.device): \(reason)"))
            }
        }
        let ordered = moments.enumerated().sorted { ($0.element.at, $0.offset) < ($1.element.at, $1.offset) }.map(\.element)
        return ordered.map { moment -> HTML in
            "<li class=\"\(moment.kind)\"><time>\(clock(moment.at))</time> \(moment.text)</li>"
        }
    }

    /// The timeline's mark for an event: its arrival, the wait, the answer or the end.
    static func eventKind(_ text: String) -> String {
        if text.hasPrefix("INVITE from") { return "arrival" }
        if text.hasPrefix("answered by") { return "answer" }
        if text.hasPrefix("call ") || text.contains("hung up") { return "end" }
        return "wait"
    }
}
