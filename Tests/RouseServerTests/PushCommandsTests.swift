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
        let production = try PushStandIn.apns(keys: ["ABC123DEFG": key.keyPath], teamID: "DEF123GHIJ", topics: ["com.example.app"])
        let sandbox = try PushStandIn.apns(keys: ["ABC123DEFG": key.keyPath], teamID: "DEF123GHIJ", topics: ["com.example.app"], environment: .sandbox)
        let accountPath = try PushStandIn.makeFCMServiceAccount()
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
        let (unreachable, unreachableOutput) = try run(["push", "test", "--app", "1", "--token", good], unreachableEnvironment)
        XCTAssertEqual(unreachable, 1, unreachableOutput)
        XCTAssertTrue(unreachableOutput.contains("failed (connect)"), unreachableOutput)

        let fcmID = fcmOutput.contains("#3") ? "3" : "2"
        let (fcmSent, fcmSentOutput) = try run(["push", "test", "--app", fcmID, "--token", "android-token-1"], environment)
        XCTAssertEqual(fcmSent, 0, fcmSentOutput)
        XCTAssertTrue(fcmSentOutput.contains("accepted"), fcmSentOutput)
        let (fcmDead, fcmDeadOutput) = try run(["push", "test", "--app", fcmID, "--token", "unregistered-1"], environment)
        XCTAssertEqual(fcmDead, 1, fcmDeadOutput)
        XCTAssertTrue(fcmDeadOutput.contains("refused: 404 UNREGISTERED"), fcmDeadOutput)

        let connection = try database.connect()
        let deadRows = try connection.query("SELECT family, token, reason FROM push_dead_tokens ORDER BY family")
        XCTAssertEqual(deadRows.rows, [["apns", deadToken, "Unregistered"], ["fcm", "unregistered-1", "UNREGISTERED"]])
        let outcomes = try connection.query("SELECT outcome FROM push_records ORDER BY id").rows.compactMap { $0[0] }
        XCTAssertEqual(outcomes, ["accepted", "refused", "refused", "failed", "accepted", "refused"])

        let (removed, removedOutput) = try run(["push-app", "remove", "1"], environment)
        XCTAssertEqual(removed, 0, removedOutput)
        let (_, afterRemove) = try run(["push-app", "list"], environment)
        XCTAssertFalse(afterRemove.contains("#1  apns"), afterRemove)
        let (missing, missingOutput) = try run(["push", "test", "--app", "1", "--token", good], environment)
        XCTAssertEqual(missing, 1, missingOutput)
        XCTAssertTrue(missingOutput.contains("there is no push app #1"), missingOutput)
    }
}
