import Foundation
import Glibc
import SIPDNS

/// A UDP socket bound to a free loopback port (a server that never answers, or a port to hand
/// out). Not thread-safe; close it when done.
public final class TestUDPSocket {
    public let fd: Int32
    public let port: UInt16

    public init() throws {
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

    public func close() { _ = Glibc.close(fd) }
}

/// Debian's dnsmasq in the foreground on a loopback port, answering only from its command line
/// (no resolv.conf, no hosts file, no pid file, nothing logged), authoritative for `.test`; its
/// records are dnsmasq options (`--srv-host=…`, `--naptr-record=…`, `--host-record=…`; the
/// readiness probe asks for `plain.test`, so give it a `--host-record=plain.test,…`). A
/// `ChildProcess`, not a Foundation `Process`: dnsmasq closes the descriptors it inherits, and
/// Foundation then stalls reaping the test's other children (a SIPp that exited stayed a zombie).
/// Stop it when done.
public final class TestDNSServer {
    public let port: UInt16
    private let process: ChildProcess
    private let folder: TemporaryFolder

    public init(records: [String]) throws {
        var lastError = ""
        for _ in 0..<5 {
            let probe = try TestUDPSocket()
            let port = probe.port
            probe.close()
            let folder = try TemporaryFolder(prefix: "rouse-dnsmasq")
            let output = folder.path + "/dnsmasq.log"
            let process = try ChildProcess(
                [
                    "/usr/sbin/dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts", "--no-poll", "--conf-file=/dev/null", "--pid-file=",
                    "--listen-address=127.0.0.1", "--bind-interfaces", "--port=\(port)", "--local=/test/", "--log-facility=/dev/null",
                ] + records,
                environment: ["PATH": "/usr/sbin:/usr/bin:/bin"], outputPath: output)
            // Ready when it answers; a port taken in between ends it at once.
            let resolver = DNSResolver(servers: [("127.0.0.1", port)], timeout: .milliseconds(500), attempts: 1, maximumCacheAge: 0)
            let deadline = Date().addingTimeInterval(30)
            while process.isRunning, Date() < deadline {
                if case .records = resolver.lookUpNow(DNSQuestion("plain.test", .a)) {
                    self.port = port
                    self.process = process
                    self.folder = folder
                    return
                }
            }
            _ = process.stop()
            lastError = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            folder.remove()
        }
        throw NSError(domain: "dnsmasq", code: 1, userInfo: [NSLocalizedDescriptionKey: "dnsmasq did not start: \(lastError)"])
    }

    /// Ends dnsmasq (waiting until it has gone) and removes its folder.
    public func stop() {
        _ = process.stop()
        folder.remove()
    }
}
