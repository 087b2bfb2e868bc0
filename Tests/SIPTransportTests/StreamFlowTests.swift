import Foundation
import RouseTestSupport
import RouseVocabulary
import SIPTransport
import XCTest

/// Issue 17: setting up a connection to another instance never blocks the caller (the call queue).
final class StreamFlowTests: XCTestCase {
    func testAStreamFlowIsAskedForWithoutWaitingForABusyLoop() throws {
        let remote = try EchoServer(["tcp:127.0.0.1:0"])
        defer { remote.shutdown() }
        // The local loop thread is held inside its packet handler until `gate` opens.
        let gate = DispatchSemaphore(value: 0)
        let inHandler = EventRecorder<Bool>()
        let packets = EventRecorder<InboundPacket>()
        let local = SIPTransportLayer(
            listen: [try ListenPoint(parsing: "udp:127.0.0.1:0")], tls: nil, limits: TransportLimits(),
            onPacket: { packet in
                packets.record(packet)
                if inHandler.all.isEmpty {
                    inHandler.record(true)
                    gate.wait()
                }
            },
            onFlowClosed: { _, _ in })
        try local.start()
        defer { local.shutdown() }
        let client = try TestSIPClient(transport: .udp, host: "127.0.0.1", port: try XCTUnwrap(local.boundPoints.first?.port))
        try client.send(sipMessage(1))
        XCTAssertNotNil(inHandler.wait(forCount: 1), "the loop is busy")

        let flows = EventRecorder<FlowID?>()
        local.streamFlow(to: try SocketAddress(ip: "127.0.0.1", port: remote.port(.tcp)), transport: .tcp) { flows.record($0) }
        XCTAssertTrue(flows.all.isEmpty, "asked for, not waited for: the loop is still busy")
        gate.signal()
        let flow = try XCTUnwrap(try XCTUnwrap(flows.wait(forCount: 1)?.first))
        local.send(Array(sipMessage(2).utf8), over: flow)
        XCTAssertNotNil(remote.packets.wait(forCount: 1), "the flow reaches the other instance")
        XCTAssertNotNil(packets.wait { $0.flow == flow }, "and its echo comes back over it")
    }

    func testAStreamFlowOverUDPIsRefusedAtOnce() throws {
        let local = try EchoServer(["udp:127.0.0.1:0"], echo: false)
        defer { local.shutdown() }
        let flows = EventRecorder<FlowID?>()
        local.layer.streamFlow(to: try SocketAddress(ip: "127.0.0.1", port: 9), transport: .udp) { flows.record($0) }
        XCTAssertEqual(flows.all.count, 1)
        XCTAssertNil(flows.all.first ?? nil)
    }
}
