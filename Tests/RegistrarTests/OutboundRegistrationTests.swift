import Foundation
@testable import Registrar
import SIPMessage
import XCTest

/// RFC 5626 §6 as the registrar applies it: each reg-id of an instance is a flow of its own,
/// kept as its own binding, and the 2xx says `Require: outbound` (with `Flow-Timer` when Rouse is
/// the edge proxy of a TCP/TLS flow).
final class OutboundRegistrationTests: XCTestCase {
    typealias F = RegistrarFixture
    static let instance = "<urn:uuid:00000000-0000-1000-8000-AABBCCDDEEFF>"
    let supported = "Supported: outbound, path"

    /// A Contact of the test phone over TCP from `port`, flow `regID`.
    func contact(port: Int, regID: Int, uriParameters: String = "") -> String {
        "<sip:1001@192.0.2.7:\(port);transport=tcp;ob\(uriParameters)>;+sip.instance=\"\(Self.instance)\";reg-id=\(regID)"
    }

    func tcp(_ port: Int) -> BindingFlow { F.flow("192.0.2.7:\(port)", transport: "tcp") }

    func testAFlowRegistrationGetsRequireOutboundAndFlowTimer() throws {
        var fixture = F()
        let response = F.response(try fixture.registerAuthenticated(
            contacts: [contact(port: 40001, regID: 1)], callID: "flow-1", extra: [supported], flow: tcp(40001)))
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(response.headers.values(.require), ["outbound"])
        XCTAssertEqual(response.headers["Flow-Timer"], "120")
        XCTAssertEqual(response.headers.values(.contact), [
            "<sip:1001@192.0.2.7:40001;transport=tcp;ob>;expires=3600;+sip.instance=\"\(Self.instance)\";reg-id=1"
        ])
        XCTAssertEqual(fixture.core.bindings(for: F.alice).first?.regID, 1)
    }

    func testTwoRegIDsOfOneInstanceAreTwoBindingsEachReplacedOnItsOwn() throws {
        var fixture = F()
        _ = try fixture.registerAuthenticated(contacts: [contact(port: 40001, regID: 1)], callID: "flow-1", extra: [supported], flow: tcp(40001))
        fixture.now += 1
        let second = F.response(try fixture.registerAuthenticated(
            contacts: [contact(port: 40002, regID: 2)], callID: "flow-2", extra: [supported], flow: tcp(40002)))
        XCTAssertEqual(second.statusCode, 200)
        XCTAssertEqual(Set(second.headers.values(.contact)), [
            "<sip:1001@192.0.2.7:40001;transport=tcp;ob>;expires=3599;+sip.instance=\"\(Self.instance)\";reg-id=1",
            "<sip:1001@192.0.2.7:40002;transport=tcp;ob>;expires=3600;+sip.instance=\"\(Self.instance)\";reg-id=2",
        ])
        let before = Dictionary(uniqueKeysWithValues: fixture.core.bindings(for: F.alice).map { ($0.regID ?? 0, $0) })
        XCTAssertEqual(before.keys.sorted(), [1, 2])
        XCTAssertEqual(before[1]?.flow.sourceText, "192.0.2.7:40001")
        XCTAssertEqual(before[2]?.flow.sourceText, "192.0.2.7:40002")

        // Flow 1 comes back over a new connection (new port, new Call-ID): it replaces flow 1 only.
        fixture.now += 1
        let again = try fixture.registerAuthenticated(
            contacts: [contact(port: 40003, regID: 1)], callID: "flow-1-again", extra: [supported], flow: tcp(40003))
        guard case .commit(let changes, let events, _, _) = again else { return XCTFail("\(again)") }
        XCTAssertEqual(changes.count, 1)
        XCTAssertEqual(events.map(\.kind), [.refreshed])
        let after = Dictionary(uniqueKeysWithValues: fixture.core.bindings(for: F.alice).map { ($0.regID ?? 0, $0) })
        XCTAssertEqual(after[1]?.id, before[1]?.id)
        XCTAssertEqual(after[1]?.flow.sourceText, "192.0.2.7:40003")
        XCTAssertEqual(after[2], before[2], "the other flow is untouched")

        // Unregistering flow 2 leaves flow 1.
        let removal = F.response(try fixture.registerAuthenticated(
            contacts: [contact(port: 40002, regID: 2) + ";expires=0"], callID: "flow-2", cseq: 10, extra: [supported], flow: tcp(40002)))
        XCTAssertEqual(removal.statusCode, 200)
        XCTAssertEqual(removal.headers.values(.require), ["outbound"])
        XCTAssertEqual(fixture.core.bindings(for: F.alice).map(\.regID), [1])
    }

    func testTheFlowsOfOneInstanceShareItsPushTokenAndAReinstallReplacesThemAll() throws {
        var fixture = F()
        let push = ";pn-provider=fcm;pn-prid=token-A;pn-param=project"
        _ = try fixture.registerAuthenticated(
            contacts: [contact(port: 40001, regID: 1, uriParameters: push)], callID: "flow-1", extra: [supported], flow: tcp(40001))
        _ = try fixture.registerAuthenticated(
            contacts: [contact(port: 40002, regID: 2, uriParameters: push)], callID: "flow-2", extra: [supported], flow: tcp(40002))
        let flows = fixture.core.bindings(for: F.alice)
        XCTAssertEqual(flows.count, 2, "the second flow does not take the token away from the first")
        XCTAssertTrue(flows.allSatisfy { $0.pushChannels.map(\.token) == ["token-A"] })

        // The app reinstalled: a new instance id with the same token replaces the old device.
        let reinstalled = "<sip:1001@192.0.2.7:40009;transport=tcp;ob\(push)>;+sip.instance=\"<urn:uuid:11111111-0000-1000-8000-AABBCCDDEEFF>\";reg-id=1"
        let decision = try fixture.registerAuthenticated(contacts: [reinstalled], callID: "new-app", extra: [supported], flow: tcp(40009))
        guard case .commit(_, let events, _, _) = decision else { return XCTFail("\(decision)") }
        XCTAssertEqual(events.filter { $0.kind == .removed }.count, 2)
        XCTAssertEqual(fixture.core.bindings(for: F.alice).map(\.instance), ["<urn:uuid:11111111-0000-1000-8000-AABBCCDDEEFF>"])
    }

    func testAUDPFlowGetsRequireOutboundButNoFlowTimer() throws {
        var fixture = F()
        let udp = "<sip:1001@192.0.2.7:5060;ob>;+sip.instance=\"\(Self.instance)\";reg-id=1"
        let response = F.response(try fixture.registerAuthenticated(contacts: [udp], extra: [supported]))
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(response.headers.values(.require), ["outbound"])
        XCTAssertNil(response.headers["Flow-Timer"], "a UDP phone keeps its NAT binding with its own 24–29 s keep-alives")
    }

    func testFlowTimerZeroSendsNone() throws {
        var fixture = F(policy: RegistrationPolicy(flowTimer: 0))
        let response = F.response(try fixture.registerAuthenticated(
            contacts: [contact(port: 40001, regID: 1)], extra: [supported], flow: tcp(40001)))
        XCTAssertEqual(response.headers.values(.require), ["outbound"])
        XCTAssertNil(response.headers["Flow-Timer"])
    }

    func testWithoutSupportedOutboundTheRegIDIsIgnored() throws {
        var fixture = F()
        _ = try fixture.registerAuthenticated(contacts: [contact(port: 40001, regID: 1)], callID: "flow-1", flow: tcp(40001))
        let response = F.response(try fixture.registerAuthenticated(contacts: [contact(port: 40002, regID: 2)], callID: "flow-2", flow: tcp(40002)))
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertFalse(response.headers.contains(.require))
        XCTAssertNil(response.headers["Flow-Timer"])
        XCTAssertEqual(response.headers.values(.contact), [
            "<sip:1001@192.0.2.7:40002;transport=tcp;ob>;expires=3600;+sip.instance=\"\(Self.instance)\""
        ], "one binding per instance, replaced by the second REGISTER; no reg-id echoed")
    }

    func testAFlowThroughAProxyThatLacksOutboundGets439() throws {
        var fixture = F()
        let edge = "Via: SIP/2.0/TCP edge.example.com;branch=z9hG4bK-edge"
        let refused = F.response(try fixture.registerAuthenticated(contacts: [contact(port: 40001, regID: 1)], extra: [supported, edge]))
        XCTAssertEqual(refused.statusCode, 439)
        XCTAssertEqual(refused.reasonPhrase, "First Hop Lacks Outbound Support")
        XCTAssertEqual(fixture.core.bindingCount, 0)

        // The edge proxy marks its Path with `ob`: the flow is registered, and the edge proxy,
        // not Rouse, tells the phone its Flow-Timer.
        let accepted = F.response(try fixture.registerAuthenticated(
            contacts: [contact(port: 40001, regID: 1)], callID: "via-edge", extra: [supported, edge, "Path: <sip:edge.example.com;lr;ob>"]))
        XCTAssertEqual(accepted.statusCode, 200)
        XCTAssertEqual(accepted.headers.values(.require), ["outbound"])
        XCTAssertNil(accepted.headers["Flow-Timer"])
        XCTAssertEqual(fixture.core.bindings(for: F.alice).first?.path, ["<sip:edge.example.com;lr;ob>"])
    }

    func testAReRegisterThroughAPlainProxyWithoutSupportedOutboundIgnoresTheRegID() throws {
        var fixture = F()
        let edge = "Via: SIP/2.0/UDP proxy.example.com;branch=z9hG4bK-proxy"
        let response = F.response(try fixture.registerAuthenticated(contacts: [contact(port: 40001, regID: 1)], extra: [edge]))
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertFalse(response.headers.contains(.require))
        XCTAssertNil(fixture.core.bindings(for: F.alice).first?.regID)
    }

    func testAnInvalidRegIDGets400() throws {
        var fixture = F()
        for (index, value) in ["0", "x", "2147483648"].enumerated() {
            let bad = "<sip:1001@192.0.2.7:40001;transport=tcp;ob>;+sip.instance=\"\(Self.instance)\";reg-id=\(value)"
            let response = F.response(try fixture.registerAuthenticated(contacts: [bad], callID: "bad-\(index)", extra: [supported]))
            XCTAssertEqual(response.statusCode, 400, value)
            XCTAssertEqual(response.reasonPhrase, "Invalid reg-id", value)
        }
        XCTAssertEqual(fixture.core.bindingCount, 0)
    }

    func testAFlowMayNotBeRegisteredWithOtherContacts() throws {
        var fixture = F()
        let response = F.response(try fixture.registerAuthenticated(
            contacts: [contact(port: 40001, regID: 1), "<sip:1001@192.0.2.8:5060>"], extra: [supported]))
        XCTAssertEqual(response.statusCode, 400)
        XCTAssertEqual(fixture.core.bindingCount, 0)
    }

    func testAStaleCSeqOfOneFlowIsRefusedWithoutTouchingTheOther() throws {
        var fixture = F()
        _ = try fixture.registerAuthenticated(contacts: [contact(port: 40001, regID: 1)], callID: "flow-1", cseq: 10, extra: [supported], flow: tcp(40001))
        _ = try fixture.registerAuthenticated(contacts: [contact(port: 40002, regID: 2)], callID: "flow-2", extra: [supported], flow: tcp(40002))
        let stale = F.response(try fixture.registerAuthenticated(
            contacts: [contact(port: 40001, regID: 1)], callID: "flow-1", cseq: 3, extra: [supported], flow: tcp(40001)))
        XCTAssertEqual(stale.statusCode, 400)
        XCTAssertEqual(fixture.core.bindingCount, 2)
    }
}
