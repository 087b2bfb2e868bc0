import Foundation
import Registrar
import RouseTestSupport
import Storage
import XCTest

/// Gateway mode's leases (migration 603): one holder per extension, renewed by it, taken by
/// another only once it has run out or been released; every statement within its deadline.
final class PostgresGatewayLeasesTests: XCTestCase {
    private var database: MigratedDatabase!
    private var pool: PostgresWorkerPool!
    let aor = AddressOfRecord(number: "1001", domain: "example.com")

    override func setUpWithError() throws {
        database = try MigratedDatabase()
        pool = PostgresWorkerPool(settings: database.settings, threads: 2, name: "lease-test")
    }

    override func tearDown() {
        pool?.shutdown()
        database?.drop()
    }

    func testOneHolderRenewsAnotherWaitsUntilTheLeaseRunsOutOrIsReleased() async throws {
        let first = PostgresGatewayLeases(pool: pool, holder: "instance-a")
        let second = PostgresGatewayLeases(pool: pool, holder: "instance-b")
        let taken = try await first.take(aor, for: 30)
        XCTAssertTrue(taken)
        let refused = try await second.take(aor, for: 30)
        XCTAssertFalse(refused, "the lease is instance-a's while it runs")
        let renewed = try await first.take(aor, for: 0.3)
        XCTAssertTrue(renewed, "the holder renews")
        let heldBy = try await second.holder(of: aor)
        XCTAssertEqual(heldBy, "instance-a")

        // Once it has run out (instance-a died), instance-b takes it.
        let deadline = Date().addingTimeInterval(10)
        var takenOver = false
        while !takenOver, Date() < deadline {
            takenOver = try await second.take(aor, for: 30)
            if !takenOver { try await Task.sleep(for: .milliseconds(50)) }
        }
        XCTAssertTrue(takenOver)
        let lostRenewal = try await first.take(aor, for: 30)
        XCTAssertFalse(lostRenewal, "a lease lost is not renewed")

        // Releasing is the holder's alone.
        try await first.release(aor)
        let stillB = try await first.holder(of: aor)
        XCTAssertEqual(stillB, "instance-b")
        try await second.release(aor)
        let nobody = try await first.holder(of: aor)
        XCTAssertNil(nobody)
        let retaken = try await first.take(aor, for: 30)
        XCTAssertTrue(retaken)
    }
}
