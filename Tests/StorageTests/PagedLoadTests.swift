import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
@testable import Storage
import XCTest

/// The start-up loads read in pages (keyset on the primary key, one short statement each): every
/// binding and extension comes back once across page boundaries, rows changing between pages are
/// neither doubled nor resurrected, and a session's low `statement_timeout` does not stop a load
/// of many rows.
final class PagedLoadTests: XCTestCase {
    var database: MigratedDatabase!
    var store: PostgresLocationStore!

    override func setUpWithError() throws {
        database = try MigratedDatabase(extensions: 5)
        store = PostgresLocationStore(settings: database.settings)
    }

    override func tearDown() {
        store?.shutdown()
        database?.drop()
    }

    private func aor(_ index: Int) -> AddressOfRecord { AddressOfRecord(number: String(1000 + index % 5), domain: "example.com") }

    func testEveryBindingComesBackOnceAcrossPageBoundariesInEachExtensionsOrder() throws {
        let start = Date(timeIntervalSince1970: 1_750_000_000)
        let token = PushChannel(provider: .fcm, token: "tok", param: "project", kind: .standard)
        // 11 bindings: pages of 3, 4 and 11 end inside, on, and past the table's end.
        let saved = (0..<11).map { index in
            makeBinding(aor(index), channels: index % 2 == 0 ? [token] : [], now: start.addingTimeInterval(Double(11 - index)))
        }
        try store.applyAndWait(saved.map { .save($0) })
        let connection = try database.database.connect()
        for pageSize in [1, 3, 4, 11, 5000] {
            let loaded = try BindingRecords.load(connection, aor: nil, now: start, pageSize: pageSize)
            XCTAssertEqual(loaded.count, 11, "page size \(pageSize)")
            XCTAssertEqual(Set(loaded.map(\.id)), Set(saved.map(\.id)), "page size \(pageSize)")
            XCTAssertEqual(loaded.map(\.registeredAt), loaded.map(\.registeredAt).sorted(), "page size \(pageSize)")
            for binding in loaded {
                XCTAssertEqual(binding, saved.first { $0.id == binding.id }, "page size \(pageSize)")
            }
            // The start-up's read: the same bindings, one list per extension in the same order.
            XCTAssertEqual(
                try BindingRecords.loadByExtension(connection, now: start, pageSize: pageSize), Dictionary(grouping: loaded, by: \.aor),
                "page size \(pageSize)")
        }
        XCTAssertEqual(Set(try store.loadBindings(now: start).map(\.id)), Set(saved.map(\.id)))
    }

    func testRowsChangingBetweenPagesAreNeitherDoubledNorResurrected() throws {
        let now = Date()
        let saved = (0..<6).map { makeBinding(aor($0), now: now) }.sorted { $0.id.uuidString.lowercased() < $1.id.uuidString.lowercased() }
        try store.applyAndWait(saved.map { .save($0) })
        let connection = try database.database.connect()

        let first = try BindingRecords.loadPage(connection, after: nil, now: now, limit: 2)
        XCTAssertEqual(first.map(\.id), Array(saved.prefix(2)).map(\.id))
        // Between pages: one already read is refreshed, one not yet read is deleted, one not yet
        // read is refreshed with a new CSeq.
        var refreshedEarly = saved[0]
        refreshedEarly.cseq = 9
        var refreshedLate = saved[4]
        refreshedLate.cseq = 7
        try store.applyAndWait([.save(refreshedEarly), .delete(saved[3], .removed), .save(refreshedLate)])

        var rest: [Binding] = []
        var after = first.last?.id
        while let cursor = after {
            let page = try BindingRecords.loadPage(connection, after: cursor, now: now, limit: 2)
            rest += page
            after = page.count < 2 ? nil : page.last?.id
        }
        XCTAssertEqual(rest.map(\.id), [saved[2].id, saved[4].id, saved[5].id])
        XCTAssertEqual(rest.first { $0.id == saved[4].id }?.cseq, 7)
        XCTAssertEqual(Set((first + rest).map(\.id)).count, 5)
    }

    func testALoadOfManyBindingsIsNotStoppedByALowStatementTimeout() throws {
        // 30,000 bindings each with a push channel, bulk-inserted.
        let total = 30_000
        let writer = try database.database.connect()
        try writer.query(
            """
            INSERT INTO bindings (id, extension_id, aor, contact, call_id, cseq, registered_at, expires_at,
                flow_transport, flow_source, flow_connection, flow_local, flow_instance)
            SELECT gen_random_uuid(), e.id, e.number || '@' || d.domain, 'sip:p' || g || '@192.0.2.1', 'call-' || g, g,
                now() - interval '1 minute', now() + interval '1 hour', 'udp', '192.0.2.1:5060', '', 'udp:127.0.0.1:5060', ''
            FROM generate_series(1, $1::integer) g
            JOIN extensions e ON e.number = (1000 + g % 5)::text JOIN sip_domains d ON d.id = e.domain_id
            """, [String(total)])
        try writer.query(
            """
            INSERT INTO binding_push_channels (binding_id, position, provider, family, token, param, kind)
            SELECT id, 0, 'fcm', 'fcm', 'token-' || call_id, 'project', 'standard' FROM bindings
            """)
        // The limit: a quarter of what reading every row in one statement takes here (at least
        // 0.25 s, so a page of a sixtieth of the rows stays far within it on a loaded machine).
        let connection = try database.database.connect()
        var oneStatement = Double.infinity
        for _ in 0..<2 {
            let began = DispatchTime.now()
            XCTAssertEqual(try connection.query(BindingRecords.loadFirstPageSQL, [String(Date().timeIntervalSince1970), String(total)]).count, total)
            oneStatement = min(oneStatement, Double(DispatchTime.now().uptimeNanoseconds - began.uptimeNanoseconds) / 1e9)
        }
        let limit = max(0.25, oneStatement / 4)
        try connection.setStatementTimeout(seconds: limit)
        // No control read of all rows in one statement under the limit: how long that takes varies
        // from one read to the next (it passed once under ThreadSanitizer), and a test must not
        // depend on a duration. A single-statement load would be cut by this limit where the rows
        // take over a second to read; the paged one never is.

        let loaded = try BindingRecords.load(connection, aor: nil, now: Date(), pageSize: 500)
        XCTAssertEqual(loaded.count, total)
        XCTAssertEqual(Set(loaded.map(\.id)).count, total)
        XCTAssertTrue(loaded.allSatisfy { $0.pushChannels.first?.token == "token-" + $0.callID })
    }

    func testTheDirectoryLoadsInPagesOnOneSnapshot() throws {
        let connection = try database.database.connect()
        connection.secrets = TestDatabase.secrets
        try connection.query("UPDATE extensions SET display_name = 'Name ' || number WHERE number IN ('1001', '1003')")
        let whole = try PostgresDirectory.loadDirectory(on: connection, pageSize: 5000)
        XCTAssertEqual(whole.extensions.count, 5)
        XCTAssertEqual(whole.displayNames, [aor(1): "Name 1001", aor(3): "Name 1003"])
        for pageSize in [1, 2, 5] {
            let paged = try PostgresDirectory.loadDirectory(on: connection, pageSize: pageSize)
            XCTAssertEqual(paged.extensions, whole.extensions, "page size \(pageSize)")
            XCTAssertEqual(paged.displayNames, whole.displayNames, "page size \(pageSize)")
            XCTAssertEqual(paged.domains, ["example.com"])
        }
        let credentials = try XCTUnwrap(whole.extensions[aor(2)])
        XCTAssertEqual(credentials, ExtensionCredentials(aor: aor(2), password: "pw-2"))
    }
}
