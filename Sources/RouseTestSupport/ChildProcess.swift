public import Foundation
import Glibc

/// A child process started with `posix_spawn` and reaped with `waitpid`, for servers a test or the
/// benchmark runs beside Rouse (Kamailio). Not Foundation's `Process`: a server that closes the
/// descriptors it inherits as it starts (Kamailio does) looks to `Process` as if it had exited,
/// after which `Process` waits for it in a blocking `waitpid` that stalls every other `Process`.
/// Its standard output and error are appended to a file.
///
/// Threading: meant for one thread (the test's or the benchmark's).
public final class ChildProcess {
    /// Why the process could not be started.
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
        public init(description: String) { self.description = description }
    }

    public let processIdentifier: pid_t
    /// The exit status once reaped (128 + the signal when a signal ended it).
    public private(set) var exitStatus: Int32?

    /// Starts `arguments[0]` with `arguments` and `environment`; its output goes to `outputPath`.
    public init(_ arguments: [String], environment: [String: String], outputPath: String) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        func cStrings(_ strings: [String]) -> [UnsafeMutablePointer<CChar>?] { strings.map { strdup($0) } + [nil] }
        let argv = cStrings(arguments)
        let envp = cStrings(environment.map { "\($0.key)=\($0.value)" })
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        // Its own process group, so that stopping it stops the children it forks too (Kamailio's
        // workers outlive a main process that was killed, or that exited before they did).
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))
        posix_spawnattr_setpgroup(&attributes, 0)
        var pid: pid_t = 0
        let result = posix_spawn(&pid, arguments[0], &actions, &attributes, argv, envp)
        guard result == 0 else {
            throw Failure(description: "cannot start \(arguments[0]): \(String(cString: strerror(result)))")
        }
        processIdentifier = pid
    }

    deinit { stop() }

    /// True until the process has exited (and been reaped).
    public var isRunning: Bool {
        guard exitStatus == nil else { return false }
        var status: Int32 = 0
        let reaped = waitpid(processIdentifier, &status, WNOHANG)
        if reaped == processIdentifier || reaped < 0 {
            exitStatus = reaped < 0 ? -1 : ((status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f))
            return false
        }
        return true
    }

    /// Waits for the process to exit (blocking; for a short-lived command) and returns its status.
    @discardableResult
    public func waitForExit() -> Int32 {
        if let exitStatus { return exitStatus }
        var status: Int32 = 0
        while waitpid(processIdentifier, &status, 0) == -1, errno == EINTR {}
        let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        exitStatus = code
        return code
    }

    /// Sends SIGTERM to the process's group, waits up to `grace` seconds for the process, then
    /// SIGKILLs whatever of the group is still there (children that outlived it included);
    /// returns the exit status.
    @discardableResult
    public func stop(grace: TimeInterval = 10) -> Int32? {
        if isRunning {
            kill(-processIdentifier, SIGTERM)
            let deadline = Date().addingTimeInterval(grace)
            while isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
            kill(-processIdentifier, SIGKILL)
            while isRunning && Date() < deadline.addingTimeInterval(5) { Thread.sleep(forTimeInterval: 0.02) }
        }
        // Children left in the group after the process itself exited.
        kill(-processIdentifier, SIGKILL)
        return exitStatus
    }
}

/// Loopback ports for a child server: free on UDP and TCP at once when picked.
public enum FreePort {
    /// A port the kernel picks for TCP that is also free for UDP (tried a few times).
    public static func pick() throws -> UInt16 {
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
        throw ChildProcess.Failure(description: "no loopback port free for both UDP and TCP")
    }

    /// True when a TCP connection to the port is accepted (the connection is closed at once).
    public static func acceptsTCP(host: String, port: UInt16) -> Bool {
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
