import Crypto
import Foundation
import RouseLog
import Storage

/// Rouse's command line. Each command returns the process exit status; messages for people go to
/// standard output (results) or standard error (problems), one line each where possible.
public struct CommandLineInterface: Sendable {
    let environment: [String: String]

    public init(environment: [String: String]) {
        self.environment = environment
    }

    /// One command: its name (a sub-command is "push-app add"), one-line summary, usage text,
    /// whether its help lists the settings, and what it does with the remaining arguments.
    struct Command: Sendable {
        let name: String
        let summary: String
        let usage: String
        var listsSettings = false
        let run: @Sendable (CommandLineInterface, [String]) -> Int32
    }

    static let version = "0.1.0"

    /// Every command; each area of Rouse contributes its own list from its own file.
    static var commands: [Command] { serverCommands + directoryCommands + diversionCommands + pushCommands + routeCommands + callClassCommands + adminCommands + secretsCommands }

    static let serverCommands: [Command] = [
        Command(
            name: "serve", summary: "run the SIP server (and apply migrations first)",
            usage: "rouse serve [--config FILE] [--SETTING VALUE ...]", listsSettings: true,
            run: { $0.runServe($1) }),
        Command(
            name: "migrate", summary: "apply database migrations and exit",
            usage: "rouse migrate [--config FILE] [--database-url URL]", listsSettings: true,
            run: { $0.runMigrate($1) }),
        Command(
            name: "check-config", summary: "check the configuration without starting",
            usage: "rouse check-config [--config FILE] [--SETTING VALUE ...]", listsSettings: true,
            run: { $0.runCheckConfig($1) }),
        Command(name: "version", summary: "print the version", usage: "rouse version", run: { cli, _ in cli.runVersion() }),
    ]

    /// The command named by the leading words of `arguments` (longest name first), and the rest.
    static func find(_ arguments: [String]) -> (Command, [String])? {
        for command in commands.sorted(by: { $0.name.count > $1.name.count }) {
            let words = command.name.split(separator: " ").map(String.init)
            if arguments.count >= words.count, Array(arguments.prefix(words.count)) == words {
                return (command, Array(arguments.dropFirst(words.count)))
            }
        }
        return nil
    }

    public func run(_ arguments: [String]) -> Int32 {
        guard let first = arguments.first else {
            print(Self.mainHelp)
            return 2
        }
        let rest = Array(arguments.dropFirst())
        if first == "--help" || first == "-h" || first == "help" {
            if let (command, _) = Self.find(rest) {
                print(Self.help(for: command))
            } else {
                print(Self.mainHelp)
            }
            return 0
        }
        if first == "--version" { return runVersion() }
        guard let (command, remaining) = Self.find(arguments) else {
            printError("rouse: unknown command '\(first)' (see rouse --help)")
            return 2
        }
        if remaining.contains("--help") || remaining.contains("-h") {
            print(Self.help(for: command))
            return 0
        }
        return command.run(self, remaining)
    }

    func runVersion() -> Int32 {
        print("rouse \(Self.version)")
        return 0
    }

    func loadConfiguration(_ flags: [String]) -> RouseConfiguration? {
        do {
            return try ConfigurationLoader.load(flags: flags, environment: environment)
        } catch {
            printError("rouse: \(error)")
            return nil
        }
    }

    func runCheckConfig(_ flags: [String]) -> Int32 {
        guard let configuration = loadConfiguration(flags) else { return 1 }
        print("configuration is valid")
        print("  sip_listen: \(configuration.sipListen.map(\.description).joined(separator: ","))")
        print("  http_listen: \(configuration.httpListen)")
        print("  database: \(PostgresConnection.describeEndpoint(configuration.databaseURL))")
        print("  secrets key: \(configuration.secrets.map { "\($0.current.id)" } ?? "none (rouse serve refuses to start without one)")")
        if let proxy = configuration.pushProxy { print("  push_proxy: \(proxy)") }
        return 0
    }

    func runMigrate(_ flags: [String]) -> Int32 {
        guard let configuration = loadConfiguration(flags) else { return 1 }
        do {
            let connection = try PostgresConnection(
                conninfo: configuration.databaseURL, connectTimeout: configuration.databaseConnectTimeout)
            connection.secrets = configuration.secrets
            let applied = try Migrator.migrate(connection)
            // With a key, what was stored before sealing is sealed now; without, at the first start.
            if connection.secrets != nil, try SealedSecrets.sealPlainValues(on: connection).sealed > 0 {
                print("sealed the secrets stored before sealing")
            }
            let version = try Migrator.currentVersion(connection)
            if applied.isEmpty {
                print("database is up to date (schema version \(version))")
            } else {
                print("applied migrations \(applied.map(String.init).joined(separator: ", ")); schema version \(version)")
            }
            return 0
        } catch {
            printError("rouse: \(error)")
            return 1
        }
    }

    func runServe(_ flags: [String]) -> Int32 {
        guard let configuration = loadConfiguration(flags) else { return 1 }
        let logger = Logger(level: configuration.logLevel, format: configuration.logFormat)
        defer { logger.flush() }
        do {
            let stopSignal = StopSignal()
            let server = try RouseService(configuration: configuration, logger: logger)
            try server.start()
            // Unbuffered, so that a supervisor or test reading the pipe sees it at once.
            FileHandle.standardOutput.write(
                Data("rouse \(Self.version) serving SIP on \(server.listeningPoints.map(\.description).joined(separator: ", "))\n".utf8))
            if let http = server.httpListenAddress {
                FileHandle.standardOutput.write(Data("rouse \(Self.version) serving HTTP on \(http)\n".utf8))
            }
            server.waitForStopSignal(stopSignal)
            return 0
        } catch {
            printError("rouse: \(error)")
            return 1
        }
    }

    static var mainHelp: String {
        var text = """
            rouse: a SIP registrar and proxy that wakes mobile apps by push before ringing them

            usage: rouse <command> [options]

            commands:

            """
        for command in commands {
            text += "  " + command.name.padding(toLength: 22, withPad: " ", startingAt: 0) + command.summary + "\n"
        }
        text += "\nrouse <command> --help shows a command's options."
        return text
    }

    static func help(for command: Command) -> String {
        var text = "\(command.usage)\n\n\(command.summary)\n"
        if command.listsSettings {
            text += """

                Settings come from, in increasing precedence: defaults, the JSON config file
                (--config FILE or ROUSE_CONFIG), environment variables, flags.

                setting (flag / environment)                          default
                """
            text += "\n"
            for setting in RouseConfiguration.settings {
                text += "  \(setting.flag) / \(setting.environmentVariable)\n"
                text += "      \(setting.meaning)"
                text += setting.defaultValue.isEmpty ? " (no default)\n" : " (default: \(setting.defaultValue))\n"
            }
        }
        return text
    }
}

func printError(_ message: String) {
    FileHandle.standardError.write(Data((message + "\n").utf8))
}

/// Prints `object` as one JSON document on one line (keys sorted): what `--json` gives a script.
func printJSON(_ object: [String: Any]) {
    let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
    FileHandle.standardOutput.write(data + Data("\n".utf8))
}
