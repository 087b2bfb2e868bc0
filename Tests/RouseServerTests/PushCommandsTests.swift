import Foundation
import RouseTestSupport
import Storage
import XCTest

/// `rouse push-app …` and `rouse push test …` against the APNs and FCM stand-ins: an accepted, a
/// dead, a wrong-environment and an unreachable case, and keys never shown.
final class PushCommandsTests: XCTestCase {
    func run(_ arguments: [String], _ environment: [String: String]) throws -> (Int32?, String) {
        let process = try RouseProcess(arguments: arguments, environment: environment)
        let status = process.waitForExit(timeout: 60)
        return (status, process.outputText)
    }

    func testPushAppAddThenTestPushGivesEachOutcomeInWords() throws {
        let database = try TestDatabase()
        defer { database.drop() }
        let key = try PushStandIn.makeAPNsKey()
        defer { key.remove() }
        let production = try PushStandIn.apns(keys: ["ABC123DEFG": key.keyPath], teamID: "DEF123GHIJ", topics: ["com.example.app"])
        let sandbox = try PushStandIn.apns(keys: ["ABC123DEFG": key.keyPath], teamID: "DEF123GHIJ", topics: ["com.example.app"], environment: .sandbox)
        let account = try PushStandIn.makeFCMServiceAccount()
        defer { account.remove() }
        let accountPath = account.path
        let fcm = try PushStandIn.fcm(serviceAccountPath: accountPath)
        let caFile = production.stateDirectory + "/cas.pem"
        try [production.caFile, sandbox.caFile, fcm.caFile].map { try String(contentsOfFile: $0, encoding: .utf8) }.joined()
            .write(toFile: caFile, atomically: true, encoding: .utf8)
        let environment = [
            "ROUSE_DATABASE_URL": database.conninfo, "ROUSE_APNS_PRODUCTION_URL": production.baseURL,
            "ROUSE_APNS_SANDBOX_URL": sandbox.baseURL, "ROUSE_FCM_URL": fcm.baseURL, "ROUSE_PUSH_CA_FILE": caFile,
            "ROUSE_PUSH_TIMEOUT": "3",
        ]
        let (migrated, migrateOutput) = try run(["migrate"], environment)
        XCTAssertEqual(migrated, 0, migrateOutput)

        let (added, addOutput) = try run(
            ["push-app", "add", "apns", "--team-id", "DEF123GHIJ", "--key-id", "ABC123DEFG", "--topic", "com.example.app",
             "--key-file", key.keyPath, "--environment", "production"], environment)
        XCTAssertEqual(added, 0, addOutput)
        XCTAssertTrue(addOutput.contains("added push app #1"), addOutput)
        XCTAssertTrue(addOutput.contains("VoIP topic com.example.app.voip derived from bundle id com.example.app"), addOutput)
        let (badKey, badKeyOutput) = try run(
            ["push-app", "add", "apns", "--team-id", "DEF123GHIJ", "--key-id", "ABC123DEFG", "--topic", "com.example.other",
             "--key-file", accountPath, "--param", "x"], environment)
        XCTAssertEqual(badKey, 1, badKeyOutput)
        XCTAssertTrue(badKeyOutput.contains("key:"), badKeyOutput)
        XCTAssertFalse(badKeyOutput.contains("PRIVATE KEY"), badKeyOutput)
        let (fcmAdded, fcmOutput) = try run(["push-app", "add", "fcm", "--service-account", fcm.serviceAccountFile!], environment)
        XCTAssertEqual(fcmAdded, 0, fcmOutput)
        XCTAssertTrue(fcmOutput.contains("added push app #3") || fcmOutput.contains("added push app #2"), fcmOutput)

        let (listed, list) = try run(["push-app", "list"], environment)
        XCTAssertEqual(listed, 0, list)
        XCTAssertTrue(list.contains("#1  apns  team DEF123GHIJ key ABC123DEFG topic com.example.app  default iPhone app  production only"), list)
        XCTAssertTrue(list.contains("fcm  project rouse-test"), list)
        XCTAssertFalse(list.contains("PRIVATE KEY"), list)
        XCTAssertFalse(list.contains(key.privateKeyPEM.split(separator: "\n")[1]), list)

        let good = String(repeating: "ab", count: 32)
        let (accepted, acceptedOutput) = try run(["push", "test", "--app", "1", "--token", good], environment)
        XCTAssertEqual(accepted, 0, acceptedOutput)
        XCTAssertTrue(acceptedOutput.contains("test push through app #1: accepted in"), acceptedOutput)
        let sent = try XCTUnwrap(try production.requests().last)
        XCTAssertEqual(sent.jsonBody?["test"]?.stringValue, "true")
        XCTAssertEqual(sent.headers["apns-push-type"], "voip")
        // The same token again at once: spaced by test_push_interval, nothing sent.
        let (spaced, spacedOutput) = try run(["push", "test", "--app", "1", "--token", good], environment)
        XCTAssertEqual(spaced, 1, spacedOutput)
        XCTAssertTrue(
            spacedOutput.contains("rouse: a test push went to this token less than 30 s ago (test_push_interval); try again in "), spacedOutput)
        XCTAssertEqual(try production.requests().count, 1)

        let deadToken = "dead" + String(repeating: "0", count: 60)
        let (dead, deadOutput) = try run(["push", "test", "--app", "1", "--token", deadToken], environment)
        XCTAssertEqual(dead, 1, deadOutput)
        XCTAssertTrue(deadOutput.contains("refused: 410 Unregistered"), deadOutput)
        XCTAssertTrue(deadOutput.contains("token marked dead"), deadOutput)

        let developmentToken = "5a0d" + String(repeating: "1", count: 60)
        let (wrong, wrongOutput) = try run(["push", "test", "--app", "1", "--token", developmentToken], environment)
        XCTAssertEqual(wrong, 1, wrongOutput)
        XCTAssertTrue(wrongOutput.contains("refused: 400 BadDeviceToken: the token belongs to a development build; this app is set to production"), wrongOutput)

        var unreachableEnvironment = environment
        unreachableEnvironment["ROUSE_APNS_PRODUCTION_URL"] = "https://127.0.0.1:1"
        let other = String(repeating: "ac", count: 32)
        let (unreachable, unreachableOutput) = try run(["push", "test", "--app", "1", "--token", other], unreachableEnvironment)
        XCTAssertEqual(unreachable, 1, unreachableOutput)
        XCTAssertTrue(unreachableOutput.contains("failed (connect)"), unreachableOutput)
        // It never reached a phone, so it does not count: the next test of that token goes at once.
        let (retried, retriedOutput) = try run(["push", "test", "--app", "1", "--token", other, "--json"], unreachableEnvironment)
        XCTAssertEqual(retried, 1, retriedOutput)
        let retriedAnswer = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(retriedOutput.utf8)) as? [String: Any])
        XCTAssertEqual(retriedAnswer["outcome"] as? String, "failed")
        XCTAssertEqual(retriedAnswer["appId"] as? Int, 1)

        let fcmID = fcmOutput.contains("#3") ? "3" : "2"
        let (fcmSent, fcmSentOutput) = try run(["push", "test", "--app", fcmID, "--token", "android-token-1", "--json"], environment)
        XCTAssertEqual(fcmSent, 0, fcmSentOutput)
        let fcmAnswer = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(fcmSentOutput.utf8)) as? [String: Any], fcmSentOutput)
        XCTAssertEqual(fcmAnswer["outcome"] as? String, "accepted")
        XCTAssertEqual(fcmAnswer["status"] as? Int, 200)
        XCTAssertEqual(fcmAnswer["deadToken"] as? Bool, false)
        XCTAssertTrue((fcmAnswer["description"] as? String)?.hasPrefix("accepted in") == true, fcmSentOutput)
        let (fcmDead, fcmDeadOutput) = try run(["push", "test", "--app", fcmID, "--token", "unregistered-1"], environment)
        XCTAssertEqual(fcmDead, 1, fcmDeadOutput)
        XCTAssertTrue(fcmDeadOutput.contains("refused: 404 UNREGISTERED"), fcmDeadOutput)

        let connection = try database.connect()
        let deadRows = try connection.query("SELECT family, token, reason FROM push_dead_tokens ORDER BY family")
        XCTAssertEqual(deadRows.rows, [["apns", deadToken, "Unregistered"], ["fcm", "unregistered-1", "UNREGISTERED"]])
        let outcomes = try connection.query("SELECT outcome FROM push_records ORDER BY id").rows.compactMap { $0[0] }
        XCTAssertEqual(outcomes, ["accepted", "refused", "refused", "failed", "failed", "accepted", "refused"])

        // --json: the list as the admin API gives it, never a key.
        let (listedJSON, listJSON) = try run(["push-app", "list", "--json"], environment)
        XCTAssertEqual(listedJSON, 0, listJSON)
        let apps = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(listJSON.utf8)) as? [String: Any], listJSON)
        let items = try XCTUnwrap(apps["items"] as? [[String: Any]])
        XCTAssertEqual(apps["total"] as? Int, items.count)
        XCTAssertEqual(items.first?["id"] as? Int, 1)
        XCTAssertEqual(items.first?["kind"] as? String, "apns")
        XCTAssertEqual(items.first?["environment"] as? String, "production")
        XCTAssertEqual(items.first?["details"] as? String, "team DEF123GHIJ key ABC123DEFG topic com.example.app")
        XCTAssertFalse(listJSON.contains("PRIVATE KEY"), listJSON)

        let (removed, removedOutput) = try run(["push-app", "remove", "1"], environment)
        XCTAssertEqual(removed, 0, removedOutput)
        let (_, afterRemove) = try run(["push-app", "list"], environment)
        XCTAssertFalse(afterRemove.contains("#1  apns"), afterRemove)
        let (missing, missingOutput) = try run(["push", "test", "--app", "1", "--token", good], environment)
        XCTAssertEqual(missing, 1, missingOutput)
        XCTAssertTrue(missingOutput.contains("there is no push app #1"), missingOutput)
    }

    func testPushAppAddWithJSONPrintsTheNewAppWithItsID() throws {
        let database = try TestDatabase()
        defer { database.drop() }
        let environment = ["ROUSE_DATABASE_URL": database.conninfo]
        XCTAssertEqual(try run(["migrate"], environment).0, 0)
        let key = try PushStandIn.makeAPNsKey()
        defer { key.remove() }
        let (added, output) = try run(
            ["push-app", "add", "apns", "--team-id", "DEF123GHIJ", "--key-id", "ABC123DEFG", "--topic", "com.example.app",
             "--key-file", key.keyPath, "--param", "DEF123GHIJ.com.example.app.voip", "--json"], environment)
        XCTAssertEqual(added, 0, output)
        XCTAssertEqual(output.filter { $0 == "\n" }.count, 1, "one line: \(output)")
        let app = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any], output)
        XCTAssertEqual(app["id"] as? Int, 1)
        XCTAssertEqual(app["kind"] as? String, "apns")
        XCTAssertEqual(app["param"] as? String, "DEF123GHIJ.com.example.app.voip")
        XCTAssertTrue(app["environment"] is NSNull)
        XCTAssertEqual(app["details"] as? String, "team DEF123GHIJ key ABC123DEFG topic com.example.app")
        XCTAssertEqual(
            app["notes"] as? [String],
            ["VoIP topic com.example.app.voip derived from bundle id com.example.app (ring pushes go there; cancel pushes to com.example.app)"])
        XCTAssertFalse(output.contains("PRIVATE KEY") || output.contains(key.privateKeyPEM.split(separator: "\n")[1]), output)

        let account = try PushStandIn.makeFCMServiceAccount()
        defer { account.remove() }
        let (fcmAdded, fcmOutput) = try run(["push-app", "add", "fcm", "--service-account", account.path, "--json"], environment)
        XCTAssertEqual(fcmAdded, 0, fcmOutput)
        let fcmApp = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(fcmOutput.utf8)) as? [String: Any], fcmOutput)
        XCTAssertEqual(fcmApp["id"] as? Int, 2)
        XCTAssertEqual(fcmApp["kind"] as? String, "fcm")
        XCTAssertTrue((fcmApp["details"] as? String)?.hasPrefix("project rouse-test as ") == true, fcmOutput)
        XCTAssertFalse(fcmOutput.contains("PRIVATE KEY"), fcmOutput)
        // A refusal stays one line on standard error.
        let (refused, refusedOutput) = try run(["push-app", "add", "fcm", "--json"], environment)
        XCTAssertEqual(refused, 1)
        XCTAssertEqual(refusedOutput, "rouse: --service-account is required\n")
    }
}
