import Foundation
import RouseVocabulary
import SIPProxy
import Storage

/// The operator's commands for outbound routes (docs/calls.md, "Calls to the outside"). Each reads
/// the database setting as `rouse serve` does, runs one operation and exits: 0 on success, 1 with
/// one line on standard error otherwise. A route's password comes from `--password` or one line of
/// standard input and is never printed; running instances pick every change up at once.
extension CommandLineInterface {
    static let routeUsage =
        "rouse route add DOMAIN NAME --pattern prefix:P|regex:R|domain:D --hops HOP[,HOP…] [--position N] [--strip N] [--prepend DIGITS] [--hop-timeout MS] [--username U [--password P]] [--caller-identity asserted-identity|unchanged|from:NUMBER] [--emergency] [--json]"

    static let routeCommands: [Command] = [
        Command(
            name: "route add", summary: "add an outbound route of an organisation (calls to numbers and other domains)",
            usage: routeUsage,
            run: { cli, arguments in
                cli.runPushCommand(
                    arguments, usage: routeUsage,
                    options: ["--pattern", "--hops", "--position", "--strip", "--prepend", "--hop-timeout", "--username", "--password", "--caller-identity"],
                    switches: ["--emergency", "--json"], positional: 2...2
                ) { context in
                    try Self.requireRouteTables(context.connection)
                    guard let pattern = context.options["--pattern"] else { throw CommandLineProblem("--pattern is required") }
                    guard let hops = context.options["--hops"] else { throw CommandLineProblem("--hops is required") }
                    func number(_ option: String) throws -> Int? {
                        guard let text = context.options[option] else { return nil }
                        guard let value = Int(text) else { throw CommandLineProblem("\(option.dropFirst(2)): '\(text)' is not a whole number") }
                        return value
                    }
                    var password = context.options["--password"]
                    if context.options["--username"] != nil, password == nil {
                        guard let line = PasswordReader.readLine(prompt: "trunk password: ") else {
                            throw CommandLineProblem("no password given: pass --password or one line on standard input")
                        }
                        password = line
                    }
                    let draft = RouteDraft(
                        organisation: context.positional[0], name: context.positional[1], position: try number("--position"), pattern: pattern,
                        strip: try number("--strip") ?? 0, prepend: context.options["--prepend"] ?? "",
                        hops: hops.split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) },
                        hopTimeoutMilliseconds: try number("--hop-timeout") ?? 4000, username: context.options["--username"], password: password,
                        callerIdentity: context.options["--caller-identity"] ?? "asserted-identity", emergency: context.switches.contains("--emergency"))
                    let id = try PostgresRoutes(connection: context.connection).add(draft)
                    if context.json { return printJSON(["id": id, "organisation": draft.organisation.lowercased(), "name": draft.name]) }
                    print("added route \(draft.name) of \(draft.organisation.lowercased())")
                }
            }),
        Command(
            name: "route list", summary: "list the outbound routes, of one organisation or all (passwords are never shown)",
            usage: "rouse route list [DOMAIN] [--json]",
            run: { cli, arguments in
                cli.runPushCommand(arguments, usage: "rouse route list [DOMAIN] [--json]", options: [], switches: ["--json"], positional: 0...1) { context in
                    try Self.requireRouteTables(context.connection)
                    let routes = try PostgresRoutes(connection: context.connection).list(organisation: context.positional.first)
                    if context.json { return printJSON(["items": routes.map(Self.routeItem), "total": routes.count]) }
                    if routes.isEmpty { print("no routes") }
                    for listed in routes {
                        let route = listed.route
                        var words = ["\(route.organisation)  \(route.position)  \(route.name)  \(route.pattern)"]
                        if route.strip > 0 || !route.prepend.isEmpty { words.append("strip \(route.strip) prepend '\(route.prepend)'") }
                        words.append("via " + route.hops.map(\.description).joined(separator: ", "))
                        words.append("hop timeout \(HopFailover.seconds(route.hopTimeout))")
                        if let username = route.username { words.append("as \(username)\(listed.hasPassword ? " (password set)" : "")") }
                        words.append("caller \(route.callerIdentity)")
                        if route.emergency { words.append("EMERGENCY") }
                        print(words.joined(separator: "  "))
                    }
                }
            }),
        Command(
            name: "route remove", summary: "remove an outbound route",
            usage: "rouse route remove DOMAIN NAME",
            run: { cli, arguments in
                cli.runPushCommand(arguments, usage: "rouse route remove DOMAIN NAME", options: [], positional: 2...2) { context in
                    try Self.requireRouteTables(context.connection)
                    guard try PostgresRoutes(connection: context.connection).remove(organisation: context.positional[0], name: context.positional[1]) else {
                        throw CommandLineProblem("\(context.positional[0].lowercased()) has no route named \(context.positional[1])")
                    }
                    print("removed route \(context.positional[1]) of \(context.positional[0].lowercased())")
                }
            }),
    ]

    static func requireRouteTables(_ connection: PostgresConnection) throws {
        guard try Migrator.currentVersion(connection) >= 600 else {
            throw CommandLineProblem("the database has no route tables yet: run rouse migrate first")
        }
    }

    /// A route as `--json` lists it: every field but the password.
    static func routeItem(_ listed: PostgresRoutes.Listed) -> [String: Any] {
        let route = listed.route
        var item: [String: Any] = [
            "id": route.id, "organisation": route.organisation, "name": route.name, "position": route.position,
            "pattern": route.pattern.description, "strip": route.strip, "prepend": route.prepend, "hops": route.hops.map(\.description),
            "hop_timeout_ms": route.hopTimeout.wholeMilliseconds,
            "caller_identity": route.callerIdentity.description, "emergency": route.emergency, "has_password": listed.hasPassword,
        ]
        if let username = route.username { item["username"] = username }
        return item
    }
}
