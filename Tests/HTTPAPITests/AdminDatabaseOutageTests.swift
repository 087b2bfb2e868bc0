import Foundation
import HTTPAPI
import HTTPServer
import Registrar
import RouseTestSupport
import Storage
import XCTest

/// The admin API and pages while PostgreSQL cannot answer them (issue 17, item 4): a database
/// failure during a sign-in answers 503 with `Retry-After` and is not counted as wrong
/// credentials against the address, and an admin read that PostgreSQL holds up answers 503 when
/// its deadline passes instead of waiting. PostgreSQL is held up by another connection holding
/// an exclusive lock on the table the request reads, released by the test after the answers.
final class AdminDatabaseOutageTests: XCTestCase {
    var database: TestDatabase!
    let admin = ("root", "admin-password-1")
    /// Blocks an address after three wrong credentials, for longer than the test runs.
    let throttle = AuthFailureThrottle(limit: 3, window: 3600, blockFor: 3600)
    var cleanups: [() -> Void] = []

    override func setUpWithError() throws {
        database = try TestDatabase()
        let connection = try database.connect()
        try Migrator.migrate(connection)
        try PostgresAdmins.add(name: admin.0, password: admin.1, on: connection)
    }

    override func tearDown() {
        for cleanup in cleanups.reversed() { cleanup() }
        cleanups = []
        database?.drop()
    }

    /// A connection of its own holding `table` locked (ACCESS EXCLUSIVE, so reads wait) until
    /// `release` is called or the test ends.
    func lock(_ table: String) throws -> () -> Void {
        let holder = try database.connect()
        try holder.query("BEGIN")
        try holder.query("LOCK TABLE \(table) IN ACCESS EXCLUSIVE MODE")
        var released = false
        let release = {
            guard !released else { return }
            released = true
            _ = try? holder.query("ROLLBACK")
        }
        cleanups.append(release)
        return release
    }

    /// The HTTP API with a 0.3 s statement deadline, so a read waiting on a lock fails quickly.
    func startService() throws -> StandaloneHTTPAPI {
        let service = try StandaloneHTTPAPI(
            listen: "127.0.0.1:0", settings: database.settings(connectTimeout: 3, statementTimeout: 0.3),
            authFailureThrottle: throttle)
        cleanups.append { service.stop() }
        return service
    }

    func testAnAPISignInThatTheDatabaseFailsGets503AndDoesNotBlockTheAddress() throws {
        let service = try startService()
        let http = try TestHTTPClient(port: service.server.port)
        let basic = [("Authorization", TestHTTPClient.basic(admin.0, admin.1))]
        let release = try lock("admins")
        for attempt in 1...6 {
            let answer = try http.send("GET", "/api/v1/admin/organisations", headers: basic)
            XCTAssertEqual(answer.status, 503, "attempt \(attempt)")
            XCTAssertEqual((answer.json["error"] as? [String: Any])?["code"] as? String, "storage_unavailable", "attempt \(attempt)")
            XCTAssertNotNil(answer.header("Retry-After").flatMap(Int.init), "attempt \(attempt)")
        }
        release()
        // Six database failures from one address, the limit three: the right password still works.
        XCTAssertEqual(try http.send("GET", "/api/v1/admin/organisations", headers: basic).status, 200)
        // And wrong credentials are still counted: three, then the address is refused.
        let wrong = [("Authorization", TestHTTPClient.basic(admin.0, "wrong-password"))]
        for _ in 1...3 { XCTAssertEqual(try http.send("GET", "/api/v1/admin/organisations", headers: wrong).status, 401) }
        XCTAssertEqual(try http.send("GET", "/api/v1/admin/organisations", headers: wrong).status, 429)
    }

    func testAPageSignInThatTheDatabaseFailsGets503AndDoesNotBlockTheAddress() throws {
        let service = try startService()
        let browser = try PageBrowser(port: service.server.port)
        let release = try lock("admins")
        for attempt in 1...6 {
            let answer = try browser.signIn(admin.0, admin.1)
            XCTAssertEqual(answer.status, 503, "attempt \(attempt)")
            XCTAssertTrue(answer.text.contains("The database is unavailable"), answer.text)
            XCTAssertNotNil(answer.header("Retry-After").flatMap(Int.init), "attempt \(attempt)")
            XCTAssertNil(browser.cookies["rouse_admin_session"])
        }
        release()
        let signedIn = try browser.signIn(admin.0, admin.1)
        XCTAssertEqual(signedIn.status, 303)
        XCTAssertEqual(signedIn.header("Location"), "/admin/extensions")
    }

    func testAnAdminReadThatPostgreSQLHoldsUpAnswers503AtItsDeadline() throws {
        // A statement deadline far longer than the client waits: only the admin deadline can answer.
        // 3 s: room for the sign-ins' PBKDF2 checks, which run inside a database job, on a slow run.
        let pool = PostgresWorkerPool(settings: database.settings(connectTimeout: 3, statementTimeout: 120))
        cleanups.append { pool.shutdown() }
        let service = try HTTPAPIService(listen: "127.0.0.1:0", pool: pool, directory: CredentialCache(), adminDatabaseDeadline: 3)
        cleanups.append { service.stop() }
        let server = service.server
        let http = try TestHTTPClient(port: server.port, timeout: 60)
        let basic = [("Authorization", TestHTTPClient.basic(admin.0, admin.1))]
        XCTAssertEqual(try http.send("GET", "/api/v1/admin/organisations", headers: basic).status, 200)
        let browser = try PageBrowser(port: server.port)
        XCTAssertEqual(try browser.signIn(admin.0, admin.1).status, 303)

        var release = try lock("sip_domains")
        let held = try http.send("GET", "/api/v1/admin/organisations", headers: basic)
        XCTAssertEqual(held.status, 503)
        XCTAssertEqual((held.json["error"] as? [String: Any])?["code"] as? String, "storage_unavailable")
        XCTAssertNotNil(held.header("Retry-After").flatMap(Int.init))
        release()
        XCTAssertEqual(try http.send("GET", "/api/v1/admin/organisations", headers: basic).status, 200)

        release = try lock("admin_sessions")
        let page = try browser.get("/admin/extensions")
        XCTAssertEqual(page.status, 503)
        XCTAssertTrue(page.text.contains("The database is unavailable"), page.text)
        XCTAssertNotNil(page.header("Retry-After").flatMap(Int.init))
        release()
        XCTAssertEqual(try browser.get("/admin/extensions").status, 200)
    }
}
