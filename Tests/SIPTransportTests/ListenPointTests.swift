import RouseVocabulary
import SIPTransport
import XCTest

final class ListenPointTests: XCTestCase {
    func testParsesIPv4Point() throws {
        let point = try ListenPoint(parsing: "udp:127.0.0.1:5060")
        XCTAssertEqual(point, ListenPoint(transport: .udp, host: "127.0.0.1", port: 5060))
        XCTAssertEqual(point.description, "udp:127.0.0.1:5060")
        XCTAssertFalse(point.isIPv6)
    }

    func testParsesBracketedIPv6Point() throws {
        let point = try ListenPoint(parsing: "tcp:[::1]:5060")
        XCTAssertEqual(point, ListenPoint(transport: .tcp, host: "::1", port: 5060))
        XCTAssertEqual(point.description, "tcp:[::1]:5060")
        XCTAssertTrue(point.isIPv6)
    }

    func testDescriptionParsesBackToTheSamePoint() throws {
        for text in ["tls:0.0.0.0:5061", "udp:[::]:0", "tcp:[fe80::1]:65535", "tls:10.1.2.3:1"] {
            XCTAssertEqual(try ListenPoint(parsing: text).description, text)
            XCTAssertEqual(try ListenPoint(parsing: try ListenPoint(parsing: text).description), try ListenPoint(parsing: text))
        }
    }

    func testAcceptsSurroundingSpaceAndUpperCaseTransport() throws {
        XCTAssertEqual(try ListenPoint(parsing: " TLS:127.0.0.1:5061 "), ListenPoint(transport: .tls, host: "127.0.0.1", port: 5061))
    }

    func testRejectedTextIsNamedInTheError() {
        let bad = [
            "udp:127.0.0.1", "sctp:127.0.0.1:5060", "tcp:::1:5060", "tcp:[::1:5060", "tcp:[::1]5060",
            "udp:127.0.0.1:65536", "udp:127.0.0.1:-1", "udp:localhost:5060", "udp::5060", "127.0.0.1:5060",
            "tcp:[127.0.0.1]:5060", "udp:127.0.0.1:50x0", "",
        ]
        for text in bad {
            XCTAssertThrowsError(try ListenPoint(parsing: text), text) { error in
                XCTAssertTrue("\(error)".contains("\"\(text)\""), "\(error) should name \(text)")
            }
        }
    }
}
