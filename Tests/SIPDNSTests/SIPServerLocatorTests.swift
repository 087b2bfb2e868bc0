import XCTest

@testable import SIPDNS

/// RFC 3263 §4 step by step: which questions the locator asks for each kind of target, and the
/// hops it ends with for the answers given.
final class SIPServerLocatorTests: XCTestCase {
    func testAnIPLiteralNeedsNoDNS() {
        var locator = SIPServerLocator(target: SIPServerTarget(host: "[2001:db8::5]"), seed: 1)
        XCTAssertEqual(locator.start(), .located([ResolvedHop(transport: .udp, ip: "2001:db8::5", port: 5060, host: "2001:db8::5")]))
        var secure = SIPServerLocator(target: SIPServerTarget(host: "198.51.100.9", secure: true), seed: 1)
        XCTAssertEqual(secure.start(), .located([ResolvedHop(transport: .tls, ip: "198.51.100.9", port: 5061, host: "198.51.100.9")]))
    }

    func testAPortSkipsNAPTRAndSRV() {
        var locator = SIPServerLocator(target: SIPServerTarget(host: "trunk.example.com", port: 5080, transport: .tcp), seed: 1)
        XCTAssertEqual(locator.start(), .lookUp([DNSQuestion("trunk.example.com", .a), DNSQuestion("trunk.example.com", .aaaa)]))
        XCTAssertNil(locator.answer(DNSQuestion("trunk.example.com", .aaaa), records: [address("trunk.example.com", "2001:db8::1")]))
        XCTAssertEqual(locator.answer(DNSQuestion("trunk.example.com", .a), records: [address("trunk.example.com", "198.51.100.1")]), .located([
            ResolvedHop(transport: .tcp, ip: "198.51.100.1", port: 5080, host: "trunk.example.com"),
            ResolvedHop(transport: .tcp, ip: "2001:db8::1", port: 5080, host: "trunk.example.com"),
        ]))
    }

    func testNAPTRsAreFollowedInOrderAndPreferenceToTheirSRVs() {
        var locator = SIPServerLocator(target: SIPServerTarget(host: "example.com"), seed: 1)
        XCTAssertEqual(locator.start(), .lookUp([DNSQuestion("example.com", .naptr)]))
        let naptrs = [
            naptr("example.com", order: 20, preference: 10, service: "SIP+D2U", to: "_sip._udp.example.com"),
            naptr("example.com", order: 10, preference: 20, service: "SIP+D2T", to: "_sip._tcp.example.com"),
            naptr("example.com", order: 10, preference: 30, service: "SIP+D2X", to: "_sip._sctp.example.com"),
        ]
        XCTAssertEqual(locator.answer(DNSQuestion("example.com", .naptr), records: naptrs),
            .lookUp([DNSQuestion("_sip._tcp.example.com", .srv), DNSQuestion("_sip._udp.example.com", .srv)]))
        XCTAssertNil(locator.answer(DNSQuestion("_sip._udp.example.com", .srv), records: [srv("_sip._udp.example.com", 10, 0, 5060, "b.example.com")]))
        // The TCP SRV answer carries its target's address as glue: only b's addresses are asked.
        let tcp = [srv("_sip._tcp.example.com", 10, 0, 5070, "a.example.com"), address("a.example.com", "192.0.2.1")]
        XCTAssertEqual(locator.answer(DNSQuestion("_sip._tcp.example.com", .srv), records: tcp),
            .lookUp([DNSQuestion("b.example.com", .a), DNSQuestion("b.example.com", .aaaa)]))
        XCTAssertNil(locator.answer(DNSQuestion("b.example.com", .a), records: [address("b.example.com", "192.0.2.2")]))
        XCTAssertEqual(locator.answer(DNSQuestion("b.example.com", .aaaa), records: []), .located([
            ResolvedHop(transport: .tcp, ip: "192.0.2.1", port: 5070, host: "a.example.com"),
            ResolvedHop(transport: .udp, ip: "192.0.2.2", port: 5060, host: "b.example.com"),
        ]))
    }

    func testASIPSTargetOnlyTakesTLS() {
        var locator = SIPServerLocator(target: SIPServerTarget(host: "example.com", secure: true), seed: 1)
        _ = locator.start()
        let naptrs = [
            naptr("example.com", order: 10, preference: 10, service: "SIP+D2U", to: "_sip._udp.example.com"),
            naptr("example.com", order: 20, preference: 10, service: "SIPS+D2T", to: "_sips._tcp.example.com"),
        ]
        XCTAssertEqual(locator.answer(DNSQuestion("example.com", .naptr), records: naptrs), .lookUp([DNSQuestion("_sips._tcp.example.com", .srv)]))
    }

    func testWithoutNAPTRsEachSupportedTransportIsTriedBySRVThenTheHostItself() {
        var locator = SIPServerLocator(target: SIPServerTarget(host: "example.com"), supported: [.udp, .tcp], seed: 1)
        _ = locator.start()
        XCTAssertEqual(locator.answer(DNSQuestion("example.com", .naptr), records: []),
            .lookUp([DNSQuestion("_sip._udp.example.com", .srv), DNSQuestion("_sip._tcp.example.com", .srv)]))
        XCTAssertNil(locator.answer(DNSQuestion("_sip._udp.example.com", .srv), records: []))
        // No SRV either: the host's own address on the default port and transport (§4.2).
        XCTAssertEqual(locator.answer(DNSQuestion("_sip._tcp.example.com", .srv), records: []),
            .lookUp([DNSQuestion("example.com", .a), DNSQuestion("example.com", .aaaa)]))
        XCTAssertNil(locator.answer(DNSQuestion("example.com", .a), records: [address("example.com", "203.0.113.4")]))
        XCTAssertEqual(locator.answer(DNSQuestion("example.com", .aaaa), records: []),
            .located([ResolvedHop(transport: .udp, ip: "203.0.113.4", port: 5060, host: "example.com")]))
    }

    func testSRVPrioritiesComeFirstAndTheDotTargetMeansNoService() {
        var locator = SIPServerLocator(target: SIPServerTarget(host: "example.com", transport: .udp), seed: 1)
        XCTAssertEqual(locator.start(), .lookUp([DNSQuestion("_sip._udp.example.com", .srv)]))
        let records = [
            srv("_sip._udp.example.com", 20, 0, 5060, "backup.example.com"), srv("_sip._udp.example.com", 10, 0, 5060, "main.example.com"),
            srv("_sip._udp.example.com", 30, 0, 0, ""), address("backup.example.com", "192.0.2.20"), address("main.example.com", "192.0.2.10"),
        ]
        XCTAssertEqual(locator.answer(DNSQuestion("_sip._udp.example.com", .srv), records: records), .located([
            ResolvedHop(transport: .udp, ip: "192.0.2.10", port: 5060, host: "main.example.com"),
            ResolvedHop(transport: .udp, ip: "192.0.2.20", port: 5060, host: "backup.example.com"),
        ]))
    }

    /// RFC 2782: within a priority, a record is chosen first in proportion to its weight.
    func testWeightsShareTheFirstChoiceInProportion() {
        var heavyFirst = 0
        let runs = 2_000
        for seed in 0..<UInt64(runs) {
            var locator = SIPServerLocator(target: SIPServerTarget(host: "example.com", transport: .udp), seed: seed)
            _ = locator.start()
            let records = [
                srv("_sip._udp.example.com", 10, 90, 5060, "heavy.example.com"), srv("_sip._udp.example.com", 10, 10, 5060, "light.example.com"),
                address("heavy.example.com", "192.0.2.1"), address("light.example.com", "192.0.2.2"),
            ]
            guard case .located(let hops) = locator.answer(DNSQuestion("_sip._udp.example.com", .srv), records: records) else {
                return XCTFail("no hops")
            }
            XCTAssertEqual(Set(hops.map(\.ip)), ["192.0.2.1", "192.0.2.2"])
            if hops.first?.ip == "192.0.2.1" { heavyFirst += 1 }
        }
        XCTAssertEqual(Double(heavyFirst) / Double(runs), 0.9, accuracy: 0.04)
    }

    func testAnswersToQuestionsNotAskedAreIgnored() {
        var locator = SIPServerLocator(target: SIPServerTarget(host: "example.com"), seed: 1)
        _ = locator.start()
        XCTAssertNil(locator.answer(DNSQuestion("evil.example", .naptr), records: []))
        XCTAssertNotNil(locator.answer(DNSQuestion("example.com", .naptr), records: []))
    }

    private func address(_ name: String, _ ip: String) -> DNSRecord { DNSRecord(name: name, ttl: 60, data: .address(ip)) }

    private func srv(_ name: String, _ priority: UInt16, _ weight: UInt16, _ port: UInt16, _ target: String) -> DNSRecord {
        DNSRecord(name: name, ttl: 60, data: .srv(priority: priority, weight: weight, port: port, target: target))
    }

    private func naptr(_ name: String, order: UInt16, preference: UInt16, service: String, to replacement: String) -> DNSRecord {
        DNSRecord(name: name, ttl: 60, data: .naptr(order: order, preference: preference, flags: "s", service: service, regexp: "", replacement: replacement))
    }
}
