import CallRouting
import Foundation
import RouseTestSupport
import SIPMessage
import Storage
import XCTest

/// Gateway mode end to end (issue 19 item 3), against Debian's Kamailio as the PBX: a sleeping app
/// registered through Rouse is registered at Kamailio with Rouse's Contact (no `pn-*` upstream),
/// the PBX's qualify OPTIONS and message-waiting NOTIFY to that Contact get 200, and a call that
/// reaches Kamailio for the extension is routed to Rouse, which pushes the app, which registers
/// again and rings (and gets the held message summary).
extension CallProcessTests {
    /// Kamailio on a port of its own trusting Rouse's address and port; Rouse on a port picked
    /// first (Kamailio must know it), registering example.com's extensions at Kamailio.
    /// `pbxHost`: the loopback address Kamailio serves on, the one Rouse trusts (another than the
    /// phones' 127.0.0.1, so that the phones must authenticate).
    func startGateway(
        pbxHost: String = "127.0.0.1", pbxEntry: (KamailioPBX) -> String = { "example.com=\($0.host):\($0.port)" }, trustRouse: Bool = true
    ) throws -> (KamailioPBX, UInt16) {
        let rousePort = try FreePort.pick()
        let pbx = try KamailioPBX(host: pbxHost, trusted: trustRouse ? [("127.0.0.1", rousePort)] : [])
        addTeardownBlock { pbx.stop() }
        try startRouse(wakeWait: 15, extra: [
            "ROUSE_SIP_LISTEN": "udp:127.0.0.1:\(rousePort),tcp:127.0.0.1:\(rousePort)", "ROUSE_GATEWAY_PBX": pbxEntry(pbx),
            "ROUSE_GATEWAY_REGISTER_EXPIRES": "60", "ROUSE_TRUSTED_PEERS": pbxHost,
        ])
        return (pbx, rousePort)
    }

    /// An OPTIONS or NOTIFY from a port of the test's, as the PBX sends it, to Rouse's Contact.
    func sendAsThePBX(_ method: String, to rousePort: UInt16, user: String, extra: String = "", body: String = "") throws -> SIPResponse {
        let client = try TestSIPClient(transport: .udp, host: "127.0.0.1", port: rousePort)
        defer { client.close() }
        try client.send(
            "\(method) sip:\(user)@127.0.0.1:\(rousePort) SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:\(client.localPort);rport;branch=z9hG4bK-\(UUID().uuidString.prefix(8))\r\n"
                + "Max-Forwards: 70\r\nFrom: <sip:pbx@127.0.0.1>;tag=pbx\r\nTo: <sip:\(user)@127.0.0.1:\(rousePort)>\r\nCall-ID: \(UUID().uuidString)@pbx\r\n"
                + "CSeq: 1 \(method)\r\n\(extra)Content-Length: \(body.utf8.count)\r\n\r\n\(body)")
        let bytes = try XCTUnwrap(try client.receive(timeout: .seconds(10)), "no answer to \(method)")
        guard case .response(let response) = try SIPParser.parse(bytes) else { throw ChildProcess.Failure(description: "not a response") }
        return response
    }

    func testSleepingAppThroughRouseIsRegisteredAtThePBXQualifiedAndRingsForThePBXsCall() throws {
        let (pbx, rousePort) = try startGateway()
        let phone = try iPhoneApp()
        try registerAndSleep(phone)

        // Kamailio holds Rouse's Contact for 1002, with no push parameter of the app's.
        let contact = try XCTUnwrap(
            try pbx.waitForContact(of: "1002") { $0.contains("sip:1002@127.0.0.1:\(rousePort)") },
            "Kamailio has no binding of 1002 through Rouse:\n\(rouse?.outputText ?? "")\n\(pbx.outputText.suffix(3_000))")
        XCTAssertFalse(contact.contains("pn-"), contact)
        XCTAssertTrue(pbx.outputText.contains("pbx: REGISTER sip:1002@127.0.0.1 from trusted 127.0.0.1:\(rousePort)"), "trusted by address, no digest")
        XCTAssertTrue(rouse?.outputText.contains("gateway.registered") ?? false)

        // The PBX's qualify of the sleeping app's Contact: 200; an extension without bindings: 480.
        XCTAssertEqual(try sendAsThePBX("OPTIONS", to: rousePort, user: "1002").statusCode, 200)
        XCTAssertEqual(try sendAsThePBX("OPTIONS", to: rousePort, user: "1001").statusCode, 480)
        // Message waiting for the sleeping app: accepted now, delivered when it is back.
        let summary = "Messages-Waiting: yes\r\nVoice-Message: 2/0 (0/0)\r\n"
        let mwi = try sendAsThePBX(
            "NOTIFY", to: rousePort, user: "1002",
            extra: "Event: message-summary\r\nSubscription-State: terminated;reason=noresource\r\nContent-Type: application/simple-message-summary\r\n", body: summary)
        XCTAssertEqual(mwi.statusCode, 200)

        // A phone of the PBX's calls 1002 at Kamailio, which sends the call to Rouse's Contact.
        let colleague = try TestUserAgent(transport: .udp, serverPort: pbx.port, user: "2000", domain: "127.0.0.1", password: "unused")
        agents.append(colleague)
        TestUserAgent.link(colleague, phone)
        let call = try colleague.invite("sip:1002@127.0.0.1:\(pbx.port)", authenticate: false)
        let push = try XCTUnwrap(try pushes(apns, token: Self.apnsToken).first, "\(rouse?.outputText ?? "")\n\(pbx.outputText.suffix(3_000))")
        XCTAssertEqual(push.headers["apns-push-type"], "voip")
        XCTAssertEqual(push.jsonBody?["call_id"]?.stringValue, call.callID)

        try wake(phone)
        let invite = try phone.waitForRequest(.invite)
        XCTAssertEqual(invite.callID, call.callID)
        XCTAssertTrue(invite.headers.lines(.via).count >= 3, "through Kamailio and Rouse: \(invite.headers.lines(.via))")
        try phone.respond(to: invite, status: 180)
        XCTAssertEqual(try call.waitForResponse(status: 180).statusCode, 180, "the PBX's caller hears the app ring")
        let notify = try phone.waitForRequest(.notify)
        XCTAssertEqual(String(decoding: notify.body, as: UTF8.self), summary)
        XCTAssertEqual(notify.headers[SIPHeaderName("event")], "message-summary")
        try phone.respond(to: notify, status: 200)

        // Answered, ACKed and hung up through Kamailio and Rouse.
        let phoneDialog = try phone.answer(invite, ringing: false)
        let ok = try call.waitForResponse(status: 200)
        let callerDialog = try call.ack(ok)
        _ = try phoneDialog.waitForAck()
        let bye = try callerDialog.sendRequest(.bye)
        _ = try phoneDialog.receiveBye()
        XCTAssertEqual(try colleague.waitForFinalResponse(to: bye).statusCode, 200)
        let journey = try journey(callID: call.callID, outcome: .answered)
        XCTAssertEqual(journey.pushes.count, 1)
        XCTAssertEqual(journey.answeredBy, "RouseTestApp/1 (iPhone)")
    }

    func testRouseAnswersThePBXsChallengeWithItsCredentialsAndUnregistersWhenTheBindingGoes() throws {
        let (pbx, rousePort) = try startGateway(pbxEntry: { pbx in
            "example.com=127.0.0.1:\(pbx.port);user=\(KamailioPBX.trunkUser);password=\(pbx.trunkPassword)"
        }, trustRouse: false)
        let desk = try TestUserAgent(transport: .udp, serverPort: rousePort, user: "1001", domain: "example.com", password: "pw-1001")
        agents.append(desk)
        XCTAssertEqual(try desk.register(expires: 300).statusCode, 200)
        XCTAssertNotNil(
            try pbx.waitForContact(of: "1001") { $0.contains("sip:1001@127.0.0.1:\(rousePort)") },
            "\(rouse?.outputText ?? "")\n\(pbx.outputText.suffix(3_000))")
        XCTAssertTrue(pbx.outputText.contains("pbx: REGISTER sip:1001@127.0.0.1 authenticated as \(KamailioPBX.trunkUser)"), String(pbx.outputText.suffix(2_000)))
        XCTAssertFalse(rouse?.outputText.contains(pbx.trunkPassword) ?? true, "the PBX password is never logged")

        // The desk phone's last binding goes: Rouse unregisters it upstream.
        XCTAssertEqual(try desk.register(expires: 0).statusCode, 200)
        let deadline = Date().addingTimeInterval(20)
        var contacts = try pbx.contacts(of: "1001")
        while !contacts.isEmpty, Date() < deadline {
            Thread.sleep(forTimeInterval: 0.1)
            contacts = try pbx.contacts(of: "1001")
        }
        XCTAssertEqual(contacts, [], "Rouse sent Expires: 0 upstream")
    }

    func testExactlyOneInstanceRegistersAnExtensionAndAnotherTakesOverWhenItStops() throws {
        let ports = [try FreePort.pick(), try FreePort.pick()]
        let pbx = try KamailioPBX(trusted: ports.map { ("127.0.0.1", $0) })
        addTeardownBlock { pbx.stop() }
        var instances: [RouseProcess] = []
        for port in ports {
            let (instance, _) = try startInstance(extra: [
                "ROUSE_SIP_LISTEN": "udp:127.0.0.1:\(port),tcp:127.0.0.1:\(port)", "ROUSE_GATEWAY_PBX": "example.com=127.0.0.1:\(pbx.port)",
                "ROUSE_GATEWAY_REGISTER_EXPIRES": "60", "ROUSE_TRUSTED_PEERS": "127.0.0.1",
            ])
            instances.append(instance)
        }
        let desk = try TestUserAgent(transport: .udp, serverPort: ports[0], user: "1001", domain: "example.com", password: "pw-1001")
        agents.append(desk)
        XCTAssertEqual(try desk.register(expires: 600).statusCode, 200)

        let first = try XCTUnwrap(try pbx.waitForContact(of: "1001"), pbx.outputText.suffix(2_000).description)
        let holder = try XCTUnwrap(ports.firstIndex { first.contains("@127.0.0.1:\($0)>") }, first)
        let lease = try database.connect().query("SELECT holder FROM gateway_leases WHERE aor = '1001@example.com'")
        XCTAssertEqual(lease.rows.count, 1, "one lease for the extension")
        // Both instances know the binding; still only the holder's Contact is at the PBX.
        XCTAssertEqual(try pbx.contacts(of: "1001").count, 1)

        // The holder stops (without unregistering); the other takes the lease once it runs out
        // (30 s) and registers its own Contact.
        _ = instances[holder].stop()
        let other = ports[1 - holder]
        XCTAssertNotNil(
            try pbx.waitForContact(of: "1001", timeout: 60) { $0.contains("@127.0.0.1:\(other)>") },
            "no take-over:\n\(instances[1 - holder].outputText.suffix(3_000))")
    }

    func testBindingsStoredBeforeGatewayModeAreRegisteredUpstreamAtStart() throws {
        let port = try FreePort.pick()
        let listen = ["ROUSE_SIP_LISTEN": "udp:127.0.0.1:\(port),tcp:127.0.0.1:\(port)"]
        let (before, _) = try startInstance(extra: listen)
        let desk = try TestUserAgent(transport: .udp, serverPort: port, user: "1001", domain: "example.com", password: "pw-1001")
        agents.append(desk)
        XCTAssertEqual(try desk.register(expires: 600).statusCode, 200)
        _ = before.stop()

        // Gateway mode turned on: the binding loaded at start is registered without a new REGISTER.
        let pbx = try KamailioPBX(trusted: [("127.0.0.1", port)])
        addTeardownBlock { pbx.stop() }
        let (after, _) = try startInstance(extra: listen.merging(["ROUSE_GATEWAY_PBX": "example.com=127.0.0.1:\(pbx.port)"]) { $1 })
        XCTAssertNotNil(
            try pbx.waitForContact(of: "1001") { $0.contains("sip:1001@127.0.0.1:\(port)") }, after.outputText.suffix(3_000).description)
    }
}
