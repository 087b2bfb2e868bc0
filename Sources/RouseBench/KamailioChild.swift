import Foundation
import Glibc

/// A Kamailio process tree the benchmark starts as its rival: the configuration in `bench/kamailio/`
/// rendered for this run (loopback port, children, database, usrloc `db_mode`), run in the
/// foreground (`-DD -E`) with its own runtime folder, and stopped with SIGTERM (then SIGKILL) by
/// `stop()` or when the value goes away.
///
/// Kamailio reaches the bench's PostgreSQL over its Unix socket: the database URL names no host and
/// libpq takes the socket folder and port from `PGHOST`/`PGPORT`.
///
/// It is started with `posix_spawn` and reaped with `waitpid`, not with Foundation's `Process`:
/// Kamailio closes the descriptors it inherits as it starts, which `Process` takes for the child's
/// exit, after which it waits for it in a blocking `waitpid` that stalls every other `Process`.
/// Its output goes to a file in its runtime folder.
///
/// Threading: meant for the one thread that runs the benchmark.
final class KamailioChild {
    /// How the rival is set up.
    struct Settings {
        /// The `kamailio` executable.
        var executable = "/usr/sbin/kamailio"
        /// The configuration template (`bench/kamailio/kamailio.cfg`).
        var template: String
        /// libpq conninfo of Kamailio's database (`subscriber` and `location` tables).
        var databaseConninfo: String
        /// usrloc `db_mode`: 1 write-through, 0 memory only.
        var databaseMode = 1
        /// UDP receiver processes, and TCP workers.
        var children = 4
        /// Shared memory, in MiB (mapped at start, resident only as it is used).
        var sharedMemoryMiB = 1_024
        /// Private memory per process, in MiB.
        var privateMemoryMiB = 16
    }

    /// Why Kamailio could not be started or did not come up.
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    let settings: Settings
    /// Where it listens, on UDP and TCP alike.
    let host = "127.0.0.1"
    let port: UInt16
    /// The main Kamailio process (its children are its own).
    let processIdentifier: pid_t
    private var exitStatus: Int32?
    private let runDirectory: String
    private let logPath: String

    /// Renders the configuration, starts Kamailio and waits (up to 30 s) until it answers OPTIONS
    /// over UDP and accepts a TCP connection.
    init(_ settings: Settings) throws {
        self.settings = settings
        guard FileManager.default.isExecutableFile(atPath: settings.executable) else {
            throw Failure(description: "no kamailio executable at \(settings.executable) (apt-get install kamailio kamailio-postgres-modules)")
        }
        guard let template = try? String(contentsOfFile: settings.template, encoding: .utf8) else {
            throw Failure(description: "cannot read the Kamailio configuration template \(settings.template)")
        }
        let fields = ConninfoFields(settings.databaseConninfo)
        guard let socketFolder = fields.value("host"), let databasePort = fields.value("port"), let database = fields.value("dbname")
        else {
            throw Failure(description: "the Kamailio database conninfo must name host (a socket folder), port and dbname")
        }
        let user = fields.value("user") ?? "postgres"
        port = try FreePort.pick()
        runDirectory = NSTemporaryDirectory() + "rouse-bench-kamailio-\(getpid())-\(port)"
        try FileManager.default.createDirectory(atPath: runDirectory, withIntermediateDirectories: true)

        var secretBytes = SystemRandomNumberGenerator()
        let secret = (0..<4).map { _ in String(secretBytes.next() as UInt64, radix: 16) }.joined()
        let rendered = template
            .replacingOccurrences(of: "@LISTEN_HOST@", with: host)
            .replacingOccurrences(of: "@PORT@", with: String(port))
            .replacingOccurrences(of: "@CHILDREN@", with: String(settings.children))
            .replacingOccurrences(of: "@DB_URL@", with: "postgres://\(user)@/\(database)")
            .replacingOccurrences(of: "@DB_MODE@", with: String(settings.databaseMode))
            .replacingOccurrences(of: "@SECRET@", with: secret)
        let configPath = runDirectory + "/kamailio.cfg"
        try rendered.write(toFile: configPath, atomically: true, encoding: .utf8)

        logPath = runDirectory + "/kamailio.log"
        let arguments = [
            settings.executable, "-DD", "-E", "-f", configPath, "-m", String(settings.sharedMemoryMiB), "-M", String(settings.privateMemoryMiB),
            "-Y", runDirectory, "-w", runDirectory,
        ]
        var environment = ProcessInfo.processInfo.environment
        environment["PGHOST"] = socketFolder
        environment["PGPORT"] = databasePort
        processIdentifier = try Self.spawn(arguments, environment: environment.map { "\($0.key)=\($0.value)" }, output: logPath)
        do {
            try waitUntilServing(timeout: 30)
        } catch {
            stop()
            throw error
        }
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: runDirectory)
    }

    /// What Kamailio has written to its log so far (the last 100,000 characters).
    var outputText: String {
        String((try? String(contentsOfFile: logPath, encoding: .utf8))?.suffix(100_000) ?? "")
    }

    /// True until the main process has exited (and been reaped).
    var isRunning: Bool {
        guard exitStatus == nil else { return false }
        var status: Int32 = 0
        let reaped = waitpid(processIdentifier, &status, WNOHANG)
        if reaped == processIdentifier || reaped < 0 {
            exitStatus = reaped < 0 ? -1 : ((status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f))
            return false
        }
        return true
    }

    /// CPU seconds of the main process and every child so far.
    func cpuSeconds() -> Double? { ProcessTree.cpuSeconds(of: processIdentifier) }

    /// Proportional set size of the whole tree (shared memory counted once), in bytes.
    func memoryBytes() -> Double? { ProcessTree.proportionalBytes(of: processIdentifier) }

    /// `kamailio -v`'s first line, e.g. "version: kamailio 5.6.3 (x86_64/linux)".
    static func version(executable: String) -> String? {
        let probe = Process()
        probe.executableURL = URL(fileURLWithPath: executable)
        probe.arguments = ["-v"]
        let pipe = Pipe()
        probe.standardOutput = pipe
        probe.standardError = pipe
        guard (try? probe.run()) != nil else { return nil }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        probe.waitUntilExit()
        return String(decoding: data, as: UTF8.self).split(separator: "\n").first.map {
            $0.replacingOccurrences(of: "version: ", with: "").trimmingCharacters(in: .whitespaces)
        }
    }

    /// Sends SIGTERM (Kamailio's main process stops its children), waits up to 10 s, then SIGKILLs
    /// what is left of the tree; returns the main process's exit status.
    @discardableResult
    func stop() -> Int32? {
        if isRunning {
            let tree = ProcessTree.members(of: processIdentifier)
            kill(processIdentifier, SIGTERM)
            let deadline = Date().addingTimeInterval(10)
            while isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
            for pid in tree where kill(pid, 0) == 0 { kill(pid, SIGKILL) }
            while isRunning && Date() < deadline.addingTimeInterval(5) { Thread.sleep(forTimeInterval: 0.02) }
        }
        return exitStatus
    }

    /// Starts `arguments[0]` with its standard output and error appended to `output`.
    private static func spawn(_ arguments: [String], environment: [String], output: String) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        func cStrings(_ strings: [String]) -> [UnsafeMutablePointer<CChar>?] { strings.map { strdup($0) } + [nil] }
        let argv = cStrings(arguments)
        let envp = cStrings(environment)
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, arguments[0], &actions, nil, argv, envp)
        guard result == 0 else {
            throw Failure(description: "cannot start \(arguments[0]): \(String(cString: strerror(result)))")
        }
        return pid
    }

    private func waitUntilServing(timeout: TimeInterval) throws {
        let deadline = Date().addingTimeInterval(timeout)
        let probe = try UDPSocket(connectingTo: host, port: port)
        defer { probe.close() }
        let request = Array(
            ("OPTIONS sip:\(host):\(port) SIP/2.0\r\nVia: SIP/2.0/UDP \(host):\(probe.localPort);rport;branch=z9hG4bK.kprobe\r\n"
                + "Max-Forwards: 70\r\nFrom: <sip:probe@\(host)>;tag=p\r\nTo: <sip:\(host)>\r\nCall-ID: kprobe@rouse-bench\r\n"
                + "CSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n").utf8)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 8)
        defer { buffer.deallocate() }
        while Date() < deadline {
            guard isRunning else {
                throw Failure(description: "kamailio exited with status \(exitStatus ?? -1):\n\(outputText.suffix(3_000))")
            }
            _ = try probe.send(request)
            try probe.waitReadable(milliseconds: 200)
            if let length = try probe.receive(into: buffer), length > 12,
                String(decoding: UnsafeRawBufferPointer(rebasing: buffer[0..<12]), as: UTF8.self) == "SIP/2.0 200 "
            {
                if FreePort.acceptsTCP(host: host, port: port) { return }
            }
        }
        throw Failure(description: "kamailio did not answer OPTIONS on \(host):\(port) within \(Int(timeout)) s:\n\(outputText.suffix(3_000))")
    }
}

/// Loopback ports for a child server: free on UDP and TCP at once when picked.
enum FreePort {
    /// A port the kernel picks for TCP that is also free for UDP (tried a few times).
    static func pick() throws -> UInt16 {
        for _ in 0..<20 {
            let tcp = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            let udp = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
            defer {
                close(tcp)
                close(udp)
            }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = 0
            guard bind(socketAddress: &address, to: tcp) else { continue }
            var bound = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &bound) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(tcp, $0, &length) } }
            address.sin_port = bound.sin_port
            if bind(socketAddress: &address, to: udp) { return UInt16(bigEndian: bound.sin_port) }
        }
        throw KamailioChild.Failure(description: "no loopback port free for both UDP and TCP")
    }

    /// True when a TCP connection to the port is accepted (the connection is closed at once).
    static func acceptsTCP(host: String, port: UInt16) -> Bool {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr(host)
        address.sin_port = port.bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }

    private static func bind(socketAddress: inout sockaddr_in, to descriptor: Int32) -> Bool {
        withUnsafePointer(to: &socketAddress) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }
}
