import Foundation
import RouseTestSupport
import XCTest

@testable import SIPDNS

/// The resolver against a DNS server nobody here wrote: Debian's dnsmasq on a loopback port,
/// serving NAPTR, SRV and address records for a `.test` zone (scripts/deps.sh installs it).
final class DNSResolverTests: XCTestCase {
    private var server: TestDNSServer!

    override func setUpWithError() throws {
        var records = [
            "--naptr-record=trunk.test,10,50,s,SIP+D2T,,_sip._tcp.trunk.test",
            "--naptr-record=trunk.test,20,50,s,SIP+D2U,,_sip._udp.trunk.test",
            "--srv-host=_sip._tcp.trunk.test,hop1.trunk.test,5070,10,0",
            "--srv-host=_sip._tcp.trunk.test,hop2.trunk.test,5071,20,0",
            "--srv-host=_sip._udp.trunk.test,hop1.trunk.test,5060,10,0",
            "--host-record=hop1.trunk.test,127.0.0.11",
            "--host-record=hop2.trunk.test,127.0.0.12,::1",
            "--host-record=plain.test,127.0.0.13",
        ]
        // More SRV records than fit dnsmasq's UDP answers: the resolver must ask again over TCP.
        for index in 0..<80 { records.append("--srv-host=_sip._udp.big.test,host\(index).big.test,\(6000 + index),10,\(index)") }
        records.append("--host-record=host7.big.test,127.0.0.7")
        server = try TestDNSServer(records: records)
    }

    override func tearDown() {
        server?.stop()
        server = nil
    }

    func testATrunkIsLocatedThroughNAPTRSRVAndAddressRecords() async {
        let resolver = DNSResolver(servers: [("127.0.0.1", server.port)], timeout: .seconds(5))
        let location = await resolver.locate(SIPServerTarget(host: "trunk.test"))
        XCTAssertEqual(location.hops.map(\.description), [
            "127.0.0.11:5070;transport=tcp", "127.0.0.12:5071;transport=tcp", "[::1]:5071;transport=tcp", "127.0.0.11:5060;transport=udp",
        ])
        XCTAssertEqual(location.lookups.first.map { "\($0.question)" }, "NAPTR trunk.test")
        let plain = await resolver.locate(SIPServerTarget(host: "plain.test"))
        XCTAssertEqual(plain.hops.map(\.description), ["127.0.0.13:5060;transport=udp"], "no NAPTR, no SRV: the host itself")
    }

    func testAnUnknownNameLocatesNothingAndSaysSo() async {
        let resolver = DNSResolver(servers: [("127.0.0.1", server.port)], timeout: .seconds(5))
        let location = await resolver.locate(SIPServerTarget(host: "nowhere.test", port: 5060))
        XCTAssertEqual(location.hops, [])
        XCTAssertEqual(location.lookups.map(\.result), [.noSuchName, .noSuchName])
    }

    func testATruncatedAnswerIsAskedAgainOverTCP() async {
        let resolver = DNSResolver(servers: [("127.0.0.1", server.port)], timeout: .seconds(5))
        let result = await resolver.lookUp(DNSQuestion("_sip._udp.big.test", .srv))
        XCTAssertEqual(result.records.filter { $0.type == .srv }.count, 80)
    }

    func testASilentServerFailsAtItsDeadline() async throws {
        // A bound UDP socket that never answers.
        let silent = try TestUDPSocket()
        defer { silent.close() }
        let resolver = DNSResolver(servers: [("127.0.0.1", silent.port)], timeout: .milliseconds(300), attempts: 1)
        let result = await resolver.lookUp(DNSQuestion("trunk.test", .naptr))
        XCTAssertEqual(result, .failed("127.0.0.1: no answer in time"))
    }
}
