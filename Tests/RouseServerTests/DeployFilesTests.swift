import Foundation
import RouseServer
import RouseTestSupport
import Storage
import XCTest

/// What an operator meets first: `deploy/rouse.example.json` names every setting with its default
/// and passes `rouse check-config`, its table in `deploy/rouse.example.md` and
/// docs/configuration.md name every setting, a bad file is refused naming the bad key, the
/// systemd unit keeps its hardening, and `make run`'s first administrator is made once.
final class DeployFilesTests: XCTestCase {
    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func text(_ path: String) throws -> String {
        try String(contentsOf: repositoryRoot.appendingPathComponent(path), encoding: .utf8)
    }

    static var examplePath: String { repositoryRoot.appendingPathComponent("deploy/rouse.example.json").path }

    func run(_ arguments: [String], environment: [String: String] = [:]) throws -> (Int32?, String) {
        let process = try RouseProcess(arguments: arguments, environment: environment)
        let status = process.waitForExit(timeout: 60)
        return (status, process.outputText)
    }

    func testExampleConfigNamesEverySettingWithItsDefault() throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: Self.examplePath))
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let settings = RouseConfiguration.settings
        XCTAssertEqual(Set(object.keys), Set(settings.map(\.key)), "deploy/rouse.example.json must name every setting, and only those")
        for setting in settings {
            guard let value = object[setting.key] else { continue }
            let text: String
            switch value {
            case let list as [String]: text = list.joined(separator: ",")
            case let string as String: text = string
            case let number as NSNumber: text = "\(number)"
            default: text = "\(value)"
            }
            XCTAssertEqual(text, setting.defaultValue, "\(setting.key) in deploy/rouse.example.json is not its default")
        }
    }

    func testExampleTableAndConfigurationPageNameEverySetting() throws {
        let table = try Self.text("deploy/rouse.example.md")
        let page = try Self.text("docs/configuration.md")
        for setting in RouseConfiguration.settings {
            let shownDefault = setting.defaultValue.isEmpty ? "none" : "`\(setting.defaultValue)`"
            XCTAssertTrue(
                table.contains("| `\(setting.key)` | \(shownDefault) | "),
                "deploy/rouse.example.md has no row for \(setting.key) with its default \(shownDefault)")
            XCTAssertTrue(page.contains("`\(setting.key)`"), "docs/configuration.md does not name \(setting.key)")
        }
    }

    func testCheckConfigAcceptsTheExample() throws {
        let (status, output) = try run(["check-config", "--config", Self.examplePath])
        XCTAssertEqual(status, 0, output)
        XCTAssertTrue(output.contains("configuration is valid"), output)
        XCTAssertTrue(output.contains("sip_listen: udp:127.0.0.1:5060,tcp:127.0.0.1:5060"), output)
    }

    func testCheckConfigRefusesABadFileNamingTheBadKey() throws {
        var text = try String(contentsOfFile: Self.examplePath, encoding: .utf8)
        text = text.replacingOccurrences(of: #""wake_wait": 8,"#, with: #""wake_wait": "soon", "wake_wiat": 8,"#)
        let path = NSTemporaryDirectory() + "rouse-bad-\(UUID().uuidString).json"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let (status, output) = try run(["check-config", "--config", path])
        XCTAssertEqual(status, 1, output)
        XCTAssertTrue(output.contains("wake_wiat: unknown setting in config file \(path)"), output)
        XCTAssertTrue(output.contains("wake_wait: 'soon' is not a positive duration"), output)
        XCTAssertFalse(output.contains("configuration is valid"), output)
    }

    func testSystemdUnitKeepsItsUserAndHardening() throws {
        let unit = try Self.text("deploy/rouse.service")
        for line in [
            "User=rouse", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
            "CapabilityBoundingSet=CAP_NET_BIND_SERVICE", "AmbientCapabilities=CAP_NET_BIND_SERVICE",
            "Restart=on-failure", "LimitNOFILE=", "ExecStart=/usr/local/bin/rouse serve --config /etc/rouse/rouse.json",
        ] {
            XCTAssertTrue(unit.contains(line), "deploy/rouse.service lacks \(line)")
        }
        XCTAssertFalse(unit.contains("--password"), "no secret on a command line")
    }

    /// `make run` makes its first administrator with `--generate-password --if-none`: the password
    /// is printed once, and a second run adds nobody and prints no password.
    func testFirstAdministratorIsMadeOnceAndItsPasswordShownOnce() throws {
        let database = try TestDatabase()
        defer { database.drop() }
        try Migrator.migrate(try database.connect())
        let environment = ["ROUSE_DATABASE_URL": database.conninfo]
        let (first, firstOutput) = try run(["admin", "add", "admin", "--generate-password", "--if-none"], environment: environment)
        XCTAssertEqual(first, 0, firstOutput)
        XCTAssertTrue(firstOutput.contains("added admin admin"), firstOutput)
        let password = try XCTUnwrap(
            firstOutput.components(separatedBy: "\n").first { $0.hasPrefix("generated password (shown once): ") }?
                .dropFirst("generated password (shown once): ".count))
        XCTAssertEqual(password.count, 20)
        XCTAssertTrue(try PostgresAdmins.verify(name: "admin", password: String(password), on: try database.connect()))

        let (second, secondOutput) = try run(["admin", "add", "admin", "--generate-password", "--if-none"], environment: environment)
        XCTAssertEqual(second, 0, secondOutput)
        XCTAssertTrue(secondOutput.contains("an administrator exists already; added none"), secondOutput)
        XCTAssertFalse(secondOutput.contains("password"), secondOutput)

        let (both, bothOutput) = try run(
            ["admin", "add", "bob", "--generate-password", "--password", "x-long-enough"], environment: environment)
        XCTAssertEqual(both, 1, bothOutput)
        XCTAssertEqual(try PostgresAdmins.list(on: try database.connect()).map(\.name), ["admin"])

        // A lost password is replaced, and an administrator can go.
        let (changed, changedOutput) = try run(["admin", "passwd", "admin", "--password", "a-new-admin-pw-1"], environment: environment)
        XCTAssertEqual(changed, 0, changedOutput)
        XCTAssertTrue(try PostgresAdmins.verify(name: "admin", password: "a-new-admin-pw-1", on: try database.connect()))
        XCTAssertFalse(try PostgresAdmins.verify(name: "admin", password: String(password), on: try database.connect()))
        let (unknown, unknownOutput) = try run(["admin", "passwd", "nobody", "--password", "a-new-admin-pw-1"], environment: environment)
        XCTAssertEqual(unknown, 1, unknownOutput)
        XCTAssertTrue(unknownOutput.contains("there is no admin nobody"), unknownOutput)
        let (removed, removedOutput) = try run(["admin", "remove", "admin"], environment: environment)
        XCTAssertEqual(removed, 0, removedOutput)
        XCTAssertEqual(try PostgresAdmins.list(on: try database.connect()).count, 0)
    }
}
