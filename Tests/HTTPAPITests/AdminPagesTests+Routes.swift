import CallRouting
import Foundation
import HTTPAPI
import HTTPServer
import Registrar
import RouseTestSupport
import SIPProxy
import Storage
import XCTest

/// An organisation's page (its routes, the add form, Remove, its national numbers) and an
/// extension's class of service, as a browser uses them; a route's password never in a page.
extension AdminPagesTests {
    func testAnOrganisationsRoutesAreAddedShownAndRemovedOnItsPage() throws {
        _ = try directory.addDomain("example.com")
        XCTAssertEqual(try browser.signIn(admin.0, admin.1).status, 303)
        let list = try browser.get("/admin/extensions")
        XCTAssertTrue(list.text.contains("href=\"/admin/organisations/example.com\""), "the organisation's page is linked from the list")
        var page = try browser.get("/admin/organisations/example.com")
        XCTAssertEqual(page.status, 200)
        XCTAssertTrue(page.text.contains("No route: its extensions can call only other extensions."), page.text)
        let csrf = try browser.csrf(from: page)

        let bad = try browser.post(
            "/admin/organisations/example.com/routes",
            ["name": "uk", "pattern": "0044", "hops": "trunk.example.net", "password": "trunk-secret-9", "username": "acme"], csrf: csrf)
        XCTAssertEqual(bad.status, 400)
        XCTAssertTrue(bad.text.contains("id=\"error-route-pattern\">a pattern is prefix:&lt;digits&gt;"), bad.text)
        XCTAssertTrue(bad.text.contains("value=\"trunk.example.net\""), "what was typed is shown again")
        let hostile = try browser.post(
            "/admin/organisations/example.com/routes", ["name": "x", "pattern": "prefix:1", "hops": "<script>.example"], csrf: csrf)
        XCTAssertEqual(hostile.status, 400)
        XCTAssertFalse(hostile.text.contains("<script>"), "a bad hop is escaped where it is shown again")

        let added = try browser.post(
            "/admin/organisations/example.com/routes",
            ["name": "uk", "pattern": "prefix:0044", "strip": "4", "prepend": "+44", "hops": "trunk-a.example.net, 198.51.100.7:5080;transport=tcp",
             "hop_timeout": "2500", "username": "acme", "password": "trunk-secret-9", "caller_identity": "from:+442079460000"], csrf: csrf)
        XCTAssertEqual(added.status, 303, added.text)
        XCTAssertEqual(added.header("Location"), "/admin/organisations/example.com?done=route-added&subject=uk")
        let emergency = try browser.post(
            "/admin/organisations/example.com/routes",
            ["name": "emergency", "pattern": "regex:^(112|999)$", "hops": "[::1]:5090", "position": "1", "emergency": "yes"], csrf: csrf)
        XCTAssertEqual(emergency.status, 303, emergency.text)

        page = try browser.get(try XCTUnwrap(added.header("Location")))
        XCTAssertTrue(page.text.contains("Route uk added."), page.text)
        let start = try XCTUnwrap(page.text.range(of: "<tr id=\"route-uk\">"))
        let uk = String(page.text[start.lowerBound...].prefix(while: { _ in true }).split(separator: "</tr>", maxSplits: 1)[0])
        for shown in ["prefix:0044", "strip 4, prepend <code>+44</code>", "<code>trunk-a.example.net</code>", "<code>198.51.100.7:5080;transport=tcp</code>",
                      "2.5 s", "from:+442079460000", "<code>acme</code>, password set"] {
            XCTAssertTrue(uk.contains(shown), "\(shown) in \(uk)")
        }
        XCTAssertTrue(page.text.contains("<span class=\"badge emergency\">emergency</span>"), page.text)
        let emergencyRow = try XCTUnwrap(page.text.range(of: "<tr id=\"route-emergency\">"))
        XCTAssertLessThan(emergencyRow.lowerBound, try XCTUnwrap(page.text.range(of: "<tr id=\"route-uk\">")).lowerBound, "position order")

        let removed = try browser.post("/admin/organisations/example.com/routes/uk/remove", [:], csrf: csrf)
        XCTAssertEqual(removed.header("Location"), "/admin/organisations/example.com?done=route-removed&subject=uk")
        XCTAssertEqual(try PostgresRoutes(connection: try database.connect()).list().map(\.route.name), ["emergency"])
        XCTAssertEqual(try browser.post("/admin/organisations/example.com/routes/uk/remove", [:], csrf: csrf).status, 404)
        for forged in [nil, "wrong"] {
            XCTAssertEqual(try browser.post("/admin/organisations/example.com/routes/emergency/remove", [:], csrf: forged).status, 403)
        }
        XCTAssertEqual(try PostgresRoutes(connection: try database.connect()).list().count, 1, "a forged form removes nothing")
        XCTAssertEqual(try browser.get("/admin/organisations/nowhere.example").status, 404)
        XCTAssertFalse(browser.allText.contains("trunk-secret-9"), "a route's password is never written into a page")
    }

    func testTheExtensionsPageWarnsOfOutsideCallsThatJumped() throws {
        let surging = AddressOfRecord(number: "1001", domain: "example.com")
        let warned = try StandaloneHTTPAPI(
            listen: "127.0.0.1:0", settings: database.settings(connectTimeout: 3),
            outsideCallSurges: { [(surging, 42)] })
        defer { warned.stop() }
        let browser = try PageBrowser(port: warned.server.port)
        XCTAssertEqual(try browser.signIn(admin.0, admin.1).status, 303)
        let page = try browser.get("/admin/extensions")
        XCTAssertTrue(page.text.contains("id=\"outside-call-surge\""), page.text)
        XCTAssertTrue(page.text.contains("<a href=\"/admin/extensions/1001%40example.com\">1001@example.com</a>: 42 outside calls in the last hour")
                      || page.text.contains(">1001@example.com</a>: 42 outside calls in the last hour"), page.text)
        XCTAssertEqual(try self.browser.signIn(admin.0, admin.1).status, 303)
        XCTAssertFalse(try self.browser.get("/admin/extensions").text.contains("outside-call-surge"), "no warning when nothing jumped")
    }

    func testNationalNumbersAndAnExtensionsClassOfServiceAreSetOnTheirPages() throws {
        _ = try directory.addDomain("example.com")
        try directory.addExtension(alice, password: "sip-pw-1")
        XCTAssertEqual(try browser.signIn(admin.0, admin.1).status, 303)
        let page = try browser.get("/admin/organisations/example.com")
        let csrf = try browser.csrf(from: page)
        let bad = try browser.post("/admin/organisations/example.com/national-patterns", ["patterns": "prefix:0\nregex:(("], csrf: csrf)
        XCTAssertEqual(bad.status, 400)
        XCTAssertTrue(bad.text.contains("id=\"error-national-patterns\">"), bad.text)
        XCTAssertTrue(bad.text.contains(">prefix:0\nregex:((</textarea>"), "the patterns are shown again")
        let saved = try browser.post("/admin/organisations/example.com/national-patterns", ["patterns": " prefix:0 \r\n\r\nregex:^0[1-9][0-9]{8}$\n"], csrf: csrf)
        XCTAssertEqual(saved.status, 303, saved.text)
        let after = try browser.get(try XCTUnwrap(saved.header("Location")))
        XCTAssertTrue(after.text.contains(">prefix:0\nregex:^0[1-9][0-9]{8}$</textarea>"), after.text)
        XCTAssertEqual(
            try PostgresCallClasses(connection: try database.connect()).load().national["example.com"]?.map(\.description),
            ["prefix:0", "regex:^0[1-9][0-9]{8}$"])

        var extensionPage = try browser.get("/admin/extensions/1001@example.com")
        XCTAssertTrue(extensionPage.text.contains("<option value=\"default\" selected>"), extensionPage.text)
        let set = try browser.post("/admin/extensions/1001@example.com/class-of-service", ["class": "internal"], csrf: csrf)
        XCTAssertEqual(set.header("Location"), "/admin/extensions/1001@example.com?done=class-saved")
        extensionPage = try browser.get("/admin/extensions/1001@example.com?done=class-saved")
        XCTAssertTrue(extensionPage.text.contains("Class of service saved."), extensionPage.text)
        XCTAssertTrue(extensionPage.text.contains("<option value=\"internal\" selected>"), extensionPage.text)
        XCTAssertEqual(try PostgresCallClasses(connection: try database.connect()).load().classes, [alice: .internalOnly])
        XCTAssertEqual(try browser.post("/admin/extensions/1001@example.com/class-of-service", ["class": "premium"], csrf: csrf).status, 400)
        XCTAssertEqual(try browser.post("/admin/extensions/1001@example.com/class-of-service", ["class": "national"], csrf: nil).status, 403)
        XCTAssertEqual(try browser.post("/admin/extensions/1009@example.com/class-of-service", ["class": "national"], csrf: csrf).status, 404)
        XCTAssertEqual(try PostgresCallClasses(connection: try database.connect()).load().classes, [alice: .internalOnly], "refusals change nothing")
    }
}
