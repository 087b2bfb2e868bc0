import CallRouting
import Foundation
import HTTPAPI
public import Push
import Registrar
import RouseVocabulary
import Storage

/// The operator's push commands: push apps (add, list, remove) and the test push. Each reads the
/// database and push settings as `rouse serve` does, runs one operation and exits: 0 on success, 1
/// with one line on standard error otherwise. Keys are read from files and never printed.
extension CommandLineInterface {
    static let pushTestUsage =
        "rouse push test --app ID --token T [--provider apns|apns.dev|fcm] [--json] | rouse push test --webpush ENDPOINT [--json]"

    static let pushCommands: [Command] = [
        Command(
            name: "push-app add apns", summary: "add an APNs app (token auth with a .p8 key)",
            usage: "rouse push-app add apns --team-id T --key-id K --topic BUNDLE --key-file F.p8 [--environment production|sandbox] [--param P] [--json]",
            run: { cli, arguments in
                cli.runPushCommand(
                    arguments,
                    usage: "rouse push-app add apns --team-id T --key-id K --topic BUNDLE --key-file F.p8 [--environment production|sandbox] [--param P] [--json]",
                    options: ["--team-id", "--key-id", "--topic", "--key-file", "--environment", "--param"], switches: ["--json"], positional: 0...0
                ) { context in
                    for required in ["--team-id", "--key-id", "--topic", "--key-file"] where context.options[required] == nil {
                        throw CommandLineProblem("\(required) is required")
                    }
                    var environment: APNsEnvironment? = nil
                    if let given = context.options["--environment"] {
                        guard let parsed = APNsEnvironment(rawValue: given) else {
                            throw CommandLineProblem("environment: '\(given)' is not production or sandbox")
                        }
                        environment = parsed
                    }
                    let key = try Self.readKeyFile(context.options["--key-file"]!, field: "key-file")
                    let app = PushApp(
                        credentials: .apns(APNsCredentials(
                            teamID: context.options["--team-id"]!, keyID: context.options["--key-id"]!,
                            topic: context.options["--topic"]!, privateKeyPEM: key, environment: environment)),
                        param: context.options["--param"] ?? "")
                    try context.add(app)
                }
            }),
        Command(
            name: "push-app add fcm", summary: "add an FCM app (a Google service account JSON file)",
            usage: "rouse push-app add fcm --service-account F.json [--param P] [--direct-boot on|off] [--json]",
            run: { cli, arguments in
                cli.runPushCommand(
                    arguments, usage: "rouse push-app add fcm --service-account F.json [--param P] [--direct-boot on|off] [--json]",
                    options: ["--service-account", "--param", "--direct-boot"], switches: ["--json"], positional: 0...0
                ) { context in
                    guard let path = context.options["--service-account"] else {
                        throw CommandLineProblem("--service-account is required")
                    }
                    let directBoot = context.options["--direct-boot"] ?? "on"
                    guard directBoot == "on" || directBoot == "off" else { throw CommandLineProblem("--direct-boot must be on or off") }
                    let text = try Self.readKeyFile(path, field: "service-account")
                    let account = try FCMServiceAccount(json: Array(text.utf8))
                    let app = PushApp(credentials: .fcm(account), param: context.options["--param"] ?? "", directBootOK: directBoot == "on")
                    try context.add(app)
                }
            }),
        Command(
            name: "push-app list", summary: "list the push apps (keys are never shown)",
            usage: "rouse push-app list [--json]",
            run: { cli, arguments in
                cli.runPushCommand(arguments, usage: "rouse push-app list [--json]", options: [], switches: ["--json"], positional: 0...0) { context in
                    let apps = try PostgresPushApps(connection: context.connection).summaries()
                    if context.json { return printJSON(["items": apps.map(AdminAPI.item), "total": apps.count]) }
                    if apps.isEmpty { print("no push apps") }
                    for app in apps {
                        let answers = app.param.isEmpty ? "default \(app.kind == "apns" ? "iPhone" : "Android") app" : "param \(app.param)"
                        let environment = app.environment.map { "  \($0) only" } ?? ""
                        print("#\(app.id)  \(app.kind)  \(app.details)  \(answers)\(environment)  added \(app.createdAt)")
                    }
                }
            }),
        Command(
            name: "push-app remove", summary: "remove a push app",
            usage: "rouse push-app remove ID",
            run: { cli, arguments in
                cli.runPushCommand(arguments, usage: "rouse push-app remove ID", options: [], positional: 1...1) { context in
                    guard let id = Int64(context.positional[0].trimmingCharacters(in: CharacterSet(charactersIn: "#"))) else {
                        throw CommandLineProblem("'\(context.positional[0])' is not a push app id (see rouse push-app list)")
                    }
                    guard try PostgresPushApps(connection: context.connection).remove(id: id) else {
                        throw CommandLineProblem("there is no push app #\(id)")
                    }
                    print("removed push app #\(id)")
                }
            }),
        Command(
            name: "push test",
            summary: "send one test ring push (the app wakes, nothing rings) and print the provider's answer",
            usage: Self.pushTestUsage,
            run: { cli, arguments in
                cli.runPushCommand(
                    arguments, usage: Self.pushTestUsage, options: ["--app", "--token", "--provider", "--webpush"], switches: ["--json"],
                    positional: 0...0
                ) { context in
                    if let endpoint = context.options["--webpush"] {
                        guard context.options["--app"] == nil, context.options["--token"] == nil, context.options["--provider"] == nil else {
                            throw CommandLineProblem("--webpush ENDPOINT goes alone: a web push has no push app")
                        }
                        try context.testWebPush(endpoint: endpoint)
                        return
                    }
                    guard let appText = context.options["--app"], let id = Int64(appText.trimmingCharacters(in: CharacterSet(charactersIn: "#"))) else {
                        throw CommandLineProblem("--app ID is required (see rouse push-app list), or --webpush ENDPOINT")
                    }
                    guard let token = context.options["--token"], !token.isEmpty else { throw CommandLineProblem("--token is required") }
                    var provider: PushProvider? = nil
                    if let given = context.options["--provider"] {
                        guard let parsed = PushProvider(rawValue: given), parsed != .webpush else {
                            throw CommandLineProblem("provider: '\(given)' is not apns, apns.dev or fcm (a web push: --webpush ENDPOINT)")
                        }
                        provider = parsed
                    }
                    guard let app = try PostgresPushApps(connection: context.connection).app(id: id) else {
                        throw CommandLineProblem("there is no push app #\(id)")
                    }
                    let family = app.family
                    let settings = context.pushSettings
                    let chosen = provider
                    try context.testPush(
                        family: family, token: family == .apns ? token.lowercased() : token,
                        provider: provider ?? (family == .fcm ? .fcm : .apns), appID: id, through: "app #\(id)"
                    ) {
                        await PushService(settings: settings, apps: [app]).sendTest(app: app, token: token, provider: chosen)
                    }
                }
            }),
    ]

    /// What a push command works with once its arguments and settings are read.
    struct PushCommandContext {
        let positional: [String]
        let options: [String: String]
        /// The command's own on/off options that were given (`--json`).
        let switches: Set<String>
        let connection: PostgresConnection
        let pushSettings: PushSettings
        /// Seconds between two test pushes to one token (`test_push_interval`).
        let testPushInterval: TimeInterval
        /// Every setting (web push reads its contact and allowed hosts).
        let configuration: RouseConfiguration

        /// `--json`: one JSON document on standard output instead of lines for people.
        var json: Bool { switches.contains("--json") }

        /// One test push to `token`, limited to one per `test_push_interval`: sends it, marks the
        /// token dead when the provider says so, records it like any push and prints its outcome;
        /// throws `NotAccepted` (exit 1) unless the provider accepted it. Blocks until it is done.
        func testPush(
            family: PushProviderFamily, token: String, provider: PushProvider, appID: Int64?, through: String,
            send: @escaping @Sendable () async -> PushOutcome
        ) throws {
            let claim = try TestPushClaims.claim(family: family, token: token, interval: testPushInterval, on: connection)
            if case .limited(let seconds) = claim {
                throw CommandLineProblem(
                    "a test push went to this token less than \(Int(testPushInterval.rounded(.up))) s ago (test_push_interval); try again in \(seconds) s")
            }
            let outcome = PushTestRun.run(send)
            if !outcome.isAccepted { try TestPushClaims.release(claim, on: connection) }
            if outcome.isDeadToken {
                try PostgresPushStores.markDead(on: connection, family: family, token: token, reason: outcome.reason ?? "dead")
            }
            try PostgresPushStores.insert(
                PushRecord(
                    createdAt: Date(), aor: nil, callID: nil, provider: provider, tokenShort: PushRecord.shorten(token), appID: appID,
                    outcome: outcome.word, status: outcome.status, reason: outcome.reason, explanation: outcome.explanation,
                    latencyMilliseconds: outcome.latencyMilliseconds),
                on: connection)
            if json {
                printJSON([
                    "appId": appID.map { $0 as Any } ?? NSNull(), "outcome": outcome.word, "description": outcome.description,
                    "latencyMs": outcome.latencyMilliseconds, "status": outcome.status ?? NSNull(), "reason": outcome.reason ?? NSNull(),
                    "explanation": outcome.explanation, "deadToken": outcome.isDeadToken,
                ])
            } else {
                print("test push through \(through): \(outcome)")
            }
            guard outcome.isAccepted else { throw PushTestRun.NotAccepted() }
        }

        /// Stores a new app and prints it with its id and the validation notes.
        func add(_ app: PushApp) throws {
            let (id, notes) = try PostgresPushApps(connection: connection).add(app)
            guard json else {
                print("added push app #\(id): \(PushApp(id: id, credentials: app.credentials, param: app.param))")
                for note in notes { print("  \(note)") }
                return
            }
            let summary = try PostgresPushApps(connection: connection).summaries().first { $0.id == id }
            printJSON((summary.map(AdminAPI.item) ?? ["id": id, "kind": app.kind, "param": app.param]).merging(["notes": notes]) { $1 })
        }
    }

    /// A key or service account file's text; errors name the file, never its content.
    static func readKeyFile(_ path: String, field: String) throws -> String {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw PushAppError(field: field, problem: "cannot read file '\(path)'")
        }
        return String(decoding: data, as: UTF8.self)
    }

    /// Splits this command's own options from the setting flags, reads the settings, opens the
    /// database (migrated to the push tables) and runs `body`; any error is one line on standard
    /// error and status 1.
    func runPushCommand(
        _ arguments: [String], usage: String, options allowed: Set<String>, switches allowedSwitches: Set<String> = [],
        positional range: ClosedRange<Int>, _ body: (PushCommandContext) throws -> Void
    ) -> Int32 {
        var positional: [String] = []
        var options: [String: String] = [:]
        var switches: Set<String> = []
        var settingFlags: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            guard argument.hasPrefix("--") else {
                positional.append(argument)
                index += 1
                continue
            }
            if allowedSwitches.contains(argument) {
                switches.insert(argument)
                index += 1
                continue
            }
            let name = String(argument.prefix { $0 != "=" })
            var value: String? = argument.contains("=") ? String(argument.drop { $0 != "=" }.dropFirst()) : nil
            if value == nil {
                guard index + 1 < arguments.count else {
                    printError("rouse: option '\(name)' needs a value; usage: \(usage)")
                    return 1
                }
                value = arguments[index + 1]
                index += 1
            }
            index += 1
            if allowed.contains(name) {
                options[name] = value
            } else if name == "--config" || RouseConfiguration.settings.contains(where: { $0.flag == name }) {
                settingFlags += [name, value!]
            } else {
                printError("rouse: unknown option '\(name)'; usage: \(usage)")
                return 1
            }
        }
        guard range.contains(positional.count) else {
            printError("rouse: usage: \(usage)")
            return 1
        }
        guard let configuration = loadConfiguration(settingFlags) else { return 1 }
        do {
            let connection = try configuration.databaseSettings.connect()
            guard try Migrator.currentVersion(connection) >= 100 else {
                throw CommandLineProblem("the database has no push tables yet: run rouse migrate first")
            }
            try body(PushCommandContext(
                positional: positional, options: options, switches: switches, connection: connection, pushSettings: configuration.pushSettings,
                testPushInterval: configuration.testPushInterval.timeInterval, configuration: configuration))
            return 0
        } catch is PushTestRun.NotAccepted {
            return 1
        } catch {
            printError("rouse: \(error)")
            return 1
        }
    }
}

extension RouseConfiguration {
    /// The push service's settings.
    public var pushSettings: PushSettings {
        PushSettings(
            apns: APNsEndpoints(production: apnsProductionURL, sandbox: apnsSandboxURL), fcmURL: fcmURL,
            caFile: pushCAFile, timeout: pushTimeout, retry: PushRetryPolicy(maxAttempts: pushAttempts),
            breaker: ProviderCircuitBreaker.Settings(
                failureThreshold: pushBreakerFailures, initialBackoff: pushBreakerBackoff, maximumBackoff: pushBreakerMaxBackoff),
            proxy: pushProxy)
    }
}

/// Runs one test push from a synchronous command. Blocks the calling thread (the command line's
/// main thread, never a cooperative one) until the push's deadline at most.
enum PushTestRun {
    /// The push was sent but not accepted: the outcome is already printed.
    struct NotAccepted: Error {}

    static func run(_ send: @escaping @Sendable () async -> PushOutcome) -> PushOutcome {
        let box = OutcomeBox()
        let done = DispatchSemaphore(value: 0)
        Task {
            box.set(await send())
            done.signal()
        }
        done.wait()
        return box.get()
    }

    /// Hands the outcome from the task to the waiting thread.
    final class OutcomeBox: @unchecked Sendable {
        // @unchecked: `outcome` is only touched under `lock`.
        private let lock = NSLock()
        private var outcome: PushOutcome?

        func set(_ value: PushOutcome) {
            lock.lock()
            outcome = value
            lock.unlock()
        }

        func get() -> PushOutcome {
            lock.lock()
            defer { lock.unlock() }
            return outcome!
        }
    }
}
