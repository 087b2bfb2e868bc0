import Crypto
import Foundation
import RouseTestSupport
import XCTest

/// A `rouse` process (or a third-party tool such as SIPp) started by a test, with its output
/// captured. Stops it (SIGTERM) on `stop()`.
final class RouseProcess {
    let process = Process()
    private let output = Pipe()
    private let errors = Pipe()
    private let collected = Collected()
    private let collectedErrors = Collected()
    private var input: Pipe?

    /// Lines written so far, both streams.
    final class Collected: @unchecked Sendable {
        // @unchecked: `lines` is only touched under `lock`.
        private let lock = NSLock()
        private var text = ""
        func append(_ chunk: String) { lock.lock(); text += chunk; lock.unlock() }
        var all: String { lock.lock(); defer { lock.unlock() }; return text }
    }

    /// The `rouse` executable built beside the test bundle.
    static var executable: URL {
        let beside = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("rouse")
        if FileManager.default.isExecutableFile(atPath: beside.path) { return beside }
        let bundle = Bundle.main.bundleURL.deletingLastPathComponent().appendingPathComponent("rouse")
        return bundle
    }

    /// - Parameter standardInput: text fed to the process's standard input, which is then closed
    ///   unless `keepsInputOpen`; nil leaves it unconnected (unless `keepsInputOpen`).
    /// - Parameter keepsInputOpen: standard input stays open for `send(_:)` until `closeInput()`.
    /// - Parameter executable: the program; `rouse` by default.
    init(
        arguments: [String], environment: [String: String], standardInput: String? = nil, keepsInputOpen: Bool = false,
        executable: URL = RouseProcess.executable, workingDirectory: URL? = nil
    ) throws {
        process.executableURL = executable
        process.currentDirectoryURL = workingDirectory
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("ROUSE_") }
        // The test run's secrets key, unless the test gives its own (or a key file).
        env["ROUSE_SECRETS_KEY"] = TestDatabase.secrets.current.hexText
        env.merge(environment) { $1 }
        if env["ROUSE_SECRETS_KEY_FILE"] != nil { env["ROUSE_SECRETS_KEY"] = nil }
        // A served HTTP API binds any free port unless the test asks for one, so that instances
        // started side by side (and by parallel test runs) never compete for 8080.
        if arguments.first == "serve", env["ROUSE_HTTP_LISTEN"] == nil { env["ROUSE_HTTP_LISTEN"] = "127.0.0.1:0" }
        process.environment = env
        process.standardOutput = output
        process.standardError = errors
        let input = standardInput != nil || keepsInputOpen ? Pipe() : nil
        if let input { process.standardInput = input }
        let collected = self.collected
        let collectedErrors = self.collectedErrors
        for pipe in [output, errors] {
            let isErrors = pipe === errors
            pipe.fileHandleForReading.readabilityHandler = { handle in
                let data = handle.availableData
                if !data.isEmpty {
                    let text = String(decoding: data, as: UTF8.self)
                    collected.append(text)
                    if isErrors { collectedErrors.append(text) }
                }
            }
        }
        try process.run()
        if let input {
            if let standardInput { input.fileHandleForWriting.write(Data(standardInput.utf8)) }
            if keepsInputOpen {
                // A write after the process has gone must fail, not end the test run.
                signal(SIGPIPE, SIG_IGN)
                self.input = input
            } else {
                try input.fileHandleForWriting.close()
            }
        }
    }

    /// Writes `text` to the standard input kept open (`keepsInputOpen`).
    func send(_ text: String) {
        try? input?.fileHandleForWriting.write(contentsOf: Data(text.utf8))
    }

    /// Closes the standard input kept open: the process reads its end.
    func closeInput() {
        try? input?.fileHandleForWriting.close()
        input = nil
    }

    var outputText: String { collected.all }

    /// What the process wrote to standard error alone.
    var errorText: String { collectedErrors.all }

    /// Waits until the output contains `text` or the process exits, up to `timeout`.
    func waitForOutput(containing text: String, timeout: TimeInterval = 60) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if outputText.contains(text) { return true }
            if !process.isRunning { return outputText.contains(text) }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return false
    }

    /// The first output line containing `text`, once it is there (log lines are written by the
    /// logger's own thread, so one may come after what was printed later); nil when the process
    /// exits or `timeout` passes first.
    func line(containing text: String, timeout: TimeInterval = 60) -> Substring? {
        guard waitForOutput(containing: text, timeout: timeout) else { return nil }
        return outputText.split(separator: "\n").first { $0.contains(text) }
    }

    /// The HTTP API's port, from the `http.listening` log line.
    func httpPort() throws -> UInt16 {
        let line = try XCTUnwrap(line(containing: "event=http.listening"), outputText)
        let address = try XCTUnwrap(line.split(separator: " ").first { $0.hasPrefix("listen=") })
        return try XCTUnwrap(UInt16(address.split(separator: ":").last ?? ""))
    }

    /// Waits for the process to exit, up to `timeout`; returns its status, or nil if still running.
    func waitForExit(timeout: TimeInterval = 60) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning, Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        if process.isRunning { return nil }
        drainPipes()
        return process.terminationStatus
    }

    private func drainPipes() {
        for pipe in [output, errors] {
            pipe.fileHandleForReading.readabilityHandler = nil
            let rest = pipe.fileHandleForReading.readDataToEndOfFile()
            if !rest.isEmpty {
                collected.append(String(decoding: rest, as: UTF8.self))
                if pipe === errors { collectedErrors.append(String(decoding: rest, as: UTF8.self)) }
            }
        }
    }

    /// Sends SIGTERM and waits for the exit status.
    func stop() -> Int32? {
        if process.isRunning { process.terminate() }
        return waitForExit()
    }

    deinit {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
    }
}

extension RouseProcess {
    /// Runs a `scripts/*-venv.sh` of the checkout at `repositoryRoot` (it makes or checks its Python
    /// venv) and returns the venv's python, the script's last line of output.
    static func venvPython(script: String, repositoryRoot: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["bash", repositoryRoot + "/scripts/" + script]
        process.currentDirectoryURL = URL(fileURLWithPath: repositoryRoot)
        let output = Pipe()
        process.standardOutput = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0, "scripts/\(script) failed")
        return String(decoding: data, as: UTF8.self).split(separator: "\n").last.map(String.init) ?? ""
    }
}
