import Foundation
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPTransport
import XCTest

final class SIPTransportLayerTests: XCTestCase {
    private let timeout: Duration = .seconds(5)

    // MARK: UDP

    func testUDPDatagramIsEchoedOverItsFlowOnIPv4AndIPv6() throws {
        let server = try EchoServer(["udp:127.0.0.1:0", "udp:[::1]:0"])
        defer { server.shutdown() }
        for (host, ipv6) in [("127.0.0.1", false), ("::1", true)] {
            let client = try TestSIPClient(transport: .udp, host: host, port: server.port(.udp, ipv6: ipv6))
            try client.send(sipMessage(1))
            XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(1))
            let packet = try XCTUnwrap(server.packets.wait { $0.source.port == client.localPort })
            XCTAssertEqual(packet.transport, .udp)
            XCTAssertFalse(packet.isReliable)
            XCTAssertEqual(packet.source.ip, host)
            XCTAssertEqual(packet.local, ListenPoint(transport: .udp, host: host, port: server.port(.udp, ipv6: ipv6)))
            XCTAssertTrue(server.layer.flowIsOpen(packet.flow))
        }
    }

    func testUDPDatagramOfCRLFsOnlyIsIgnored() throws {
        let server = try EchoServer(["udp:127.0.0.1:0"])
        defer { server.shutdown() }
        let client = try TestSIPClient(transport: .udp, host: "127.0.0.1", port: server.port(.udp))
        try client.send("\r\n\r\n")
        try client.send(sipMessage(2))
        XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(2))
        XCTAssertEqual(server.packets.all.map { text($0.bytes) }, [sipMessage(2)])
    }

    func testOversizeUDPDatagramIsDropped() throws {
        var limits = TransportLimits()
        limits.framing = SIPParserLimits(maxMessageBytes: 1024)
        let server = try EchoServer(["udp:127.0.0.1:0"], limits: limits)
        defer { server.shutdown() }
        let client = try TestSIPClient(transport: .udp, host: "127.0.0.1", port: server.port(.udp))
        try client.send(sipMessage(1, body: String(repeating: "x", count: 2000)))
        try client.send(sipMessage(2))
        XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(2))
        XCTAssertEqual(server.packets.all.count, 1)
    }

    func testUDPSendToAddressUsesTheListeningSocket() throws {
        let server = try EchoServer(["udp:127.0.0.1:0"], echo: false)
        defer { server.shutdown() }
        let client = try TestSIPClient(transport: .udp, host: "127.0.0.1", port: server.port(.udp))
        try client.send(sipMessage(3))
        let packet = try XCTUnwrap(server.packets.wait(forCount: 1)?.first)
        let sent = EventRecorder<Result<FlowID, SIPTransportError>>()
        server.layer.send(Array(sipMessage(4).utf8), to: packet.source, transport: .udp) { sent.record($0) }
        XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(4))
        XCTAssertEqual(try XCTUnwrap(sent.wait(forCount: 1)?.first).get(), packet.flow)
    }

    // MARK: TCP

    func testTCPSeveralMessagesInOneWriteArriveSeparately() throws {
        let server = try EchoServer(["tcp:127.0.0.1:0"])
        defer { server.shutdown() }
        let client = try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp))
        try client.send(sipMessage(1) + sipMessage(2, body: "v=0\r\n") + sipMessage(3))
        XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(1))
        XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(2, body: "v=0\r\n"))
        XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(3))
        let packets = try XCTUnwrap(server.packets.wait(forCount: 3))
        XCTAssertEqual(Set(packets.map(\.flow)).count, 1)
        XCTAssertTrue(packets.allSatisfy { $0.isReliable && $0.transport == .tcp })
    }

    func testTCPMessageWrittenByteByByteArrivesWhole() throws {
        let server = try EchoServer(["tcp:[::1]:0"])
        defer { server.shutdown() }
        let client = try TestSIPClient(transport: .tcp, host: "::1", port: server.port(.tcp, ipv6: true))
        let message = sipMessage(7, body: "hello body")
        for byte in message.utf8 {
            try client.send([byte])
        }
        XCTAssertEqual(text(try client.receive(timeout: timeout)), message)
        XCTAssertEqual(server.packets.all.count, 1)
    }

    func testTCPKeepAlivePingIsAnsweredWithPongAndNotPassedUp() throws {
        let server = try EchoServer(["tcp:127.0.0.1:0"])
        defer { server.shutdown() }
        let client = try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp))
        try client.send("\r\n\r\n")
        XCTAssertEqual(try client.receiveRaw(timeout: timeout), [0x0D, 0x0A])
        try client.send("\r\n\r")
        XCTAssertNil(try client.receiveRaw(timeout: .milliseconds(100)), "three bytes are not a ping yet")
        try client.send("\n")
        XCTAssertEqual(try client.receiveRaw(timeout: timeout), [0x0D, 0x0A])
        try client.send(sipMessage(1))
        XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(1))
        XCTAssertEqual(server.packets.all.map { text($0.bytes) }, [sipMessage(1)])
    }

    func testPeerThatDoesNotReadIsDroppedWhenItsWriteQueueFills() throws {
        var limits = TransportLimits()
        limits.maxWriteQueueBytes = 256 * 1024
        let server = try EchoServer(["tcp:127.0.0.1:0"], limits: limits, echo: false)
        defer { server.shutdown() }
        let client = try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp))
        try client.send(sipMessage(1))
        let flow = try XCTUnwrap(server.packets.wait(forCount: 1)?.first?.flow)
        let chunk = [UInt8](repeating: 0x41, count: 64 * 1024)
        let sent = EventRecorder<Result<FlowID, SIPTransportError>>()
        for _ in 0..<400 {
            server.layer.send(chunk, over: flow) { sent.record($0) }
        }
        let closed = try XCTUnwrap(server.closedFlows.wait(forCount: 1, timeout: 10)?.first)
        XCTAssertEqual(closed.0, flow)
        XCTAssertEqual(closed.1, .writeQueueFull)
        let results = try XCTUnwrap(sent.wait(forCount: 400, timeout: 10))
        XCTAssertTrue(results.contains { if case .success = $0 { return true } else { return false } })
        XCTAssertTrue(results.contains { $0 == .failure(.connectionClosed(flow, .writeQueueFull)) })
    }

    func testResponseToAddressReusesTheSameTCPConnection() throws {
        let server = try EchoServer(["tcp:127.0.0.1:0"], echo: false)
        defer { server.shutdown() }
        let first = try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp))
        let second = try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp))
        try first.send(sipMessage(1))
        try second.send(sipMessage(2))
        let packets = try XCTUnwrap(server.packets.wait(forCount: 2))
        let fromFirst = try XCTUnwrap(packets.first { $0.source.port == first.localPort })
        let fromSecond = try XCTUnwrap(packets.first { $0.source.port == second.localPort })
        XCTAssertNotEqual(fromFirst.flow, fromSecond.flow)

        let sent = EventRecorder<Result<FlowID, SIPTransportError>>()
        server.layer.send(Array(sipMessage(10).utf8), to: fromFirst.source, transport: .tcp) { sent.record($0) }
        server.layer.send(Array(sipMessage(20).utf8), over: fromSecond.flow) { sent.record($0) }
        XCTAssertEqual(text(try first.receive(timeout: timeout)), sipMessage(10))
        XCTAssertEqual(text(try second.receive(timeout: timeout)), sipMessage(20))
        let results = try XCTUnwrap(sent.wait(forCount: 2)).map { try $0.get() }
        XCTAssertEqual(Set(results), [fromFirst.flow, fromSecond.flow])
        XCTAssertEqual(server.layer.openConnectionCount, 2)
    }

    func testOversizeMessageClosesThatConnectionOnly() throws {
        var limits = TransportLimits()
        limits.framing = SIPParserLimits(maxMessageBytes: 1024)
        let server = try EchoServer(["tcp:127.0.0.1:0"], limits: limits)
        defer { server.shutdown() }
        let bystander = try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp))
        let offender = try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp))
        try offender.send(sipMessage(1, body: String(repeating: "x", count: 2000)))
        XCTAssertTrue(offender.waitUntilClosed(timeout: timeout))
        let closed = try XCTUnwrap(server.closedFlows.wait(forCount: 1)?.first)
        XCTAssertEqual(closed.1, .framingError("message too large"))
        try bystander.send(sipMessage(2))
        XCTAssertEqual(text(try bystander.receive(timeout: timeout)), sipMessage(2))
        XCTAssertFalse(server.packets.all.contains { $0.source.port == offender.localPort })
    }

    func testConnectionsBeyondTheLimitAreClosed() throws {
        var limits = TransportLimits()
        limits.maxConnections = 2
        let server = try EchoServer(["tcp:127.0.0.1:0"], limits: limits)
        defer { server.shutdown() }
        let clients = try (1...2).map { _ in try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp)) }
        for (index, client) in clients.enumerated() {
            try client.send(sipMessage(index))
            XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(index))
        }
        let extra = try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp))
        XCTAssertTrue(extra.waitUntilClosed(timeout: timeout))
        XCTAssertEqual(server.layer.openConnectionCount, 2)

        clients[0].close()
        XCTAssertNotNil(server.closedFlows.wait { $0.1 == .peerClosed })
        let replacement = try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp))
        try replacement.send(sipMessage(9))
        XCTAssertEqual(text(try replacement.receive(timeout: timeout)), sipMessage(9))
    }

    func testSilentConnectionIsClosedAfterTheIdleTimeout() throws {
        var limits = TransportLimits()
        limits.idleTimeout = .seconds(1)
        let server = try EchoServer(["tcp:127.0.0.1:0"], limits: limits)
        defer { server.shutdown() }
        let client = try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp))
        try client.send(sipMessage(1))
        XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(1))
        let flow = try XCTUnwrap(server.packets.wait(forCount: 1)?.first?.flow)
        XCTAssertTrue(client.waitUntilClosed(timeout: .seconds(10)))
        let closed = try XCTUnwrap(server.closedFlows.wait(forCount: 1)?.first)
        XCTAssertEqual(closed.0, flow)
        XCTAssertEqual(closed.1, .idleTimeout)
        XCTAssertFalse(server.layer.flowIsOpen(flow))
    }

    func testSendOverAClosedConnectionFails() throws {
        let server = try EchoServer(["tcp:127.0.0.1:0"], echo: false)
        defer { server.shutdown() }
        let client = try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp))
        try client.send(sipMessage(1))
        let flow = try XCTUnwrap(server.packets.wait(forCount: 1)?.first?.flow)
        XCTAssertTrue(server.layer.flowIsOpen(flow))
        client.close()
        XCTAssertNotNil(server.closedFlows.wait { $0.0 == flow })
        XCTAssertFalse(server.layer.flowIsOpen(flow))
        let sent = EventRecorder<Result<FlowID, SIPTransportError>>()
        server.layer.send(Array(sipMessage(2).utf8), over: flow) { sent.record($0) }
        let result = try XCTUnwrap(sent.wait(forCount: 1)?.first)
        XCTAssertThrowsError(try result.get()) { XCTAssertEqual($0 as? SIPTransportError, .flowNotOpen(flow)) }
    }

    // MARK: TLS

    func testTLSMessagesAreEchoedOnIPv4AndIPv6() throws {
        let certificate = try TestCertificate.make(commonName: "rouse.test")
        defer { certificate.remove() }
        let server = try EchoServer(
            ["tls:127.0.0.1:0", "tls:[::1]:0"],
            tls: TLSConfiguration(certificatePath: certificate.certificatePath, privateKeyPath: certificate.keyPath))
        defer { server.shutdown() }
        for (host, ipv6) in [("127.0.0.1", false), ("::1", true)] {
            let client = try TestSIPClient(transport: .tls, host: host, port: server.port(.tls, ipv6: ipv6))
            try client.send(sipMessage(1) + sipMessage(2, body: "tls body"))
            XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(1))
            XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(2, body: "tls body"))
            try client.send("\r\n\r\n")
            XCTAssertEqual(try client.receiveRaw(timeout: timeout), [0x0D, 0x0A])
        }
        let packets = try XCTUnwrap(server.packets.wait(forCount: 4))
        XCTAssertTrue(packets.allSatisfy { $0.transport == .tls && $0.flow.transport == .tls })
    }

    func testTLSClientThatNeverFinishesItsHandshakeIsDropped() throws {
        let certificate = try TestCertificate.make(commonName: "rouse.test")
        defer { certificate.remove() }
        var limits = TransportLimits()
        limits.tlsHandshakeTimeout = .seconds(1)
        let server = try EchoServer(
            ["tls:127.0.0.1:0"],
            tls: TLSConfiguration(certificatePath: certificate.certificatePath, privateKeyPath: certificate.keyPath),
            limits: limits)
        defer { server.shutdown() }
        let silent = try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tls))
        XCTAssertTrue(silent.waitUntilClosed(timeout: .seconds(10)))
        XCTAssertEqual(try XCTUnwrap(server.closedFlows.wait(forCount: 1)?.first).1, .handshakeTimeout)
        XCTAssertEqual(server.layer.openConnectionCount, 0)
    }

    func testPlaintextOnTheTLSPortClosesTheConnection() throws {
        let certificate = try TestCertificate.make(commonName: "rouse.test")
        defer { certificate.remove() }
        let server = try EchoServer(
            ["tls:127.0.0.1:0"],
            tls: TLSConfiguration(certificatePath: certificate.certificatePath, privateKeyPath: certificate.keyPath))
        defer { server.shutdown() }
        let confused = try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tls))
        try confused.send(sipMessage(1))
        XCTAssertTrue(confused.waitUntilClosed(timeout: timeout))
        let reason = try XCTUnwrap(server.closedFlows.wait(forCount: 1)?.first?.1)
        guard case .tlsError = reason else { return XCTFail("closed for \(reason)") }
    }

    // MARK: outbound

    func testOutboundSendsOpenOneConnectionPerAddressAndGetAnswers() throws {
        let certificate = try TestCertificate.make(commonName: "rouse.test")
        defer { certificate.remove() }
        let tls = TLSConfiguration(certificatePath: certificate.certificatePath, privateKeyPath: certificate.keyPath)
        let remote = try EchoServer(["udp:127.0.0.1:0", "tcp:127.0.0.1:0", "tls:[::1]:0"], tls: tls)
        defer { remote.shutdown() }
        let local = try EchoServer(["udp:127.0.0.1:0", "tcp:127.0.0.1:0"], echo: false)
        defer { local.shutdown() }

        let targets: [(SIPTransportKind, SocketAddress)] = [
            (.udp, try SocketAddress(ip: "127.0.0.1", port: remote.port(.udp))),
            (.tcp, try SocketAddress(ip: "127.0.0.1", port: remote.port(.tcp))),
            (.tls, try SocketAddress(ip: "::1", port: remote.port(.tls, ipv6: true))),
        ]
        let sent = EventRecorder<Result<FlowID, SIPTransportError>>()
        for (round, _) in [0, 1].enumerated() {
            for (index, (transport, address)) in targets.enumerated() {
                local.layer.send(Array(sipMessage(round * 10 + index).utf8), to: address, transport: transport) { sent.record($0) }
            }
        }
        let flows = try XCTUnwrap(sent.wait(forCount: 6)).map { try $0.get() }
        XCTAssertEqual(Set(flows).count, 3, "each second send reuses the first one's flow")
        let echoes = try XCTUnwrap(local.packets.wait(forCount: 6))
        XCTAssertEqual(Set(echoes.map { text($0.bytes)! }), Set((0..<6).map { sipMessage(($0 / 3) * 10 + $0 % 3) }))
        let tlsEcho = try XCTUnwrap(echoes.first { $0.transport == .tls })
        XCTAssertEqual(tlsEcho.source, targets[2].1)
        XCTAssertTrue(local.layer.flowIsOpen(tlsEcho.flow))
        XCTAssertEqual(local.layer.openConnectionCount, 2)
    }

    func testOutboundConnectToAClosedPortFails() throws {
        let probe = try EchoServer(["tcp:127.0.0.1:0"])
        let port = probe.port(.tcp)
        probe.shutdown()
        let local = try EchoServer(["udp:127.0.0.1:0"], echo: false)
        defer { local.shutdown() }
        let sent = EventRecorder<Result<FlowID, SIPTransportError>>()
        local.layer.send(Array(sipMessage(1).utf8), to: try SocketAddress(ip: "127.0.0.1", port: port), transport: .tcp) {
            sent.record($0)
        }
        let result = try XCTUnwrap(sent.wait(forCount: 1)?.first)
        XCTAssertThrowsError(try result.get())
        XCTAssertEqual(local.layer.openConnectionCount, 0)
    }

    func testOutboundTLSWithVerificationAcceptsOnlyTheTrustedCertificate() throws {
        let serverCertificate = try TestCertificate.make(commonName: "rouse.test")
        defer { serverCertificate.remove() }
        let otherCertificate = try TestCertificate.make(commonName: "other.test")
        defer { otherCertificate.remove() }
        let remote = try EchoServer(
            ["tls:127.0.0.1:0"],
            tls: TLSConfiguration(certificatePath: serverCertificate.certificatePath, privateKeyPath: serverCertificate.keyPath))
        defer { remote.shutdown() }
        let address = try SocketAddress(ip: "127.0.0.1", port: remote.port(.tls))
        for (trusted, shouldSucceed) in [(serverCertificate, true), (otherCertificate, false)] {
            let local = try EchoServer(
                [],
                tls: TLSConfiguration(
                    certificatePath: otherCertificate.certificatePath, privateKeyPath: otherCertificate.keyPath,
                    verifiesOutboundPeers: true, trustedCertificatesPath: trusted.certificatePath),
                echo: false)
            defer { local.shutdown() }
            let sent = EventRecorder<Result<FlowID, SIPTransportError>>()
            local.layer.send(Array(sipMessage(1).utf8), to: address, transport: .tls) { sent.record($0) }
            let result = try XCTUnwrap(sent.wait(forCount: 1)?.first)
            if shouldSucceed {
                XCTAssertNoThrow(try result.get())
                XCTAssertNotNil(local.packets.wait(forCount: 1))
            } else {
                guard case .failure(.connectionClosed(_, .tlsError(let reason))) = result else {
                    return XCTFail("expected a TLS failure, got \(result)")
                }
                XCTAssertTrue(reason.contains("certificate verification failed"), reason)
            }
        }
    }

    // MARK: lifecycle

    func testStartFailureNamesTheAddressInUse() throws {
        let first = try EchoServer(["udp:127.0.0.1:0"])
        defer { first.shutdown() }
        let taken = ListenPoint(transport: .udp, host: "127.0.0.1", port: first.port(.udp))
        let second = SIPTransportLayer(listen: [ListenPoint(transport: .tcp, host: "127.0.0.1", port: 0), taken], onPacket: { _ in })
        XCTAssertThrowsError(try second.start()) { error in
            XCTAssertEqual("\(error)", "cannot listen on \(taken): Address already in use")
        }
        XCTAssertEqual(second.boundPoints, [])
        second.shutdown()
    }

    func testTLSPointWithoutCertificateDoesNotStart() {
        let layer = SIPTransportLayer(listen: [ListenPoint(transport: .tls, host: "127.0.0.1", port: 0)], onPacket: { _ in })
        XCTAssertThrowsError(try layer.start()) { XCTAssertTrue("\($0)".contains("tls:127.0.0.1:0"), "\($0)") }
    }

    func testShutdownClosesConnectionsAndIsIdempotent() throws {
        let server = try EchoServer(["tcp:127.0.0.1:0", "udp:127.0.0.1:0"])
        let client = try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp))
        try client.send(sipMessage(1))
        XCTAssertNotNil(try client.receive(timeout: timeout))
        let flow = try XCTUnwrap(server.packets.all.first?.flow)
        server.shutdown()
        server.shutdown()
        XCTAssertTrue(client.waitUntilClosed(timeout: timeout))
        XCTAssertEqual(server.closedFlows.all.map(\.1), [.shutdown])
        XCTAssertFalse(server.layer.flowIsOpen(flow))
        let sent = EventRecorder<Result<FlowID, SIPTransportError>>()
        server.layer.send([1], over: flow) { sent.record($0) }
        XCTAssertThrowsError(try XCTUnwrap(sent.wait(forCount: 1)?.first).get()) {
            XCTAssertEqual($0 as? SIPTransportError, .notRunning)
        }
        XCTAssertThrowsError(try server.layer.start()) { XCTAssertEqual($0 as? SIPTransportError, .alreadyStarted) }
    }
}
