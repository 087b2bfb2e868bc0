import Crypto
import Storage

/// The operator's commands for secrets sealed at rest (docs/operators.md, "Secrets at rest"):
/// make a key file, check that every stored secret opens, seal what an upgrade left plain, and
/// re-seal everything under a new key in one transaction. They read the settings like every
/// command (`secrets_key_file` or `ROUSE_SECRETS_KEY`), exit 0, or 1 with one line on standard
/// error, and never print a key or a secret.
extension CommandLineInterface {
    static let secretsCommands: [Command] = [
        Command(
            name: "secrets new-key",
            summary: "write a new random secrets key to a new file (mode 0600); prints its id",
            usage: "rouse secrets new-key --key-file FILE",
            run: { cli, arguments in cli.runNewKey(arguments) }),
        Command(
            name: "secrets check",
            summary: "check that every secret stored opens with the configured key; counts them by key",
            usage: "rouse secrets check [--config FILE] [--secrets-key-file FILE] [--database-url URL]",
            run: { cli, arguments in
                cli.runPushCommand(arguments, usage: "rouse secrets check", options: [], positional: 0...0) { context in
                    try requireSealing(context.connection)
                    let count = try SealedSecrets.verify(on: context.connection)
                    print("\(count) secrets stored, every one opens with \(context.connection.secrets?.description ?? "")")
                }
            }),
        Command(
            name: "secrets seal",
            summary: "seal the secrets stored before sealing (rouse serve does it at start)",
            usage: "rouse secrets seal [--config FILE] [--secrets-key-file FILE] [--database-url URL]",
            run: { cli, arguments in
                cli.runPushCommand(arguments, usage: "rouse secrets seal", options: [], positional: 0...0) { context in
                    try requireSealing(context.connection)
                    let count = try SealedSecrets.sealPlainValues(on: context.connection)
                    print("sealed \(count.sealed) secrets with \(context.connection.secrets?.current.description ?? "")")
                }
            }),
        Command(
            name: "secrets reseal",
            summary: "re-seal every stored secret under the key of --new-key-file (or the configured current key), in one transaction",
            usage: "rouse secrets reseal [--new-key-file FILE] [--config FILE] [--secrets-key-file FILE] [--database-url URL]",
            run: { cli, arguments in
                cli.runPushCommand(
                    arguments, usage: "rouse secrets reseal [--new-key-file FILE]", options: ["--new-key-file"], positional: 0...0
                ) { context in
                    try requireSealing(context.connection)
                    guard let current = context.connection.secrets else { throw SealedSecrets.missingKey }
                    let target = try context.options["--new-key-file"].map { path throws(SecretSealError) in
                        SecretSeal(current: try SecretsKeySource.read(path).current)
                    } ?? SecretSeal(current: current.current)
                    let count = try SealedSecrets.reseal(on: context.connection, with: target)
                    print("re-sealed \(count.sealed) secrets with \(target.current) (\(count.unchanged) were sealed with it already)")
                }
            }),
    ]

    /// `secrets new-key --key-file FILE`: no database, no settings.
    func runNewKey(_ arguments: [String]) -> Int32 {
        var path: String?
        if arguments.count == 2, arguments[0] == "--key-file" { path = arguments[1] }
        if arguments.count == 1, arguments[0].hasPrefix("--key-file=") { path = String(arguments[0].dropFirst("--key-file=".count)) }
        guard let path, !path.isEmpty else {
            printError("rouse: usage: rouse secrets new-key --key-file FILE")
            return 1
        }
        do {
            let key = try SecretsKeySource.create(path)
            print("wrote \(key) to \(path)")
            return 0
        } catch {
            printError("rouse: \(error)")
            return 1
        }
    }

    private static func requireSealing(_ connection: PostgresConnection) throws {
        guard try Migrator.currentVersion(connection) >= 740 else {
            throw CommandLineProblem("the database has no sealed secrets yet: run rouse migrate first")
        }
    }
}
