import Foundation
import Storage

/// Rouse's command line. Each command returns the process exit status; messages for people go to
/// standard output (results) or standard error (problems), one line each where possible.
public struct CommandLineInterface {
    let environment: [String: String]

    public init(environment: [String: String]) {
        self.environment = environment
    }

    /// One command: its name, one-line summary and usage text.
    struct Command {
        let name: String
        let summary: String
        let usage: String
    }

    static let version = "0.1.0"

    static let commands: [Command] = [
        Command(
            name: "serve", summary: "run the SIP server (and apply migrations first)",
            usage: "rouse serve [--config FILE] [--SETTING VALUE ...]"),
        Command(
            name: "migrate", summary: "apply database migrations and exit",
            usage: "rouse migrate [--config FILE] [--database-url URL]"),
        Command(
            name: "check-config", summary: "check the configuration without starting",
            usage: "rouse check-config [--config FILE] [--SETTING VALUE ...]"),
        Command(name: "version", summary: "print the version", usage: "rouse version"),
    ]

    public func run(_ arguments: [String]) -> Int32 {
        guard let first = arguments.first else {
            print(Self.mainHelp)
            return 2
        }
        let rest = Array(arguments.dropFirst())
        if first == "--help" || first == "-h" || first == "help" {
            if let name = rest.first, let command = Self.commands.first(where: { $0.name == name }) {
                print(Self.help(for: command))
            } else {
                print(Self.mainHelp)
            }
            return 0
        }
        if first == "--version" { return runVersion() }
        guard let command = Self.commands.first(where: { $0.name == first }) else {
            printError("rouse: unknown command '\(first)' (see rouse --help)")
            return 2
        }
        if rest.contains("--help") || rest.contains("-h") {
            print(Self.help(for: command))
            return 0
        }
        switch command.name {
        case "serve": return runServe(rest)
        case "migrate": return runMigrate(rest)
        case "check-config": return runCheckConfig(rest)
        default: return runVersion()
        }
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
        return 0
    }

    func runMigrate(_ flags: [String]) -> Int32 {
        guard let configuration = loadConfiguration(flags) else { return 1 }
        do {
            let connection = try PostgresConnection(
                conninfo: configuration.databaseURL, connectTimeout: configuration.databaseConnectTimeout)
            let applied = try Migrator.migrate(connection)
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
        do {
            let server = try RouseService(configuration: configuration, logger: logger)
            try server.start()
            // Unbuffered, so that a supervisor or test reading the pipe sees it at once.
            FileHandle.standardOutput.write(
                Data("rouse \(Self.version) serving SIP on \(server.listeningPoints.map(\.description).joined(separator: ", "))\n".utf8))
            server.waitForStopSignal()
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
            text += "  " + command.name.padding(toLength: 14, withPad: " ", startingAt: 0) + command.summary + "\n"
        }
        text += "\nrouse <command> --help shows a command's options."
        return text
    }

    static func help(for command: Command) -> String {
        var text = "\(command.usage)\n\n\(command.summary)\n"
        if command.name == "serve" || command.name == "check-config" || command.name == "migrate" {
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
