import Foundation
import HTTPServer
import Push
import Registrar
import RouseLog
import RouseVocabulary
import Storage

/// An extension's devices (registered bindings and posted tokens): the Test push button, which
/// rings the device exactly as a call would, marked as a test, and shows the provider's answer
/// beside it; and Show token, the one page that holds a device's whole token.
extension AdminPages {
    /// A device's Test push and Show token buttons (each a CSRF form), or why it has no test push.
    static func deviceActions(_ device: AdminReads.Device, path: String, page: SignedIn) -> HTML {
        let csrf = csrfField(page.session)
        let target = "\(path)/devices/\(device.id)"
        let test: HTML
        if let reason = device.untestableReason {
            test = "<span class=\"muted\" id=\"no-test-\(device.id)\">No test push: \(reason).</span>"
        } else {
            test = """
                <form method="post" action="\(target)/test" class="inline">\(csrf)
                <button type="submit" class="secondary" id="test-device-\(device.id)">Test push</button></form>
                """
        }
        let show: HTML = device.channels.isEmpty
            ? .empty
            : """
                <form method="post" action="\(target)/token" class="inline">\(csrf)
                <button type="submit" class="secondary" id="show-token-\(device.id)">Show token</button></form>
                """
        return "<div class=\"device-actions\">\(test)\(show)</div>"
    }

    /// A token's state as a badge: dead (a provider said so), stale (the stale-device rule: not
    /// pushed, with its last sign of life and its unanswered pushes), or alive.
    static func tokenState(_ channel: PushChannel, detail: AdminReads.ExtensionDetail, dead: HTML, alive: HTML) -> HTML {
        if detail.isDead(channel) { return "<span class=\"badge dead\">\(dead)</span>" }
        if let mark = detail.staleMarks[channel.tokenID], mark.staleFrom <= detail.now {
            return """
                <span class="badge stale" title="not pushed until it registers or posts its token again">stale</span> \
                <span class="muted stale-since">last sign of life \(time(mark.lastSignOfLife)), then \(String(mark.unansweredPushes)) unanswered ring pushes: not pushed until it registers or posts its token again</span>
                """
        }
        return "<span class=\"badge alive\">\(alive)</span>"
    }

    /// How far back the lists of pushes and calls go (`history_retention`).
    var keptFor: HTML {
        let days = reads.historyRetention / 86400
        let span = days >= 1 && days == days.rounded() ? "\(Int(days)) days" : Self.duration(seconds: Int(reads.historyRetention))
        return "<p class=\"muted history-kept\">Pushes and calls are kept for \(span) (history_retention); older ones are deleted.</p>"
    }

    /// The extension and device a device action names; throws the 404 page when there is none.
    private func device(_ page: SignedIn) async throws -> (AddressOfRecord, AdminReads.Device) {
        let address = page.parameter("address")
        guard let aor = try? DirectoryError.parseAddress(address) else {
            throw HTTPError(Self.notFoundPage(page, message: "There is no extension \(address)."))
        }
        guard let device = try await reads.extensionDetail(aor, page.store).device(id: page.parameter("id")) else {
            let message = "\(aor) has no such device now: it may have unregistered or expired. Go back and reload its page."
            throw HTTPError(Self.notFoundPage(page, message: message))
        }
        return (aor, device)
    }

    /// `POST /admin/extensions/{address}/devices/{id}/token`.
    @Sendable func showToken(_ page: SignedIn) async throws -> HTTPResponse {
        let (aor, device) = try await device(page)
        logger.tokensShown(admin: page.session.adminName, target: "\(aor) device \(device.id) (\(device.name))")
        return Self.tokenPage(page, aor: aor, device: device)
    }

    /// `POST /admin/extensions/{address}/devices/{id}/test`.
    @Sendable func testDevice(_ page: SignedIn) async throws -> HTTPResponse {
        let (aor, device) = try await device(page)
        let address = page.parameter("address")
        guard let channel = device.ringChannel else {
            return try await extensionPage(page, address: address, problem: "No test push for this device: \(device.untestableReason ?? "").", status: 409)
        }
        let resultID = "device-result-\(device.id)"
        let answer = try await reads.sendTestPush(to: device, of: aor, page.store)
        let target = "\(aor) device \(device.id) (\(device.name))"
        logger.testPush(admin: page.session.adminName, target: target, token: PushRecord.shorten(channel.token), outcome: answer.word)
        let after = page.renewed()
        switch answer {
        case .sent(let outcome, let appID):
            let sent = Self.sentLine(channel, appID: appID)
            return try await extensionPage(after, address: address, deviceResults: [device.id: Self.testResult(outcome, id: resultID, sent: sent)])
        case .limited(let seconds):
            let result = Self.limitedResult(retryAfterSeconds: seconds, interval: reads.testPushInterval, id: resultID)
            return Self.retryingAfter(seconds, try await extensionPage(after, address: address, status: 429, deviceResults: [device.id: result]))
        }
    }

    /// Where a device's test push went, in words.
    static func sentLine(_ channel: PushChannel, appID: Int64?) -> HTML {
        let host: HTML
        switch channel.provider {
        case .apns: host = "Apple's production host"
        case .apnsSandbox: host = "Apple's sandbox host"
        case .fcm: host = "Firebase Cloud Messaging"
        case .webpush: host = "the browser's push service"
        }
        let through: HTML = appID.map { "through push app #\($0)" } ?? (channel.family == .webpush ? "with Rouse's VAPID key" : "")
        return "<p class=\"muted\">Sent as a call's ring push (marked test: the app wakes, nothing rings) to \(host) \(through).</p>"
    }

    /// The page with a device's whole tokens, each in a read-only box to copy from. Sent, like
    /// every page, with `Cache-Control: no-store`.
    static func tokenPage(_ page: SignedIn, aor: AddressOfRecord, device: AdminReads.Device) -> HTTPResponse {
        let path = extensionPath(aor)
        let boxes = device.channels.enumerated().map { index, channel -> HTML in
            let param: HTML = channel.param.map { "pn-param <code>\($0)</code>" } ?? "no pn-param (the default app)"
            return """
                <div class="field">
                <label for="whole-token-\(index)">pn-provider <code>\(channel.provider.rawValue)</code> · \(channel.kind.rawValue) · \(param)</label>
                <textarea id="whole-token-\(index)" class="whole-token" rows="3" readonly spellcheck="false" autocomplete="off">\(channel.token)</textarea>
                </div>
                """
        }
        let body: HTML = """
            <h1>Token of \(device.name)</h1>
            <p><a href="\(path)" id="back-to-extension">\(aor.description)</a></p>
            <section id="whole-tokens">
            \(boxes.isEmpty ? "<p class=\"muted\">This device registered no push token: a call rings it over SIP.</p>" : HTML(joining: boxes))
            <small class="hint">Select a token and copy it, for the app's builder or a Test in Settings → Mobile push. Whoever has a token can push to that phone: keep it to where it is needed. This page is not kept by the browser, and Rouse logs who asked for it, never the token.</small>
            </section>
            """
        return html(200, layout(page.session, title: "Token of \(device.name)", section: .extensions, body: body))
    }
}
