import Registrar
import RouseVocabulary
import XCTest

final class BindingFlowTests: XCTestCase {
    func testAFlowReadsBackFromItsStoredTexts() throws {
        let flow = BindingFlow(
            transport: .tls, source: SocketAddress(parsing: "[2001:db8::7]:40000"), connectionID: FlowConnectionID("tls#12"),
            local: SocketAddress(parsing: "[2001:db8::1]:5061"), instanceID: "instance-a")
        XCTAssertEqual(flow.sourceText, "[2001:db8::7]:40000")
        XCTAssertEqual(flow.localPointText, "tls:[2001:db8::1]:5061", "the listen point's own form")
        let read = try XCTUnwrap(
            BindingFlow(
                storedTransport: flow.transport.rawValue, source: flow.sourceText, connectionID: flow.connectionID.name,
                localPoint: flow.localPointText, instanceID: flow.instanceID))
        XCTAssertEqual(read, flow)
    }

    func testUnknownTextsAreUnknownEndsAndAnUnknownTransportNoFlow() throws {
        let read = try XCTUnwrap(
            BindingFlow(storedTransport: "udp", source: "", connectionID: "udp#0/192.0.2.7:5060", localPoint: "tcp:127.0.0.1:5060", instanceID: "a"))
        XCTAssertNil(read.source)
        XCTAssertNil(read.local, "a listen point of another transport is not this flow's")
        XCTAssertEqual(read.sourceText, "")
        XCTAssertEqual(read.localPointText, "")
        XCTAssertNil(BindingFlow(storedTransport: "sctp", source: "192.0.2.7:5060", connectionID: "x", localPoint: "", instanceID: "a"))
    }
}
