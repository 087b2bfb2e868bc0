public import Crypto
import Foundation
public import Storage

/// A fresh, empty PostgreSQL database for one test suite, made on the cluster that `make test`
/// starts (`ROUSE_TEST_DATABASE_URL`) and dropped by `drop()`. Its connections and settings carry
/// the test run's secrets key (`secrets`), the one `rouse` processes started by tests get too.
public final class TestDatabase: Sendable {
    /// Why a test database could not be had.
    public struct Unavailable: Error, CustomStringConvertible {
        public let description: String
    }

    /// The conninfo of the new database.
    public let conninfo: String
    public let name: String
    private let adminConninfo: String

    /// Creates `rouse_test_<random>` on the test cluster.
    public init() throws {
        guard let admin = ProcessInfo.processInfo.environment["ROUSE_TEST_DATABASE_URL"], !admin.isEmpty else {
            throw Unavailable(description: "ROUSE_TEST_DATABASE_URL is not set: run the tests with `make test`, which starts PostgreSQL")
        }
        adminConninfo = admin
        name = "rouse_test_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
        let connection = try PostgresConnection(conninfo: admin)
        // CREATE DATABASE takes no bind parameters; the name is made here from hex digits only.
        try connection.query("CREATE DATABASE \(name)")
        conninfo = admin + " dbname=\(name)"
    }

    /// The secrets key of this test run: made once per test process, handed to every connection and
    /// settings made here and to every `rouse` a test starts (`ROUSE_SECRETS_KEY`).
    public static let secrets = SecretSeal(current: .generate())

    /// Opens a connection to the test database, with the test run's secrets key.
    public func connect() throws -> PostgresConnection {
        try Self.connect(conninfo)
    }

    /// Opens a connection to any test database by its conninfo, with the test run's secrets key.
    public static func connect(_ conninfo: String) throws -> PostgresConnection {
        let connection = try PostgresConnection(conninfo: conninfo)
        connection.secrets = secrets
        return connection
    }

    /// Settings for the test database, with the test run's secrets key.
    public func settings(connectTimeout: Int = 10, statementTimeout: Double = 10) -> PostgresSettings {
        PostgresSettings(conninfo: conninfo, connectTimeout: connectTimeout, statementTimeout: statementTimeout, secrets: Self.secrets)
    }

    /// Drops the database (connections to it must be closed first).
    public func drop() {
        guard let connection = try? PostgresConnection(conninfo: adminConninfo) else { return }
        _ = try? connection.query("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
    }
}
