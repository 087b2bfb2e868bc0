import Foundation
import XCTest

/// `rouse extension forward …` as an operator runs it (docs/calls.md "Diversion"): the rules shown,
/// set one at a time (the others stay), removed with `off` or `--clear`, read with `--json`, and
/// refused in one line naming the field.
extension DirectoryCommandsTests {
    /// example.com with extensions 1001 and 1002.
    func addForwardingExtensions() throws {
        XCTAssertEqual(try rouse(["domain", "add", "example.com"]).status, 0)
        XCTAssertEqual(try rouse(["extension", "add", "1001@example.com", "--password", "pw-1001"]).status, 0)
        XCTAssertEqual(try rouse(["extension", "add", "1002@example.com", "--password", "pw-1002"]).status, 0)
    }

    /// `rouse extension forward 1001@example.com ARGUMENTS`: it succeeds and prints one line.
    func forward(_ arguments: [String], file: StaticString = #filePath, line: UInt = #line) throws -> String {
        let outcome = try rouse(["extension", "forward", "1001@example.com"] + arguments)
        XCTAssertEqual(outcome.status, 0, outcome.errors, file: file, line: line)
        return outcome.output
    }

    func testForwardingRulesAreSetOneAtATimeShownAndRemoved() throws {
        try addForwardingExtensions()
        XCTAssertTrue(try rouse(["--help"]).output.contains("extension forward"))
        XCTAssertEqual(try forward([]), "1001@example.com  no call forwarding\n")

        XCTAssertEqual(try forward(["--busy", "sip:vm1001@pbx.example"]), "1001@example.com  busy sip:vm1001@pbx.example\n")
        XCTAssertEqual(
            try forward(["--no-answer", "1002", "--after", "20"]),
            "1001@example.com  busy sip:vm1001@pbx.example  no answer (after 20 s) sip:1002@example.com\n",
            "a number that is an extension of the organisation is that extension; the busy rule stays")
        XCTAssertEqual(
            try forward(["--unreachable", "+44 1234 567"]),
            "1001@example.com  busy sip:vm1001@pbx.example  no answer (after 20 s) sip:1002@example.com"
                + "  unreachable sip:+441234567@example.com;user=phone\n",
            "any other number is dialled through the outbound routes")
        XCTAssertEqual(
            try forward(["--always", "alice@pbx.example"]),
            "1001@example.com  always sip:alice@pbx.example  busy sip:vm1001@pbx.example  no answer (after 20 s) sip:1002@example.com"
                + "  unreachable sip:+441234567@example.com;user=phone\n")
        XCTAssertEqual(
            try forward(["--after", "25"]),
            "1001@example.com  always sip:alice@pbx.example  busy sip:vm1001@pbx.example  no answer (after 25 s) sip:1002@example.com"
                + "  unreachable sip:+441234567@example.com;user=phone\n",
            "--after alone changes the ring time of the no-answer rule")

        XCTAssertEqual(
            try forward(["--always", "off", "--no-answer", "OFF"]),
            "1001@example.com  busy sip:vm1001@pbx.example  unreachable sip:+441234567@example.com;user=phone\n",
            "off removes a rule, and a no-answer rule goes with its ring time")
        XCTAssertEqual(
            try forward(["--no-answer", "tel:+441234999"]),
            "1001@example.com  busy sip:vm1001@pbx.example  no answer (after ring_timeout) tel:+441234999"
                + "  unreachable sip:+441234567@example.com;user=phone\n",
            "without --after a no-answer rule waits ring_timeout")
        XCTAssertEqual(try forward(["--clear"]), "1001@example.com  no call forwarding\n")
        XCTAssertEqual(try forward([]), "1001@example.com  no call forwarding\n", "--clear removed them all")
        XCTAssertEqual(try rouse(["extension", "forward", "1002@example.com"]).output, "1002@example.com  no call forwarding\n")
    }

    func testForwardingReadsAsJSON() throws {
        try addForwardingExtensions()
        _ = try forward(["--busy", "sip:vm1001@pbx.example", "--no-answer", "1002", "--after", "15"])
        let document = try forwardingDocument()
        XCTAssertEqual(document["address"] as? String, "1001@example.com")
        XCTAssertEqual(document["busy"] as? String, "sip:vm1001@pbx.example")
        XCTAssertEqual(document["no_answer"] as? String, "sip:1002@example.com")
        XCTAssertEqual(document["no_answer_after_s"] as? Int, 15)
        XCTAssertNil(document["always"])
        XCTAssertNil(document["unreachable"])

        _ = try forward(["--clear"])
        XCTAssertEqual(try forwardingDocument().keys.sorted(), ["address"], "no rule, only the address")
    }

    /// `rouse extension forward 1001@example.com --json` as a JSON object.
    private func forwardingDocument() throws -> [String: Any] {
        let outcome = try forward(["--json"])
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(outcome.utf8)) as? [String: Any], outcome)
    }

    func testForwardingRefusalsAreOneLineNamingTheFieldAndChangeNothing() throws {
        try addForwardingExtensions()
        _ = try forward(["--busy", "1002"])
        let command = ["extension", "forward", "1001@example.com"]
        try assertRefused(command + ["--always", "1001"], "always: an extension cannot forward to itself")
        try assertRefused(command + ["--busy", "sip:1001@Example.com"], "busy: an extension cannot forward to itself")
        try assertRefused(command + ["--unreachable", "1001@example.com"], "unreachable: an extension cannot forward to itself")
        try assertRefused(command + ["--no-answer", "voice mail"], "no-answer: 'voice mail' is neither a URI, user@domain nor a number")
        try assertRefused(command + ["--always", "sip:@pbx.example"], "always: 'sip:@pbx.example': empty user part in URI")
        try assertRefused(command + ["--no-answer", "1002", "--after", "soon"], "after: 'soon' is not a whole number of seconds")
        try assertRefused(command + ["--no-answer", "1002", "--after", "0"], "after: the no-answer ring time is 1 to 3600 seconds")
        try assertRefused(command + ["--after", "20"], "after: a no-answer ring time needs a no-answer target")
        try assertRefused(command + ["--clear", "--busy", "off"], "--clear takes no other option")
        try assertRefused(["extension", "forward", "1009@example.com"], "no such extension 1009@example.com")
        try assertRefused(["extension", "forward", "1001"], "'1001' is not an extension address (NUMBER@DOMAIN)")
        let bare = try rouse(["extension", "forward"])
        XCTAssertEqual(bare.status, 1)
        XCTAssertTrue(bare.errors.hasPrefix("rouse: usage: rouse extension forward NUMBER@DOMAIN [--always T]"), bare.errors)
        XCTAssertEqual(try forward([]), "1001@example.com  busy sip:1002@example.com\n", "a refusal changes nothing")
    }
}
