import Crypto
import Foundation
import Storage

/// The operator's commands for the admin API's administrators. Like the directory commands they
/// read the database setting, run one operation and exit 0, or 1 with one line on standard error.
/// A password comes from `--password` or one line of standard input; with `--generate-password`,
/// or when standard input is empty, a random one is generated and printed once. Stored only as a
/// PBKDF2 hash. `--if-none` adds the administrator only to a database that has none yet (the
/// first run of `make run`).
extension CommandLineInterface {
    static let adminCommands: [Command] = [
        Command(
            name: "admin add",
            summary: "add an administrator of the admin API; the password comes from --password or standard input, or is generated",
            usage: "rouse admin add NAME [--password PASSWORD | --generate-password] [--if-none] [--json] [--database-url URL]",
            run: { cli, arguments in
                cli.runDirectoryCommand(
                    arguments, usage: "rouse admin add NAME [--password PASSWORD | --generate-password] [--if-none] [--json]", positional: 1...1,
                    acceptsPassword: true, switches: ["--generate-password", "--if-none", "--json"]
                ) { context in
                    let connection = try adminConnection(context)
                    let name = context.positional[0]
                    let generate = context.switches.contains("--generate-password")
                    if generate, context.givenPassword != nil {
                        throw CommandLineProblem("give either --password or --generate-password, not both")
                    }
                    var password = generate ? "" : context.givenPassword ?? PasswordReader.readLine(prompt: "password for admin \(name): ") ?? ""
                    let generated = password.isEmpty
                    if generated { password = generatePassword() }
                    if context.switches.contains("--if-none") {
                        guard try PostgresAdmins.addFirst(name: name, password: password, on: connection) else {
                            if context.json { return printJSON(["name": name, "added": false]) }
                            print("an administrator exists already; added none")
                            return
                        }
                    } else {
                        try PostgresAdmins.add(name: name, password: password, on: connection)
                    }
                    if context.json {
                        // The one secret --json prints: a password Rouse made, which is shown once and nowhere else.
                        return printJSON(["name": name, "added": true, "generatedPassword": generated ? password : NSNull()])
                    }
                    print("added admin \(name)")
                    if generated { print("generated password (shown once): \(password)") }
                }
            }),
        Command(
            name: "admin passwd",
            summary: "change an administrator's password (from --password or standard input, or generated); their sessions end",
            usage: "rouse admin passwd NAME [--password PASSWORD | --generate-password] [--database-url URL]",
            run: { cli, arguments in
                cli.runDirectoryCommand(
                    arguments, usage: "rouse admin passwd NAME [--password PASSWORD | --generate-password]", positional: 1...1,
                    acceptsPassword: true, switches: ["--generate-password"]
                ) { context in
                    let connection = try adminConnection(context)
                    let name = context.positional[0]
                    let generate = context.switches.contains("--generate-password")
                    if generate, context.givenPassword != nil {
                        throw CommandLineProblem("give either --password or --generate-password, not both")
                    }
                    var password = generate ? "" : context.givenPassword ?? PasswordReader.readLine(prompt: "new password for admin \(name): ") ?? ""
                    let generated = password.isEmpty
                    if generated { password = generatePassword() }
                    guard try PostgresAdmins.changePassword(name: name, password: password, on: connection) else {
                        throw CommandLineProblem("there is no admin \(name)")
                    }
                    print("changed the password of admin \(name); their signed-in sessions have ended")
                    if generated { print("generated password (shown once): \(password)") }
                }
            }),
        Command(
            name: "admin remove", summary: "remove an administrator of the admin API (their sessions end)",
            usage: "rouse admin remove NAME [--database-url URL]",
            run: { cli, arguments in
                cli.runDirectoryCommand(arguments, usage: "rouse admin remove NAME", positional: 1...1) { context in
                    let name = context.positional[0]
                    guard try PostgresAdmins.remove(name: name, on: try adminConnection(context)) else {
                        throw CommandLineProblem("there is no admin \(name)")
                    }
                    print("removed admin \(name)")
                }
            }),
        Command(
            name: "admin list", summary: "list the administrators of the admin API",
            usage: "rouse admin list [--json] [--database-url URL]",
            run: { cli, arguments in
                cli.runDirectoryCommand(arguments, usage: "rouse admin list [--json]", positional: 0...0, switches: ["--json"]) { context in
                    let admins = try PostgresAdmins.list(on: try adminConnection(context))
                    let format = ISO8601DateFormatter()
                    if context.json {
                        return printJSON(["items": admins.map { ["name": $0.name, "createdAt": format.string(from: $0.createdAt)] }, "total": admins.count])
                    }
                    if admins.isEmpty { print("no admins") }
                    for admin in admins { print("\(admin.name)  added \(format.string(from: admin.createdAt))") }
                }
            }),
    ]

    /// A connection to a database migrated at least to the administrators' table.
    static func adminConnection(_ context: DirectoryCommandContext) throws -> PostgresConnection {
        let connection = try context.settings.connect()
        guard try Migrator.currentVersion(connection) >= 200 else {
            throw CommandLineProblem("the database has no admins table yet: run rouse migrate first")
        }
        return connection
    }

    /// 20 random characters from letters and digits (about 119 bits).
    static func generatePassword(length: Int = 20) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
        var out = ""
        while out.count < length {
            for byte in SecureRandom.bytes(32) where byte < 248 && out.count < length {
                out.append(alphabet[Int(byte) % alphabet.count])
            }
        }
        return out
    }
}
