import Storage

/// Kamailio's side of the benchmark database: the same extensions as Rouse's (`subscriber` rows
/// with the MD5 HA1 precomputed for the same realm, user and password), made in one
/// `INSERT … SELECT generate_series` statement, the same HA1s as `htable` rows (key the number)
/// for Kamailio at its fastest (`HA1_IN_MEMORY` loads them at start), and its `location` table
/// emptied between runs.
/// The tables come from Debian's `/usr/share/kamailio/postgres/*-create.sql`, which
/// `scripts/bench.sh` loads.
enum KamailioDirectory {
    /// Why the database is not ready for Kamailio.
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Adds subscribers `first ..< first + count` (numbers as decimal strings) of `domain`, all
    /// with `password`, keeping rows already there; then gathers planner statistics.
    static func prepare(_ conninfo: String, domain: String, password: String, first: Int, count: Int) throws {
        let connection = try PostgresConnection(conninfo: conninfo)
        let tables = try connection.query(
            "SELECT to_regclass('subscriber') IS NOT NULL AND to_regclass('location') IS NOT NULL AND to_regclass('htable') IS NOT NULL")
        guard tables.rows.first?.first ?? nil == "t" else {
            throw Failure(description: "Kamailio's tables are missing (scripts/bench.sh loads /usr/share/kamailio/postgres/*-create.sql)")
        }
        try connection.query(
            """
            INSERT INTO subscriber (username, domain, ha1, ha1b)
            SELECT n::text, $1::text, md5(n::text || ':' || $1::text || ':' || $2::text), ''
            FROM generate_series($3::bigint, $4::bigint) AS n
            ON CONFLICT (username, domain) DO NOTHING
            """,
            [domain, password, String(first), String(first + count - 1)])
        try connection.query("CREATE UNIQUE INDEX IF NOT EXISTS htable_key_name ON htable (key_name)")
        try connection.query(
            """
            INSERT INTO htable (key_name, key_type, value_type, key_value)
            SELECT n::text, 0, 0, md5(n::text || ':' || $1::text || ':' || $2::text)
            FROM generate_series($3::bigint, $4::bigint) AS n
            ON CONFLICT (key_name) DO NOTHING
            """,
            [domain, password, String(first), String(first + count - 1)])
        try connection.query("ANALYZE subscriber, htable")
    }

    /// Removes every binding Kamailio stored (usrloc loads the table at start in `db_mode` 1).
    static func clearLocations(_ conninfo: String) throws {
        let connection = try PostgresConnection(conninfo: conninfo)
        try connection.query("TRUNCATE location, location_attrs")
    }
}
