import Crypto
import Foundation
import Push
import Registrar
import RouseTestSupport
import SIPProxy
import Storage
import XCTest

/// Secrets sealed at rest (issue 20 item 7), on real PostgreSQL: what a dump of the tables holds,
/// what a wrong key gets, re-sealing under a new key, a sealed value moved to another row, and an
/// upgrade from plain rows.
final class SealedSecretsTests: XCTestCase {
    private var database: TestDatabase!
    private let aor = AddressOfRecord(number: "1001", domain: "example.com")
    private let other = AddressOfRecord(number: "1002", domain: "example.com")
    private let password = "correct-horse-1001"
    private let trunkPassword = "trunk-pw-Zq8vX"
    private var apnsPEM = ""
    private var fcmPEM = ""

    override func setUpWithError() throws {
        database = try TestDatabase()
        apnsPEM = SigningKey.generateP256().privateKeyPEM()
        let account = try PushStandIn.makeFCMServiceAccount()
        defer { account.remove() }
        fcmPEM = try FCMServiceAccount(json: Array(try Data(contentsOf: URL(fileURLWithPath: account.path)))).privateKeyPEM
    }

    override func tearDown() {
        database?.drop()
    }

    /// Every secret kind stored through the storage layer, with the test run's key.
    private func storeEverySecret() throws -> (apns: Int64, fcm: Int64) {
        let connection = try database.connect()
        try Migrator.migrate(connection)
        let directory = PostgresDirectory(settings: database.settings())
        try directory.addDomain("example.com")
        try directory.addExtension(aor, password: password)
        try directory.addExtension(other, password: password + "-other")
        let apps = PostgresPushApps(connection: connection)
        let apns = try apps.add(PushApp(credentials: .apns(APNsCredentials(
            teamID: "DEF123GHIJ", keyID: "ABC123DEFG", topic: "com.example.app", privateKeyPEM: apnsPEM)))).id
        let fcm = try apps.add(PushApp(credentials: .fcm(FCMServiceAccount(
            projectID: "rouse-test", clientEmail: "rouse@rouse-test.iam.gserviceaccount.com", privateKeyPEM: fcmPEM,
            tokenURI: "https://oauth2.googleapis.com/token")))).id
        _ = try PostgresRoutes(connection: connection).add(RouteDraft(
            organisation: "example.com", name: "trunk", pattern: "prefix:0", hops: ["trunk.example.net"], username: "acme", password: trunkPassword))
        _ = try PostgresVAPIDKeys.loadOrCreate(on: connection)
        _ = try SealedSecrets.sharedSecret(named: "call_token_secret", on: connection)
        return (apns, fcm)
    }

    /// Every row of every table, as JSON text: what `pg_dump` of the data would show.
    private func dump() throws -> String {
        let connection = try database.connect()
        let tables = try connection.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1"
        ).rows.compactMap { $0[0] }
        XCTAssertTrue(tables.contains("extensions") && tables.contains("push_apps"), "\(tables)")
        var text = ""
        for table in tables {
            // Table names come from the catalogue itself; quote_ident keeps them one identifier.
            let name = try XCTUnwrap(connection.query("SELECT quote_ident($1)", [table]).rows.first?[0] ?? nil)
            for row in try connection.query("SELECT row_to_json(t)::text FROM \(name) t").rows { text += (row[0] ?? "") + "\n" }
        }
        return text
    }

    /// The lines of a PEM between its armour, each long enough to be telling.
    private func bodyLines(_ pem: String) -> [String] {
        pem.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("-----") && $0.count >= 16 }
    }

    func testADumpOfTheTablesHoldsNoSecretInPlainText() throws {
        _ = try storeEverySecret()
        let dump = try dump()
        XCTAssertTrue(dump.contains("v1:\(TestDatabase.secrets.current.id):"), "the secrets are there, sealed")
        var secrets = bodyLines(apnsPEM) + bodyLines(fcmPEM) + [trunkPassword, password]
        for algorithm in [Digest.Algorithm.md5, .sha256] {
            secrets.append(ExtensionCredentials.ha1(algorithm, number: "1001", realm: "example.com", password: password))
        }
        XCTAssertGreaterThan(secrets.count, 10)
        for secret in secrets { XCTAssertFalse(dump.contains(secret), "the dump holds \(secret.prefix(8))… in plain text") }
        XCTAssertFalse(dump.contains("PRIVATE KEY"), "no PEM in the dump")
        // The shared secret is 64 hex digits: none appears anywhere in the dump.
        XCTAssertNil(dump.range(of: "[0-9a-f]{64}", options: .regularExpression), "no 32-byte hex secret in the dump")

        // What the stored secrets open to, with the key.
        XCTAssertEqual(try PostgresDirectory(settings: database.settings()).loadDirectory().extensions[aor], ExtensionCredentials(aor: aor, password: password))
        let apps = try PostgresPushApps(connection: try database.connect()).all()
        XCTAssertEqual(apps.compactMap { if case .apns(let a) = $0.credentials { a.privateKeyPEM } else { nil } }, [apnsPEM])
        XCTAssertEqual(try PostgresRoutes(connection: try database.connect()).credentials().first?.password, trunkPassword)
    }

    func testAWrongKeyReadsNothingAndSaysWhichKeyItNeeds() throws {
        _ = try storeEverySecret()
        let wrong = SecretSeal(current: .generate())
        let settings = PostgresSettings(conninfo: database.conninfo, secrets: wrong)
        let right = TestDatabase.secrets.current.id
        func assertRefused(_ what: String, _ body: () throws -> Void) {
            XCTAssertThrowsError(try body(), what) { error in
                XCTAssertTrue(error is SecretSealError, "\(what): \(error)")
                let text = "\(error)"
                XCTAssertTrue(text.contains("sealed with secrets key \(right)") && text.contains(wrong.current.id), "\(what): \(text)")
            }
        }
        assertRefused("directory") { _ = try PostgresDirectory(settings: settings).loadDirectory() }
        assertRefused("push apps") { _ = try PostgresPushApps(connection: try settings.connect()).all() }
        assertRefused("routes") { _ = try PostgresRoutes(connection: try settings.connect()).credentials() }
        assertRefused("VAPID key") { _ = try PostgresVAPIDKeys.loadOrCreate(on: try settings.connect()) }
        assertRefused("shared secret") { _ = try SealedSecrets.sharedSecret(named: "call_token_secret", on: try settings.connect()) }
        assertRefused("check") { try SealedSecrets.verify(on: try settings.connect()) }
        // Listing needs no key and shows no secret.
        XCTAssertEqual(try PostgresRoutes(connection: try settings.connect()).list().map(\.hasPassword), [true])
        // No key at all: a clear refusal, not a plain-text write.
        let keyless = PostgresDirectory(settings: PostgresSettings(conninfo: database.conninfo))
        XCTAssertThrowsError(try keyless.addExtension(AddressOfRecord(number: "1003", domain: "example.com"), password: "pw-1003-x")) { error in
            XCTAssertTrue("\(error)".contains("no secrets key: set secrets_key_file"), "\(error)")
        }
    }

    func testResealMovesEverySecretToTheNewKeyAtOnce() throws {
        _ = try storeEverySecret()
        let before = try SealedSecrets.verify(on: try database.connect())
        XCTAssertEqual(before, 9, "two apps, four HA1s, a trunk password, the VAPID key, a shared secret")
        let newKey = SecretSeal(current: .generate())
        let count = try SealedSecrets.reseal(on: try database.connect(), with: newKey)
        XCTAssertEqual(count, SealedSecrets.Count(sealed: 9, unchanged: 0))
        let dump = try dump()
        XCTAssertFalse(dump.contains("v1:\(TestDatabase.secrets.current.id):"), "nothing is left under the old key")

        let renewed = PostgresSettings(conninfo: database.conninfo, secrets: newKey)
        XCTAssertEqual(try SealedSecrets.verify(on: try renewed.connect()), 9)
        XCTAssertEqual(try PostgresDirectory(settings: renewed).loadDirectory().extensions[aor], ExtensionCredentials(aor: aor, password: password))
        XCTAssertEqual(try PostgresRoutes(connection: try renewed.connect()).credentials().first?.password, trunkPassword)
        XCTAssertThrowsError(try PostgresDirectory(settings: database.settings()).loadDirectory(), "the old key opens nothing now")
        // Again with the same key: nothing to do.
        XCTAssertEqual(try SealedSecrets.reseal(on: try renewed.connect(), with: newKey), SealedSecrets.Count(sealed: 0, unchanged: 9))
        // During a rotation the key file holds the new key first and the old one after: both open.
        let ring = SecretSeal(current: TestDatabase.secrets.current, older: [newKey.current])
        XCTAssertEqual(try SealedSecrets.verify(on: try PostgresSettings(conninfo: database.conninfo, secrets: ring).connect()), 9)
    }

    func testASealedValueCopiedToAnotherRowDoesNotOpen() throws {
        let ids = try storeEverySecret()
        let connection = try database.connect()
        // 1002's hash replaced by 1001's: whoever knows 1001's password must not become 1002.
        try connection.query(
            """
            UPDATE extensions SET ha1_md5 = (SELECT ha1_md5 FROM extensions WHERE number = '1001')
            WHERE number = '1002'
            """)
        XCTAssertThrowsError(try PostgresDirectory(settings: database.settings()).loadDirectory()) { error in
            XCTAssertTrue("\(error)".contains("extensions.ha1_md5:1002@example.com does not open"), "\(error)")
            XCTAssertTrue("\(error)".contains("copied from another row"), "\(error)")
        }
        // One app's key copied to the other.
        try connection.query(
            "UPDATE push_apps SET key_text = (SELECT key_text FROM push_apps WHERE id = $1::bigint) WHERE id = $2::bigint",
            [String(ids.apns), String(ids.fcm)])
        XCTAssertThrowsError(try PostgresPushApps(connection: connection).all()) { error in
            XCTAssertTrue("\(error)".contains("push_apps.key_text:\(ids.fcm) does not open"), "\(error)")
        }
        // A value written in plain text is refused by PostgreSQL itself.
        XCTAssertThrowsError(try connection.query(
            "UPDATE extensions SET ha1_md5 = $1 WHERE number = '1001'",
            [ExtensionCredentials.ha1(.md5, number: "1001", realm: "example.com", password: password)])) { error in
            XCTAssertTrue("\(error)".contains("extensions_ha1_sealed"), "\(error)")
        }
    }

    func testAStartWithNothingPlainNeitherWaitsForNorTakesRowLocks() throws {
        _ = try storeEverySecret()
        // Another session holds an extension's row (an operator's change under way): a start that
        // finds every secret sealed must not queue behind it for the row it need not rewrite.
        let holder = try database.connect()
        try holder.query("BEGIN")
        try holder.query("SELECT id FROM extensions FOR UPDATE")
        defer { _ = try? holder.query("ROLLBACK") }
        let connection = try database.connect()
        // Waiting for the held row would end in this timeout's error.
        try connection.setStatementTimeout(seconds: 5)
        let count = try SealedSecrets.sealPlainValues(on: connection)
        XCTAssertEqual(count.sealed, 0)
        XCTAssertGreaterThan(count.unchanged, 2)
    }

    func testAnUpgradeSealsThePlainRowsAndLosesNothing() throws {
        let connection = try database.connect()
        try Migrator.migrate(connection, migrations: Migrator.all.filter { $0.version < 740 })
        // Rows as Rouse stored them before version 740.
        let md5 = ExtensionCredentials.ha1(.md5, number: "1001", realm: "example.com", password: password)
        let sha256 = ExtensionCredentials.ha1(.sha256, number: "1001", realm: "example.com", password: password)
        let sharedHex = SecureRandom.hex(32)
        let vapid = VAPIDKeys.generate()
        try connection.query("INSERT INTO sip_domains (domain) VALUES ('example.com')")
        try connection.query(
            "INSERT INTO extensions (domain_id, number, ha1_md5, ha1_sha256) SELECT id, '1001', $1, $2 FROM sip_domains", [md5, sha256])
        try connection.query(
            """
            INSERT INTO push_apps (kind, fields, key_text) VALUES
                ('apns', '{"team_id": "DEF123GHIJ", "key_id": "ABC123DEFG", "topic": "com.example.app"}', $1)
            """, [apnsPEM])
        try connection.query(
            """
            INSERT INTO outbound_routes (domain_id, name, position, pattern, hops, username, password)
            SELECT id, 'trunk', 10, 'prefix:0', '["trunk.example.net"]', 'acme', $1 FROM sip_domains
            """, [trunkPassword])
        try connection.query("INSERT INTO webpush_vapid_keys (id, private_key_pem, public_key) VALUES (1, $1, $2)", [vapid.privateKeyPEM, vapid.keys.publicKeyBase64URL])
        try connection.query("INSERT INTO rouse_settings (key, value) VALUES ('call_token_secret', $1), ('unrelated', 'kept')", [sharedHex])

        XCTAssertEqual(try Migrator.migrate(connection).first, 740, "the upgrade starts with the sealing migration (later ones follow it)")
        XCTAssertThrowsError(try PostgresDirectory(settings: database.settings()).loadDirectory(), "plain until sealed") { error in
            XCTAssertTrue("\(error)".contains("not sealed yet"), "\(error)")
        }
        XCTAssertEqual(try SealedSecrets.sealPlainValues(on: connection), SealedSecrets.Count(sealed: 6, unchanged: 0))
        XCTAssertEqual(try SealedSecrets.sealPlainValues(on: connection), SealedSecrets.Count(sealed: 0, unchanged: 6), "once only")

        let dump = try dump()
        for secret in [md5, sha256, sharedHex, trunkPassword] + bodyLines(apnsPEM) + bodyLines(vapid.privateKeyPEM) {
            XCTAssertFalse(dump.contains(secret), "\(secret.prefix(8))… is still plain")
        }
        XCTAssertEqual(try PostgresDirectory(settings: database.settings()).loadDirectory().extensions[aor], ExtensionCredentials(aor: aor, password: password))
        let app = try XCTUnwrap(try PostgresPushApps(connection: connection).all().first)
        guard case .apns(let apns) = app.credentials else { return XCTFail("\(app)") }
        XCTAssertEqual(apns.privateKeyPEM, apnsPEM)
        XCTAssertEqual(try PostgresRoutes(connection: connection).credentials().first?.password, trunkPassword)
        XCTAssertEqual(try PostgresVAPIDKeys.load(on: connection)?.publicKeyBase64URL, vapid.keys.publicKeyBase64URL)
        XCTAssertEqual(try SealedSecrets.sharedSecret(named: "call_token_secret", on: connection), Hex.decode(sharedHex))
        XCTAssertEqual(try connection.query("SELECT value FROM rouse_settings WHERE key = 'unrelated'").value(0, "value"), "kept")
    }
}
