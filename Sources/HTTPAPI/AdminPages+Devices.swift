import Foundation
import Push
import Registrar
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

    /// `POST /admin/extensions/{address}/devices/{id}/test` and `…/token`.
    func deviceAction(_ page: SignedIn, address: String, id: String, action: String, _ respond: HTTPResponder) {
        let found: (AddressOfRecord, AdminReads.Device)
        do {
            guard let aor = try? DirectoryError.parseAddress(address) else {
                respond(Self.notFoundPage(page, message: "There is no extension \(address)."))
                return
            }
            guard let device = try reads.extensionDetail(aor).device(id: id) else {
                respond(Self.notFoundPage(page, message: "\(aor) has no such device now: it may have unregistered or expired. Go back and reload its page."))
                return
            }
            found = (aor, device)
        } catch {
            respond(Self.answer(page) { _ in throw error })
            return
        }
        let (aor, device) = found
        let target = "\(aor) device \(device.id) (\(device.name))"
        if action == "token" {
            log(.tokensShown(admin: page.session.adminName, target: target))
            respond(Self.tokenPage(page, aor: aor, device: device))
            return
        }
        guard let channel = device.ringChannel else {
            respond(Self.answer(page) { try extensionPage($0, address: address, problem: "No test push for this device: \(device.untestableReason ?? "").", status: 409) })
            return
        }
        let interval = reads.testPushInterval
        let resultID = "device-result-\(device.id)"
        Task {
            let answer: AdminReads.TestPushAnswer
            do {
                answer = try await reads.sendTestPush(to: device, of: aor)
            } catch {
                respond(Self.unavailablePage(page.session))
                return
            }
            log(.testPush(admin: page.session.adminName, target: target, token: PushRecord.shorten(channel.token), outcome: answer.word))
            queue.async {
                switch answer {
                case .sent(let outcome, let appID):
                    let sent = Self.sentLine(channel, appID: appID)
                    respond(Self.answer(page) { try extensionPage($0, address: address, deviceResults: [device.id: Self.testResult(outcome, id: resultID, sent: sent)]) })
                case .limited(let seconds):
                    let result = Self.limitedResult(retryAfterSeconds: seconds, interval: interval, id: resultID)
                    respond(Self.retryingAfter(seconds, Self.answer(page) { try extensionPage($0, address: address, status: 429, deviceResults: [device.id: result]) }))
                }
            }
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
