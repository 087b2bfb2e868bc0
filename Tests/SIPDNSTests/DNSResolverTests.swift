import Foundation
import Glibc
import XCTest

@testable import SIPDNS

/// The resolver against a DNS server nobody here wrote: Debian's dnsmasq on a loopback port,
/// serving NAPTR, SRV and address records for a `.test` zone (scripts/deps.sh installs it).
final class DNSResolverTests: XCTestCase {
    private var server: DNSMasq!

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
        server = try DNSMasq(records: records)
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
        let silent = try UDPSocket()
        defer { silent.close() }
        let resolver = DNSResolver(servers: [("127.0.0.1", silent.port)], timeout: .milliseconds(300), attempts: 1)
        let result = await resolver.lookUp(DNSQuestion("trunk.test", .naptr))
        XCTAssertEqual(result, .failed("127.0.0.1: no answer in time"))
    }

    /// A UDP socket bound to a free loopback port.
    final class UDPSocket {
        let fd: Int32
        let port: UInt16

        init() throws {
            let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                    bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
                }
            }
            guard fd >= 0, bound else { throw POSIXError(.EADDRINUSE) }
            self.fd = fd
            port = UInt16(bigEndian: address.sin_port)
        }

        func close() { _ = Glibc.close(fd) }
    }

    /// dnsmasq in the foreground, answering only from its command line (no resolv.conf, no hosts
    /// file, no pid file, nothing written), authoritative for `.test`.
    final class DNSMasq {
        let port: UInt16
        private let process: Process

        init(records: [String]) throws {
            var lastError = ""
            for _ in 0..<5 {
                let probe = try UDPSocket()
                let port = probe.port
                probe.close()
                let process = Process()
                process.executableURL = URL(fileURLWithPath: "/usr/sbin/dnsmasq")
                process.arguments = [
                    "--keep-in-foreground", "--no-resolv", "--no-hosts", "--no-poll", "--conf-file=/dev/null", "--pid-file=",
                    "--listen-address=127.0.0.1", "--bind-interfaces", "--port=\(port)", "--local=/test/", "--log-facility=-",
                ] + records
                let errors = Pipe()
                process.standardError = errors
                process.standardOutput = FileHandle.nullDevice
                try process.run()
                // Ready when it answers; a port taken in between ends it at once.
                let resolver = DNSResolver(servers: [("127.0.0.1", port)], timeout: .milliseconds(500), attempts: 1, maximumCacheAge: 0)
                let deadline = Date().addingTimeInterval(30)
                while process.isRunning, Date() < deadline {
                    if case .records = resolver.lookUpNow(DNSQuestion("plain.test", .a)) {
                        self.port = port
                        self.process = process
                        return
                    }
                }
                if process.isRunning { process.terminate() }
                process.waitUntilExit()
                lastError = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            }
            throw NSError(domain: "dnsmasq", code: 1, userInfo: [NSLocalizedDescriptionKey: "dnsmasq did not start: \(lastError)"])
        }

        func stop() {
            process.terminate()
            process.waitUntilExit()
        }
    }
}
