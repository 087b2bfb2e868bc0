import SIPDNS
import SIPMessage
import XCTest

@testable import SIPProxy

/// Which route an outside call takes: the dialled target read from the Request-URI, patterns in
/// position order per organisation, the number as the trunk gets it, and hops as operators write them.
final class OutboundRoutesTests: XCTestCase {
    func testNumbersAreReadFromTelAndSIPURIsWithoutTheirSeparators() throws {
        let tel = try XCTUnwrap(DialledTarget(try SIPURI(parsing: "tel:+44-20-7946-0958")))
        XCTAssertEqual(tel.user, "+442079460958")
        XCTAssertTrue(tel.isNumber)
        let phone = try XCTUnwrap(DialledTarget(try SIPURI(parsing: "sip:+1%20(555)%20010-9999@rouse.example;user=phone")))
        XCTAssertEqual(phone.user, "+15550109999")
        XCTAssertEqual(phone.domain, "rouse.example")
        let other = try XCTUnwrap(DialledTarget(try SIPURI(parsing: "sip:bob@Partner.Example")))
        XCTAssertEqual(other.description, "bob@partner.example")
        XCTAssertFalse(other.isNumber)
        XCTAssertNil(DialledTarget(try SIPURI(parsing: "sip:partner.example")), "no user part: nothing dialled")
    }

    func testTheFirstMatchingRouteOfTheCallersOrganisationWins() throws {
        let table = OutboundRouteTable([
            route(1, "acme", position: 30, "prefix:"),
            route(2, "acme", position: 10, "regex:^(112|999)$", emergency: true),
            route(3, "acme", position: 20, "prefix:+44"),
            route(4, "acme", position: 40, "domain:partner.example"),
            route(5, "globex", position: 10, "prefix:+1"),
        ])
        func chosen(_ uri: String, _ organisation: String = "acme") throws -> Int? {
            table.route(for: try XCTUnwrap(DialledTarget(try SIPURI(parsing: uri))), organisation: organisation)?.id
        }
        XCTAssertEqual(try chosen("sip:999@rouse.example"), 2)
        XCTAssertEqual(try chosen("sip:+442079460958@rouse.example"), 3)
        XCTAssertEqual(try chosen("tel:+15550100"), 1, "the catch-all after the +44 route")
        XCTAssertEqual(try chosen("sip:9999@rouse.example"), 1, "a regex must match the whole number")
        XCTAssertEqual(try chosen("sip:bob@partner.example"), 4)
        XCTAssertNil(try chosen("sip:bob@elsewhere.example"), "a user at an unrouted domain: no route, no call")
        XCTAssertEqual(try chosen("tel:+15550100", "globex"), 5)
        XCTAssertNil(try chosen("tel:+445550100", "globex"), "another organisation's routes are not used")
        XCTAssertNil(try chosen("tel:+15550100", "initech"))
    }

    func testTheNumberIsTranslatedForTheTrunk() throws {
        var national = route(1, "acme", position: 1, "prefix:0044")
        national.strip = 4
        national.prepend = "+44"
        XCTAssertEqual(national.translated(try XCTUnwrap(DialledTarget(try SIPURI(parsing: "sip:00442079460958@rouse.example")))), "+442079460958")
        let partner = route(2, "acme", position: 2, "domain:partner.example")
        XCTAssertEqual(partner.translated(try XCTUnwrap(DialledTarget(try SIPURI(parsing: "sip:bob@partner.example")))), "bob")
    }

    func testPatternsAndHopsAreReadAsOperatorsWriteThemAndRefusedInWords() throws {
        XCTAssertEqual(try RoutePattern(parsing: "prefix:+44").description, "prefix:+44")
        XCTAssertEqual(try RoutePattern(parsing: "DOMAIN:Partner.Example"), .domain("partner.example"))
        XCTAssertThrowsError(try RoutePattern(parsing: "prefix:44x")) { XCTAssertEqual("\($0)", "a prefix is digits, +, * and #, not \"44x\"") }
        XCTAssertThrowsError(try RoutePattern(parsing: "regex:(unclosed")) { XCTAssertTrue("\($0)".hasPrefix("\"(unclosed\" is not a regular expression")) }
        XCTAssertThrowsError(try RoutePattern(parsing: "+44")) { XCTAssertTrue("\($0)".hasPrefix("a pattern is prefix:")) }

        XCTAssertEqual(try RouteHop(parsing: "198.51.100.7:5080;transport=TCP").target, SIPServerTarget(host: "198.51.100.7", port: 5080, transport: .tcp))
        XCTAssertEqual(try RouteHop(parsing: "sip:trunk.example.com").target, SIPServerTarget(host: "trunk.example.com"))
        XCTAssertEqual(try RouteHop(parsing: "sips:trunk.example.com").target, SIPServerTarget(host: "trunk.example.com", secure: true))
        XCTAssertEqual(try RouteHop(parsing: "[2001:db8::7]:5062").target, SIPServerTarget(host: "2001:db8::7", port: 5062))
        XCTAssertEqual(try RouteHop(parsing: "[2001:db8::7]:5062").description, "[2001:db8::7]:5062")
        for bad in ["", "trunk.example.com:0", "trunk.example.com;lr", "trunk.example.com;transport=sctp", "bad host", "[::1"] {
            XCTAssertThrowsError(try RouteHop(parsing: bad), bad)
        }
    }

    private func route(_ id: Int, _ organisation: String, position: Int, _ pattern: String, emergency: Bool = false) -> OutboundRoute {
        OutboundRoute(
            id: id, organisation: organisation, name: "route \(id)", position: position, pattern: try! RoutePattern(parsing: pattern),
            hops: [RouteHop(SIPServerTarget(host: "127.0.0.1", port: 5080))], emergency: emergency)
    }
}
