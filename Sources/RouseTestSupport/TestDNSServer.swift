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

/// Debian's dnsmasq on a loopback port, answering only from its command line (no resolv.conf, no
/// hosts file, nothing logged), authoritative for `.test`; its records are dnsmasq options
/// (`--srv-host=…`, `--naptr-record=…`, `--host-record=…`; the readiness probe asks for
/// `plain.test`, so give it a `--host-record=plain.test,…`). It runs as a daemon, its pid file in
/// a temporary folder: a dnsmasq kept as a Foundation child stops Foundation from reaping the
/// test's other children (a SIPp that exited stayed a running zombie). Stop it when done.
public final class TestDNSServer {
    public let port: UInt16
    private let pid: pid_t
    private let folder: TemporaryFolder

    public init(records: [String]) throws {
        var lastError = ""
        for _ in 0..<5 {
            let probe = try TestUDPSocket()
            let port = probe.port
            probe.close()
            let folder = try TemporaryFolder(prefix: "rouse-dnsmasq")
            let pidFile = folder.path + "/dnsmasq.pid"
            let launcher = Process()
            launcher.executableURL = URL(fileURLWithPath: "/usr/sbin/dnsmasq")
            launcher.arguments = [
                "--no-resolv", "--no-hosts", "--no-poll", "--conf-file=/dev/null", "--pid-file=\(pidFile)", "--listen-address=127.0.0.1",
                "--bind-interfaces", "--port=\(port)", "--local=/test/", "--log-facility=/dev/null",
            ] + records
            let errors = Pipe()
            launcher.standardError = errors
            launcher.standardOutput = FileHandle.nullDevice
            try launcher.run()
            // The launcher returns once the daemon runs (or could not start: a port taken in between).
            launcher.waitUntilExit()
            lastError = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            if launcher.terminationStatus == 0,
                let text = try? String(contentsOfFile: pidFile, encoding: .utf8), let pid = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines))
            {
                let resolver = DNSResolver(servers: [("127.0.0.1", port)], timeout: .milliseconds(500), attempts: 1, maximumCacheAge: 0)
                let deadline = Date().addingTimeInterval(30)
                while Date() < deadline {
                    if case .records = resolver.lookUpNow(DNSQuestion("plain.test", .a)) {
                        self.port = port
                        self.pid = pid
                        self.folder = folder
                        return
                    }
                }
                kill(pid, SIGTERM)
            }
            folder.remove()
        }
        throw NSError(domain: "dnsmasq", code: 1, userInfo: [NSLocalizedDescriptionKey: "dnsmasq did not start: \(lastError)"])
    }

    /// Ends the daemon (waiting, at most 10 s, until it has gone) and removes its folder.
    public func stop() {
        kill(pid, SIGTERM)
        let deadline = Date().addingTimeInterval(10)
        while isAlive, Date() < deadline { usleep(20_000) }
        folder.remove()
    }

    /// Whether the daemon still runs: its process exists and is no zombie (init reaps it later).
    private var isAlive: Bool {
        guard kill(pid, 0) == 0, let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return false }
        return stat.split(separator: ")").last?.split(separator: " ").first != "Z"
    }
}
