import Foundation
import Push
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import Storage
import XCTest

/// Issue 20 item 5 through `rouse serve` and the command line: with `push_proxy` set, a call's web
/// push reaches the stand-in through a real CONNECT proxy (tinyproxy, with Basic authentication)
/// whose log shows the tunnel; the admin API's device test push reaches a web push subscription,
/// and so does `rouse push test --webpush`; the proxy's password shows nowhere.
extension WebPushProcessTests {
    func testACallsWebPushAndTheTestPushesGoThroughThePushProxy() throws {
        let password = "tinyproxy-pw-7"
        let proxy = try TestHTTPProxy(user: "rouse", password: password)
        defer { proxy.stop() }
        try startRouse(wakeWait: 2, environment: ["ROUSE_PUSH_PROXY": proxy.url, "ROUSE_TEST_PUSH_INTERVAL": "10ms"])
        let subscription = try postedSubscription()

        // A call's ring push, through the proxy.
        let caller = try caller()
        let call = try place(caller)
        let ring = try XCTUnwrap(try pushes(to: subscription).first)
        XCTAssertEqual(ring.verdictStatus, 201, ring.verdictDetail ?? "")
        XCTAssertEqual(ring.jsonPlaintext?["call_id"]?.stringValue, call.callID)
        let target = "127.0.0.1:\(webPush.port)"
        XCTAssertTrue(proxy.waitForConnects(to: target).contains(target), "the push went through the proxy: \(proxy.log())")
        XCTAssertEqual(try call.waitForResponse(timeout: .seconds(15)) { $0.statusCode >= 300 }.statusCode, 480)

        // The admin API's Test push of the browser (its posted subscription).
        try PostgresAdmins.add(name: "ops", password: "admin-pw-1", on: try database.connect())
        let basic = [("Authorization", "Basic " + Data("ops:admin-pw-1".utf8).base64EncodedString())]
        let detail = try http().send("GET", "/api/v1/admin/extensions/1002@example.com", headers: basic)
        XCTAssertEqual(detail.status, 200)
        let deviceID = try XCTUnwrap((detail.json["postedTokens"] as? [[String: Any]])?.first?["id"] as? String, "\(detail.json)")
        let isTest: (StandInRequest) -> Bool = { $0.jsonPlaintext?["test"]?.stringValue == "true" }
        let tested = try http().send("POST", "/api/v1/admin/extensions/1002@example.com/devices/\(deviceID)/test", headers: basic)
        XCTAssertEqual(tested.status, 200, String(decoding: tested.body, as: UTF8.self))
        XCTAssertEqual(tested.json["outcome"] as? String, "accepted", "\(tested.json)")
        XCTAssertEqual(tested.json["provider"] as? String, "webpush")
        let test = try XCTUnwrap(try pushes(to: subscription, where: isTest).first)
        XCTAssertEqual(test.jsonPlaintext?["event"]?.stringValue, "call.ring")
        XCTAssertEqual(test.jsonPlaintext?["caller_name"]?.stringValue, "Rouse test push")

        // The command line's test push to the same subscription, through the same proxy.
        let connectsBefore = proxy.connects().filter { $0 == target }.count
        let command = try RouseProcess(arguments: ["push", "test", "--webpush", subscription.endpoint], environment: [
            "ROUSE_DATABASE_URL": database.conninfo, "ROUSE_PUSH_CA_FILE": webPush.caFile, "ROUSE_PUSH_TIMEOUT": "3",
            "ROUSE_WEBPUSH_ALLOWED_HOSTS": "127.0.0.1", "ROUSE_PUSH_PROXY": proxy.url, "ROUSE_TEST_PUSH_INTERVAL": "10ms",
        ])
        XCTAssertEqual(command.waitForExit(timeout: 60), 0, command.outputText)
        XCTAssertTrue(command.outputText.contains("test push through web push: accepted"), command.outputText)
        let fromCommand = try XCTUnwrap(try pushes(to: subscription, count: 2, where: isTest).last, "encrypted to the posted keys")
        XCTAssertEqual(fromCommand.vapidKey, try vapidKey(), "signed with the deployment's VAPID key")
        XCTAssertGreaterThan(proxy.waitForConnects(to: target, count: connectsBefore + 1).filter { $0 == target }.count, connectsBefore)
        let record = try XCTUnwrap(try PostgresPushStores.recent(on: try database.connect(), limit: 5).first)
        XCTAssertEqual(record.provider, .webpush)
        XCTAssertEqual(record.outcome, "accepted")

        let output = try XCTUnwrap(rouse).outputText + command.outputText
        XCTAssertFalse(output.contains(password), "the proxy's password is never logged")
        let checked = try RouseProcess(arguments: ["check-config"], environment: ["ROUSE_DATABASE_URL": database.conninfo, "ROUSE_PUSH_PROXY": proxy.url])
        XCTAssertEqual(checked.waitForExit(timeout: 30), 0, checked.outputText)
        XCTAssertTrue(checked.outputText.contains("push_proxy: http://rouse:•••@127.0.0.1:\(proxy.port)"), checked.outputText)
        XCTAssertFalse(checked.outputText.contains(password), checked.outputText)
    }

    func testAPushProxyValueWithoutAPortIsRefusedWithoutQuotingIt() throws {
        let checked = try RouseProcess(
            arguments: ["check-config"], environment: ["ROUSE_DATABASE_URL": database.conninfo, "ROUSE_PUSH_PROXY": "http://ops:hunter22@proxy.example.com"])
        XCTAssertEqual(checked.waitForExit(timeout: 30), 1, checked.outputText)
        XCTAssertTrue(checked.outputText.contains("push_proxy: give the proxy's port (http://proxy.example.com:3128)"), checked.outputText)
        XCTAssertFalse(checked.outputText.contains("hunter22"), checked.outputText)
    }
}
