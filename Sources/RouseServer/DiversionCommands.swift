import Foundation
import Registrar
import SIPMessage
import Storage

/// The operator's command for an extension's call forwarding (docs/calls.md "Diversion"). Reads
/// the database setting as `rouse serve` does, runs one operation and exits: 0 on success, 1 with
/// one line on standard error otherwise. Running instances pick every change up at once (the
/// directory is reloaded on `rouse_directory`).
extension CommandLineInterface {
    static let forwardUsage =
        "rouse extension forward NUMBER@DOMAIN [--always T] [--busy T] [--no-answer T [--after SECONDS]] [--unreachable T] [--clear] [--json]"
        + " (T: a URI, user@domain or a number; 'off' removes that rule)"

    static let diversionCommands: [Command] = [
        Command(
            name: "extension forward", summary: "show or set an extension's call forwarding (always, busy, no answer, unreachable)",
            usage: forwardUsage,
            run: { cli, arguments in
                cli.runPushCommand(
                    arguments, usage: forwardUsage, options: ["--always", "--busy", "--no-answer", "--after", "--unreachable"],
                    switches: ["--clear", "--json"], positional: 1...1
                ) { context in
                    guard try Migrator.currentVersion(context.connection) >= 602 else {
                        throw CommandLineProblem("the database has no call forwarding table yet: run rouse migrate first")
                    }
                    let aor = try DirectoryError.parseAddress(context.positional[0])
                    let store = PostgresDiversions(connection: context.connection)
                    var rules = try store.rules(of: aor)
                    if context.switches.contains("--clear") {
                        guard context.options.isEmpty else { throw CommandLineProblem("--clear takes no other option") }
                        try store.clear(aor)
                        rules = nil
                    } else if !context.options.isEmpty {
                        rules = try store.set(aor, try Self.draft(merging: context.options, into: rules))
                    }
                    if context.json { return printJSON(Self.forwardingItem(aor, rules)) }
                    print(Self.forwardingLine(aor, rules))
                }
            })
    ]

    /// The forwarding as it stands with the options given laid over it (`off` removes a rule).
    static func draft(merging options: [String: String], into current: DiversionRules?) throws -> DiversionDraft {
        func pick(_ option: String, _ now: SIPURI?) -> String? {
            guard let given = options[option] else { return now?.description }
            return given.lowercased() == "off" ? nil : given
        }
        var draft = DiversionDraft(
            always: pick("--always", current?.always), busy: pick("--busy", current?.busy), noAnswer: pick("--no-answer", current?.noAnswer),
            noAnswerAfterSeconds: current?.noAnswerAfter.map { Int($0.components.seconds) }, unreachable: pick("--unreachable", current?.unreachable))
        if let after = options["--after"] {
            guard let seconds = Int(after) else { throw CommandLineProblem("after: '\(after)' is not a whole number of seconds") }
            draft.noAnswerAfterSeconds = seconds
        }
        // A removed no-answer rule takes its ring time along; a ring time given without a
        // no-answer target is refused by the store, naming `after`.
        if draft.noAnswer == nil, options["--after"] == nil { draft.noAnswerAfterSeconds = nil }
        return draft
    }

    /// `1001@example.com  busy sip:vm1001@pbx.example  no answer (after 20 s) sip:1002@example.com`.
    static func forwardingLine(_ aor: AddressOfRecord, _ rules: DiversionRules?) -> String {
        guard let rules, !rules.isEmpty else { return "\(aor)  no call forwarding" }
        var words = ["\(aor)"]
        if let target = rules.always { words.append("always \(target)") }
        if let target = rules.busy { words.append("busy \(target)") }
        if let target = rules.noAnswer {
            words.append("no answer" + (rules.noAnswerAfter.map { " (after \($0.components.seconds) s)" } ?? " (after ring_timeout)") + " \(target)")
        }
        if let target = rules.unreachable { words.append("unreachable \(target)") }
        return words.joined(separator: "  ")
    }

    static func forwardingItem(_ aor: AddressOfRecord, _ rules: DiversionRules?) -> [String: Any] {
        var item: [String: Any] = ["address": aor.description]
        if let target = rules?.always { item["always"] = target.description }
        if let target = rules?.busy { item["busy"] = target.description }
        if let target = rules?.noAnswer { item["no_answer"] = target.description }
        if let after = rules?.noAnswerAfter { item["no_answer_after_s"] = Int(after.components.seconds) }
        if let target = rules?.unreachable { item["unreachable"] = target.description }
        return item
    }
}
