import Foundation
import RouseTestSupport
import SIPMessage
import SIPTransport
import XCTest

/// Calls placed on one instance to devices registered on another (issue 17 item 3): two
/// `rouse serve` on one PostgreSQL, each on its own ports as on two machines, the caller on one,
/// the callee's phone on the other over UDP, TCP and TLS, and an app woken by push.
extension CallProcessTests {
    /// Starts two instances listening on UDP, TCP and TLS; the first is the test's `rouse`.
    func startTwoInstances(wakeWait: Int = 3) throws -> [ListenPoint] {
        let certificate = try TestCertificate.make(commonName: "rouse.test")
        let tls = [
            "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0,tcp:127.0.0.1:0,tls:127.0.0.1:0",
            "ROUSE_TLS_CERT": certificate.certificatePath, "ROUSE_TLS_KEY": certificate.keyPath,
        ]
        try startRouse(wakeWait: wakeWait, extra: tls)
        let (_, other) = try startInstance(wakeWait: wakeWait, extra: tls)
        return other
    }

    /// A desk phone of 1002 registered on the instance listening at `points`, over `transport`.
    func deskPhone(on points: [ListenPoint], over transport: SIPTransportKind) throws -> TestUserAgent {
        let kind: TestSIPClient.Transport = transport == .udp ? .udp : transport == .tcp ? .tcp : .tls
        let agent = try TestUserAgent(
            transport: kind, serverPort: try XCTUnwrap(points.first { $0.transport == transport }).port, user: "1002", domain: "example.com",
            password: "pw-1002", userAgent: "RouseDeskPhone/\(transport.rawValue)")
        agents.append(agent)
        return agent
    }

    /// The caller's one challenge: every 407 it got, across the whole call.
    func challenges(_ call: TestOutgoingCall) -> [SIPResponse] {
        call.responses.filter { $0.statusCode == 407 }
    }

    func testCallOnOneInstanceRingsDeskPhonesRegisteredOnTheOtherOverUDPTCPAndTLS() throws {
        let other = try startTwoInstances()
        for transport in [SIPTransportKind.udp, .tcp, .tls] {
            let desk = try deskPhone(on: other, over: transport)
            XCTAssertEqual(try desk.register().statusCode, 200, "\(transport)")
            let caller = try caller()
            let call = try place(caller)
            let invite = try desk.waitForRequest(.invite)
            XCTAssertEqual(invite.callID, call.callID, "\(transport)")
            try answerAndHangUp(desk, invite, call, caller)
            XCTAssertEqual(challenges(call).count, 1, "\(transport): one 407 for the caller, \(call.responses.map(\.statusCode))")
            _ = try journey(callID: call.callID, outcome: .answered)
            XCTAssertEqual(try desk.register(expires: 0).statusCode, 200)
            desk.close()
            caller.close()
        }
    }
}
