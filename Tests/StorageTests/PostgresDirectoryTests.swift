import Crypto
import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// Organisations and extensions in PostgreSQL: the operator's operations, their refusals, and
/// what is (and is not) stored.
final class PostgresDirectoryTests: XCTestCase {
    var store: MigratedDatabase!

    override func setUpWithError() throws {
        store = try MigratedDatabase()
    }

    override func tearDown() {
        store?.drop()
    }

    var directory: PostgresDirectory { store.directory }

    func testVersion10IsAppliedOnceAndMigratingAgainChangesNothing() throws {
        let connection = try store.database.connect()
        XCTAssertGreaterThanOrEqual(try Migrator.currentVersion(connection), 10)
        XCTAssertEqual(try Migrator.migrate(connection), [])
        for table in ["sip_domains", "extensions", "bindings", "binding_push_channels", "push_dead_tokens"] {
            XCTAssertEqual(try connection.query("SELECT to_regclass($1) IS NOT NULL AS present", [table]).value(0, "present"), "t", table)
        }
    }

    func testDomainsAreAddedListedAndRemoved() throws {
        XCTAssertEqual(try directory.addDomain("Example.COM"), "example.com")
        try directory.addDomain("example.org")
        XCTAssertEqual(try directory.listDomains().map(\.domain), ["example.com", "example.org"])
        try directory.removeDomain("example.org")
        XCTAssertEqual(try directory.listDomains().map(\.domain), ["example.com"])
        XCTAssertEqual(try directory.loadDirectory().domains, ["example.com"])
    }

    func testDomainRefusalsSayWhyInOneLine() throws {
        try directory.addDomain("example.com")
        try directory.addExtension(AddressOfRecord(number: "1001", domain: "example.com"), password: "pw")
        assertRefusal(try directory.addDomain("example.com"), "domain example.com already exists")
        assertRefusal(try directory.addDomain("exa mple.com"), "'exa mple.com' is not a valid domain")
        assertRefusal(try directory.removeDomain("example.org"), "no such domain example.org")
        assertRefusal(try directory.removeDomain("example.com"), "domain example.com still has 1 extension; remove it first")
        assertRefusal(try directory.listExtensions(domain: "example.org"), "no such domain example.org")
    }

    func testExtensionsAreAddedListedChangedAndRemoved() throws {
        try directory.addDomain("example.com")
        try directory.addDomain("example.org")
        let a = AddressOfRecord(number: "1001", domain: "example.com")
        let b = AddressOfRecord(number: "2001", domain: "example.org")
        try directory.addExtension(a, password: "first")
        try directory.addExtension(b, password: "other")
        XCTAssertEqual(try directory.listExtensions().map(\.aor), [a, b])
        XCTAssertEqual(try directory.listExtensions(domain: "example.org").map(\.aor), [b])
        XCTAssertTrue(try directory.hasExtension(a))

        let before = try directory.loadDirectory()
        XCTAssertEqual(before.extensions[a], ExtensionCredentials(aor: a, password: "first"))
        try directory.changePassword(a, password: "second")
        XCTAssertEqual(try directory.loadDirectory().extensions[a], ExtensionCredentials(aor: a, password: "second"))

        try directory.removeExtension(a)
        XCTAssertFalse(try directory.hasExtension(a))
        XCTAssertEqual(try directory.loadDirectory().extensions.keys.sorted(), [b])
    }

    func testExtensionRefusalsSayWhyInOneLine() throws {
        try directory.addDomain("example.com")
        let aor = AddressOfRecord(number: "1001", domain: "example.com")
        try directory.addExtension(aor, password: "pw")
        assertRefusal(try directory.addExtension(aor, password: "pw"), "extension 1001@example.com already exists")
        assertRefusal(
            try directory.addExtension(AddressOfRecord(number: "1001", domain: "example.org"), password: "pw"),
            "no such domain example.org")
        assertRefusal(try DirectoryError.parseAddress("10 01@example.com"), "'10 01' is not a valid extension number")
        assertRefusal(try DirectoryError.parseAddress("1001"), "'1001' is not an extension address (NUMBER@DOMAIN)")
        assertRefusal(
            try directory.addExtension(AddressOfRecord(number: "1002", domain: "example.com"), password: ""),
            "unusable password: it is empty")
        assertRefusal(
            try directory.changePassword(AddressOfRecord(number: "9", domain: "example.com"), password: "x"),
            "no such extension 9@example.com")
        assertRefusal(
            try directory.removeExtension(AddressOfRecord(number: "9", domain: "example.net")), "no such domain example.net")
    }

    func testOnlyHashesAreStoredAndThePasswordIsInNoColumn() throws {
        try directory.addDomain("example.com")
        let aor = AddressOfRecord(number: "1001", domain: "example.com")
        let password = "Tr0ub4dor-and-3"
        try directory.addExtension(aor, password: password)
        try directory.changePassword(aor, password: password + "x")
        try directory.changePassword(aor, password: password)
        let connection = try store.database.connect()
        XCTAssertEqual(try directory.loadDirectory().extensions[aor], ExtensionCredentials(aor: aor, password: password))
        // Stored sealed: neither hash is in the row.
        let row = try connection.query("SELECT ha1_md5 || ' ' || ha1_sha256 AS stored FROM extensions")
        let stored = try XCTUnwrap(row.value(0, "stored"))
        XCTAssertFalse(stored.contains(ExtensionCredentials.ha1(.md5, number: "1001", realm: "example.com", password: password)), stored)
        XCTAssertFalse(stored.contains(ExtensionCredentials.ha1(.sha256, number: "1001", realm: "example.com", password: password)), stored)

        let columns = try connection.query(
            """
            SELECT table_name, column_name FROM information_schema.columns
            WHERE table_schema = 'public' AND data_type IN ('text', 'character varying', 'ARRAY')
            """)
        XCTAssertGreaterThan(columns.count, 10)
        for row in columns.rows {
            guard let table = row[0], let column = row[1] else { continue }
            // Identifiers from the catalogue, quoted; the value compared travels as a parameter.
            let found = try connection.query(
                "SELECT count(*) AS n FROM \"\(table)\" WHERE strpos(\"\(column)\"::text, $1) > 0", [password])
            XCTAssertEqual(found.value(0, "n"), "0", "\(table).\(column) holds the password")
        }
    }

    func testEveryChangeIsAnnouncedOnRouseDirectory() throws {
        let received = Collector<PostgresNotification>()
        let listening = Collector<Bool>()
        let listener = PostgresNotificationListener(
            settings: store.settings, channels: [PostgresDirectory.notificationChannel],
            onListening: { listening.append(true) }, onNotification: { received.append($0) })
        listener.start()
        defer { listener.stop() }
        XCTAssertEqual(listening.wait(for: 1).count, 1)
        try directory.addDomain("example.com")
        let aor = AddressOfRecord(number: "1001", domain: "example.com")
        try directory.addExtension(aor, password: "pw")
        try directory.changePassword(aor, password: "pw2")
        try directory.removeExtension(aor)
        try directory.removeDomain("example.com")
        XCTAssertEqual(
            received.wait(for: 5).map(\.payload),
            [
                "domain-added example.com", "extension-added 1001@example.com", "extension-password 1001@example.com",
                "extension-removed 1001@example.com", "domain-removed example.com",
            ])
    }

    func testAWatchTakenBeforeALoadSaysWhetherTheDirectoryChangedSince() throws {
        try directory.addDomain("example.com")
        let unchanged = try PostgresDirectoryWatch(settings: store.settings)
        XCTAssertEqual(try directory.loadDirectory().domains, ["example.com"])
        XCTAssertFalse(unchanged.changedSinceLoad())
        XCTAssertTrue(unchanged.changedSinceLoad(), "asked again, it cannot say: the directory is read again")
        let changed = try PostgresDirectoryWatch(settings: store.settings)
        try directory.addExtension(AddressOfRecord(number: "1001", domain: "example.com"), password: "pw")
        XCTAssertTrue(changed.changedSinceLoad())
    }

    func testRemovingAnExtensionRemovesItsBindings() throws {
        try directory.addDomain("example.com")
        let aor = AddressOfRecord(number: "1001", domain: "example.com")
        try directory.addExtension(aor, password: "pw")
        let location = PostgresLocationStore(settings: store.settings)
        defer { location.shutdown() }
        try location.applyAndWait([.save(makeBinding(aor, channels: [PushChannel(provider: .fcm, token: "tok-1", param: nil, kind: .standard)]))])
        XCTAssertEqual(try location.loadBindings(for: aor, now: Date()).count, 1)
        try directory.removeExtension(aor)
        XCTAssertEqual(try location.loadBindings(now: Date()).count, 0)
        let connection = try store.database.connect()
        XCTAssertEqual(try connection.query("SELECT count(*) AS n FROM binding_push_channels").value(0, "n"), "0")
    }

    private func assertRefusal<T>(
        _ expression: @autoclosure () throws -> T, _ message: String, file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertThrowsError(try expression(), file: file, line: line) { error in
            XCTAssertTrue(error is DirectoryError, "\(type(of: error)): \(error)", file: file, line: line)
            XCTAssertEqual(String(describing: error), message, file: file, line: line)
        }
    }
}
