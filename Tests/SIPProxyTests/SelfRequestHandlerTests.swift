import SIPMessage
import SIPProxy
import XCTest

final class SelfRequestHandlerTests: XCTestCase {
    let handler = SelfRequestHandler(
        allowedMethods: [.options], supportedExtensions: ["path", "outbound"],
        ownNames: ["127.0.0.1", "sip.example.com", "[::1]"], serverName: "Rouse/test")

    func request(_ method: SIPMethod, _ uri: String, extra: [(String, String)] = []) throws -> SIPRequest {
        var headers: SIPHeaders = [
            ("Via", "SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKabc"), ("From", "<sip:a@example.com>;tag=1"),
            ("To", "<\(uri)>"), ("Call-ID", "c1"), ("CSeq", "1 \(method.rawValue)"), ("Max-Forwards", "70"),
        ]
        for (name, value) in extra { headers.add(SIPHeader(name: name, value: value)) }
        return SIPRequest(method: method, uri: try SIPURI(parsing: uri), headers: headers)
    }

    func testOptionsToItselfByAddressOrAlias() throws {
        for uri in ["sip:127.0.0.1", "sip:SIP.example.com;transport=tcp", "sip:[::1]:5060"] {
            let response = try XCTUnwrap(handler.respond(to: try request(.options, uri), toTag: "t"))
            XCTAssertEqual(response.statusCode, 200, uri)
            XCTAssertEqual(response.headers[.allow], "OPTIONS")
            XCTAssertEqual(response.headers[.accept], "application/sdp")
            XCTAssertEqual(response.headers[.supported], "path, outbound")
            XCTAssertEqual(response.to?.tag, "t")
            XCTAssertEqual(response.headers[.callID], "c1")
        }
    }

    func testOptionsForSomeoneElseIsNotRelayed() throws {
        let response = try XCTUnwrap(handler.respond(to: try request(.options, "sip:bob@elsewhere.example.org"), toTag: "t"))
        XCTAssertEqual(response.statusCode, 404)
    }

    func testAckIsNeverAnswered() throws {
        XCTAssertNil(handler.respond(to: try request(.ack, "sip:127.0.0.1"), toTag: "t"))
    }

    func testRecognisedButUnhandledMethodGets405WithAllow() throws {
        for method in [SIPMethod.invite, .register, .subscribe, .bye] {
            let response = try XCTUnwrap(handler.respond(to: try request(method, "sip:1001@127.0.0.1"), toTag: "t"))
            XCTAssertEqual(response.statusCode, 405, method.rawValue)
            XCTAssertEqual(response.headers[.allow], "OPTIONS")
        }
    }

    func testUnknownMethodGets501() throws {
        let response = try XCTUnwrap(handler.respond(to: try request(SIPMethod("FROB"), "sip:127.0.0.1"), toTag: "t"))
        XCTAssertEqual(response.statusCode, 501)
    }

    func testUnsupportedRequireGets420ListingOnlyWhatIsMissing() throws {
        let response = try XCTUnwrap(
            handler.respond(to: try request(.options, "sip:127.0.0.1", extra: [("Require", "path, 100rel"), ("Require", "timer")]), toTag: "t"))
        XCTAssertEqual(response.statusCode, 420)
        XCTAssertEqual(response.headers[.unsupported], "100rel, timer")
    }
}
