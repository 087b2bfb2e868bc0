import Crypto
import Registrar
import Storage

/// Fills a benchmark database with one domain and many extensions sharing a password, as
/// `rouse extension add` would store them (sealed HA1 hashes only), in a few bulk statements.
enum BenchDirectory {
    /// The secrets key of every benchmark database and the `rouse` it runs (`RouseChild`): fixed,
    /// so that runs share a database; benchmark databases hold no real secret.
    static let secrets = SecretSeal(current: try! SecretSealKey(bytes: Digest.hash(.sha256, Array("rouse-bench secrets key".utf8))))

    /// A connection that seals and opens with `secrets`.
    static func connect(_ conninfo: String) throws -> PostgresConnection {
        let connection = try PostgresConnection(conninfo: conninfo)
        connection.secrets = secrets
        return connection
    }

    /// Applies the migrations, makes `domain` and `numbers` as its extensions, removes bindings an
    /// earlier run left in the domain, and gathers planner statistics.
    static func prepare(_ conninfo: String, domain: String, password: String, numbers: [String]) throws {
        let connection = try connect(conninfo)
        try Migrator.migrate(connection)
        try connection.query("INSERT INTO sip_domains (domain) VALUES ($1) ON CONFLICT (domain) DO NOTHING", [domain])
        try connection.query(
            """
            DELETE FROM bindings WHERE extension_id IN
                (SELECT e.id FROM extensions e JOIN sip_domains d ON d.id = e.domain_id WHERE d.domain = $1)
            """, [domain])
        // HA1 = H(number:realm:password) for both algorithms, sealed; numbers and sealed values
        // (base64url) need no quoting inside an array literal.
        let chunk = 25_000
        for start in stride(from: 0, to: numbers.count, by: chunk) {
            let part = numbers[start..<min(start + chunk, numbers.count)]
            let sealed = try part.map { number in
                let aor = AddressOfRecord(number: number, domain: domain)
                return try ExtensionCredentials(aor: aor, password: password).sealedHA1s(of: aor, on: connection)
            }
            let md5 = sealed.map(\.md5)
            let sha256 = sealed.map(\.sha256)
            try connection.query(
                """
                INSERT INTO extensions (domain_id, number, ha1_md5, ha1_sha256)
                SELECT d.id, x.number, x.md5, x.sha256
                FROM sip_domains d, unnest($2::text[], $3::text[], $4::text[]) AS x (number, md5, sha256)
                WHERE d.domain = $1
                ON CONFLICT (domain_id, number) DO UPDATE SET ha1_md5 = excluded.ha1_md5, ha1_sha256 = excluded.ha1_sha256
                """,
                [domain, arrayLiteral(part), arrayLiteral(md5), arrayLiteral(sha256)])
        }
        // A bulk load leaves the planner without statistics until autovacuum gets round to it
        // (a minute later), and it would scan every extension for each binding written meanwhile.
        // An operator's extensions accumulate over days; give the planner what they would have.
        try connection.query("ANALYZE sip_domains, extensions")
    }

    /// Removes every binding of `domain`'s extensions (Rouse loads bindings at start).
    static func clearBindings(_ conninfo: String, domain: String) throws {
        let connection = try PostgresConnection(conninfo: conninfo)
        try connection.query(
            """
            DELETE FROM bindings WHERE extension_id IN
                (SELECT e.id FROM extensions e JOIN sip_domains d ON d.id = e.domain_id WHERE d.domain = $1)
            """, [domain])
    }

    private static func arrayLiteral<S: Sequence<String>>(_ values: S) -> String {
        "{" + values.joined(separator: ",") + "}"
    }
}
