import CallRouting
import Foundation
import Registrar
import RouseTestSupport
import SIPMessage
import SIPProxy
import Storage
import XCTest

/// The toll-fraud guard's data in PostgreSQL (migration 601): an extension's class of service and
/// an organisation's national patterns, stored as checked, loaded for the guard, refused naming
/// the field, announced to every instance on change and gone with their extension or organisation.
final class PostgresCallClassesTests: XCTestCase {
    private var database: MigratedDatabase!
    let alice = AddressOfRecord(number: "1000", domain: "acme.example")
    let bob = AddressOfRecord(number: "1001", domain: "acme.example")

    override func setUpWithError() throws {
        database = try MigratedDatabase(domain: "acme.example", extensions: 2)
    }

    override func tearDown() {
        database?.drop()
    }

    func testClassesAndNationalPatternsAreStoredAndLoadedForTheGuard() throws {
        let classes = PostgresCallClasses(connection: try database.database.connect())
        XCTAssertEqual(try classes.load(), CallClasses(), "a new extension and organisation have the instance's defaults")
        try classes.setClass(.international, number: "1000", organisation: "ACME.example")
        try classes.setClass(.internalOnly, number: "1001", organisation: "acme.example")
        try classes.setNationalPatterns(["prefix:0", "regex:^0[1-9][0-9]{8}$"], organisation: "Acme.Example")
        let loaded = try classes.load()
        XCTAssertEqual(loaded.classes, [alice: .international, bob: .internalOnly])
        XCTAssertEqual(loaded.national, ["acme.example": [.prefix("0"), .regex("^0[1-9][0-9]{8}$")]])
        XCTAssertEqual(try classes.callClass(number: "1000", organisation: "acme.example"), .international)

        // What the guard makes of them: a national number and an international one.
        let plan = DialPlanClasses(national: loaded.national["acme.example"] ?? [])
        XCTAssertEqual(plan.required(for: try XCTUnwrap(DialledTarget(try SIPURI(parsing: "sip:02079460958@acme.example")))), .national)
        XCTAssertEqual(plan.required(for: try XCTUnwrap(DialledTarget(try SIPURI(parsing: "sip:+12125550100@acme.example")))), .international)

        // Back to the default, and no patterns.
        try classes.setClass(nil, number: "1001", organisation: "acme.example")
        try classes.setNationalPatterns([], organisation: "acme.example")
        XCTAssertEqual(try classes.load(), CallClasses(classes: [alice: .international]))
        XCTAssertNil(try classes.callClass(number: "1001", organisation: "acme.example"))

        // An extension's class goes with it: one added again under the number starts at the default.
        try database.directory.removeExtension(alice)
        try database.directory.addExtension(alice, password: "pw-again")
        XCTAssertEqual(try classes.load(), CallClasses())
    }

    func testRefusalsNameTheField() throws {
        let classes = PostgresCallClasses(connection: try database.database.connect())
        func field(_ body: () throws -> Void) -> String? {
            do {
                try body()
                return nil
            } catch let error as RouteError {
                return error.field
            } catch {
                return "\(error)"
            }
        }
        XCTAssertEqual(field { try classes.setClass(.national, number: "4242", organisation: "acme.example") }, "extension")
        XCTAssertEqual(field { try classes.setClass(.national, number: "1000", organisation: "nowhere.example") }, "extension")
        XCTAssertEqual(field { _ = try classes.callClass(number: "4242", organisation: "acme.example") }, "extension")
        XCTAssertEqual(field { try classes.setNationalPatterns(["prefix:0", "0"], organisation: "acme.example") }, "national_patterns")
        XCTAssertEqual(field { try classes.setNationalPatterns(["regex:(("], organisation: "acme.example") }, "national_patterns")
        XCTAssertEqual(field { try classes.setNationalPatterns(["prefix:0x"], organisation: "acme.example") }, "national_patterns")
        XCTAssertEqual(
            field { try classes.setNationalPatterns(Array(repeating: "prefix:0", count: PostgresCallClasses.maximumPatterns + 1), organisation: "acme.example") },
            "national_patterns")
        XCTAssertEqual(field { try classes.setNationalPatterns(["prefix:0"], organisation: "nowhere.example") }, "organisation")
        XCTAssertEqual(field { _ = try classes.nationalPatterns(organisation: "nowhere.example") }, "organisation")
        XCTAssertEqual(field { _ = try PostgresCallClasses.classOfService(named: "premium") }, "class_of_service")
        XCTAssertEqual(try PostgresCallClasses.classOfService(named: "default"), nil)
        XCTAssertEqual(try PostgresCallClasses.classOfService(named: "internal"), .internalOnly)
        XCTAssertEqual(try classes.load(), CallClasses(), "nothing refused was stored")
    }

    func testEveryChangeIsAnnouncedOnTheRoutesChannel() throws {
        let (listener, heard) = try database.listening(to: [PostgresRoutes.notificationChannel])
        defer { listener.stop() }
        let classes = PostgresCallClasses(connection: try database.database.connect())
        try classes.setClass(.national, number: "1000", organisation: "acme.example")
        XCTAssertEqual(heard.wait(for: 1), ["rouse_routes"])
        try classes.setNationalPatterns(["prefix:0"], organisation: "acme.example")
        XCTAssertEqual(heard.wait(for: 2).count, 2)
        try database.directory.removeExtension(alice)
        XCTAssertEqual(heard.wait(for: 3).count, 3, "an extension removed takes its class with it: instances reload")
    }
}
