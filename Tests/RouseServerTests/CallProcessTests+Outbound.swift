import CallRouting
import Foundation
import Push
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPTransport
import XCTest

/// RFC 5626 through `rouse serve` (issue 16 item 4): a phone registered over two TCP flows (one
/// instance, reg-id 1 and 2) is told `Require: outbound` and `Flow-Timer`, a call reaches it once,
/// a closed flow moves the next call to the other, and with both gone the phone is pushed; STUN
/// keep-alives on the SIP UDP port are answered.
extension CallProcessTests {
    /// One Android phone as two agents: the same instance and token, reg-id 1 and 2, each over
    /// its own TCP connection.
    func phoneWithTwoFlows(token: String) throws -> (TestUserAgent, TestUserAgent) {
        let instance = "urn:uuid:\(UUID().uuidString.lowercased())"
        let flows = try [1, 2].map { regID in
            try TestUserAgent(
                transport: .tcp, serverPort: try port(.tcp), user: "1002", domain: "example.com", password: "pw-1002",
                instanceID: instance, regID: regID, contactURIParameters: "pn-provider=fcm;pn-prid=\(token);pn-param=rouse-test",
                userAgent: "RouseTestApp/1 (Android, flow \(regID))")
        }
        agents += flows
        return (flows[0], flows[1])
    }

    func testAPhoneOnTwoFlowsRingsOnceThenOverItsOtherFlowThenByPush() throws {
        try startRouse(wakeWait: 8, ringTimeout: 30)
        let token = "fcm-flows-" + UUID().uuidString
        let (flow1, flow2) = try phoneWithTwoFlows(token: token)

        let first = try flow1.register()
        XCTAssertEqual(first.statusCode, 200)
        XCTAssertEqual(first.headers.values(.require), ["outbound"], "RFC 5626 §6: the registrar applied outbound")
        XCTAssertEqual(first.headers["Flow-Timer"], "120")
        XCTAssertEqual(first.headers.values(.contact).count, 1)
        XCTAssertTrue(first.headers.values(.contact)[0].hasSuffix(";reg-id=1"), first.headers.values(.contact)[0])
        let second = try flow2.register()
        XCTAssertEqual(second.statusCode, 200)
        XCTAssertEqual(second.headers.values(.require), ["outbound"])
        let contacts = second.headers.values(.contact)
        XCTAssertEqual(contacts.count, 2, "both flows are kept: \(contacts)")
        XCTAssertEqual(Set(contacts.compactMap { $0.components(separatedBy: ";reg-id=").last }), ["1", "2"])
        XCTAssertTrue(contacts.contains { $0.contains(":\(flow1.localPort);transport=tcp") })
        XCTAssertTrue(contacts.contains { $0.contains(":\(flow2.localPort);transport=tcp") })

        // Call 1: both flows are open; the phone gets one INVITE, over the flow registered last.
        let caller = try caller()
        let call1 = try place(caller)
        let invite1 = try flow2.waitForRequest(.invite)
        XCTAssertEqual(invite1.callID, call1.callID)
        try answerAndHangUp(flow2, invite1, call1, caller)
        XCTAssertFalse(flow1.buffered.requests.contains { $0.method == .invite }, "one INVITE per phone, not one per reg-id")
        XCTAssertEqual(try journey(callID: call1.callID, outcome: .answered).branches.count, 1)

        // Call 2: the connection of flow 2 is gone; the call goes over flow 1. (Should Rouse not
        // have seen the close yet, the INVITE over it fails and the call moves on all the same.)
        flow2.goQuiet()
        let call2 = try place(caller)
        let invite2 = try flow1.waitForRequest(.invite, timeout: .seconds(45))
        XCTAssertEqual(invite2.callID, call2.callID)
        try answerAndHangUp(flow1, invite2, call2, caller)
        let journey2 = try journey(callID: call2.callID, outcome: .answered)
        XCTAssertTrue(journey2.branches.last?.target.contains(":\(flow1.localPort);") == true, "\(journey2.branches.map(\.target))")

        // Call 3: no flow is left. The binding's push channel is: the phone is pushed, and the
        // flow its woken app opens gets the call.
        flow1.goQuiet()
        let call3 = try place(caller)
        XCTAssertEqual(try call3.waitForResponse(status: 180).statusCode, 180, "ringback while the app wakes")
        let deadline = Date().addingTimeInterval(15)
        var ring: StandInRequest?
        while ring == nil, Date() < deadline {
            ring = try fcm.requests().first { $0.body.contains(token) && $0.body.contains(call3.callID) }
            if ring == nil { Thread.sleep(forTimeInterval: 0.02) }
        }
        XCTAssertEqual(pushData(try XCTUnwrap(ring, "the phone with no flow left was not pushed"))["event"] as? String, "call.ring")
        try flow1.reopen()
        XCTAssertEqual(try flow1.register().statusCode, 200)
        let invite3 = try flow1.waitForRequest(.invite)
        XCTAssertEqual(invite3.callID, call3.callID)
        try answerAndHangUp(flow1, invite3, call3, caller)
        let journey3 = try journey(callID: call3.callID, outcome: .answered)
        XCTAssertEqual(journey3.pushes.count, 1)
        guard case .woke = journey3.pushes[0].wake else { return XCTFail("wake: \(journey3.pushes[0].wake)") }
    }

    func testASTUNBindingRequestOnTheSIPUDPPortIsAnswered() throws {
        try startRouse()
        let client = try TestSIPClient(transport: .udp, host: "127.0.0.1", port: try port(.udp))
        defer { client.close() }
        let transactionID: [UInt8] = (0..<12).map { _ in UInt8.random(in: 0...255) }
        // RFC 5389 §6: Binding request, no attributes, the magic cookie, our transaction ID.
        try client.send([0x00, 0x01, 0x00, 0x00, 0x21, 0x12, 0xA4, 0x42] + transactionID)
        let answer = try XCTUnwrap(try client.receive(timeout: .seconds(10)), "no answer to the STUN keep-alive")
        XCTAssertEqual(answer.count, 32)
        XCTAssertEqual(Array(answer[0..<8]), [0x01, 0x01, 0x00, 0x0C, 0x21, 0x12, 0xA4, 0x42], "Binding success, 12 bytes of attributes")
        XCTAssertEqual(Array(answer[8..<20]), transactionID)
        XCTAssertEqual(Array(answer[20..<26]), [0x00, 0x20, 0x00, 0x08, 0x00, 0x01], "XOR-MAPPED-ADDRESS, IPv4")
        let port = (UInt16(answer[26]) << 8 | UInt16(answer[27])) ^ 0x2112
        let address = zip(answer[28..<32], [0x21, 0x12, 0xA4, 0x42] as [UInt8]).map { $0 ^ $1 }
        XCTAssertEqual(port, client.localPort, "the port the request came from")
        XCTAssertEqual(address, [127, 0, 0, 1])

        // The keep-alive is not SIP: the same socket is still served SIP afterwards.
        try client.send(
            "OPTIONS sip:127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:\(client.localPort);branch=z9hG4bKstun1;rport\r\n"
                + "From: <sip:ping@127.0.0.1>;tag=1\r\nTo: <sip:127.0.0.1>\r\nCall-ID: stun-then-sip\r\nCSeq: 1 OPTIONS\r\n"
                + "Max-Forwards: 70\r\nContent-Length: 0\r\n\r\n")
        let options = try XCTUnwrap(try client.receiveText(timeout: .seconds(10)))
        XCTAssertTrue(options.hasPrefix("SIP/2.0 200 OK"), options)
    }
}
