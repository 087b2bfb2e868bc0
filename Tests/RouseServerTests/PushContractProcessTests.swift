import CallRouting
import Foundation
import RouseTestSupport
import SIPMessage
import XCTest

/// Issue 20 item 3, "the payload as documented": real calls through `rouse serve`, and each push
/// the APNs and FCM stand-ins logged carries exactly the keys docs/app-builders.md's Keys table
/// gives its event (a key the table says "may be absent" may be missing; nothing else may). The
/// table is read from the page itself, and its JSON examples are held to it too, so the page, its
/// examples and the wire cannot drift apart.
extension CallProcessTests {
    /// The Keys table of docs/app-builders.md: for each event, the keys it must carry and those it
    /// may leave out.
    struct DocumentedKeys {
        static let events = ["call.ring", "call.canceled", "call.ended", "call.missed", "binding.refresh"]
        var required: [String: Set<String>] = [:]
        var optional: [String: Set<String>] = [:]

        /// Every key an event may carry.
        func allowed(_ event: String) -> Set<String> { required[event, default: []].union(optional[event, default: []]) }

        static func read() throws -> DocumentedKeys {
            let page = try String(
                contentsOf: DocsExamplesTests.repositoryRoot.appendingPathComponent("docs/app-builders.md"), encoding: .utf8)
            let lines = page.components(separatedBy: "\n")
            guard let section = lines.firstIndex(of: "## Keys"),
                let start = lines[section...].firstIndex(where: { $0.hasPrefix("| key | in | value |") })
            else { throw DocProblem("docs/app-builders.md has no | key | in | value | table under ## Keys") }
            var keys = DocumentedKeys()
            for line in lines[(start + 2)...].prefix(while: { $0.hasPrefix("|") }) {
                let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
                guard cells.count >= 4 else { throw DocProblem("a Keys row without three cells: \(line)") }
                let names = quoted(cells[1])
                let events = cells[2] == "every push" ? Self.events : quoted(cells[2]).filter(Self.events.contains)
                let mayBeAbsent = cells[3].contains("may be absent")
                for event in events {
                    if mayBeAbsent { keys.optional[event, default: []].formUnion(names) } else { keys.required[event, default: []].formUnion(names) }
                }
            }
            for event in Self.events where keys.required[event, default: []].isEmpty {
                throw DocProblem("the Keys table names no key for \(event)")
            }
            return keys
        }

        /// The `code` spans of a table cell.
        static func quoted(_ cell: String) -> [String] {
            cell.components(separatedBy: "`").enumerated().filter { $0.offset % 2 == 1 }.map(\.element)
        }

        /// Fails the test when `keys`, the payload of a push of `event`, is not as documented.
        func check(_ keys: Set<String>, event: String, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
            let missing = required[event, default: []].subtracting(keys)
            let undocumented = keys.subtracting(allowed(event))
            XCTAssertTrue(missing.isEmpty, "\(what) (\(event)) lacks documented keys \(missing.sorted())", file: file, line: line)
            XCTAssertTrue(undocumented.isEmpty, "\(what) (\(event)) carries keys the Keys table does not give it: \(undocumented.sorted())",
                          file: file, line: line)
        }
    }

    struct DocProblem: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    /// The contract's keys of a push as a stand-in logged it: FCM's `message.data`, or the top
    /// level of an APNs body without Apple's own `aps`.
    func contractKeys(_ request: StandInRequest) -> (event: String, keys: Set<String>, data: [String: Any]) {
        var data = pushData(request)
        data["aps"] = nil
        return (data["event"] as? String ?? "", Set(data.keys), data)
    }

    /// The JSON examples of docs/app-builders.md that are pushes carry the keys the table gives them.
    func testTheKeysTableAndTheExamplesOfTheAppBuildersPageAgree() throws {
        let keys = try DocumentedKeys.read()
        let page = try String(contentsOf: DocsExamplesTests.repositoryRoot.appendingPathComponent("docs/app-builders.md"), encoding: .utf8)
        var checked: [String: Int] = [:]
        for block in page.components(separatedBy: "```json\n").dropFirst() {
            let json = String(block.prefix { $0 != "`" }).trimmingCharacters(in: .whitespacesAndNewlines)
            guard let object = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any] else { continue }
            var data = ((object["message"] as? [String: Any])?["data"] as? [String: Any]) ?? object
            data["aps"] = nil
            guard let event = data["event"] as? String else { continue }
            checked[event, default: 0] += 1
            keys.check(Set(data.keys), event: event, "the example \(json.prefix(60))…")
        }
        for event in DocumentedKeys.events {
            XCTAssertNotNil(checked[event], "docs/app-builders.md shows no example of \(event)")
        }
    }

    /// One call answered on one Android and ended by the caller after that Android's connection
    /// closed (`call.ended`), while a second Android and an iPhone (VoIP and regular tokens) slept
    /// (`call.canceled`, `answered_elsewhere`); then a call the caller gives up on while every
    /// device sleeps (`call.canceled`, `caller_hangup`, and `call.missed`). Names come from the
    /// directory, set with `rouse extension update --name`.
    func testEveryPushOfRealCallsCarriesTheDocumentedKeys() throws {
        let keys = try DocumentedKeys.read()
        for (address, name) in [("1001@example.com", "Alice Example"), ("1002@example.com", "Bob Example")] {
            let update = try RouseProcess(
                arguments: ["extension", "update", address, "--name", name], environment: ["ROUSE_DATABASE_URL": database.conninfo])
            XCTAssertEqual(update.waitForExit(), 0, update.outputText)
        }
        try startRouse(wakeWait: 20, ringTimeout: 40)
        let tokenA = "fcm-a-" + UUID().uuidString
        let tokenB = "fcm-b-" + UUID().uuidString
        let remote = String(repeating: "5e", count: 32)
        let voip = String(repeating: "7c", count: 32)
        let pixel = try androidApp(token: tokenA)
        let tablet = try androidApp(token: tokenB)
        let iPhone = try dualTokenIPhone(remote: remote, voip: voip)
        for phone in [pixel, tablet, iPhone] { try registerAndSleep(phone) }
        let caller = try caller()

        // Call 1: every device is pushed; the Pixel wakes and answers.
        let call = try place(caller)
        let ring = try XCTUnwrap(try pushes(fcm, token: tokenA).first)
        let ringKeys = contractKeys(ring)
        XCTAssertEqual(ringKeys.event, "call.ring")
        keys.check(ringKeys.keys, event: "call.ring", "the Pixel's ring push")
        XCTAssertEqual(ringKeys.data["callee_name"] as? String, "Bob Example", "the directory's name of the callee")
        XCTAssertEqual(ringKeys.data["caller_name"] as? String, "Alice Example", "a From without a name: the calling extension's")
        XCTAssertEqual(ringKeys.data["call_id"] as? String, call.callID)
        let iPhoneRing = try XCTUnwrap(try pushes(apns, token: voip).first)
        XCTAssertEqual(iPhoneRing.headers["apns-push-type"], "voip")
        keys.check(contractKeys(iPhoneRing).keys, event: "call.ring", "the iPhone's VoIP ring push")
        _ = try pushes(fcm, token: tokenB)

        try wake(pixel)
        let invite = try pixel.waitForRequest(.invite)
        let pixelDialog = try pixel.answer(invite)
        let ok = try call.waitForResponse(status: 200)
        let callerDialog = try call.ack(ok)
        _ = try pixelDialog.waitForAck()

        // The sleepers are told the call was answered elsewhere: FCM data, an APNs background push
        // to the iPhone's regular token (never its VoIP token).
        let tabletPushes = try pushes(fcm, token: tokenB, count: 2)
        let tabletCancel = contractKeys(try XCTUnwrap(tabletPushes.last))
        XCTAssertEqual(tabletCancel.event, "call.canceled")
        XCTAssertEqual(tabletCancel.data["reason"] as? String, "answered_elsewhere")
        keys.check(tabletCancel.keys, event: "call.canceled", "the tablet's cancel push")
        let iPhoneCancel = try XCTUnwrap(try pushes(apns, token: remote).first)
        XCTAssertEqual(iPhoneCancel.headers["apns-push-type"], "background")
        XCTAssertEqual(contractKeys(iPhoneCancel).data["reason"] as? String, "answered_elsewhere")
        keys.check(contractKeys(iPhoneCancel).keys, event: "call.canceled", "the iPhone's cancel push")
        XCTAssertEqual(try apns.requests().filter { $0.path.hasSuffix(voip) }.count, 1, "one VoIP push: the ring")

        // The Pixel's app is killed (its connection closes), then the caller hangs up: the BYE
        // cannot reach the Pixel, so its call ends by push.
        pixel.goQuiet()
        let credentials = call.invite.headers.lines(.proxyAuthorization).map { ("Proxy-Authorization", $0) }
        let bye = try callerDialog.sendRequest(.bye, headers: credentials)
        let byeAnswer = try caller.waitForFinalResponse(to: bye, timeout: .seconds(40))
        XCTAssertTrue([430, 408, 503].contains(byeAnswer.statusCode), "the BYE reached nobody: \(byeAnswer.statusCode)")
        let pixelPushes = try pushes(fcm, token: tokenA, count: 2)
        let ended = contractKeys(try XCTUnwrap(pixelPushes.last))
        XCTAssertEqual(ended.event, "call.ended")
        XCTAssertEqual(ended.data["reason"] as? String, "caller_hangup")
        XCTAssertEqual(ended.data["uuid"] as? String, ringKeys.data["uuid"] as? String)
        keys.check(ended.keys, event: "call.ended", "the Pixel's call.ended push")
        XCTAssertEqual(try pushes(fcm, token: tokenB, count: 2).count, 2, "the tablet is not told again")
        let told = try journey(callID: call.callID, outcome: .answered) { $0.events.contains { $0.text.contains("call.ended push") } }
        XCTAssertTrue(told.events.contains { $0.text.hasPrefix("the BYE could not reach RouseTestApp/1 (Android") && $0.text.hasSuffix("call.ended push accepted") },
                      "\(told.events.map(\.text))")
        XCTAssertNotNil(told.endedAt, "the hang-up is kept in the rewritten journey")

        // Call 2: nobody wakes, the caller gives up.
        let missedCall = try place(caller)
        _ = try pushes(fcm, token: tokenB, count: 3)
        _ = try pushes(apns, token: voip, count: 2)
        XCTAssertEqual(try missedCall.cancel().statusCode, 200)
        XCTAssertEqual(try missedCall.waitForFinal().statusCode, 487)
        let tabletAfter = try pushes(fcm, token: tokenB, count: 5).suffix(2).map(contractKeys)
        XCTAssertEqual(tabletAfter.map(\.event), ["call.canceled", "call.missed"])
        XCTAssertEqual(tabletAfter.map { $0.data["reason"] as? String }, ["caller_hangup", "caller_hangup"])
        for push in tabletAfter { keys.check(push.keys, event: push.event, "the tablet's \(push.event)") }
        XCTAssertEqual(tabletAfter.last?.data["caller_name"] as? String, "Alice Example")
        let iPhoneAfter = try pushes(apns, token: remote, count: 3).suffix(2)
        XCTAssertEqual(iPhoneAfter.map { $0.headers["apns-push-type"] ?? "" }, ["background", "alert"])
        for push in iPhoneAfter.map(contractKeys) { keys.check(push.keys, event: push.event, "the iPhone's \(push.event)") }
    }
}
