import Foundation
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPTransport
import XCTest

/// `TestUserAgent` against scripted servers on a `SIPTransportLayer`: a digest registrar, and a
/// relay that passes requests and responses between two agents' flows (answering CANCEL itself and,
/// when asked, challenging INVITEs with 407 and adding two Record-Route lines).
final class TestUserAgentTests: XCTestCase {
    static let instance = "urn:uuid:7c5e4b8e-9f0e-4b5c-9d2a-1f3c5e7a9b0d"
    static let pushParameters = "pn-provider=apns;pn-prid=abc;pn-param=TEAM.com.example.app.voip"

    func agent(_ user: String, _ transport: TestSIPClient.Transport, _ server: ScriptedSIPServer, password: String? = nil) throws -> TestUserAgent {
        try TestUserAgent(
            transport: transport, serverPort: server.port(transport), user: user, domain: "example.com",
            password: password ?? "pw-\(user)", instanceID: user == "1002" ? Self.instance : nil,
            contactURIParameters: user == "1002" ? Self.pushParameters : nil)
    }

    // MARK: Registration

    func testRegistersWithDigestOverUDPTCPAndTLS() throws {
        let certificate = try TestCertificate.make()
        defer { certificate.remove() }
        let server = try ScriptedSIPServer(
            ["udp:127.0.0.1:0", "tcp:127.0.0.1:0", "tls:127.0.0.1:0"],
            tls: TLSConfiguration(certificatePath: certificate.certificatePath, privateKeyPath: certificate.keyPath),
            mode: .registrar(algorithms: ["SHA-256", "MD5"]))
        defer { server.shutdown() }
        for transport in [TestSIPClient.Transport.udp, .tcp, .tls] {
            let phone = try agent("1002", transport, server)
            defer { phone.close() }
            XCTAssertEqual(try phone.register().statusCode, 200, "\(transport)")

            let registers = server.requests.all.map(\.request).filter {
                $0.method == .register && $0.topVia?.transport == transport.rawValue.uppercased()
            }
            XCTAssertEqual(registers.count, 2, "\(transport)")
            guard registers.count == 2 else { continue }
            XCTAssertNil(registers[0].headers[.authorization])
            let answer = TestDigest.parameters(of: registers[1].headers[.authorization] ?? "")
            XCTAssertEqual(answer["username"], "1002")
            XCTAssertEqual(answer["realm"], "example.com")
            XCTAssertEqual(answer["uri"], "sip:example.com")
            XCTAssertEqual(answer["algorithm"], "SHA-256")
            XCTAssertEqual(answer["qop"], "auth")
            XCTAssertEqual(answer["nc"], "00000001")
            XCTAssertEqual(registers.map(\.callID), [registers[0].callID, registers[0].callID])
            XCTAssertEqual(registers.map(\.cseq), [SIPCSeq(1, .register), SIPCSeq(2, .register)])
            let transportParameter = transport == .udp ? "" : ";transport=\(transport.rawValue)"
            XCTAssertEqual(
                registers[1].headers[.contact],
                "<sip:1002@127.0.0.1:\(phone.localPort)\(transportParameter);ob;\(Self.pushParameters)>"
                    + ";+sip.instance=\"<\(Self.instance)>\";reg-id=1")
            XCTAssertEqual(registers[1].headers[.expires], "600")
            let vias = registers.compactMap(\.topVia)
            XCTAssertTrue(vias.allSatisfy { $0.hasRFC3261Branch && $0.rport == .some(nil) && $0.port == Int(phone.localPort) })
            XCTAssertNotEqual(vias.first?.branch, vias.last?.branch)
        }
    }

    func testAnswersAnMD5OnlyChallengeUnregistersAndReportsAWrongPassword() throws {
        let server = try ScriptedSIPServer(["udp:127.0.0.1:0"], mode: .registrar(algorithms: ["MD5"]))
        defer { server.shutdown() }
        let phone = try agent("1001", .udp, server)
        defer { phone.close() }
        XCTAssertEqual(try phone.register().statusCode, 200)
        XCTAssertEqual(try phone.register(expires: 0).statusCode, 200)
        let registers = server.requests.all.map(\.request)
        XCTAssertEqual(registers.count, 4)
        XCTAssertEqual(TestDigest.parameters(of: registers[1].headers[.authorization] ?? "")["algorithm"], "MD5")
        XCTAssertEqual(registers.last?.headers[.expires], "0")
        XCTAssertEqual(registers.last?.cseq?.number, 4)

        let impostor = try agent("1001", .udp, server, password: "wrong")
        defer { impostor.close() }
        XCTAssertEqual(try impostor.register().statusCode, 403)
    }

    func testGoesQuietThenRegistersAgainFromANewPort() throws {
        let server = try ScriptedSIPServer(["udp:127.0.0.1:0", "tcp:127.0.0.1:0"], mode: .registrar(algorithms: ["SHA-256"]))
        defer { server.shutdown() }
        for transport in [TestSIPClient.Transport.udp, .tcp] {
            let phone = try agent("1002", transport, server)
            defer { phone.close() }
            XCTAssertEqual(try phone.register().statusCode, 200)
            let before = phone.localPort
            phone.goQuiet()
            XCTAssertFalse(phone.isConnected)
            XCTAssertThrowsError(try phone.waitForRequest(.invite, timeout: .milliseconds(10))) { error in
                guard case TestUserAgentError.notConnected = error else { return XCTFail("\(error)") }
            }
            try phone.reopen()
            XCTAssertNotEqual(phone.localPort, before)
            XCTAssertEqual(try phone.register().statusCode, 200)
            let last = try XCTUnwrap(server.requests.all.last)
            XCTAssertEqual(last.packet.source.port, phone.localPort)
            XCTAssertEqual(last.request.cseq?.number, 4)
            XCTAssertTrue(last.request.headers[.contact]?.contains(":\(phone.localPort)") ?? false)
        }
    }

    func testAnswersOptionsByItself() throws {
        let server = try ScriptedSIPServer(["udp:127.0.0.1:0"], mode: .registrar(algorithms: []))
        defer { server.shutdown() }
        let phone = try agent("1002", .udp, server)
        defer { phone.close() }
        XCTAssertEqual(try phone.register().statusCode, 200)
        server.sendOptions(toUser: "1002")
        try serve(phone) { server.responses.all.contains { $0.cseq?.method == .options } }
        let answer = try XCTUnwrap(server.responses.all.first)
        XCTAssertEqual(answer.statusCode, 200)
        XCTAssertNotNil(answer.to?.tag)
        XCTAssertTrue(phone.buffered.requests.isEmpty)
    }

    // MARK: Calls through the relay

    func testCallWithChallengeRecordRouteAndCallerHangUpOverUDP() throws {
        try runAnsweredCall(.udp, phoneHangsUp: false)
    }

    func testCallWithChallengeRecordRouteAndPhoneHangUpOverTCP() throws {
        try runAnsweredCall(.tcp, phoneHangsUp: true)
    }

    func runAnsweredCall(_ transport: TestSIPClient.Transport, phoneHangsUp: Bool) throws {
        let relay = try ScriptedSIPServer(["\(transport.rawValue):127.0.0.1:0"], mode: .relay(challengeInvites: true, recordRoute: true))
        defer { relay.shutdown() }
        let caller = try agent("1001", transport, relay)
        let phone = try agent("1002", transport, relay)
        defer {
            caller.close()
            phone.close()
        }
        XCTAssertEqual(try caller.register().statusCode, 200)
        XCTAssertEqual(try phone.register().statusCode, 200)
        TestUserAgent.link(caller, phone)

        // The relay's 407 is ACKed and answered while the phone waits (the agents are linked).
        let call = try caller.invite("sip:1002@example.com")
        let invite = try phone.waitForRequest(.invite, timeout: .seconds(3))
        XCTAssertEqual(invite.cseq, SIPCSeq(2, .invite))
        XCTAssertEqual(invite.uri.description, "sip:1002@example.com")
        XCTAssertEqual(invite.maxForwards, 70)
        XCTAssertEqual(invite.headers[.contentType], "application/sdp")
        XCTAssertEqual(TestDigest.parameters(of: invite.headers[.proxyAuthorization] ?? "")["uri"], "sip:1002@example.com")
        XCTAssertEqual(call.responses.map(\.statusCode), [407])
        let absorbed = relay.requests.all.map(\.request).filter { $0.method == .ack }
        XCTAssertEqual(absorbed.map(\.cseq), [SIPCSeq(1, .ack)])
        XCTAssertEqual(absorbed.first?.topVia?.branch, relay.requests.all.map(\.request).first { $0.method == .invite }?.topVia?.branch)
        XCTAssertEqual(absorbed.first?.to?.tag, call.responses.first?.to?.tag)

        let phoneDialog = try phone.answer(invite)
        XCTAssertEqual(try call.waitForResponse(status: 180, timeout: .seconds(3)).statusCode, 180)
        let ok = try call.waitForFinal(timeout: .seconds(3))
        XCTAssertEqual(ok.statusCode, 200)
        XCTAssertFalse(ok.body.isEmpty)
        XCTAssertEqual(ok.to?.tag, phoneDialog.localTag)
        let callerDialog = try call.ack()
        let ack = try phoneDialog.waitForAck(timeout: .seconds(3))

        // RFC 3261 §12.1: the phone keeps Record-Route as received, the caller reverses it.
        XCTAssertEqual(phoneDialog.routeSet, [relay.hop(1), relay.hop(2)])
        XCTAssertEqual(callerDialog.routeSet, [relay.hop(2), relay.hop(1)])
        XCTAssertEqual(callerDialog.remoteTarget, phone.contactURI)
        XCTAssertEqual(phoneDialog.remoteTarget, caller.contactURI)
        XCTAssertEqual(ack.headers.lines(.route), [relay.hop(2), relay.hop(1)])
        XCTAssertEqual(ack.uri.description, phone.contactURI)
        XCTAssertEqual(ack.cseq, SIPCSeq(2, .ack))
        XCTAssertEqual(ack.headers[.proxyAuthorization], invite.headers[.proxyAuthorization])
        XCTAssertNotEqual(ack.topVia?.branch, invite.topVia?.branch)

        if transport == .udp {
            // A retransmitted INVITE: the phone skips it and repeats its 200; the caller ACKs that again.
            relay.resendLastInvite()
            try serve(caller) {
                relay.forwarded(where: { $0.statusCode == 200 && $0.cseq?.method == .invite }) == 2
                    && relay.forwardedRequests(.ack) == 2
            }
            XCTAssertTrue(phone.buffered.requests.isEmpty)
            XCTAssertTrue(caller.buffered.responses.allSatisfy { $0.statusCode < 200 })
        }

        if phoneHangsUp {
            caller.answersBye = true
            let response = try phoneDialog.sendBye(timeout: .seconds(3))
            XCTAssertEqual(response.statusCode, 200)
            let bye = try caller.waitForRequest(.bye, timeout: .seconds(1))
            XCTAssertEqual(bye.headers.lines(.route), [relay.hop(1), relay.hop(2)])
            XCTAssertEqual(bye.uri.description, caller.contactURI)
            XCTAssertEqual(bye.cseq, SIPCSeq(1, .bye))
            XCTAssertEqual(bye.from?.tag, phoneDialog.localTag)
            XCTAssertEqual(bye.to?.tag, callerDialog.localTag)
        } else {
            let bye = try callerDialog.sendRequest(.bye)
            XCTAssertEqual(bye.cseq, SIPCSeq(3, .bye))
            XCTAssertEqual(bye.headers.lines(.route), [relay.hop(2), relay.hop(1)])
            let received = try phoneDialog.receiveBye(timeout: .seconds(3))
            XCTAssertEqual(received.callID, call.callID)
            XCTAssertEqual(try caller.waitForFinalResponse(to: bye, timeout: .seconds(3)).statusCode, 200)
        }
    }

    func testCancelWhileRingingGives487AndTheCallersACK() throws {
        let relay = try ScriptedSIPServer(["udp:127.0.0.1:0"], mode: .relay(challengeInvites: false, recordRoute: false))
        defer { relay.shutdown() }
        let caller = try agent("1001", .udp, relay)
        let phone = try agent("1002", .udp, relay)
        defer {
            caller.close()
            phone.close()
        }
        XCTAssertEqual(try caller.register().statusCode, 200)
        XCTAssertEqual(try phone.register().statusCode, 200)
        TestUserAgent.link(caller, phone)

        let call = try caller.invite("sip:1002@example.com", authenticate: false)
        let invite = try phone.waitForRequest(.invite, timeout: .seconds(3))
        try phone.respond(to: invite, status: 180)
        XCTAssertEqual(try call.waitForResponse(status: 180, timeout: .seconds(3)).statusCode, 180)
        XCTAssertEqual(try call.cancel(timeout: .seconds(3)).statusCode, 200)

        let cancel = try phone.handleCancel(of: invite, timeout: .seconds(3))
        XCTAssertEqual(cancel.uri, invite.uri)
        XCTAssertEqual(cancel.topVia, invite.topVia)
        XCTAssertEqual(cancel.cseq, SIPCSeq(1, .cancel))
        for key in [SIPHeaderName.from, .to, .callID] { XCTAssertEqual(cancel.headers[key], invite.headers[key]) }

        let final = try call.waitForFinal(timeout: .seconds(3))
        XCTAssertEqual(final.statusCode, 487)
        let ack = try XCTUnwrap(relay.requests.all.map(\.request).first { $0.method == .ack })
        XCTAssertEqual(ack.topVia?.branch, invite.topVia?.branch)
        XCTAssertEqual(ack.cseq, SIPCSeq(1, .ack))
        XCTAssertEqual(ack.to?.tag, final.to?.tag)
        XCTAssertEqual(ack.uri, invite.uri)
        XCTAssertTrue(phone.buffered.requests.isEmpty)
    }

    /// Lets `agent` (and the agents linked to it) read until `condition` holds, at most `timeout`.
    func serve(_ agent: TestUserAgent, timeout: Duration = .seconds(3), until condition: () -> Bool, line: UInt = #line) throws {
        let deadline = ContinuousClock.now + timeout
        while !condition() {
            guard ContinuousClock.now < deadline else { return XCTFail("condition not met in time", line: line) }
            try agent.serve(for: .milliseconds(10))
        }
    }
}

/// A scripted SIP server on a `SIPTransportLayer`, answering from the loop thread. As a registrar,
/// it challenges REGISTER (401, one line per algorithm; none: no challenge) and answers a right
/// digest 200 (Contact echoed), a wrong one 403. As a relay it answers REGISTER 200 and passes every
/// other request to the flow of its Request-URI's user and every response to the flow of its From
/// user, adding nothing, except that it answers CANCEL 200 itself (dropping the callee's answer to
/// it), can challenge INVITEs with 407 (absorbing the ACK of the 407), and can add two Record-Route
/// lines to INVITEs. Thread-safe: its state is guarded by `lock`.
final class ScriptedSIPServer: @unchecked Sendable {
    // @unchecked Sendable: `flows`, `challenged` and `lastInvite` are only touched with `lock` held.

    enum Mode {
        case registrar(algorithms: [String])
        case relay(challengeInvites: Bool, recordRoute: Bool)
    }

    struct Received: Sendable {
        let request: SIPRequest
        let packet: InboundPacket
    }

    let layer: SIPTransportLayer
    let mode: Mode
    let requests = EventRecorder<Received>()
    let responses = EventRecorder<SIPResponse>()
    let relayed = EventRecorder<SIPMessage>()
    private let lock = NSLock()
    private var flows: [String: FlowID] = [:]
    private var challenged: Set<String> = []
    private var lastInvite: ([UInt8], FlowID)?

    init(_ points: [String], tls: TLSConfiguration? = nil, mode: Mode) throws {
        let box = ServerBox()
        self.mode = mode
        layer = SIPTransportLayer(
            listen: try points.map { try ListenPoint(parsing: $0) }, tls: tls,
            onPacket: { packet in box.server?.handle(packet) })
        box.server = self
        try layer.start()
    }

    func port(_ transport: TestSIPClient.Transport) -> UInt16 {
        layer.boundPoints.first { $0.transport.rawValue == transport.rawValue }!.port
    }

    /// A Record-Route entry of the relay: `hop(1)` is the top line it adds.
    func hop(_ number: Int) -> String {
        "<sip:127.0.0.1:\(layer.boundPoints[0].port);lr;hop=\(number)>"
    }

    func forwarded(where predicate: (SIPResponse) -> Bool) -> Int {
        relayed.all.filter { if case .response(let response) = $0 { return predicate(response) } else { return false } }.count
    }

    func forwardedRequests(_ method: SIPMethod) -> Int {
        relayed.all.filter { if case .request(let request) = $0 { return request.method == method } else { return false } }.count
    }

    func sendOptions(toUser user: String) {
        guard let flow = lock.withLock({ flows[user] }) else { return }
        let text = "OPTIONS sip:\(user)@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:\(layer.boundPoints[0].port);branch=z9hG4bKoptions1\r\n"
            + "Max-Forwards: 70\r\nFrom: <sip:server@example.com>;tag=s1\r\nTo: <sip:\(user)@example.com>\r\n"
            + "Call-ID: options-1\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
        layer.send(Array(text.utf8), over: flow)
    }

    /// Sends the last INVITE relayed once more, as a UDP retransmission.
    func resendLastInvite() {
        guard let (bytes, flow) = lock.withLock({ lastInvite }) else { return }
        layer.send(bytes, over: flow)
    }

    func shutdown() {
        layer.shutdown()
    }

    private func handle(_ packet: InboundPacket) {
        guard let message = try? SIPParser.parse(packet.bytes) else { return }
        switch message {
        case .request(let request):
            requests.record(Received(request: request, packet: packet))
            if request.method == .register {
                register(request, packet.flow)
            } else if case .relay(let challenge, let recordRoute) = mode {
                relay(request, packet.flow, challenge: challenge, recordRoute: recordRoute)
            }
        case .response(let response):
            responses.record(response)
            guard case .relay = mode, response.cseq?.method != .cancel, let user = response.from?.uri.user else { return }
            forward(.response(response), toUser: user)
        }
    }

    private func register(_ request: SIPRequest, _ flow: FlowID) {
        lock.withLock { flows[request.from?.uri.user ?? ""] = flow }
        if case .registrar(let algorithms) = mode, !algorithms.isEmpty {
            guard let authorization = request.headers[.authorization] else {
                let challenges = algorithms.map {
                    ("WWW-Authenticate", TestDigest.challenge(realm: "example.com", nonce: "n-\(UUID().uuidString)", algorithm: $0, opaque: "op"))
                }
                return reply(request, 401, challenges, flow)
            }
            guard TestDigest.verify(authorization: authorization, method: "REGISTER", password: "pw-" + (request.from?.uri.user ?? "")) else {
                return reply(request, 403, [], flow)
            }
        }
        let expires = request.expires ?? 3600
        reply(request, 200, request.headers[.contact].map { [("Contact", $0 + ";expires=\(expires)")] } ?? [], flow)
    }

    private func relay(_ request: SIPRequest, _ flow: FlowID, challenge: Bool, recordRoute: Bool) {
        let branch = request.topVia?.branch ?? ""
        var request = request
        switch request.method {
        case .invite:
            if challenge {
                guard let authorization = request.headers[.proxyAuthorization] else {
                    lock.withLock { _ = challenged.insert(branch) }
                    let offer = TestDigest.challenge(realm: "example.com", nonce: "n-\(UUID().uuidString)")
                    return reply(request, 407, [("Proxy-Authenticate", offer)], flow)
                }
                guard TestDigest.verify(authorization: authorization, method: "INVITE", password: "pw-" + (request.from?.uri.user ?? "")) else {
                    return reply(request, 403, [], flow)
                }
            }
            if recordRoute {
                request.headers.prepend(.recordRoute, hop(2))
                request.headers.prepend(.recordRoute, hop(1))
            }
        case .ack where lock.withLock({ challenged.contains(branch) }):
            return
        case .cancel:
            reply(request, 200, [], flow)
        default:
            break
        }
        guard let user = request.uri.user, let destination = forward(.request(request), toUser: user) else { return }
        if request.method == .invite {
            lock.withLock { lastInvite = (SIPSerializer.serialize(request), destination) }
        }
    }

    @discardableResult
    private func forward(_ message: SIPMessage, toUser user: String) -> FlowID? {
        guard let flow = lock.withLock({ flows[user] }) else { return nil }
        relayed.record(message)
        layer.send(SIPSerializer.serialize(message), over: flow)
        return flow
    }

    private func reply(_ request: SIPRequest, _ status: Int, _ headers: [(String, String)], _ flow: FlowID) {
        var response = SIPResponse(replyingTo: request, statusCode: status, toTag: "server")
        for (name, value) in headers { response.headers.add(SIPHeader(name: name, value: value)) }
        layer.send(SIPSerializer.serialize(response), over: flow)
    }
}

/// Lets the layer's onPacket closure reach the server that owns the layer. Thread-safe (an NSLock).
final class ServerBox: @unchecked Sendable {
    // @unchecked Sendable: `stored` is only touched with `lock` held.
    private let lock = NSLock()
    private weak var stored: ScriptedSIPServer?

    var server: ScriptedSIPServer? {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
