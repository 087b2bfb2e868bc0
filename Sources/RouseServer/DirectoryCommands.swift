import Foundation
import Glibc
import HTTPAPI
import Registrar
import RouseVocabulary
import Storage

/// The operator's commands for organisations, extensions and their registrations. Each reads the
/// database setting as `rouse migrate` does, runs one operation and exits: 0 on success, 1 with
/// one line on standard error otherwise. Passwords are taken from `--password` or one line of
/// standard input, and are never printed.
extension CommandLineInterface {
    static let directoryCommands: [Command] = [
        Command(
            name: "domain add", summary: "add an organisation (SIP domain)",
            usage: "rouse domain add DOMAIN [--json] [--database-url URL]",
            run: { cli, arguments in
                cli.runDirectoryCommand(arguments, usage: "rouse domain add DOMAIN [--json]", positional: 1...1, switches: ["--json"]) { context in
                    let domain = try context.directory.addDomain(context.positional[0])
                    if context.json { return printJSON(["domain": domain]) }
                    print("added domain \(domain)")
                }
            }),
        Command(
            name: "domain list", summary: "list the organisations",
            usage: "rouse domain list [--json] [--database-url URL]",
            run: { cli, arguments in
                cli.runDirectoryCommand(arguments, usage: "rouse domain list [--json]", positional: 0...0, switches: ["--json"]) { context in
                    let domains = try context.directory.listDomains()
                    if context.json { return printJSON(["items": domains.map(AdminAPI.item), "total": domains.count]) }
                    if domains.isEmpty { print("no domains") }
                    for domain in domains {
                        print("\(domain.domain)  \(domain.extensionCount) extension\(domain.extensionCount == 1 ? "" : "s")")
                    }
                }
            }),
        Command(
            name: "domain remove", summary: "remove an organisation that has no extensions left",
            usage: "rouse domain remove DOMAIN [--database-url URL]",
            run: { cli, arguments in
                cli.runDirectoryCommand(arguments, usage: "rouse domain remove DOMAIN", positional: 1...1) { context in
                    try context.directory.removeDomain(context.positional[0])
                    print("removed domain \(context.positional[0].lowercased())")
                }
            }),
        Command(
            name: "extension add",
            summary: "add an extension (--name: its display name); the password comes from --password or one line on standard input",
            usage: "rouse extension add NUMBER@DOMAIN [--password PASSWORD] [--name NAME] [--json] [--database-url URL]",
            run: { cli, arguments in
                cli.runDirectoryCommand(
                    arguments, usage: "rouse extension add NUMBER@DOMAIN [--password PASSWORD] [--name NAME] [--json]", positional: 1...1,
                    acceptsPassword: true, options: ["--name"], switches: ["--json"]
                ) { context in
                    let aor = try DirectoryError.parseAddress(context.positional[0])
                    let name = try context.options["--name"].flatMap { text throws(DirectoryError) in try DirectoryError.parseDisplayName(text) }
                    let password = try context.password(for: aor)
                    try context.directory.addExtension(aor, password: password, displayName: name)
                    if context.json { return printJSON(["address": aor.description, "displayName": name ?? NSNull()]) }
                    print("added extension \(aor)\(name.map { " (\($0))" } ?? "")")
                }
            }),
        Command(
            name: "extension update", summary: "change an extension's display name (--name ''  removes it)",
            usage: "rouse extension update NUMBER@DOMAIN --name NAME [--database-url URL]",
            run: { cli, arguments in
                cli.runDirectoryCommand(
                    arguments, usage: "rouse extension update NUMBER@DOMAIN --name NAME", positional: 1...1, options: ["--name"]
                ) { context in
                    let aor = try DirectoryError.parseAddress(context.positional[0])
                    guard let given = context.options["--name"] else {
                        throw CommandLineProblem("nothing to change: pass --name NAME (--name '' removes the display name)")
                    }
                    let name = try DirectoryError.parseDisplayName(given)
                    try context.directory.setDisplayName(aor, name)
                    print(name.map { "\(aor) is now called \($0)" } ?? "\(aor) has no display name now")
                }
            }),
        Command(
            name: "extension list", summary: "list the extensions, of one organisation or all",
            usage: "rouse extension list [DOMAIN] [--json] [--database-url URL]",
            run: { cli, arguments in
                cli.runDirectoryCommand(arguments, usage: "rouse extension list [DOMAIN] [--json]", positional: 0...1, switches: ["--json"]) { context in
                    let extensions = try context.directory.listExtensions(domain: context.positional.first)
                    if context.json { return printJSON(["items": extensions.map(AdminAPI.item), "total": extensions.count]) }
                    if extensions.isEmpty { print("no extensions") }
                    for item in extensions {
                        let count = item.liveBindingCount
                        print("\(item.aor)  \(item.displayName.map { "\($0)  " } ?? "")\(count) registration\(count == 1 ? "" : "s")")
                    }
                }
            }),
        Command(
            name: "extension passwd",
            summary: "change an extension's password (from --password or one line on standard input)",
            usage: "rouse extension passwd NUMBER@DOMAIN [--password PASSWORD] [--database-url URL]",
            run: { cli, arguments in
                cli.runDirectoryCommand(
                    arguments, usage: "rouse extension passwd NUMBER@DOMAIN [--password PASSWORD]", positional: 1...1,
                    acceptsPassword: true
                ) { context in
                    let aor = try DirectoryError.parseAddress(context.positional[0])
                    let password = try context.password(for: aor)
                    try context.directory.changePassword(aor, password: password)
                    print("changed the password of \(aor)")
                }
            }),
        Command(
            name: "extension remove", summary: "remove an extension and its registrations",
            usage: "rouse extension remove NUMBER@DOMAIN [--database-url URL]",
            run: { cli, arguments in
                cli.runDirectoryCommand(arguments, usage: "rouse extension remove NUMBER@DOMAIN", positional: 1...1) { context in
                    let aor = try DirectoryError.parseAddress(context.positional[0])
                    try context.directory.removeExtension(aor)
                    print("removed extension \(aor)")
                }
            }),
        Command(
            name: "registrations", summary: "show live registrations and their push channels (--tokens: whole tokens)",
            usage: "rouse registrations [NUMBER@DOMAIN] [--tokens] [--json] [--database-url URL]",
            run: { cli, arguments in
                cli.runDirectoryCommand(
                    arguments, usage: "rouse registrations [NUMBER@DOMAIN] [--tokens] [--json]", positional: 0...1, switches: ["--tokens", "--json"]
                ) { context in
                    try context.showRegistrations()
                }
            }),
    ]

    /// What a directory command works with once its arguments and settings are read.
    struct DirectoryCommandContext {
        let positional: [String]
        let givenPassword: String?
        /// The command's own options with a value that were given (`--name`), by name.
        let options: [String: String]
        /// The command's own on/off options that were given (`--generate-password`).
        let switches: Set<String>
        let settings: PostgresSettings
        let directory: PostgresDirectory

        /// `--password`, or one line of standard input (without echo on a terminal).
        func password(for aor: AddressOfRecord) throws -> String {
            if let givenPassword { return givenPassword }
            guard let line = PasswordReader.readLine(prompt: "password for \(aor): ") else {
                throw CommandLineProblem("no password given: pass --password or one line on standard input")
            }
            return line
        }

        /// `--json`: one JSON document on standard output instead of lines for people.
        var json: Bool { switches.contains("--json") }

        /// Bindings, then posted tokens (`POST /api/v1/push/register`); tokens shortened, whole
        /// with `--tokens`.
        func showRegistrations() throws {
            let aor = try positional.first.map { text throws(DirectoryError) in try DirectoryError.parseAddress(text) }
            if let aor, try !directory.hasExtension(aor) { throw DirectoryError.noSuchExtension(aor) }
            let connection = try settings.connect()
            let now = Date()
            let bindings = try PostgresLocationStore.loadBindings(on: connection, for: aor, now: now)
            let posted = try PostedPushTokens.list(for: aor, on: connection)
            let dead = try PostgresLocationStore.deadTokens(on: connection, among: bindings.flatMap(\.pushChannels) + posted.map(\.channel))
            let deadIDs = Set(dead.map(\.id))
            let isDead = { (channel: PushChannel) in deadIDs.contains(channel.tokenID) }
            let whole = switches.contains("--tokens")
            let shown = { (token: String) in whole ? token : Binding.shortenedToken(token) }
            if json {
                func addressed(_ item: [String: Any], _ aor: AddressOfRecord) -> [String: Any] { item.merging(["address": aor.description]) { $1 } }
                return printJSON([
                    "bindings": bindings.map { addressed(AdminAPI.item($0, now: now, isDead: isDead, wholeTokens: whole), $0.aor) },
                    "postedTokens": posted.map { addressed(AdminAPI.item($0, isDead: isDead, wholeTokens: whole), $0.aor) },
                ])
            }
            defer { Self.printPosted(posted, shown: shown) }
            if bindings.isEmpty {
                print(aor.map { "no registrations for \($0)" } ?? "no registrations")
                return
            }
            for binding in bindings {
                print(
                    "\(binding.aor)  \(binding.contactForDisplay)  user agent: \(binding.userAgent ?? "-")  "
                        + "\(binding.flow.transport) from \(binding.flow.sourceText)  expires in \(binding.remainingSeconds(at: now)) s")
                for channel in binding.pushChannels {
                    print(
                        "    push \(channel.provider.rawValue) / \(shown(channel.token)) / \(channel.param ?? "-") / "
                            + "\(channel.kind.rawValue)\(isDead(channel) ? " DEAD" : "")")
                }
            }
        }

        /// Posted tokens, shown as for bindings.
        static func printPosted(_ posted: [PostedPushToken], shown: (String) -> String) {
            guard !posted.isEmpty else { return }
            print("can be woken by push (posted):")
            for token in posted {
                print(
                    "    \(token.aor)  push \(token.channel.provider.rawValue) / \(shown(token.channel.token)) / "
                        + "\(token.channel.param ?? "-") / \(token.channel.kind.rawValue)  device: \(token.deviceID ?? "-")")
            }
        }
    }

    /// A refusal by the command line itself (bad usage, no password), shown as one line.
    struct CommandLineProblem: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    /// Splits this command's own arguments (positional ones, `--password`, the options with a
    /// value in `options`, the on/off options in `switches`) from the setting flags, reads the
    /// settings, and runs `body`; any error is one line on standard error and status 1.
    func runDirectoryCommand(
        _ arguments: [String], usage: String, positional allowed: ClosedRange<Int>, acceptsPassword: Bool = false,
        options allowedOptions: Set<String> = [], switches allowedSwitches: Set<String> = [], _ body: (DirectoryCommandContext) throws -> Void
    ) -> Int32 {
        var positional: [String] = []
        var values: [String: String] = [:]
        var switches: Set<String> = []
        let valued = allowedOptions.union(acceptsPassword ? ["--password"] : [])
        var settingFlags: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            if allowedSwitches.contains(argument) {
                switches.insert(argument)
                index += 1
            } else if let name = valued.first(where: { argument == $0 || argument.hasPrefix($0 + "=") }) {
                if argument == name {
                    guard index + 1 < arguments.count else {
                        printError("rouse: option '\(name)' needs a value")
                        return 1
                    }
                    values[name] = arguments[index + 1]
                    index += 2
                } else {
                    values[name] = String(argument.dropFirst(name.count + 1))
                    index += 1
                }
            } else if argument.hasPrefix("--") {
                let name = String(argument.prefix { $0 != "=" })
                guard name == "--config" || RouseConfiguration.settings.contains(where: { $0.flag == name }) else {
                    printError("rouse: unknown option '\(name)'; usage: \(usage)")
                    return 1
                }
                settingFlags.append(argument)
                if !argument.contains("="), index + 1 < arguments.count {
                    settingFlags.append(arguments[index + 1])
                    index += 1
                }
                index += 1
            } else {
                positional.append(argument)
                index += 1
            }
        }
        guard allowed.contains(positional.count) else {
            printError("rouse: usage: \(usage)")
            return 1
        }
        guard let configuration = loadConfiguration(settingFlags) else { return 1 }
        let settings = configuration.databaseSettings
        let context = DirectoryCommandContext(
            positional: positional, givenPassword: values["--password"], options: values, switches: switches, settings: settings,
            directory: PostgresDirectory(settings: settings))
        do {
            let connection = try settings.connect()
            guard try Migrator.currentVersion(connection) >= 10 else {
                throw CommandLineProblem("the database has no directory yet: run rouse migrate first")
            }
            try body(context)
            return 0
        } catch {
            printError("rouse: \(error)")
            return 1
        }
    }
}

/// Reads one line of standard input, with echo off when it is a terminal.
enum PasswordReader {
    static func readLine(prompt: String) -> String? {
        let isTerminal = isatty(STDIN_FILENO) == 1
        var saved = termios()
        if isTerminal {
            FileHandle.standardError.write(Data(prompt.utf8))
            tcgetattr(STDIN_FILENO, &saved)
            var silent = saved
            silent.c_lflag &= ~tcflag_t(ECHO)
            tcsetattr(STDIN_FILENO, TCSAFLUSH, &silent)
        }
        defer {
            if isTerminal {
                tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved)
                FileHandle.standardError.write(Data("\n".utf8))
            }
        }
        guard var line = Swift.readLine(strippingNewline: true) else { return nil }
        if line.hasSuffix("\r") { line.removeLast() }
        return line
    }
}
