import Foundation
import XCTest

/// `rouse route …` as an operator runs it: routes added in order, listed without their password,
/// refused in one line naming the field.
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
        XCTAssertEqual(uk["has_password"] as? Bool, true)
        XCTAssertFalse(json.output.contains("trunk-secret") || listed.output.contains("trunk-secret"), "the password is never shown")

        let removed = try rouse(["route", "remove", "acme.example", "uk"])
        XCTAssertEqual(removed.output, "removed route uk of acme.example\n")
        XCTAssertEqual(try rouse(["route", "list", "acme.example"]).output.split(separator: "\n").count, 2)
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
}
