import Foundation
import HTTPAPI
import Registrar
import RouseTestSupport
import SIPProxy
import Storage
import XCTest

/// Outbound routes, national patterns and an extension's class of service through the admin
/// API: stored as the CLI stores them, listed without the password, refused naming the field.
extension AdminAPITests {
    func error(_ response: TestHTTPClient.Response) -> (code: String?, field: String?) {
        let body = response.json["error"] as? [String: Any]
        return (body?["code"] as? String, body?["field"] as? String)
    }

    func testRoutesAreAddedListedInOrderAndRemovedAndTheirPasswordIsNeverAnswered() throws {
        XCTAssertEqual(try call("POST", "/api/v1/admin/organisations", ["domain": "acme.example"]).status, 201)
        let uk = try call(
            "POST", "/api/v1/admin/organisations/ACME.example/routes",
            ["name": "uk", "pattern": "prefix:0044", "strip": 4, "prepend": "+44", "hops": ["trunk-a.example.net", "198.51.100.7:5080;transport=tcp"],
             "hopTimeoutMs": 2500, "username": "acme", "password": "trunk-secret-7", "callerIdentity": "from:+442079460000"])
        XCTAssertEqual(uk.status, 201, text(uk))
        XCTAssertEqual(uk.json["organisation"] as? String, "acme.example")
        XCTAssertEqual(uk.json["position"] as? Int, 10, "the first route goes at 10")
        XCTAssertEqual(uk.json["hasPassword"] as? Bool, true)
        XCTAssertEqual(uk.json["username"] as? String, "acme")
        XCTAssertNil(uk.json["password"])
        let emergency = try call(
            "POST", "/api/v1/admin/organisations/acme.example/routes",
            ["name": "emergency", "pattern": "regex:^(112|999)$", "hops": ["[::1]:5090"], "position": 1, "emergency": true])
        XCTAssertEqual(emergency.status, 201, text(emergency))
        XCTAssertEqual(emergency.json["hasPassword"] as? Bool, false)
        XCTAssertTrue(emergency.json["username"] is NSNull, "always in the answer, null without credentials")
        XCTAssertEqual(emergency.json["callerIdentity"] as? String, "asserted-identity")
        XCTAssertEqual(emergency.json["hopTimeoutMs"] as? Int, 4000)

        let listed = try call("GET", "/api/v1/admin/organisations/acme.example/routes")
        XCTAssertEqual(listed.status, 200)
        let items = try XCTUnwrap(listed.json["items"] as? [[String: Any]])
        XCTAssertEqual(items.map { $0["name"] as? String }, ["emergency", "uk"])
        XCTAssertEqual(items.last?["hops"] as? [String], ["trunk-a.example.net", "198.51.100.7:5080;transport=tcp"])
        XCTAssertEqual(items.last?["strip"] as? Int, 4)
        XCTAssertEqual(items.last?["prepend"] as? String, "+44")
        XCTAssertEqual(items.first?["emergency"] as? Bool, true)
        XCTAssertEqual(try call("GET", "/api/v1/admin/routes").json["total"] as? Int, 2)
        XCTAssertEqual(try call("GET", "/api/v1/admin/organisations/nowhere.example/routes").status, 404)
        // The instance's route table gets the password; no answer ever does.
        let stored = try PostgresRoutes(connection: try database.connect()).credentials()
        XCTAssertEqual(stored.first { $0.route.name == "uk" }?.password, "trunk-secret-7")

        XCTAssertEqual(try call("DELETE", "/api/v1/admin/organisations/acme.example/routes/uk").status, 200)
        let again = try call("DELETE", "/api/v1/admin/organisations/acme.example/routes/uk")
        XCTAssertEqual(again.status, 404)
        XCTAssertEqual(error(again).code, "not_found")
        XCTAssertEqual((try call("GET", "/api/v1/admin/routes").json["items"] as? [[String: Any]])?.map { $0["name"] as? String }, ["emergency"])
        XCTAssertFalse(bodies.contains { String(decoding: $0, as: UTF8.self).contains("trunk-secret-7") }, "the password is write-only")
    }

    func testABadRouteIsRefusedNamingItsField() throws {
        XCTAssertEqual(try call("POST", "/api/v1/admin/organisations", ["domain": "acme.example"]).status, 201)
        let path = "/api/v1/admin/organisations/acme.example/routes"
        let good: [String: Any] = ["name": "out", "pattern": "prefix:", "hops": ["trunk.example.net"]]
        func refusal(_ changes: [String: Any]) throws -> (status: Int, code: String?, field: String?) {
            let answer = try call("POST", path, good.merging(changes) { $1 })
            return (answer.status, error(answer).code, error(answer).field)
        }
        XCTAssertEqual(try refusal(["pattern": "44"]).field, "pattern")
        XCTAssertEqual(try refusal(["pattern": 44]).field, "pattern")
        XCTAssertEqual(try refusal(["hops": "trunk.example.net"]).field, "hops")
        XCTAssertEqual(try refusal(["hops": ["trunk.example.net;transport=sctp"]]).field, "hops")
        XCTAssertEqual(try refusal(["hops": [String]()]).field, "hops")
        XCTAssertEqual(try refusal(["hopTimeoutMs": 10]).field, "hopTimeoutMs")
        XCTAssertEqual(try refusal(["hopTimeoutMs": 2.5]).field, "hopTimeoutMs")
        XCTAssertEqual(try refusal(["callerIdentity": "from:not-a-number"]).field, "callerIdentity")
        XCTAssertEqual(try refusal(["username": "only-a-user"]).field, "username")
        XCTAssertEqual(try refusal(["emergency": "yes"]).field, "emergency")
        XCTAssertEqual(try refusal(["name": "no spaces"]).field, "name")
        XCTAssertEqual(try refusal(["strip": 99]).field, "strip")
        let bad = try refusal(["prepend": "abc"])
        XCTAssertEqual(bad.status, 400)
        XCTAssertEqual(bad.code, "invalid_field")
        XCTAssertEqual(bad.field, "prepend")
        XCTAssertEqual(try refusal([:]).status, 201)
        XCTAssertEqual(try refusal([:]).field, "name", "the same name twice")
        let notJSON = try http.send(
            "POST", path, headers: [("Authorization", TestHTTPClient.basic(admin.0, admin.1)), ("Content-Type", "application/json")],
            body: Data("[1]".utf8))
        XCTAssertEqual(notJSON.status, 400)
        let unknown = try call("POST", "/api/v1/admin/organisations/nowhere.example/routes", good)
        XCTAssertEqual(unknown.status, 404)
        XCTAssertEqual(try PostgresRoutes(connection: try database.connect()).list().map(\.route.name), ["out"])
    }

    func testNationalPatternsAndAnExtensionsClassOfService() throws {
        XCTAssertEqual(try call("POST", "/api/v1/admin/organisations", ["domain": "acme.example"]).status, 201)
        XCTAssertEqual(try call("POST", "/api/v1/admin/extensions", ["address": "1001@acme.example", "password": "sip-pw-1"]).status, 201)
        let path = "/api/v1/admin/organisations/acme.example/national-patterns"
        XCTAssertEqual(try call("GET", path).json["patterns"] as? [String], [])
        let saved = try call("PUT", path, ["patterns": ["prefix:0", "regex:^0[1-9][0-9]{8}$"]])
        XCTAssertEqual(saved.status, 200, text(saved))
        XCTAssertEqual(try call("GET", path).json["patterns"] as? [String], ["prefix:0", "regex:^0[1-9][0-9]{8}$"])
        let bad = try call("PUT", path, ["patterns": ["prefix:0", "regex:(("]])
        XCTAssertEqual(bad.status, 400)
        XCTAssertEqual(error(bad).field, "patterns")
        XCTAssertEqual(error(try call("PUT", path, ["patterns": "prefix:0"])).field, "patterns")
        XCTAssertEqual(try call("GET", path).json["patterns"] as? [String], ["prefix:0", "regex:^0[1-9][0-9]{8}$"], "a refusal changes nothing")
        XCTAssertEqual(try call("PUT", "/api/v1/admin/organisations/nowhere.example/national-patterns", ["patterns": [String]()]).status, 404)
        XCTAssertEqual(try call("GET", "/api/v1/admin/organisations/nowhere.example/national-patterns").status, 404)

        let extensionPath = "/api/v1/admin/extensions/1001@acme.example"
        XCTAssertTrue(try call("GET", extensionPath).json["classOfService"] is NSNull, "the instance's default")
        let set = try call("PUT", extensionPath + "/class-of-service", ["classOfService": "international"])
        XCTAssertEqual(set.status, 200, text(set))
        XCTAssertEqual(set.json["classOfService"] as? String, "international")
        XCTAssertEqual(try call("GET", extensionPath).json["classOfService"] as? String, "international")
        XCTAssertEqual(error(try call("PUT", extensionPath + "/class-of-service", ["classOfService": "premium"])).field, "classOfService")
        XCTAssertEqual(error(try call("PUT", extensionPath + "/class-of-service", ["other": 1])).field, "classOfService")
        XCTAssertEqual(try call("PUT", "/api/v1/admin/extensions/1009@acme.example/class-of-service", ["classOfService": "national"]).status, 404)
        XCTAssertEqual(try call("PUT", extensionPath + "/class-of-service", ["classOfService": NSNull()]).status, 200)
        XCTAssertTrue(try call("GET", extensionPath).json["classOfService"] is NSNull, "null: back to the default")
        let loaded = try PostgresCallClasses(connection: try database.connect()).load()
        XCTAssertEqual(loaded.classes, [:])
        XCTAssertEqual(loaded.national["acme.example"]?.map(\.description), ["prefix:0", "regex:^0[1-9][0-9]{8}$"])
    }
}
