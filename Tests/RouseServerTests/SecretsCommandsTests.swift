import Crypto
import Foundation
import Registrar
import RouseTestSupport
import Storage
import XCTest

/// `rouse secrets …`, `secrets_key_file` and `rouse serve` without a key, as an operator meets them
/// (issue 20 item 7): the key file's checks, the refusal to serve without a key, and a rotation by
/// `rouse secrets reseal --new-key-file` checked with `rouse secrets check`.
final class SecretsCommandsTests: XCTestCase {
    var database: TestDatabase!
    var folder: TemporaryFolder!

    override func setUpWithError() throws {
        database = try TestDatabase()
        folder = try TemporaryFolder(prefix: "rouse-secrets")
    }

    override func tearDown() {
        database?.drop()
        folder?.remove()
    }

    /// `rouse arguments` with the test run's key in `ROUSE_SECRETS_KEY`, unless the arguments name
    /// a key file (then only that) or `environment` says otherwise.
    func rouse(_ arguments: [String], _ environment: [String: String] = [:]) throws -> (status: Int32?, output: String) {
        var settings = ["ROUSE_DATABASE_URL": database.conninfo]
        if arguments.contains("--secrets-key-file") { settings["ROUSE_SECRETS_KEY"] = "" }
        let process = try RouseProcess(arguments: arguments, environment: settings.merging(environment) { $1 })
        let status = process.waitForExit(timeout: 60)
        return (status, process.outputText)
    }

    func testAKeyFileIsMadePrivateAndOneOpenToOthersIsRefused() throws {
        let path = folder.file("secrets.key")
        let made = try rouse(["secrets", "new-key", "--key-file", path])
        XCTAssertEqual(made.status, 0, made.output)
        let mode = try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
        XCTAssertEqual(mode & 0o777, 0o600)
        let key = try SecretSeal(keyText: String(contentsOfFile: path, encoding: .utf8))
        XCTAssertTrue(made.output.contains("wrote secrets key \(key.current.id) to \(path)"), made.output)
        XCTAssertFalse(made.output.contains(key.current.hexText), "the key is never printed")
        XCTAssertEqual(try rouse(["secrets", "new-key", "--key-file", path]).status, 1, "an existing file is never replaced")

        let checked = try rouse(["check-config", "--secrets-key-file", path])
        XCTAssertEqual(checked.status, 0, checked.output)
        XCTAssertTrue(checked.output.contains("secrets key: \(key.current.id)"), checked.output)

        XCTAssertEqual(chmod(path, 0o640), 0)
        let open = try rouse(["check-config", "--secrets-key-file", path])
        XCTAssertEqual(open.status, 1, open.output)
        XCTAssertTrue(open.output.contains("secrets_key_file: '\(path)' is open to its group or others (mode 640): chmod 600"), open.output)

        let malformed = folder.file("short.key")
        XCTAssertTrue(FileManager.default.createFile(atPath: malformed, contents: Data("abcdef\n".utf8), attributes: [.posixPermissions: 0o600]))
        let refused = try rouse(["check-config", "--secrets-key-file", malformed])
        XCTAssertEqual(refused.status, 1, refused.output)
        XCTAssertTrue(refused.output.contains("a secrets key is 32 random bytes written as 64 hex digits or in base64"), refused.output)
        XCTAssertEqual(try rouse(["check-config", "--secrets-key-file", path], ["ROUSE_SECRETS_KEY": key.current.hexText]).status, 1, "one source, not two")
    }

    func testServeRefusesToStartWithoutAKey() throws {
        let serve = try RouseProcess(
            arguments: ["serve"],
            environment: ["ROUSE_DATABASE_URL": database.conninfo, "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0", "ROUSE_SECRETS_KEY": ""])
        XCTAssertEqual(serve.waitForExit(timeout: 60), 1, serve.outputText)
        XCTAssertTrue(serve.outputText.contains("rouse: no secrets key: set secrets_key_file"), serve.outputText)
    }

    func testResealMovesTheDatabaseToANewKeyThatCheckThenOpens() throws {
        XCTAssertEqual(try rouse(["migrate"]).status, 0)
        XCTAssertEqual(try rouse(["domain", "add", "example.com"]).status, 0)
        XCTAssertEqual(try rouse(["extension", "add", "1001@example.com", "--password", "pw-for-1001"]).status, 0)
        let before = try rouse(["secrets", "check"])
        XCTAssertEqual(before.status, 0, before.output)
        XCTAssertTrue(before.output.contains("2 secrets stored, every one opens with secrets keys \(TestDatabase.secrets.current.id)"), before.output)

        let path = folder.file("new.key")
        XCTAssertEqual(try rouse(["secrets", "new-key", "--key-file", path]).status, 0)
        let newKey = try SecretSeal(keyText: String(contentsOfFile: path, encoding: .utf8))
        let resealed = try rouse(["secrets", "reseal", "--new-key-file", path])
        XCTAssertEqual(resealed.status, 0, resealed.output)
        XCTAssertTrue(resealed.output.contains("re-sealed 2 secrets with secrets key \(newKey.current.id)"), resealed.output)

        let withNew = try rouse(["secrets", "check", "--secrets-key-file", path])
        XCTAssertEqual(withNew.status, 0, withNew.output)
        let withOld = try rouse(["secrets", "check"])
        XCTAssertEqual(withOld.status, 1, withOld.output)
        XCTAssertTrue(withOld.output.contains("is sealed with secrets key \(newKey.current.id), but the key given is \(TestDatabase.secrets.current.id)"), withOld.output)
        let credentials = try PostgresDirectory(settings: PostgresSettings(conninfo: database.conninfo, secrets: newKey)).loadDirectory()
        let aor = AddressOfRecord(number: "1001", domain: "example.com")
        XCTAssertEqual(credentials.extensions[aor], ExtensionCredentials(aor: aor, password: "pw-for-1001"))
    }
}
