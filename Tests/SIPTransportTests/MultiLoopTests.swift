import Foundation
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPTransport
import XCTest

/// A layer with two loop threads (`sip_threads` 2): every listen point bound once per loop with
/// SO_REUSEPORT, the kernel spreading peers over the loops, each flow served by one loop.
final class MultiLoopTests: XCTestCase {
    private let timeout: Duration = .seconds(5)

    func testTwoLoopsShareTheUDPPortAndBothServePeers() throws {
        let server = try EchoServer(["udp:127.0.0.1:0", "udp:[::1]:0"], loops: 2)
        defer { server.shutdown() }
        XCTAssertEqual(server.layer.loopCount, 2)
        XCTAssertEqual(server.layer.boundPoints.count, 2, "each point is reported once, with the port every loop shares")
        // The kernel picks a loop's socket by the peer's address and port: 32 peers all landing on
        // one of two sockets would happen once in 2^31.
        var clients: [TestSIPClient] = []
        for number in 1...32 {
            let client = try TestSIPClient(transport: .udp, host: "127.0.0.1", port: server.port(.udp))
            try client.send(sipMessage(number))
            XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(number), "peer \(number) is answered from the port it sent to")
            clients.append(client)
        }
        let six = try TestSIPClient(transport: .udp, host: "::1", port: server.port(.udp, ipv6: true))
        try six.send(sipMessage(99))
        XCTAssertEqual(text(try six.receive(timeout: timeout)), sipMessage(99))
        let threads = try XCTUnwrap(server.receivingThreads.wait(forCount: 33))
        XCTAssertEqual(Set(threads.map(\.1)).count, 2, "both loops received datagrams")
        XCTAssertEqual(Set(server.packets.all.map(\.local.port)).count, 2, "one port per listen point (IPv4, IPv6)")
    }

    func testEachTCPConnectionStaysOnTheLoopThatAcceptedIt() throws {
        let server = try EchoServer(["tcp:127.0.0.1:0"], loops: 2)
        defer { server.shutdown() }
        let clients = try (1...16).map { _ in try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp)) }
        for round in 0..<3 {
            for (index, client) in clients.enumerated() {
                let number = round * 100 + index
                try client.send(sipMessage(number))
                XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(number))
            }
        }
        let threads = try XCTUnwrap(server.receivingThreads.wait(forCount: 48))
        let byFlow = Dictionary(grouping: threads, by: \.0).mapValues { Set($0.map(\.1)) }
        XCTAssertEqual(byFlow.count, 16, "a flow per connection")
        XCTAssertTrue(byFlow.values.allSatisfy { $0.count == 1 }, "every message of a connection arrives on one loop")
        // 16 connections accepted by one listener of two would happen once in 2^15.
        XCTAssertEqual(Set(byFlow.values.compactMap(\.first)).count, 2, "connections are spread over both loops")
        XCTAssertEqual(server.layer.openConnectionCount, 16)
    }

    func testSendOverATCPFlowFromAnotherThreadGoesOutOnItsLoop() throws {
        let certificate = try TestCertificate.make(commonName: "rouse.test")
        defer { certificate.remove() }
        let server = try EchoServer(
            ["tcp:127.0.0.1:0", "tls:127.0.0.1:0"],
            tls: TLSConfiguration(certificatePath: certificate.certificatePath, privateKeyPath: certificate.keyPath), loops: 2, echo: false)
        defer { server.shutdown() }
        for transport in [SIPTransportKind.tcp, .tls] {
            let client = try TestSIPClient(transport: transport == .tcp ? .tcp : .tls, host: "127.0.0.1", port: server.port(transport))
            try client.send(sipMessage(1))
            let packet = try XCTUnwrap(server.packets.wait { $0.transport == transport })
            let receiver = try XCTUnwrap(server.receivingThreads.all.first { $0.0 == packet.flow }).1
            let sent = EventRecorder<(Result<FlowID, SIPTransportError>, UInt)>()
            // From the test's thread, which is no loop's.
            server.layer.send(Array(sipMessage(2).utf8), over: packet.flow) { sent.record(($0, UInt(pthread_self()))) }
            XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(2))
            let (result, thread) = try XCTUnwrap(sent.wait(forCount: 1)?.first)
            XCTAssertEqual(try result.get(), packet.flow)
            XCTAssertEqual(thread, receiver, "the send ran on the loop that owns the connection")
            XCTAssertNotEqual(thread, UInt(pthread_self()))
        }
    }

    func testSendToAnAddressUsesTheOpenConnectionWhicheverLoopHoldsIt() throws {
        let server = try EchoServer(["tcp:127.0.0.1:0"], loops: 2, echo: false)
        defer { server.shutdown() }
        let clients = try (1...8).map { _ in try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp)) }
        for (index, client) in clients.enumerated() { try client.send(sipMessage(index)) }
        let packets = try XCTUnwrap(server.packets.wait(forCount: 8))
        let sent = EventRecorder<Result<FlowID, SIPTransportError>>()
        for (index, client) in clients.enumerated() {
            let packet = try XCTUnwrap(packets.first { $0.source.port == client.localPort })
            server.layer.send(Array(sipMessage(100 + index).utf8), to: packet.source, transport: .tcp) { sent.record($0) }
            XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(100 + index))
        }
        let flows = try XCTUnwrap(sent.wait(forCount: 8)).map { try $0.get() }
        XCTAssertEqual(Set(flows), Set(packets.map(\.flow)), "no new connection was opened")
        XCTAssertEqual(server.layer.openConnectionCount, 8)
    }

    func testAClosedFlowIsReportedByItsLoopAndNoLongerOpen() throws {
        let server = try EchoServer(["tcp:127.0.0.1:0"], loops: 2, echo: false)
        defer { server.shutdown() }
        let clients = try (1...6).map { _ in try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp)) }
        for (index, client) in clients.enumerated() { try client.send(sipMessage(index)) }
        let packets = try XCTUnwrap(server.packets.wait(forCount: 6))
        for client in clients {
            let flow = try XCTUnwrap(packets.first { $0.source.port == client.localPort }).flow
            XCTAssertTrue(server.layer.flowIsOpen(flow))
            client.close()
            XCTAssertNotNil(server.closedFlows.wait { $0.0 == flow && $0.1 == .peerClosed })
            XCTAssertFalse(server.layer.flowIsOpen(flow))
            let sent = EventRecorder<Result<FlowID, SIPTransportError>>()
            server.layer.send(Array(sipMessage(9).utf8), over: flow) { sent.record($0) }
            let result = try XCTUnwrap(sent.wait(forCount: 1)?.first)
            XCTAssertThrowsError(try result.get()) { XCTAssertEqual($0 as? SIPTransportError, .flowNotOpen(flow)) }
        }
        XCTAssertEqual(server.layer.openConnectionCount, 0)
    }

    func testTheConnectionLimitCountsEveryLoop() throws {
        var limits = TransportLimits()
        limits.maxConnections = 3
        let server = try EchoServer(["tcp:127.0.0.1:0"], limits: limits, loops: 2)
        defer { server.shutdown() }
        let clients = try (1...3).map { _ in try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp)) }
        for (index, client) in clients.enumerated() {
            try client.send(sipMessage(index))
            XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(index))
        }
        for _ in 1...4 {
            let extra = try TestSIPClient(transport: .tcp, host: "127.0.0.1", port: server.port(.tcp))
            XCTAssertTrue(extra.waitUntilClosed(timeout: timeout), "beyond the limit, whichever loop accepts it")
        }
        XCTAssertEqual(server.layer.openConnectionCount, 3)
    }

    func testAPortHeldByRunningLoopsCannotBeTakenAgain() throws {
        let first = try EchoServer(["udp:127.0.0.1:0", "tcp:127.0.0.1:0"], loops: 2)
        defer { first.shutdown() }
        for transport in [SIPTransportKind.udp, .tcp] {
            let taken = ListenPoint(transport: transport, host: "127.0.0.1", port: first.port(transport))
            for loops in [1, 2] {
                let second = SIPTransportLayer(listen: [taken], loops: loops, onPacket: { _ in })
                XCTAssertThrowsError(try second.start(), "\(loops) loop(s) on \(taken)") { error in
                    XCTAssertEqual("\(error)", "cannot listen on \(taken): Address already in use")
                }
                XCTAssertEqual(second.boundPoints, [])
                second.shutdown()
            }
        }
        let client = try TestSIPClient(transport: .udp, host: "127.0.0.1", port: first.port(.udp))
        try client.send(sipMessage(5))
        XCTAssertEqual(text(try client.receive(timeout: timeout)), sipMessage(5), "the first server still serves its port")
    }

    func testShutdownFromACallbackStopsEveryLoop() throws {
        let box = LayerBox()
        let packets = EventRecorder<InboundPacket>()
        let layer = SIPTransportLayer(
            listen: [ListenPoint(transport: .udp, host: "127.0.0.1", port: 0)], loops: 2,
            onPacket: { packet in
                // Recorded once shutdown returned: the send below is then sure to find the layer stopped.
                box.layer?.shutdown()
                packets.record(packet)
            })
        box.layer = layer
        try layer.start()
        let port = try XCTUnwrap(layer.boundPoints.first?.port)
        let client = try TestSIPClient(transport: .udp, host: "127.0.0.1", port: port)
        try client.send(sipMessage(1))
        let packet = try XCTUnwrap(packets.wait(forCount: 1)?.first)
        // The callback returned (the other loop was stopped from it without a deadlock).
        let sent = EventRecorder<Result<FlowID, SIPTransportError>>()
        layer.send(Array(sipMessage(2).utf8), over: packet.flow) { sent.record($0) }
        let result = try XCTUnwrap(sent.wait(forCount: 1)?.first)
        XCTAssertThrowsError(try result.get()) { XCTAssertEqual($0 as? SIPTransportError, .notRunning) }
        XCTAssertTrue(layer.boundPoints.isEmpty)
        layer.shutdown()
    }
}
