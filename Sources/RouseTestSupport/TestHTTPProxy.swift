public import Foundation

/// Debian's tinyproxy in the foreground on a loopback port: a real HTTP CONNECT proxy (nobody here
/// wrote it) for the `push_proxy` tests, with Basic authentication when `user`/`password` are
/// given, logging every CONNECT to a file in a folder of its own. A `ChildProcess`, not a
/// Foundation `Process` (servers that close inherited descriptors stall `Process`'s reaping).
/// Stop it when done (or let it go: `deinit` stops it). Meant for one thread.
public final class TestHTTPProxy {
    public let port: UInt16
    public let user: String?
    public let password: String?
    private let process: ChildProcess
    private let folder: TemporaryFolder
    private let logPath: String

    /// The proxy URL to give Rouse (`push_proxy`), with the credentials when there are some.
    public var url: String {
        guard let user, let password else { return "http://127.0.0.1:\(port)" }
        return "http://\(user):\(password)@127.0.0.1:\(port)"
    }

    public init(user: String? = nil, password: String? = nil) throws {
        self.user = user
        self.password = password
        var lastError = ""
        for _ in 0..<5 {
            let port = try FreePort.pick()
            // World-writable: tinyproxy run as root drops to nobody unless told otherwise, and must
            // still write its log here.
            let folder = try TemporaryFolder(prefix: "rouse-tinyproxy", mode: 0o777)
            let logPath = folder.file("tinyproxy.log")
            var config = [
                "Listen 127.0.0.1", "Port \(port)", "LogFile \"\(logPath)\"", "LogLevel Connect", "Timeout 60", "MaxClients 50",
                "DisableViaHeader Yes",
            ]
            if let user, let password { config.append("BasicAuth \(user) \(password)") }
            try (config.joined(separator: "\n") + "\n").write(toFile: folder.file("tinyproxy.conf"), atomically: true, encoding: .utf8)
            let output = folder.file("output.log")
            let process = try ChildProcess(
                ["/usr/bin/tinyproxy", "-d", "-c", folder.file("tinyproxy.conf")], environment: ["PATH": "/usr/sbin:/usr/bin:/bin"],
                outputPath: output)
            let deadline = Date().addingTimeInterval(30)
            while process.isRunning, Date() < deadline {
                if FreePort.acceptsTCP(host: "127.0.0.1", port: port) {
                    self.port = port
                    self.process = process
                    self.folder = folder
                    self.logPath = logPath
                    return
                }
                Thread.sleep(forTimeInterval: 0.02)
            }
            _ = process.stop()
            lastError = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            folder.remove()
        }
        throw ChildProcess.Failure(description: "tinyproxy did not start: \(lastError)")
    }

    deinit { stop() }

    /// tinyproxy's log as written so far.
    public func log() -> String {
        (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
    }

    /// The `host:port` of each CONNECT the proxy was asked for, in order ("CONNECT 127.0.0.1:4431").
    public func connects() -> [String] {
        log().split(separator: "\n").compactMap { line in
            guard let range = line.range(of: ": CONNECT ") else { return nil }
            return line[range.upperBound...].split(separator: " ").first.map(String.init)
        }
    }

    /// Waits until the proxy has logged `count` CONNECTs to `target` (`host:port`); returns them all.
    @discardableResult
    public func waitForConnects(to target: String, count: Int = 1, timeout: TimeInterval = 30) -> [String] {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let all = connects()
            if all.filter({ $0 == target }).count >= count { return all }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return connects()
    }

    /// Ends tinyproxy (waiting until it has gone) and removes its folder.
    public func stop() {
        _ = process.stop()
        folder.remove()
    }
}
