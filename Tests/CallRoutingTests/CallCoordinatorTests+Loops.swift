import CallRouting
import Foundation
import Registrar
import RouseVocabulary
import SIPMessage
import SIPTransaction
import XCTest

/// RFC 3261 §16.3 step 4 in the coordinator: an INVITE that comes back unchanged while its call is
/// in progress is a loop (482); one with this instance's Via but a new Request-URI is a spiral
/// (gateway mode's PBX sends a call of Rouse's back to the Contact Rouse registered), and rings.
final class CallCoordinatorLoopTests: XCTestCase {
    let callee = AddressOfRecord(number: "1002", domain: "example.com")

    func invite(uri: String, callID: String, loopedVia: Bool) throws -> SIPRequest {
        var text = "INVITE \(uri) SIP/2.0\r\n"
        if loopedVia { text += "Via: SIP/2.0/UDP 192.0.2.7:5060;branch=z9hG4bKpbx\(UUID().uuidString)\r\n" }
        if loopedVia { text += "Via: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKrouse;rport;rouse=test-instance\r\n" }
        text += "Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKcaller\r\nMax-Forwards: 70\r\nFrom: <sip:1001@example.com>;tag=a\r\n"
        text += "To: <sip:1002@example.com>\r\nCall-ID: \(callID)\r\nCSeq: 1 INVITE\r\nContact: <sip:1001@192.0.2.1>\r\nContent-Length: 0\r\n\r\n"
        guard case .request(let request) = try SIPParser.parse(Array(text.utf8)) else { return try XCTUnwrap(nil, "the fixture is not a request") }
        return request
    }

    func testTheSameRequestBackIsALoopAndANewRequestURIASpiral() throws {
        let desk = Binding(
            aor: callee, contact: "sip:desk@192.0.2.5:5060", callID: "desk", cseq: 1, registeredAt: Date(), expiresAt: Date().addingTimeInterval(600),
            userAgent: "desk", flow: BindingFlow(transport: .udp, source: SocketAddress(parsing: "192.0.2.5:5060"), connectionID: FlowConnectionID("udp#0"),
                                                local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "i"))
        let harness = Harness(bindings: [desk])
        let callID = UUID().uuidString
        harness.transactions.receive(.request(try invite(uri: "sip:1002@example.com", callID: callID, loopedVia: false)), from: 0, isReliable: true)
        _ = try harness.waitForBranch()

        harness.transactions.receive(.request(try invite(uri: "sip:1002@example.com", callID: callID, loopedVia: true)), from: 0, isReliable: true)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 == 482 }.statusCode, 482, "unchanged while its call rings: a loop")

        harness.transactions.receive(.request(try invite(uri: "sip:1002@127.0.0.1:5060", callID: callID, loopedVia: true)), from: 0, isReliable: true)
        try harness.waitUntil { harness.signaling.invites.count == 2 }
        XCTAssertEqual(harness.coordinator.liveCallCount, 2, "a spiral is a call of its own")
    }
}
