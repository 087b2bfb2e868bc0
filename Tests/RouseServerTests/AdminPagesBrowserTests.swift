import CallRouting
import Foundation
import Push
import Registrar
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPTransport
import Storage
import XCTest

/// The admin pages in a real browser (issue 7 item 5): `rouse serve` with the APNs and FCM
/// stand-ins, and headless Chromium driven through Selenium by Tests/BrowserTests/admin_pages.py
/// (in the venv scripts/browser-venv.sh makes). An administrator signs in, adds an extension,
/// sees the phone that registered for it with its pn-* values, sees the push and the journey of
/// a call that woke the phone through the stand-in, sends a Test push from Settings and reads the
/// answer, presses Test push on the phone's own row (accepted, then spaced) and Show token, and
/// signs out. Screenshots of every step land in .build/test-artifacts/admin-pages/.
///
/// Every wait has a deadline: the browser waits for elements (60 s a step), this test waits for
/// each step's answer (180 s), for SIP answers and for PostgreSQL rows; nothing sleeps.
final class AdminPagesBrowserTests: XCTestCase {
    static let apnsToken = String(repeating: "ab", count: 32)
    static let voipParam = "DEF123GHIJ.com.example.app.voip"
    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    static let artifacts = repositoryRoot + "/.build/test-artifacts/admin-pages"
    let admin = ("ops", "ops-admin-passphrase")

    var database: TestDatabase!
    var apns: PushStandIn!
    var fcm: PushStandIn!
    var rouse: RouseProcess?
    var robot: BrowserRobot?
    var agents: [TestUserAgent] = []

    override func setUpWithError() throws {
        for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver"] where !FileManager.default.isExecutableFile(atPath: tool) {
            throw BrowserRobot.StepFailure(
                description: "\(tool) is missing: scripts/deps.sh installs Debian's chromium and chromium-driver (make test runs it)")
        }
        database = try TestDatabase()
        let connection = try database.connect()
        try Migrator.migrate(connection)
        try PostgresAdmins.add(name: admin.0, password: admin.1, on: connection)
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        try directory.addExtension(AddressOfRecord(number: "1001", domain: "example.com"), password: "pw-1001")

        let key = try PushStandIn.makeAPNsKey()
        apns = try PushStandIn.apns(keys: ["ABC123DEFG": key.keyPath], teamID: "DEF123GHIJ", topics: ["com.example.app"])
        let account = try PushStandIn.makeFCMServiceAccount()
        defer { key.remove(); account.remove() }  // the stand-ins read them at start
        fcm = try PushStandIn.fcm(serviceAccountPath: account.path)
        let caFile = apns.stateDirectory + "/cas.pem"
        try [apns.caFile, fcm.caFile].map { try String(contentsOfFile: $0, encoding: .utf8) }.joined()
            .write(toFile: caFile, atomically: true, encoding: .utf8)
        let apps = PostgresPushApps(connection: connection)
        _ = try apps.add(PushApp(credentials: .apns(APNsCredentials(
            teamID: "DEF123GHIJ", keyID: "ABC123DEFG", topic: "com.example.app", privateKeyPEM: key.privateKeyPEM, environment: .production))))
        _ = try apps.add(PushApp(credentials: .fcm(try FCMServiceAccount(json: Array(try Data(contentsOf: URL(fileURLWithPath: fcm.serviceAccountFile!)))))))

        let process = try RouseProcess(
            arguments: ["serve"],
            environment: [
                "ROUSE_DATABASE_URL": database.conninfo, "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0,tcp:127.0.0.1:0",
                "ROUSE_HTTP_LISTEN": "127.0.0.1:0",
                "ROUSE_APNS_PRODUCTION_URL": apns.baseURL, "ROUSE_APNS_SANDBOX_URL": apns.baseURL, "ROUSE_FCM_URL": fcm.baseURL,
                "ROUSE_PUSH_CA_FILE": caFile, "ROUSE_PUSH_TIMEOUT": "5", "ROUSE_WAKE_WAIT": "8", "ROUSE_RING_TIMEOUT": "30",
            ])
        rouse = process
        XCTAssertTrue(process.waitForOutput(containing: "serving HTTP on"), process.outputText)
    }

    override func tearDown() {
        if let robot {
            _ = robot.stop()
            if testRun?.hasSucceeded == false { print("== browser robot output:\n\(robot.errorText)") }
        }
        robot = nil
        agents.forEach { $0.close() }
        if testRun?.hasSucceeded == false, let rouse { print("== rouse output:\n\(rouse.outputText)") }
        _ = rouse?.stop()
        rouse = nil
        apns?.stop()
        fcm?.stop()
        database?.drop()
    }

    /// `serving SIP on …` and `serving HTTP on …`, read from Rouse's output.
    func listenPoints() throws -> (sip: [ListenPoint], httpPort: UInt16) {
        let text = try XCTUnwrap(rouse).outputText
        let sipLine = try XCTUnwrap(text.split(separator: "\n").first { $0.contains("serving SIP on") })
        let sip = try (sipLine.components(separatedBy: "serving SIP on ").last ?? "").components(separatedBy: ", ").map { try ListenPoint(parsing: $0) }
        let httpLine = try XCTUnwrap(text.split(separator: "\n").first { $0.contains("serving HTTP on") })
        let port = try XCTUnwrap((httpLine.components(separatedBy: "serving HTTP on ").last ?? "").split(separator: ":").last.flatMap { UInt16($0) })
        return (sip, port)
    }

    /// The Python of scripts/browser-venv.sh (made or checked now).
    func browserPython() throws -> String {
        try RouseProcess.venvPython(script: "browser-venv.sh", repositoryRoot: Self.repositoryRoot)
    }

    /// The stand-in's requests for `token`, once there are `count` (polled, with a 60 s deadline).
    func pushes(_ standIn: PushStandIn, token: String, count: Int = 1) throws -> [StandInRequest] {
        let deadline = Date().addingTimeInterval(60)
        var found: [StandInRequest] = []
        while Date() < deadline {
            found = try standIn.requests().filter { $0.path.hasSuffix(token) }
            if found.count >= count { return found }
            Thread.sleep(forTimeInterval: 0.05)
        }
        XCTFail("no push for \(token.prefix(8)) within 60 s")
        return found
    }

    /// Waits until the call `callID` is recorded as ended with its push's wake (PostgreSQL, polled,
    /// with a 60 s deadline).
    func waitForRecordedCall(_ callID: String) throws {
        let connection = try database.connect()
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            if let call = try PostgresCalls.recent(on: connection, limit: 10).first(where: { $0.callID == callID }), call.endedAt != nil,
                try PostgresPushStores.recent(on: connection, aor: "1002@example.com").contains(where: { $0.wake?.word == "woke" })
            {
                return
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        XCTFail("call \(callID) not recorded as ended within 60 s")
    }

    func testAnAdminWatchesAPhoneRegisterGetWokenAndAnswerThenTestsAPushAndSignsOut() throws {
        let (sip, httpPort) = try listenPoints()
        let robot = try BrowserRobot(
            python: try browserPython(), script: Self.repositoryRoot + "/Tests/BrowserTests/admin_pages.py",
            baseURL: "http://127.0.0.1:\(httpPort)", artifacts: Self.artifacts)
        self.robot = robot

        // Sign in, add the extension the phone will use.
        let signIn = try robot.step("open_root")
        XCTAssertTrue((signIn["url"] as? String)?.hasSuffix("/admin/sign-in") == true, "\(signIn)")
        _ = try robot.step("sign_in", ["name": admin.0, "password": admin.1])
        let added = try robot.step("add_extension", ["address": "1002@example.com", "password": "pw-1002"])
        XCTAssertTrue((added["notice"] as? String)?.contains("Extension 1002@example.com added.") == true, "\(added)")
        // The change reaches the registrar through PostgreSQL's NOTIFY, as on every instance, a
        // moment after the page answered; Rouse logs when it took effect.
        let process = try XCTUnwrap(rouse)
        XCTAssertTrue(process.waitForOutput(containing: "event=directory.loaded extensions=2 "), process.outputText)

        // A phone registers with RFC 8599 push parameters, then goes to sleep.
        let tcp = try XCTUnwrap(sip.first { $0.transport == .tcp }).port
        let udp = try XCTUnwrap(sip.first { $0.transport == .udp }).port
        let phone = try TestUserAgent(
            transport: .tcp, serverPort: tcp, user: "1002", domain: "example.com", password: "pw-1002",
            instanceID: "urn:uuid:\(UUID().uuidString.lowercased())",
            contactURIParameters: "pn-provider=apns;pn-prid=\(Self.apnsToken);pn-param=\(Self.voipParam)", userAgent: "RouseTestApp/1 (iPhone)")
        agents.append(phone)
        XCTAssertEqual(try phone.register().statusCode, 200)
        phone.goQuiet()
        let shortToken = Binding.shortenedToken(Self.apnsToken)
        let devices = try robot.step(
            "extension_devices",
            ["address": "1002@example.com", "phone": true, "expect": ["RouseTestApp/1 (iPhone)", "pn-provider apns", "pn-prid \(shortToken)", "pn-param \(Self.voipParam)"]])
        let devicesText = devices["devices"] as? String ?? ""
        XCTAssertTrue(devicesText.contains("TCP from 127.0.0.1:"), devicesText)
        XCTAssertFalse(devicesText.contains(Self.apnsToken), "the whole token is never shown")

        // A call wakes the phone through the APNs stand-in; it registers again, answers, the caller hangs up.
        let caller = try TestUserAgent(transport: .udp, serverPort: udp, user: "1001", domain: "example.com", password: "pw-1001")
        agents.append(caller)
        TestUserAgent.link(phone, caller)
        let call = try caller.invite("sip:1002@example.com")
        _ = try call.waitForResponse { $0.statusCode == 100 && ($0.cseq?.number ?? 0) >= 2 }
        let push = try XCTUnwrap(try pushes(apns, token: Self.apnsToken).first)
        XCTAssertEqual(push.headers["apns-push-type"], "voip")
        try phone.reopen()
        XCTAssertEqual(try phone.register().statusCode, 200)
        let invite = try phone.waitForRequest(.invite)
        let phoneDialog = try phone.answer(invite)
        let ok = try call.waitForResponse(status: 200)
        let callerDialog = try call.ack(ok)
        try phoneDialog.waitForAck()
        let bye = try callerDialog.sendRequest(.bye)
        try phoneDialog.receiveBye()
        XCTAssertEqual(try caller.waitForFinalResponse(to: bye).statusCode, 200)
        try waitForRecordedCall(call.callID)

        // The admin reads the push line and the journey.
        let recent = try robot.step(
            "extension_pushes",
            ["address": "1002@example.com", "expect_pushes": ["RouseTestApp/1 (iPhone)", "apns", "accepted", "woke in"], "expect_calls": ["answered"]])
        XCTAssertTrue((recent["pushes"] as? String)?.contains("ms") == true, "\(recent)")
        let journey = try robot.step("open_journey", ["expect": ["INVITE from", "pushed RouseTestApp/1 (iPhone) (apns): accepted in", "woke in", "answered 200 OK", "hung up"]])
        XCTAssertTrue((journey["summary"] as? String)?.contains(call.callID) == true, "\(journey)")

        // A Test push from Settings → Mobile push goes out as a ring push and reads in words.
        let testToken = String(repeating: "cd", count: 32)
        let accepted = try robot.step("test_push", ["kind": "apns", "token": testToken, "expect": ["accepted by the provider"], "shot": "test-push-accepted"])
        XCTAssertTrue((accepted["answer"] as? String)?.contains("accepted") == true, "\(accepted)")
        let testPush = try XCTUnwrap(try pushes(apns, token: testToken).first)
        XCTAssertEqual(testPush.headers["apns-push-type"], "voip", "exactly as a call's ring push")
        XCTAssertEqual(testPush.headers["apns-topic"], "com.example.app.voip")
        let deadToken = "dead" + String(repeating: "ef", count: 30)
        let refused = try robot.step("test_push", ["kind": "apns", "token": deadToken, "expect": ["refused", "410", "Unregistered"], "shot": "test-push-refused"])
        XCTAssertTrue((refused["answer"] as? String)?.contains("marked dead") == true, "\(refused)")

        // Test push on the phone's own row: the same ring push a call sends, marked test, answered in words.
        let before = try pushes(apns, token: Self.apnsToken).count
        let device = try robot.step(
            "test_device",
            ["address": "1002@example.com", "user_agent": "RouseTestApp/1 (iPhone)", "expect": ["accepted", "by the provider", "through push app #1"],
             "expect_pushes": ["RouseTestApp/1 (iPhone) (test push)"], "shot": "test-device-accepted"])
        XCTAssertTrue((device["answer"] as? String)?.contains("Apple's production host") == true, "\(device)")
        let devicePush = try XCTUnwrap(try pushes(apns, token: Self.apnsToken, count: before + 1).last)
        XCTAssertEqual(devicePush.headers["apns-push-type"], "voip")
        XCTAssertEqual(devicePush.headers["apns-topic"], "com.example.app.voip")
        XCTAssertEqual(devicePush.jsonBody?["test"]?.stringValue, "true")
        // Again at once: spaced, in words, and nothing more sent.
        let spaced = try robot.step(
            "test_device", ["address": "1002@example.com", "user_agent": "RouseTestApp/1 (iPhone)", "expect": ["not sent", "Try again in"], "shot": "test-device-spaced"])
        XCTAssertTrue((spaced["answer"] as? String)?.contains("less than 30 s ago") == true, "\(spaced)")
        XCTAssertEqual(try apns.requests().filter { $0.path.hasSuffix(Self.apnsToken) }.count, before + 1)
        // Show token: the whole token, read-only, to copy.
        let shown = try robot.step("show_token", ["address": "1002@example.com", "user_agent": "RouseTestApp/1 (iPhone)"])
        XCTAssertEqual(shown["tokens"] as? [String], [Self.apnsToken])
        XCTAssertEqual(shown["readonly"] as? Bool, true)

        // An outbound route added on the organisation's page, then removed; its password never shown.
        let route = try robot.step(
            "add_route",
            ["organisation": "example.com", "name": "uk", "pattern": "prefix:0044", "hops": "trunk.example.net, 198.51.100.7:5080;transport=tcp",
             "username": "acme", "password": "trunk-secret-1", "expect": ["prefix:0044", "trunk.example.net", "acme, password set"]])
        XCTAssertTrue((route["row"] as? String)?.contains("198.51.100.7:5080;transport=tcp") == true, "\(route)")
        XCTAssertEqual(try PostgresRoutes(connection: try database.connect()).credentials().first?.password, "trunk-secret-1")
        XCTAssertFalse("\(route)".contains("trunk-secret-1"))
        let removedRoute = try robot.step("remove_route", ["organisation": "example.com", "name": "uk"])
        XCTAssertEqual(removedRoute["gone"] as? Bool, true, "\(removedRoute)")
        XCTAssertEqual(try PostgresRoutes(connection: try database.connect()).list().count, 0)

        let signedOut = try robot.step("sign_out")
        XCTAssertTrue((signedOut["url_after"] as? String)?.contains("/admin/sign-in") == true, "\(signedOut)")

        XCTAssertEqual(robot.stop(), 0, robot.errorText)
        let shots = try FileManager.default.contentsOfDirectory(atPath: Self.artifacts).filter { $0.hasSuffix(".png") && !$0.hasPrefix("failed-") }
        XCTAssertGreaterThanOrEqual(shots.count, 14, "\(shots)")
    }
}

/// Tests/BrowserTests/admin_pages.py as a child process: one JSON line per step to its standard
/// input, one JSON answer per line from its standard output, each awaited with a deadline. The
/// script and Chromium get a home and temporary folder of their own (`HOME`, `TMPDIR`), removed
/// once the script has exited (`stop()`, `deinit`).
final class BrowserRobot {
    let process = Process()
    private let home: TemporaryFolder
    private let input = Pipe()
    private let output = Pipe()
    private let errors = Pipe()
    private let lines = LineQueue()
    private let errorLines = RouseProcess.Collected()

    /// Answers received and not yet taken; a semaphore counts them.
    final class LineQueue: @unchecked Sendable {
        // @unchecked: `pending` and `partial` are only touched under `lock`.
        private let lock = NSLock()
        private var pending: [String] = []
        private var partial = Data()
        let arrived = DispatchSemaphore(value: 0)

        func append(_ data: Data) {
            lock.lock()
            partial.append(data)
            var complete: [String] = []
            while let newline = partial.firstIndex(of: UInt8(ascii: "\n")) {
                complete.append(String(decoding: partial[partial.startIndex..<newline], as: UTF8.self))
                partial = Data(partial[partial.index(after: newline)...])
            }
            pending.append(contentsOf: complete)
            lock.unlock()
            for _ in complete { arrived.signal() }
        }

        func take() -> String? {
            lock.lock()
            defer { lock.unlock() }
            return pending.isEmpty ? nil : pending.removeFirst()
        }
    }

    struct StepFailure: Error, CustomStringConvertible {
        let description: String
    }

    /// Starts the script and waits (up to `readyTimeout`) for Chromium to be up.
    init(python: String, script: String, baseURL: String, artifacts: String, readyTimeout: TimeInterval = 120) throws {
        try? FileManager.default.removeItem(atPath: artifacts)
        try FileManager.default.createDirectory(atPath: artifacts, withIntermediateDirectories: true)
        home = try TemporaryFolder(prefix: "rouse-browser")
        try FileManager.default.createDirectory(atPath: home.file("tmp"), withIntermediateDirectories: true)
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [script, "--base-url", baseURL, "--artifacts", artifacts, "--step-timeout", "60"]
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = home.path
        environment["TMPDIR"] = home.file("tmp")
        process.environment = environment
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        let lines = self.lines
        output.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if !data.isEmpty { lines.append(data) }
        }
        let errorLines = self.errorLines
        errors.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if !data.isEmpty { errorLines.append(String(decoding: data, as: UTF8.self)) }
        }
        try process.run()
        let ready = try answer(timeout: readyTimeout, step: "start")
        guard ready["ready"] as? Bool == true else { throw StepFailure(description: "the browser did not start: \(ready)") }
    }

    /// What the script wrote to standard error.
    var errorText: String { errorLines.all }

    /// Runs one step and returns its answer; throws when it failed or did not answer within `timeout`.
    func step(_ name: String, _ arguments: [String: Any] = [:], timeout: TimeInterval = 180) throws -> [String: Any] {
        var command = arguments
        command["step"] = name
        let data = try JSONSerialization.data(withJSONObject: command) + Data("\n".utf8)
        try input.fileHandleForWriting.write(contentsOf: data)
        let result = try answer(timeout: timeout, step: name)
        guard result["ok"] as? Bool == true else {
            throw StepFailure(description: "browser step \(name) failed: \(result["error"] ?? result)\n\(errorText)")
        }
        return result
    }

    private func answer(timeout: TimeInterval, step: String) throws -> [String: Any] {
        guard lines.arrived.wait(timeout: .now() + timeout) == .success, let line = lines.take() else {
            throw StepFailure(description: "browser step \(step): no answer within \(Int(timeout)) s\n\(errorText)")
        }
        guard let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] else {
            throw StepFailure(description: "browser step \(step): unreadable answer \(line)")
        }
        return object
    }

    /// Asks the script to quit (closing Chromium) and waits up to 60 s; returns its exit status
    /// (nil if it had to be terminated).
    func stop() -> Int32? {
        if process.isRunning {
            try? input.fileHandleForWriting.write(contentsOf: Data("{\"step\": \"quit\"}\n".utf8))
            try? input.fileHandleForWriting.close()
        }
        let exited = DispatchSemaphore(value: 0)
        let process = self.process
        DispatchQueue.global().async {
            process.waitUntilExit()
            exited.signal()
        }
        guard exited.wait(timeout: .now() + 60) == .success else {
            process.terminate()
            if exited.wait(timeout: .now() + 10) == .success { home.remove() }
            return nil
        }
        output.fileHandleForReading.readabilityHandler = nil
        errors.fileHandleForReading.readabilityHandler = nil
        home.remove()
        return process.terminationStatus
    }

    deinit {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        home.remove()
    }
}
