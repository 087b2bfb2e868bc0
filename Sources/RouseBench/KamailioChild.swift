import Foundation
import Glibc
import RouseTestSupport

/// A Kamailio process tree the benchmark starts as its rival: the configuration in `bench/kamailio/`
/// rendered for this run (loopback port, children, database, usrloc `db_mode`, HA1s in memory or
/// read from PostgreSQL), run in the
/// foreground (`-DD -E`) with its own runtime folder, and stopped with SIGTERM (then SIGKILL) by
/// `stop()` or when the value goes away.
///
/// Kamailio reaches the bench's PostgreSQL over its Unix socket: the database URL names no host and
/// libpq takes the socket folder and port from `PGHOST`/`PGPORT`.
///
/// It runs as a `ChildProcess` (posix_spawn, not Foundation's `Process`: see there); its output
/// goes to a file in its runtime folder.
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
        /// HA1s loaded at start into a shared-memory hash table (`-A HA1_IN_MEMORY`: htable and
        /// pv_auth_check) instead of one auth_db SELECT per REGISTER.
        var credentialsInMemory = false
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
    var processIdentifier: pid_t { process.processIdentifier }
    private let process: ChildProcess
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
        ] + (settings.credentialsInMemory ? ["-A", "HA1_IN_MEMORY"] : [])
        var environment = ProcessInfo.processInfo.environment
        environment["PGHOST"] = socketFolder
        environment["PGPORT"] = databasePort
        process = try ChildProcess(arguments, environment: environment, outputPath: logPath)
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
    var isRunning: Bool { process.isRunning }

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
        process.stop()
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
                throw Failure(description: "kamailio exited with status \(process.exitStatus ?? -1):\n\(outputText.suffix(3_000))")
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
