import CallRouting
import Foundation
import Registrar
import RouseTestSupport
import SIPMessage
import Storage
import XCTest

/// Gateway mode, the other way (issue 19 item 3): a call from a phone registered at Rouse goes to
/// the PBX, which keeps the dialplan, even for another extension: Kamailio looks the callee up,
/// finds the Contact Rouse registered for it and sends the call back to Rouse (a spiral, not a
/// loop: a new Request-URI), which rings the callee's phone.
extension CallProcessTests {
    func testAPhonesCallToAnotherExtensionGoesThroughThePBXAndBack() throws {
        // Kamailio on 127.0.0.2, the only trusted peer: the phones on 127.0.0.1 must authenticate.
        let (pbx, rousePort) = try startGateway(pbxHost: "127.0.0.2")
        let callee = try deskPhone()
        XCTAssertEqual(try callee.register(expires: 300).statusCode, 200)
        XCTAssertNotNil(try pbx.waitForContact(of: "1002") { $0.contains("sip:1002@127.0.0.1:\(rousePort)") }, String(pbx.outputText.suffix(3_000)))
        let phone = try caller()
        XCTAssertEqual(try phone.register(expires: 300).statusCode, 200)
        TestUserAgent.link(phone, callee)

        let call = try phone.invite("sip:1002@example.com")
        let invite = try callee.waitForRequest(.invite)
        XCTAssertEqual(invite.callID, call.callID)
        let vias = invite.headers.lines(.via).flatMap { SIPHeaderValueScanner.splitList($0) }
        XCTAssertEqual(vias.count, 4, "the phone, Rouse, Kamailio, Rouse again: \(vias)")
        XCTAssertTrue(vias[1].contains("127.0.0.2"), "Kamailio relayed it: \(vias)")
        let dialog = try callee.answer(invite)
        let ok = try call.waitForResponse(status: 200)
        let callerDialog = try call.ack(ok)
        _ = try dialog.waitForAck()
        let bye = try callerDialog.sendRequest(.bye)
        _ = try dialog.receiveBye()
        XCTAssertEqual(try phone.waitForFinalResponse(to: bye).statusCode, 200, "the BYE went the same way")

        // Two journeys of one Call-ID: the call out through the route, and the call back from the PBX.
        var journeys: [CallJourney] = []
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            journeys = try PostgresCalls.recent(on: try database.connect(), limit: 20).filter { $0.callID == call.callID && $0.outcome == .answered }
            if journeys.count == 2 { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        let out = try XCTUnwrap(journeys.first { $0.events.contains { $0.text.contains("by route pbx") } }, "\(journeys.map { $0.events.map(\.text) })")
        XCTAssertEqual(out.branches.map(\.target), ["127.0.0.2:\(pbx.port);transport=udp"])
        XCTAssertTrue(out.events.first?.text.contains("(authenticated as 1001@example.com)") ?? false, "\(out.events.map(\.text))")
        let back = try XCTUnwrap(journeys.first { $0.source == "127.0.0.2" }, "\(journeys.map { $0.events.map(\.text) })")
        XCTAssertEqual(back.callee.description, "1002@example.com")
        XCTAssertTrue(back.events.first?.text.contains("(trusted peer)") ?? false, "\(back.events.map(\.text))")
    }
}
