import Foundation
import HTTPAPI
import Registrar
import RouseTestSupport
import Storage
import XCTest

/// Issue 20 item 3: an extension's display name (what ring pushes call it) through the admin API
/// and the admin pages: set, changed, removed, refused with the field named, escaped on the pages.
extension AdminAPITests {
    func testADisplayNameIsSetOnCreationChangedAndRemovedAndABadOneIsRefusedByField() throws {
        XCTAssertEqual(try call("POST", "/api/v1/admin/organisations", ["domain": "example.com"]).status, 201)
        let created = try call("POST", "/api/v1/admin/extensions", ["address": "1001@example.com", "password": "pw-1001", "displayName": "  Alice Example "])
        XCTAssertEqual(created.status, 201, text(created))
        XCTAssertEqual(created.json["displayName"] as? String, "Alice Example", "trimmed")
        XCTAssertEqual(try call("POST", "/api/v1/admin/extensions", ["address": "1002@example.com", "password": "pw-1002"]).status, 201)

        let list = try call("GET", "/api/v1/admin/extensions")
        let names = (list.json["items"] as? [[String: Any]])?.map { $0["displayName"] as? String }
        XCTAssertEqual(names, ["Alice Example", nil])
        XCTAssertTrue(text(list).contains("\"displayName\":null"), "null, not absent: \(text(list))")
        XCTAssertEqual(try call("GET", "/api/v1/admin/extensions/1001@example.com").json["displayName"] as? String, "Alice Example")

        let renamed = try call("PUT", "/api/v1/admin/extensions/1002@example.com/display-name", ["displayName": "Bob Example ✓"])
        XCTAssertEqual(renamed.status, 200, text(renamed))
        let aor = AddressOfRecord(number: "1002", domain: "example.com")
        XCTAssertEqual(try PostgresDirectory(settings: database.settings()).loadDirectory().displayNames[aor], "Bob Example ✓")

        for bad: Any in [String(repeating: "x", count: 65), "Alice\nExample", "Eve\u{202E}elpmaxE", "tab\there", 42] {
            for (method, path, body) in [
                ("PUT", "/api/v1/admin/extensions/1002@example.com/display-name", ["displayName": bad]),
                ("POST", "/api/v1/admin/extensions", ["address": "1003@example.com", "password": "pw", "displayName": bad]),
            ] {
                let refused = try call(method, path, body)
                XCTAssertEqual(refused.status, 400, "\(method) \(bad)")
                XCTAssertEqual((refused.json["error"] as? [String: Any])?["field"] as? String, "displayName", "\(method) \(bad): \(text(refused))")
            }
        }
        XCTAssertEqual(try call("GET", "/api/v1/admin/extensions").json["total"] as? Int, 2, "no extension was added by a refused body")
        let missing = try call("PUT", "/api/v1/admin/extensions/1002@example.com/display-name", [:])
        XCTAssertEqual((missing.json["error"] as? [String: Any])?["field"] as? String, "displayName")
        XCTAssertEqual(try call("PUT", "/api/v1/admin/extensions/1999@example.com/display-name", ["displayName": "Nobody"]).status, 404)

        let removed = try call("PUT", "/api/v1/admin/extensions/1002@example.com/display-name", ["displayName": NSNull()])
        XCTAssertEqual(removed.status, 200, text(removed))
        XCTAssertNil(try PostgresDirectory(settings: database.settings()).loadDirectory().displayNames[aor])
        XCTAssertEqual(try call("PUT", "/api/v1/admin/extensions/1001@example.com/display-name", ["displayName": ""]).status, 200)
        XCTAssertTrue(try PostgresDirectory(settings: database.settings()).loadDirectory().displayNames.isEmpty)
    }
}

extension AdminPagesTests {
    func testADisplayNameIsSetFromThePagesAndShownEscaped() throws {
        XCTAssertEqual(try browser.signIn(admin.0, admin.1).status, 303)
        _ = try directory.addDomain("example.com")
        var csrf = try browser.csrf(from: try browser.get("/admin/extensions"))
        let added = try browser.post(
            "/admin/extensions", ["address": "1001@example.com", "password": "pw-secret-1", "displayName": "<b>Alice</b> & Co"], csrf: csrf)
        XCTAssertEqual(added.status, 303, added.text)
        let list = try browser.get("/admin/extensions")
        XCTAssertTrue(list.text.contains("<td>&lt;b&gt;Alice&lt;/b&gt; &amp; Co</td>"), list.text)
        XCTAssertFalse(list.text.contains("<b>Alice</b>"))

        let page = try browser.get("/admin/extensions/1001@example.com")
        XCTAssertTrue(page.text.contains("id=\"display-name\">&lt;b&gt;Alice&lt;/b&gt; &amp; Co</span>"), page.text)
        csrf = try browser.csrf(from: page)
        let bad = try browser.post("/admin/extensions/1001@example.com/display-name", ["displayName": String(repeating: "é", count: 65)], csrf: csrf)
        XCTAssertEqual(bad.status, 400)
        XCTAssertTrue(bad.text.contains("id=\"error-changed-display-name\">unusable display name: it is longer than 64 characters"), bad.text)
        let saved = try browser.post("/admin/extensions/1001@example.com/display-name", ["displayName": "Alice Example"], csrf: csrf)
        XCTAssertEqual(saved.header("Location"), "/admin/extensions/1001@example.com?done=name-saved")
        XCTAssertEqual(try directory.listExtensions().first?.displayName, "Alice Example")
    }
}
