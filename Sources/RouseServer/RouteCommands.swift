import CallRouting
import Foundation
import HTTPAPI
import Registrar
import SIPProxy
import Storage

/// The operator's commands for outbound routes (docs/calls.md, "Calls to the outside"). Each reads
/// the database setting as `rouse serve` does, runs one operation and exits: 0 on success, 1 with
/// one line on standard error otherwise. A route's password comes from `--password` or one line of
/// standard input and is never printed; running instances pick every change up at once. Also the
/// toll-fraud guard's data: an extension's class of service and an organisation's national patterns.
extension CommandLineInterface {
    static let routeUsage =
        "rouse route add DOMAIN NAME --pattern prefix:P|regex:R|domain:D --hops HOP[,HOP…] [--position N] [--strip N] [--prepend DIGITS] [--hop-timeout MS] [--username U [--password P]] [--caller-identity asserted-identity|unchanged|from:NUMBER] [--emergency] [--diversion-header] [--json]"

    static let routeCommands: [Command] = [
        Command(
            name: "route add", summary: "add an outbound route of an organisation (calls to numbers and other domains)",
            usage: routeUsage,
            run: { cli, arguments in
                cli.runPushCommand(
                    arguments, usage: routeUsage,
                    options: ["--pattern", "--hops", "--position", "--strip", "--prepend", "--hop-timeout", "--username", "--password", "--caller-identity"],
                    switches: ["--emergency", "--diversion-header", "--json"], positional: 2...2
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
                        callerIdentity: context.options["--caller-identity"] ?? "asserted-identity", emergency: context.switches.contains("--emergency"),
                        diversionHeader: context.switches.contains("--diversion-header"))
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
                    if context.json { return printJSON(["items": routes.map(AdminAPI.item), "total": routes.count]) }
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
                        if route.diversionHeader { words.append("diversion-header") }
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

    static let classUsage = "rouse extension class NUMBER@DOMAIN [internal|national|international|default] [--json]"
    static let nationalUsage = "rouse domain national-patterns DOMAIN [PATTERN…] [--clear] [--json]"

    static let callClassCommands: [Command] = [
        Command(
            name: "extension class",
            summary: "show or set an extension's class of service for outside calls (default: the instance's outside_call_class)",
            usage: classUsage,
            run: { cli, arguments in
                cli.runPushCommand(arguments, usage: classUsage, options: [], switches: ["--json"], positional: 1...2) { context in
                    try Self.requireRouteTables(context.connection, version: 601)
                    let aor = try DirectoryError.parseAddress(context.positional[0])
                    let classes = PostgresCallClasses(connection: context.connection)
                    if context.positional.count == 2 {
                        let value = try PostgresCallClasses.classOfService(named: context.positional[1])
                        try classes.setClass(value, number: aor.number, organisation: aor.domain)
                    }
                    let current = try classes.callClass(number: aor.number, organisation: aor.domain)
                    if context.json { return printJSON(["address": aor.description, "classOfService": current?.rawValue ?? NSNull()]) }
                    print("\(aor): \(current.map { "class \($0)" } ?? "the instance's default class (outside_call_class)")")
                }
            }),
        Command(
            name: "domain national-patterns",
            summary: "show or replace an organisation's national patterns (outside numbers of class national)",
            usage: nationalUsage,
            run: { cli, arguments in
                cli.runPushCommand(arguments, usage: nationalUsage, options: [], switches: ["--clear", "--json"], positional: 1...(1 + PostgresCallClasses.maximumPatterns)) { context in
                    try Self.requireRouteTables(context.connection, version: 601)
                    let domain = try DirectoryError.parseDomain(context.positional[0])
                    let given = Array(context.positional.dropFirst())
                    let clear = context.switches.contains("--clear")
                    if clear, !given.isEmpty { throw CommandLineProblem("--clear takes no patterns") }
                    let classes = PostgresCallClasses(connection: context.connection)
                    if clear || !given.isEmpty { try classes.setNationalPatterns(given, organisation: domain) }
                    let patterns = try classes.nationalPatterns(organisation: domain).map(\.description)
                    if context.json { return printJSON(["domain": domain, "patterns": patterns]) }
                    if patterns.isEmpty { print("\(domain): no national patterns (every outside call is international)") }
                    for pattern in patterns { print("\(domain)  \(pattern)") }
                }
            }),
    ]

    /// Refuses a database older than `version` (600: the routes; 601: classes of service).
    static func requireRouteTables(_ connection: PostgresConnection, version: Int = 600) throws {
        guard try Migrator.currentVersion(connection) >= version else {
            throw CommandLineProblem("the database has no route tables yet: run rouse migrate first")
        }
    }
}
