import Foundation
import RouseTestSupport
import SIPMessage
import SIPProxy
import Storage
import XCTest

/// Outbound routes in PostgreSQL (migration 600): stored as checked, listed without passwords,
/// refused with the field at fault, announced to every instance on change.
final class PostgresRoutesTests: XCTestCase {
    private var database: MigratedDatabase!

    override func setUpWithError() throws {
        database = try MigratedDatabase(domain: "acme.example", extensions: 1)
    }

    override func tearDown() {
        database?.drop()
    }

    func testARouteIsStoredListedInPositionOrderAndItsPasswordOnlyGoesToTheRouteTable() throws {
        let routes = PostgresRoutes(connection: try database.database.connect())
        _ = try routes.add(RouteDraft(
            organisation: "ACME.example", name: "uk", position: 20, pattern: "prefix:0044", strip: 4, prepend: "+44",
            hops: ["trunk-a.example.net", "198.51.100.7:5080;transport=tcp"], hopTimeoutMilliseconds: 2500, username: "acme",
            password: "trunk-secret", callerIdentity: "from:+442079460000"))
        _ = try routes.add(RouteDraft(organisation: "acme.example", name: "emergency", position: 10, pattern: "regex:^(112|999)$", hops: ["[2001:db8::9]"], emergency: true))

        let listed = try routes.list(organisation: "acme.example")
        XCTAssertEqual(listed.map(\.route.name), ["emergency", "uk"])
        let uk = try XCTUnwrap(listed.last)
        XCTAssertTrue(uk.hasPassword)
        XCTAssertEqual(uk.route.pattern, .prefix("0044"))
        XCTAssertEqual(uk.route.hops.map(\.description), ["trunk-a.example.net", "198.51.100.7:5080;transport=tcp"])
        XCTAssertEqual(uk.route.hopTimeout, .milliseconds(2500))
        XCTAssertEqual(uk.route.callerIdentity, .fromNumber("+442079460000"))
        XCTAssertEqual(uk.route.translated(try XCTUnwrap(DialledTarget(try SIPURI(parsing: "sip:00442079460958@acme.example")))), "+442079460958")
        XCTAssertTrue(try XCTUnwrap(listed.first).route.emergency)
        XCTAssertFalse("\(listed)".contains("trunk-secret"), "a listing never carries the password")
        XCTAssertEqual(try routes.credentials().first { $0.route.name == "uk" }?.password, "trunk-secret")

        let table = OutboundRouteTable(try routes.credentials().map(\.route))
        XCTAssertEqual(table.route(for: try XCTUnwrap(DialledTarget(try SIPURI(parsing: "sip:999@acme.example"))), organisation: "acme.example")?.name, "emergency")

        XCTAssertTrue(try routes.remove(organisation: "acme.example", name: "uk"))
        XCTAssertFalse(try routes.remove(organisation: "acme.example", name: "uk"))
        XCTAssertEqual(try routes.list().map(\.route.name), ["emergency"])
    }

    func testABadRouteIsRefusedNamingItsField() throws {
        let routes = PostgresRoutes(connection: try database.database.connect())
        func refusal(_ draft: RouteDraft) -> String? {
            do {
                _ = try routes.add(draft)
                return nil
            } catch let error as RouteError {
                return error.field
            } catch {
                return "\(error)"
            }
        }
        let good = RouteDraft(organisation: "acme.example", name: "out", position: 1, pattern: "prefix:", hops: ["trunk.example.net"])
        XCTAssertNil(refusal(good))
        XCTAssertEqual(refusal(good), "name", "the same name twice in one organisation")
        var draft = good
        draft.name = "other"
        draft.organisation = "nowhere.example"
        XCTAssertEqual(refusal(draft), "organisation")
        draft = good
        draft.name = "p"
        draft.pattern = "regex:(("
        XCTAssertEqual(refusal(draft), "pattern")
        draft.pattern = "prefix:1"
        draft.hops = ["trunk.example.net;transport=sctp"]
        XCTAssertEqual(refusal(draft), "hops")
        draft.hops = ["trunk.example.net"]
        draft.username = "only-a-user"
        XCTAssertEqual(refusal(draft), "username")
        draft.username = nil
        draft.callerIdentity = "from:not-a-number"
        XCTAssertEqual(refusal(draft), "caller_identity")
        draft.callerIdentity = "unchanged"
        draft.hopTimeoutMilliseconds = 10
        XCTAssertEqual(refusal(draft), "hop_timeout")
    }

    func testEveryChangeIsAnnouncedToListeningInstances() throws {
        let (listener, heard) = try database.listening(to: [PostgresRoutes.notificationChannel])
        defer { listener.stop() }
        let routes = PostgresRoutes(connection: try database.database.connect())
        _ = try routes.add(RouteDraft(organisation: "acme.example", name: "out", position: 1, pattern: "prefix:", hops: ["trunk.example.net"]))
        XCTAssertEqual(heard.wait(for: 1), ["rouse_routes"])
        try routes.remove(organisation: "acme.example", name: "out")
        XCTAssertEqual(heard.wait(for: 2).count, 2)
    }
}
