import Foundation
import XCTest

/// `rouse route …` as an operator runs it: routes added in order, listed without their password,
/// refused in one line naming the field; an extension's class of service and an organisation's
/// national patterns shown and set.
extension DirectoryCommandsTests {
    func testRoutesAreAddedListedInOrderAndRemoved() throws {
        XCTAssertEqual(try rouse(["domain", "add", "acme.example"]).status, 0)
        let added = try rouse([
            "route", "add", "acme.example", "uk", "--pattern", "prefix:0044", "--strip", "4", "--prepend", "+44",
            "--hops", "trunk-a.example.net, 198.51.100.7:5080;transport=tcp", "--hop-timeout", "2500", "--username", "acme",
        ], input: "trunk-secret\n")
        XCTAssertEqual(added.status, 0, added.errors)
        XCTAssertEqual(added.output, "added route uk of acme.example\n")
        let emergency = try rouse(["route", "add", "acme.example", "emergency", "--pattern", "regex:^(112|999)$", "--hops", "[::1]:5090", "--position", "1", "--emergency"])
        XCTAssertEqual(emergency.status, 0, emergency.errors)
        let last = try rouse(["route", "add", "acme.example", "rest", "--pattern", "prefix:", "--hops", "trunk-b.example.net", "--caller-identity", "from:+442079460000"])
        XCTAssertEqual(last.status, 0, last.errors)

        let listed = try rouse(["route", "list"])
        XCTAssertEqual(listed.status, 0, listed.errors)
        XCTAssertEqual(listed.output.split(separator: "\n"), [
            "acme.example  1  emergency  regex:^(112|999)$  via [::1]:5090  hop timeout 4 s  caller asserted-identity  EMERGENCY",
            "acme.example  10  uk  prefix:0044  strip 4 prepend '+44'  via trunk-a.example.net, 198.51.100.7:5080;transport=tcp  hop timeout 2.5 s  as acme (password set)  caller asserted-identity",
            "acme.example  20  rest  prefix:  via trunk-b.example.net  hop timeout 4 s  caller from:+442079460000",
        ])
        let json = try rouse(["route", "list", "acme.example", "--json"])
        let document = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [String: Any])
        XCTAssertEqual(document["total"] as? Int, 3)
        let uk = try XCTUnwrap((document["items"] as? [[String: Any]])?.first { $0["name"] as? String == "uk" })
        XCTAssertEqual(uk["hops"] as? [String], ["trunk-a.example.net", "198.51.100.7:5080;transport=tcp"])
        XCTAssertEqual(uk["hasPassword"] as? Bool, true, "the admin API's fields")
        XCTAssertEqual(uk["hopTimeoutMs"] as? Int, 2500)
        XCTAssertFalse(json.output.contains("trunk-secret") || listed.output.contains("trunk-secret"), "the password is never shown")

        let removed = try rouse(["route", "remove", "acme.example", "uk"])
        XCTAssertEqual(removed.output, "removed route uk of acme.example\n")
        let left = try rouse(["route", "list", "acme.example"])
        XCTAssertEqual(left.status, 0, left.errors)
        XCTAssertEqual(left.output.split(separator: "\n").count, 2, "output: \(left.output) errors: \(left.errors)")
    }

    func testRouteRefusalsAreOneLineNamingTheField() throws {
        XCTAssertEqual(try rouse(["domain", "add", "acme.example"]).status, 0)
        try assertRefused(["route", "add", "acme.example", "x", "--pattern", "44", "--hops", "trunk.example.net"],
            "pattern: a pattern is prefix:<digits>, regex:<expression> or domain:<name>, not \"44\"")
        try assertRefused(["route", "add", "acme.example", "x", "--pattern", "prefix:44", "--hops", "trunk.example.net;transport=sctp"],
            "hops: a hop takes only ;transport=udp|tcp|tls, not \"transport=sctp\"")
        try assertRefused(["route", "add", "nowhere.example", "x", "--pattern", "prefix:44", "--hops", "trunk.example.net"],
            "organisation: there is no organisation nowhere.example")
        try assertRefused(["route", "add", "acme.example", "x", "--pattern", "prefix:44"], "--hops is required")
        try assertRefused(["route", "remove", "acme.example", "x"], "acme.example has no route named x")
    }

    func testAnExtensionsClassOfServiceIsShownSetAndRefusedInOneLine() throws {
        XCTAssertEqual(try rouse(["domain", "add", "acme.example"]).status, 0)
        XCTAssertEqual(try rouse(["extension", "add", "1001@acme.example", "--password", "pw-1001"]).status, 0)
        XCTAssertEqual(try rouse(["extension", "class", "1001@acme.example"]).output, "1001@acme.example: the instance's default class (outside_call_class)\n")
        let set = try rouse(["extension", "class", "1001@acme.example", "international"])
        XCTAssertEqual(set.status, 0, set.errors)
        XCTAssertEqual(set.output, "1001@acme.example: class international\n")
        let json = try rouse(["extension", "class", "1001@ACME.example", "--json"])
        let document = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [String: Any])
        XCTAssertEqual(document["classOfService"] as? String, "international")
        XCTAssertEqual(try rouse(["extension", "class", "1001@acme.example", "default"]).output,
                       "1001@acme.example: the instance's default class (outside_call_class)\n")
        try assertRefused(["extension", "class", "1001@acme.example", "premium"],
            "class_of_service: 'premium' is not internal, national, international or default")
        try assertRefused(["extension", "class", "1009@acme.example", "national"], "extension: there is no extension 1009@acme.example")
    }

    func testAnOrganisationsNationalPatternsAreReplacedShownAndCleared() throws {
        XCTAssertEqual(try rouse(["domain", "add", "acme.example"]).status, 0)
        XCTAssertEqual(try rouse(["domain", "national-patterns", "acme.example"]).output,
                       "acme.example: no national patterns (every outside call is international)\n")
        let set = try rouse(["domain", "national-patterns", "acme.example", "prefix:0", "regex:^0[1-9][0-9]{8}$"])
        XCTAssertEqual(set.status, 0, set.errors)
        XCTAssertEqual(set.output, "acme.example  prefix:0\nacme.example  regex:^0[1-9][0-9]{8}$\n")
        let json = try rouse(["domain", "national-patterns", "acme.example", "--json"])
        let document = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [String: Any])
        XCTAssertEqual(document["patterns"] as? [String], ["prefix:0", "regex:^0[1-9][0-9]{8}$"])
        try assertRefused(["domain", "national-patterns", "acme.example", "prefix:0", "0044"],
            "national_patterns: a pattern is prefix:<digits>, regex:<expression> or domain:<name>, not \"0044\"")
        XCTAssertEqual(try rouse(["domain", "national-patterns", "acme.example"]).output.split(separator: "\n").count, 2, "a refusal changes nothing")
        try assertRefused(["domain", "national-patterns", "nowhere.example", "prefix:0"], "organisation: there is no organisation nowhere.example")
        try assertRefused(["domain", "national-patterns", "acme.example", "prefix:0", "--clear"], "--clear takes no patterns")
        XCTAssertEqual(try rouse(["domain", "national-patterns", "acme.example", "--clear"]).output,
                       "acme.example: no national patterns (every outside call is international)\n")
    }
}
