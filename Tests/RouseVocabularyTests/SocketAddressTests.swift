import RouseVocabulary
import XCTest

final class SocketAddressTests: XCTestCase {
    func testSocketAddressIsCanonical() throws {
        let long = try SocketAddress(ip: "0:0:0:0:0:0:0:1", port: 5060)
        XCTAssertEqual(long, try SocketAddress(ip: "::1", port: 5060))
        XCTAssertEqual(long.description, "[::1]:5060")
        XCTAssertEqual(try SocketAddress(ip: "127.0.0.1", port: 7).description, "127.0.0.1:7")
        XCTAssertThrowsError(try SocketAddress(ip: "example.com", port: 1)) { error in
            XCTAssertEqual("\(error)", "\"example.com\" is not an IP address")
        }
    }

    func testFlowEndpointsReadBackWhatTheyWrite() throws {
        let v4 = try XCTUnwrap(SocketAddress(parsing: "192.0.2.7:5060"))
        XCTAssertEqual(v4.ip, "192.0.2.7")
        XCTAssertEqual(v4.port, 5060)
        XCTAssertFalse(v4.isIPv6)
        XCTAssertEqual(v4.ipBytes, [192, 0, 2, 7])
        let v6 = try XCTUnwrap(SocketAddress(parsing: "[2001:DB8:0::7]:40000"))
        XCTAssertEqual(v6.ip, "2001:db8::7", "canonical form")
        XCTAssertEqual(v6.port, 40000)
        XCTAssertTrue(v6.isIPv6)
        XCTAssertEqual(SocketAddress(parsing: v6.description), v6)
        XCTAssertEqual(SocketAddress(parsing: "[::ffff:192.0.2.1]:5060")?.ip, "::ffff:192.0.2.1")
    }

    func testTextThatIsNoEndpointIsRefused() {
        for text in ["", "192.0.2.7", "192.0.2.7:", "192.0.2.7:65536", "2001:db8::7:5060", "[2001:db8::7]", "[2001:db8::7]5060",
                     "example.com:5060", "192.0.2.7:50x"] {
            XCTAssertNil(SocketAddress(parsing: text), text)
        }
    }

    func testTransportKinds() {
        XCTAssertEqual(SIPTransportKind.allCases.map(\.rawValue), ["udp", "tcp", "tls"])
        XCTAssertFalse(SIPTransportKind.udp.isReliable)
        XCTAssertTrue(SIPTransportKind.tls.isStream)
        XCTAssertNil(SIPTransportKind(rawValue: "sctp"))
    }
}
