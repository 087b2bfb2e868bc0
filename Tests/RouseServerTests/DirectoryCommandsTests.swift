import Crypto
import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// `rouse domain …`, `rouse extension …` and `rouse registrations` as an operator runs them.
final class DirectoryCommandsTests: XCTestCase {
    var database: TestDatabase!

    override func setUpWithError() throws {
        database = try TestDatabase()
        XCTAssertEqual(try rouse(["migrate"]).status, 0)
    }

    override func tearDown() {
        database?.drop()
    }

    struct Outcome {
        let status: Int32?
        let output: String
        let errors: String
        var errorLines: [Substring] { errors.split(separator: "\n") }
    }

    func rouse(_ arguments: [String], input: String? = nil, databaseURL: String? = nil) throws -> Outcome {
        let process = try RouseProcess(
            arguments: arguments, environment: ["ROUSE_DATABASE_URL": databaseURL ?? database.conninfo],
            standardInput: input)
        let status = process.waitForExit(timeout: 60)
        let errors = process.errorText
        var output = process.outputText
        if !errors.isEmpty { output = output.replacingOccurrences(of: errors, with: "") }
        return Outcome(status: status, output: output, errors: errors)
    }

    /// Exit status 1 and exactly one line on standard error, equal to `message`.
    func assertRefused(_ arguments: [String], _ message: String, input: String? = nil, file: StaticString = #filePath, line: UInt = #line) throws {
        let outcome = try rouse(arguments, input: input)
        XCTAssertEqual(outcome.status, 1, outcome.errors, file: file, line: line)
        XCTAssertEqual(outcome.errorLines, ["rouse: " + message], file: file, line: line)
    }

    func testHelpListsTheDirectoryCommands() throws {
        let outcome = try rouse(["--help"])
        XCTAssertEqual(outcome.status, 0)
        for name in ["domain add", "domain list", "domain remove", "extension add", "extension list", "extension passwd",
            "extension update", "extension remove", "registrations"] {
            XCTAssertTrue(outcome.output.contains(name), "--help lacks \(name)")
        }
    }

    func testDomainsAreAddedListedAndRemoved() throws {
        let added = try rouse(["domain", "add", "Example.COM"])
        XCTAssertEqual(added.status, 0, added.errors)
        XCTAssertEqual(added.output, "added domain example.com\n")
        XCTAssertEqual(try rouse(["domain", "add", "example.org"]).status, 0)
        XCTAssertEqual(try rouse(["domain", "list"]).output, "example.com  0 extensions\nexample.org  0 extensions\n")
        let removed = try rouse(["domain", "remove", "example.org"])
        XCTAssertEqual(removed.status, 0, removed.errors)
        XCTAssertEqual(removed.output, "removed domain example.org\n")
        XCTAssertEqual(try rouse(["domain", "list"]).output, "example.com  0 extensions\n")
    }

    func testDomainRefusalsAreOneLine() throws {
        XCTAssertEqual(try rouse(["domain", "add", "example.com"]).status, 0)
        XCTAssertEqual(try rouse(["extension", "add", "1001@example.com", "--password", "pw"]).status, 0)
        try assertRefused(["domain", "add", "example.com"], "domain example.com already exists")
        try assertRefused(["domain", "add", "bad domain"], "'bad domain' is not a valid domain")
        try assertRefused(["domain", "remove", "example.org"], "no such domain example.org")
        try assertRefused(["domain", "remove", "example.com"], "domain example.com still has 1 extension; remove it first")
        try assertRefused(["domain", "add"], "usage: rouse domain add DOMAIN [--json]")
        try assertRefused(["domain", "list", "extra"], "usage: rouse domain list [--json]")
    }

    func testExtensionAddReadsThePasswordFromStandardInputAndStoresOnlyHashes() throws {
        XCTAssertEqual(try rouse(["domain", "add", "example.com"]).status, 0)
        let password = "correct horse battery"
        let added = try rouse(["extension", "add", "1001@example.com"], input: password + "\n")
        XCTAssertEqual(added.status, 0, added.errors)
        XCTAssertEqual(added.output, "added extension 1001@example.com\n")
        XCTAssertFalse(added.output.contains(password) || added.errors.contains(password))

        let aor = AddressOfRecord(number: "1001", domain: "example.com")
        let directory = PostgresDirectory(settings: database.settings())
        XCTAssertEqual(try directory.loadDirectory().extensions[aor], ExtensionCredentials(aor: aor, password: password))

        let changed = try rouse(["extension", "passwd", "1001@example.com"], input: "new-secret\n")
        XCTAssertEqual(changed.status, 0, changed.errors)
        XCTAssertEqual(changed.output, "changed the password of 1001@example.com\n")
        XCTAssertEqual(try directory.loadDirectory().extensions[aor], ExtensionCredentials(aor: aor, password: "new-secret"))
        try assertRefused(
            ["extension", "passwd", "1001@example.com"], "no password given: pass --password or one line on standard input",
            input: "")
    }

    func testExtensionsAreListedAndRemovedWithOneLineRefusals() throws {
        XCTAssertEqual(try rouse(["domain", "add", "example.com"]).status, 0)
        XCTAssertEqual(try rouse(["domain", "add", "example.org"]).status, 0)
        XCTAssertEqual(try rouse(["extension", "add", "1001@example.com", "--password", "a"]).status, 0)
        XCTAssertEqual(try rouse(["extension", "add", "2001@example.org", "--password=b"]).status, 0)
        try assertRefused(["extension", "add", "1001@example.com", "--password", "a"], "extension 1001@example.com already exists")
        try assertRefused(["extension", "add", "10 01@example.com", "--password", "a"], "'10 01' is not a valid extension number")
        try assertRefused(["extension", "add", "1001@example.net", "--password", "a"], "no such domain example.net")
        try assertRefused(["extension", "add", "1001", "--password", "a"], "'1001' is not an extension address (NUMBER@DOMAIN)")
        try assertRefused(["extension", "add", "1002@example.com", "--password"], "option '--password' needs a value")
        try assertRefused(
            ["extension", "add", "1002@example.com", "--pasword", "a"],
            "unknown option '--pasword'; usage: rouse extension add NUMBER@DOMAIN [--password PASSWORD] [--name NAME] [--json]")

        XCTAssertEqual(
            try rouse(["extension", "list"]).output, "1001@example.com  0 registrations\n2001@example.org  0 registrations\n")
        XCTAssertEqual(try rouse(["extension", "list", "example.org"]).output, "2001@example.org  0 registrations\n")
        try assertRefused(["extension", "list", "example.net"], "no such domain example.net")

        let removed = try rouse(["extension", "remove", "1001@example.com"])
        XCTAssertEqual(removed.status, 0, removed.errors)
        XCTAssertEqual(removed.output, "removed extension 1001@example.com\n")
        try assertRefused(["extension", "remove", "1001@example.com"], "no such extension 1001@example.com")
        try assertRefused(["extension", "passwd", "1001@example.com", "--password", "x"], "no such extension 1001@example.com")
        XCTAssertEqual(try rouse(["extension", "list", "example.com"]).output, "no extensions\n")
    }

    func testRegistrationsShowEachBindingWithItsPushChannels() throws {
        XCTAssertEqual(try rouse(["domain", "add", "example.com"]).status, 0)
        XCTAssertEqual(try rouse(["extension", "add", "1001@example.com", "--password", "a"]).status, 0)
        XCTAssertEqual(try rouse(["extension", "add", "1002@example.com", "--password", "b"]).status, 0)
        XCTAssertEqual(try rouse(["registrations"]).output, "no registrations\n")

        let settings = database.settings()
        let store = PostgresLocationStore(settings: settings)
        defer { store.shutdown() }
        let aor = AddressOfRecord(number: "1001", domain: "example.com")
        let voipToken = "0123456789abcdef0123456789abcdef"
        let fcmToken = "fcm-token-that-is-long-enough-WXYZ"
        let now = Date()
        let binding = Binding(
            aor: aor, contact: "<sip:1001@192.0.2.7:5060;transport=tcp>", callID: "c1", cseq: 1, registeredAt: now,
            expiresAt: now.addingTimeInterval(600), userAgent: "Linphone/5.2",
            flow: BindingFlow(transport: .tcp, source: SocketAddress(parsing: "192.0.2.7:5060"), connectionID: FlowConnectionID("7"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "a"),
            pushChannels: [
                PushChannel(provider: .apns, token: voipToken, param: "TEAM.com.example.app.voip", kind: .voip),
                PushChannel(provider: .fcm, token: fcmToken, param: nil, kind: .standard),
            ])
        let done = DispatchSemaphore(value: 0)
        let failures = Failures()
        store.apply([.save(binding)]) { result in
            if case .failure(let error) = result { failures.record(error) }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(failures.descriptions, [])
        try store.markTokenDead(family: .fcm, token: fcmToken, reason: "UNREGISTERED")

        for arguments in [["registrations"], ["registrations", "1001@example.com"]] {
            let outcome = try rouse(arguments)
            XCTAssertEqual(outcome.status, 0, outcome.errors)
            let lines = outcome.output.split(separator: "\n").map(String.init)
            XCTAssertEqual(lines.count, 3, outcome.output)
            XCTAssertTrue(lines[0].hasPrefix("1001@example.com  <sip:1001@192.0.2.7:5060;transport=tcp>"), lines[0])
            XCTAssertTrue(lines[0].contains("user agent: Linphone/5.2"), lines[0])
            XCTAssertTrue(lines[0].contains("tcp from 192.0.2.7:5060"), lines[0])
            XCTAssertTrue(lines[0].contains("expires in 59"), lines[0])
            XCTAssertEqual(lines[1], "    push apns / 01234567…cdef / TEAM.com.example.app.voip / voip")
            XCTAssertEqual(lines[2], "    push fcm / fcm-toke…WXYZ / - / standard DEAD")
            XCTAssertFalse(outcome.output.contains(voipToken) || outcome.output.contains(fcmToken))
        }
        // --tokens: the same lines with the whole tokens.
        let whole = try rouse(["registrations", "1001@example.com", "--tokens"])
        XCTAssertEqual(whole.status, 0, whole.errors)
        let wholeLines = whole.output.split(separator: "\n").map(String.init)
        XCTAssertEqual(wholeLines.count, 3, whole.output)
        XCTAssertEqual(wholeLines[1], "    push apns / \(voipToken) / TEAM.com.example.app.voip / voip")
        XCTAssertEqual(wholeLines[2], "    push fcm / \(fcmToken) / - / standard DEAD")
        XCTAssertEqual(try rouse(["registrations", "1002@example.com"]).output, "no registrations for 1002@example.com\n")
        try assertRefused(["registrations", "1003@example.com"], "no such extension 1003@example.com")
        try assertRefused(["registrations", "not-an-address"], "'not-an-address' is not an extension address (NUMBER@DOMAIN)")
    }

    /// What `--json` printed: one JSON object on one line of standard output.
    func json(_ arguments: [String], input: String? = nil, file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        let outcome = try rouse(arguments + ["--json"], input: input)
        XCTAssertEqual(outcome.status, 0, outcome.errors, file: file, line: line)
        XCTAssertEqual(outcome.output.filter { $0 == "\n" }.count, 1, "one line: \(outcome.output)", file: file, line: line)
        let object = try JSONSerialization.jsonObject(with: Data(outcome.output.utf8)) as? [String: Any]
        return try XCTUnwrap(object, outcome.output, file: file, line: line)
    }

    func testADisplayNameIsGivenAtAddChangedWithUpdateAndRefusedInOneLine() throws {
        XCTAssertEqual(try rouse(["domain", "add", "example.com"]).status, 0)
        let added = try rouse(["extension", "add", "1001@example.com", "--password", "pw-1", "--name", "Alice Example"])
        XCTAssertEqual(added.status, 0, added.errors)
        XCTAssertEqual(added.output, "added extension 1001@example.com (Alice Example)\n")
        XCTAssertEqual(try rouse(["extension", "add", "1002@example.com", "--password", "pw-2"]).status, 0)
        XCTAssertEqual(try rouse(["extension", "list"]).output, "1001@example.com  Alice Example  0 registrations\n1002@example.com  0 registrations\n")
        XCTAssertEqual(try json(["extension", "list"])["items"].flatMap { $0 as? [[String: Any]] }?.map { $0["displayName"] as? String }, ["Alice Example", nil])

        let renamed = try rouse(["extension", "update", "1002@example.com", "--name=Bob Example"])
        XCTAssertEqual(renamed.status, 0, renamed.errors)
        XCTAssertEqual(renamed.output, "1002@example.com is now called Bob Example\n")
        let aor = AddressOfRecord(number: "1002", domain: "example.com")
        XCTAssertEqual(try PostgresDirectory(settings: database.settings()).loadDirectory().displayNames[aor], "Bob Example")

        try assertRefused(["extension", "update", "1002@example.com", "--name", String(repeating: "b", count: 65)],
                          "unusable display name: it is longer than 64 characters")
        try assertRefused(["extension", "update", "1002@example.com", "--name", "Bob\u{7}"], "unusable display name: it holds a control character")
        try assertRefused(["extension", "add", "1003@example.com", "--password", "pw-3", "--name", "Eve\nExample"],
                          "unusable display name: it holds a control character")
        try assertRefused(["extension", "update", "1002@example.com"], "nothing to change: pass --name NAME (--name '' removes the display name)")
        try assertRefused(["extension", "update", "1009@example.com", "--name", "Nobody"], "no such extension 1009@example.com")
        XCTAssertEqual(try rouse(["extension", "list"]).output.split(separator: "\n").count, 2, "the refused add added nothing")

        let cleared = try rouse(["extension", "update", "1001@example.com", "--name", ""])
        XCTAssertEqual(cleared.output, "1001@example.com has no display name now\n")
        XCTAssertTrue(try PostgresDirectory(settings: database.settings()).loadDirectory().displayNames[AddressOfRecord(number: "1001", domain: "example.com")] == nil)
    }

    func testListAndAddCommandsPrintOneJSONDocumentWithJSON() throws {
        XCTAssertEqual(try json(["domain", "add", "Example.COM"])["domain"] as? String, "example.com")
        XCTAssertEqual(try json(["domain", "add", "example.org"])["domain"] as? String, "example.org")
        let added = try json(["extension", "add", "1001@example.com"], input: "sip-secret-1001\n")
        XCTAssertEqual(added as NSDictionary, ["address": "1001@example.com", "displayName": NSNull()] as NSDictionary, "the address, never the password")
        XCTAssertEqual(try json(["extension", "add", "2001@example.org", "--password", "sip-secret-2001"])["address"] as? String, "2001@example.org")

        let domains = try json(["domain", "list"])
        XCTAssertEqual(domains["total"] as? Int, 2)
        let items = try XCTUnwrap(domains["items"] as? [[String: Any]])
        XCTAssertEqual(items.map { $0["domain"] as? String }, ["example.com", "example.org"])
        XCTAssertEqual(items.map { $0["extensionCount"] as? Int }, [1, 1])
        XCTAssertNotNil(ISO8601DateFormatter().date(from: items[0]["createdAt"] as? String ?? ""), "\(items[0])")

        let extensions = try json(["extension", "list", "example.org"])
        XCTAssertEqual(extensions["total"] as? Int, 1)
        let item = try XCTUnwrap((extensions["items"] as? [[String: Any]])?.first)
        XCTAssertEqual(item["address"] as? String, "2001@example.org")
        XCTAssertEqual(item["liveBindings"] as? Int, 0)
        XCTAssertEqual(Set(item.keys), ["address", "displayName", "liveBindings", "createdAt", "updatedAt"])

        // Registrations: bindings and posted tokens, tokens shortened unless --tokens.
        let aor = AddressOfRecord(number: "1001", domain: "example.com")
        let voipToken = String(repeating: "5e", count: 32)
        let binding = Binding(
            aor: aor, contact: "<sip:1001@192.0.2.7:5060;transport=tcp>", callID: "c1", cseq: 1, registeredAt: Date(),
            expiresAt: Date().addingTimeInterval(600), userAgent: "Linphone/5.2",
            flow: BindingFlow(transport: .tcp, source: SocketAddress(parsing: "192.0.2.7:5060"), connectionID: FlowConnectionID("7"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "a"),
            pushChannels: [PushChannel(provider: .apns, token: voipToken, param: "TEAM.com.example.app.voip", kind: .voip)])
        let store = PostgresLocationStore(settings: database.settings())
        defer { store.shutdown() }
        let done = DispatchSemaphore(value: 0)
        store.apply([.save(binding)]) { _ in done.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
        let postedToken = "posted-token-for-json-0123456789"
        _ = try PostedPushTokens.store(
            PushChannel(provider: .fcm, token: postedToken, param: "rouse-test", kind: .standard), deviceID: "pixel", for: aor,
            on: try database.connect())
        let registrations = try json(["registrations"])
        let bindings = try XCTUnwrap(registrations["bindings"] as? [[String: Any]])
        XCTAssertEqual(bindings.count, 1)
        XCTAssertEqual(bindings[0]["address"] as? String, "1001@example.com")
        XCTAssertEqual(bindings[0]["id"] as? String, binding.id.uuidString.lowercased())
        XCTAssertEqual(bindings[0]["userAgent"] as? String, "Linphone/5.2")
        XCTAssertEqual((bindings[0]["flow"] as? [String: Any])?["transport"] as? String, "tcp")
        let channel = try XCTUnwrap((bindings[0]["pushChannels"] as? [[String: Any]])?.first)
        XCTAssertEqual(channel["token"] as? String, Binding.shortenedToken(voipToken))
        XCTAssertEqual(channel["provider"] as? String, "apns")
        XCTAssertEqual(channel["dead"] as? Bool, false)
        let posted = try XCTUnwrap((registrations["postedTokens"] as? [[String: Any]])?.first)
        XCTAssertEqual(posted["address"] as? String, "1001@example.com")
        XCTAssertEqual(posted["token"] as? String, Binding.shortenedToken(postedToken))
        XCTAssertEqual(posted["deviceId"] as? String, "pixel")
        XCTAssertEqual(posted["platform"] as? String, "android")
        let whole = try json(["registrations", "1001@example.com", "--tokens"])
        XCTAssertEqual(((whole["bindings"] as? [[String: Any]])?.first?["pushChannels"] as? [[String: Any]])?.first?["token"] as? String, voipToken)
        XCTAssertEqual((whole["postedTokens"] as? [[String: Any]])?.first?["token"] as? String, postedToken)
        let none = try json(["registrations", "2001@example.org"])
        XCTAssertEqual((none["bindings"] as? [Any])?.count, 0)
        XCTAssertEqual((none["postedTokens"] as? [Any])?.count, 0)

        // Administrators: a given password is never printed; a generated one once, as in the lines for people.
        let ops = try json(["admin", "add", "ops", "--password", "ops-given-password"])
        XCTAssertEqual(ops["name"] as? String, "ops")
        XCTAssertEqual(ops["added"] as? Bool, true)
        XCTAssertTrue(ops["generatedPassword"] is NSNull, "\(ops)")
        let bob = try json(["admin", "add", "bob", "--generate-password"])
        let generated = try XCTUnwrap(bob["generatedPassword"] as? String)
        XCTAssertEqual(generated.count, 20)
        XCTAssertTrue(try PostgresAdmins.verify(name: "bob", password: generated, on: try database.connect()))
        XCTAssertEqual(try json(["admin", "add", "first", "--if-none", "--generate-password"]) as NSDictionary, ["name": "first", "added": false] as NSDictionary)
        let admins = try json(["admin", "list"])
        XCTAssertEqual((admins["items"] as? [[String: Any]])?.compactMap { $0["name"] as? String }.sorted(), ["bob", "ops"])
        XCTAssertEqual(admins["total"] as? Int, 2)
        XCTAssertNotNil(ISO8601DateFormatter().date(from: (admins["items"] as? [[String: Any]])?.first?["createdAt"] as? String ?? ""))

        // A refusal is still one line on standard error, with nothing on standard output.
        let refused = try rouse(["domain", "add", "example.com", "--json"])
        XCTAssertEqual(refused.status, 1)
        XCTAssertEqual(refused.output, "")
        XCTAssertEqual(refused.errorLines, ["rouse: domain example.com already exists"])
        // The lines for people are as they were.
        XCTAssertEqual(try rouse(["domain", "list"]).output, "example.com  1 extension\nexample.org  1 extension\n")
    }

    func testAnUnmigratedDatabaseIsNamedInOneLine() throws {
        let empty = try TestDatabase()
        defer { empty.drop() }
        let outcome = try rouse(["domain", "list"], databaseURL: empty.conninfo)
        XCTAssertEqual(outcome.status, 1)
        XCTAssertEqual(outcome.errorLines, ["rouse: the database has no directory yet: run rouse migrate first"])
    }
}

/// Errors handed to a completion on another thread.
final class Failures: @unchecked Sendable {
    // @unchecked: `items` is only touched under `lock`.
    private let lock = NSLock()
    private var items: [String] = []

    func record(_ error: any Error) {
        lock.lock()
        items.append(String(describing: error))
        lock.unlock()
    }

    var descriptions: [String] {
        lock.lock()
        defer { lock.unlock() }
        return items
    }
}
