import RouseTestSupport
import Storage
import XCTest

final class PostgresConnectionTests: XCTestCase {
    var database: TestDatabase!

    override func setUpWithError() throws {
        database = try TestDatabase()
    }

    override func tearDown() {
        database?.drop()
    }

    func testParametersTravelAsDataNotSQL() throws {
        let connection = try database.connect()
        try connection.query("CREATE TABLE notes (body text)")
        let hostile = "x'); DROP TABLE notes; --"
        try connection.query("INSERT INTO notes (body) VALUES ($1)", [hostile])
        let rows = try connection.query("SELECT body FROM notes WHERE body = $1", [hostile])
        XCTAssertEqual(rows.count, 1)
        XCTAssertEqual(rows.value(0, "body"), hostile)
        XCTAssertEqual(try connection.query("SELECT $1::text IS NULL AS n", [nil]).value(0, "n"), "t")
    }

    func testQueryErrorCarriesSQLStateWithoutParameters() throws {
        let connection = try database.connect()
        try connection.query("CREATE TABLE names (name text PRIMARY KEY)")
        try connection.query("INSERT INTO names VALUES ($1)", ["secret-value-1"])
        XCTAssertThrowsError(try connection.query("INSERT INTO names VALUES ($1)", ["secret-value-1"])) { error in
            let postgresError = error as? PostgresError
            XCTAssertEqual(postgresError?.isUniqueViolation, true)
            XCTAssertFalse(String(describing: error).contains("secret-value-1"), "\(error)")
        }
        XCTAssertTrue(connection.isHealthy)
    }

    func testTransactionRollsBackWhenBodyThrows() throws {
        struct Abort: Error {}
        let connection = try database.connect()
        try connection.query("CREATE TABLE counter (n integer)")
        XCTAssertThrowsError(
            try connection.transaction { connection in
                try connection.query("INSERT INTO counter VALUES (1)")
                throw Abort()
            })
        XCTAssertEqual(try connection.query("SELECT count(*) AS c FROM counter").value(0, "c"), "0")
    }

    func testConnectionsDetectAVanishedServerOverTCP() throws {
        // The test cluster listens on a Unix socket, where libpq ignores these: connecting with
        // them still works, and they are set for a TCP conninfo alike.
        let connection = try database.connect()
        XCTAssertEqual(try connection.query("SELECT 1 AS one").value(0, "one"), "1")
        XCTAssertEqual(connection.option("keepalives"), "1")
        XCTAssertEqual(connection.option("keepalives_idle"), "10")
        XCTAssertEqual(connection.option("tcp_user_timeout"), "15000")
    }

    func testAConninfoMayStillChooseItsOwnKeepalives() throws {
        let connection = try PostgresConnection(conninfo: database.conninfo + " keepalives_idle=30 tcp_user_timeout=0")
        XCTAssertEqual(connection.option("keepalives_idle"), "30")
        XCTAssertEqual(connection.option("tcp_user_timeout"), "0")
    }

    func testUnreachableServerNamesHostAndPortButNotPassword() {
        // Port 1 on loopback: nothing listens there, the connection is refused at once.
        XCTAssertThrowsError(
            try PostgresConnection(conninfo: "postgresql://rouse:hunter2-secret@127.0.0.1:1/rouse", connectTimeout: 5)
        ) { error in
            let text = String(describing: error)
            XCTAssertTrue(text.contains("127.0.0.1:1"), text)
            XCTAssertFalse(text.contains("hunter2"), text)
            XCTAssertEqual((error as? PostgresError)?.kind, .connection)
        }
    }

    func testMigrationsApplyOnceAndAreIdempotent() throws {
        let connection = try database.connect()
        XCTAssertEqual(try Migrator.currentVersion(connection), 0)
        let first = try Migrator.migrate(connection)
        XCTAssertEqual(first, Migrator.all.map(\.version))
        XCTAssertEqual(try Migrator.currentVersion(connection), Migrator.all.last?.version)
        XCTAssertEqual(try Migrator.migrate(connection), [])
        // The schema they made is usable.
        try connection.query("INSERT INTO rouse_settings (key, value) VALUES ($1, $2)", ["k", "v"])
        XCTAssertEqual(try connection.query("SELECT value FROM rouse_settings WHERE key = $1", ["k"]).value(0, "value"), "v")
    }

    func testAFailingMigrationLeavesNothingHalfDone() throws {
        let connection = try database.connect()
        let broken = Migrator.all + [
            Migration(version: 9_999, name: "broken", sql: "CREATE TABLE half (a int); SELECT no_such_function();")
        ]
        XCTAssertThrowsError(try Migrator.migrate(connection, migrations: broken))
        XCTAssertEqual(try Migrator.currentVersion(connection), Migrator.all.last?.version)
        XCTAssertEqual(try connection.query("SELECT to_regclass('half') IS NULL AS gone").value(0, "gone"), "t")
    }
}
