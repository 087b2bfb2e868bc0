import Foundation
import Registrar
import SIPMessage
import SIPProxy
import XCTest

@testable import CallRouting

/// The toll-fraud guard on a manual clock: class of service, limits per extension and
/// organisation, emergency routes always out, surges seen.
final class OutsideCallGuardTests: XCTestCase {
    private let alice = AddressOfRecord(number: "1001", domain: "acme.example")
    private let bob = AddressOfRecord(number: "1002", domain: "acme.example")
    private let start = Date(timeIntervalSince1970: 1_800_000_000)
    private let trunk = OutboundRoute(id: 1, organisation: "acme.example", name: "out", position: 10, pattern: .prefix(""), hops: [])
    private let emergency = OutboundRoute(
        id: 2, organisation: "acme.example", name: "emergency", position: 1, pattern: .regex("112|999"), hops: [], emergency: true)

    func testTheClassNeededComesFromTheOrganisationsNationalPatterns() throws {
        let classes = DialPlanClasses(national: [.prefix("+44"), .prefix("0"), .domain("partner.example")])
        func needed(_ uri: String) throws -> ClassOfService { classes.required(for: try XCTUnwrap(DialledTarget(try SIPURI(parsing: uri)))) }
        XCTAssertEqual(try needed("tel:+442079460958"), .national)
        XCTAssertEqual(try needed("sip:02079460958@acme.example"), .national)
        XCTAssertEqual(try needed("sip:bob@partner.example"), .national)
        XCTAssertEqual(try needed("tel:+15550100"), .international)
        XCTAssertEqual(try needed("sip:carol@elsewhere.example"), .international, "what no pattern names counts as international")
    }

    func testWithoutPatternsOnlyInternationalPrefixesAreInternational() throws {
        let classes = DialPlanClasses()
        func needed(_ uri: String) throws -> ClassOfService { classes.required(for: try XCTUnwrap(DialledTarget(try SIPURI(parsing: uri)))) }
        XCTAssertEqual(try needed("sip:02079460958@acme.example"), .national)
        XCTAssertEqual(try needed("sip:bob@partner.example"), .national)
        XCTAssertEqual(try needed("tel:+15550100"), .international)
        XCTAssertEqual(try needed("sip:0015550100@acme.example"), .international)
    }

    func testAClassAllowsItsOwnCallsAndLessButEmergencyCallsAlwaysGoOut() {
        var guardian = OutsideCallGuard(limits: OutsideCallLimits())
        XCTAssertEqual(guardian.admit(caller: alice, classOfService: .national, required: .international, route: trunk, now: start),
            .refuse("1001@acme.example may call national numbers only; this call is international"))
        XCTAssertEqual(guardian.admit(caller: alice, classOfService: .internalOnly, required: .national, route: trunk, now: start),
            .refuse("1001@acme.example may call extensions only; this call is national"))
        XCTAssertEqual(guardian.admit(caller: alice, classOfService: .international, required: .national, route: trunk, now: start), .admit(ticket: 1))
        XCTAssertEqual(guardian.admit(caller: bob, classOfService: .internalOnly, required: .international, route: emergency, now: start), .admit(ticket: 2))
    }

    func testConcurrentAndHourlyLimitsCountPerExtensionAndOrganisation() {
        var guardian = OutsideCallGuard(limits: OutsideCallLimits(concurrentPerExtension: 2, concurrentPerOrganisation: 3, perHourPerExtension: 3))
        func admit(_ caller: AddressOfRecord, at offset: TimeInterval) -> OutsideCallGuard.Decision {
            guardian.admit(caller: caller, classOfService: .international, required: .national, route: trunk, now: start.addingTimeInterval(offset))
        }
        XCTAssertEqual(admit(alice, at: 0), .admit(ticket: 1))
        XCTAssertEqual(admit(alice, at: 1), .admit(ticket: 2))
        XCTAssertEqual(admit(alice, at: 2), .refuse("1001@acme.example already has 2 outside calls (limit per extension)"))
        XCTAssertEqual(admit(bob, at: 3), .admit(ticket: 3))
        XCTAssertEqual(admit(bob, at: 4), .refuse("acme.example already has 3 outside calls (limit per organisation)"))
        XCTAssertEqual(guardian.admit(caller: bob, classOfService: .internalOnly, required: .international, route: emergency, now: start), .admit(ticket: 4),
            "an emergency call goes out past every limit")
        guardian.ended(1)
        guardian.ended(4)
        XCTAssertEqual(guardian.liveCount, 2)
        XCTAssertEqual(admit(alice, at: 5), .admit(ticket: 5))
        guardian.ended(2)
        guardian.ended(5)
        XCTAssertEqual(admit(alice, at: 6), .refuse("1001@acme.example made 3 outside calls in the last hour (limit per extension)"))
        XCTAssertEqual(admit(alice, at: 3601), .admit(ticket: 6), "an hour after the first call there is room again")
    }

    func testASuddenRunOfOutsideCallsIsASurge() {
        var guardian = OutsideCallGuard(limits: OutsideCallLimits(concurrentPerExtension: nil, perHourPerExtension: nil, surgeMinimum: 10, surgeFactor: 4))
        // A steady day: two calls an hour for 24 hours.
        for hour in 0..<24 {
            for minute in [10.0, 40.0] {
                if case .admit(let ticket) = guardian.admit(
                    caller: alice, classOfService: .international, required: .national, route: trunk,
                    now: start.addingTimeInterval(Double(hour) * 3600 + minute * 60))
                {
                    guardian.ended(ticket)
                }
            }
        }
        let evening = start.addingTimeInterval(24 * 3600)
        XCTAssertTrue(guardian.surges(now: evening.addingTimeInterval(3599)).isEmpty)
        for second in 0..<12 {
            _ = guardian.admit(caller: alice, classOfService: .international, required: .national, route: trunk, now: evening.addingTimeInterval(Double(second * 60)))
        }
        let surges = guardian.surges(now: evening.addingTimeInterval(3599))
        XCTAssertEqual(surges.map(\.caller), [alice])
        XCTAssertEqual(surges.first?.lastHour, 12)
        XCTAssertTrue(guardian.surges(now: evening.addingTimeInterval(30 * 3600)).isEmpty, "gone when the calls are a day old")
    }
}
