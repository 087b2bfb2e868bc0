import Crypto
import Foundation
import RouseTestSupport
import Storage
import XCTest

/// The shell examples of README.md, docs/ and deploy/ that are marked `<!-- doc-test -->`, run as
/// written against a live `rouse serve` on a test database, so the documentation stays true
/// (docs/testing.md, "Examples that are run").
///
/// Each Markdown file with marked blocks gets its own database, `rouse serve` and APNs sandbox
/// stand-in; its `<!-- doc-test-setup … -->` comment runs before the server starts (so the server
/// starts with what the page assumes), then its marked blocks run in order, in one `/bin/sh -e`
/// (so variables carry from one block to the next). Before running, `8080`
/// becomes the server's HTTP port and `5060` its SIP UDP port. A block passes when every command
/// succeeds and each output line it shows as `# {…}`, `# HTTP/…` or `# SIP/2.0 …` is found in its
/// output, `…` matching any text.
final class DocsExamplesTests: XCTestCase {
    /// One marked block: where it is, its text, and the output lines it promises.
    struct Example {
        let file: String
        let line: Int
        let script: String
        let expectedOutput: [String]
    }

    /// A Markdown file's setup comment and marked blocks, in order.
    struct MarkedFile {
        var setup = ""
        var examples: [Example] = []
    }

    struct MarkupProblem: Error, CustomStringConvertible {
        let description: String
    }

    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static let marker = "<!-- doc-test -->"
    static let setupMarker = "<!-- doc-test-setup"

    // MARK: Reading the Markdown

    static func parse(_ text: String, file: String) throws -> MarkedFile {
        let lines = text.components(separatedBy: "\n")
        var marked = MarkedFile()
        var index = 0
        while index < lines.count {
            let trimmed = lines[index].trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix(setupMarker) {
                var body: [String] = []
                index += 1
                while index < lines.count, lines[index].trimmingCharacters(in: .whitespaces) != "-->" {
                    body.append(lines[index])
                    index += 1
                }
                guard index < lines.count else { throw MarkupProblem(description: "\(file): doc-test-setup comment never closed") }
                marked.setup += body.joined(separator: "\n") + "\n"
            } else if trimmed == marker {
                let markerLine = index + 1
                index += 1
                while index < lines.count, lines[index].trimmingCharacters(in: .whitespaces).isEmpty { index += 1 }
                guard index < lines.count, lines[index].trimmingCharacters(in: .whitespaces).hasPrefix("```") else {
                    throw MarkupProblem(description: "\(file):\(markerLine): \(marker) is not followed by a code block")
                }
                let indent = lines[index].prefix { $0 == " " }.count
                let fenceLine = index + 1
                var body: [String] = []
                index += 1
                while index < lines.count, lines[index].trimmingCharacters(in: .whitespaces) != "```" {
                    let line = lines[index]
                    let leading = min(indent, line.prefix { $0 == " " }.count)
                    body.append(String(line.dropFirst(leading)))
                    index += 1
                }
                guard index < lines.count else { throw MarkupProblem(description: "\(file):\(fenceLine): code block never closed") }
                let expected = body.compactMap { line -> String? in
                    let trimmed = line.trimmingCharacters(in: .whitespaces)
                    guard ["# {", "# HTTP/", "# SIP/2.0 "].contains(where: { trimmed.hasPrefix($0) }) else { return nil }
                    return String(trimmed.dropFirst(2))
                }
                marked.examples.append(
                    Example(file: file, line: fenceLine, script: body.joined(separator: "\n"), expectedOutput: expected))
            }
            index += 1
        }
        return marked
    }

    /// `8080` and `5060`, as whole numbers, become the test server's HTTP and SIP ports.
    static func substitutePorts(_ text: String, http: Int, sip: Int) -> String {
        var result = text
        for (documented, actual) in [("8080", http), ("5060", sip)] {
            result = result.replacingOccurrences(
                of: "(?<![0-9])\(documented)(?![0-9])", with: String(actual), options: .regularExpression)
        }
        return result
    }

    /// True when some line of `output` contains `pattern`, `…` in it matching any text.
    static func output(_ output: String, shows pattern: String) -> Bool {
        let parts = pattern.components(separatedBy: "…").map { NSRegularExpression.escapedPattern(for: $0) }
        guard let regex = try? NSRegularExpression(pattern: parts.joined(separator: ".*?")) else { return false }
        return output.components(separatedBy: "\n").contains { line in
            regex.firstMatch(in: line, range: NSRange(line.startIndex..., in: line)) != nil
        }
    }

    /// Every Markdown file a newcomer reads: README.md, docs/ and deploy/.
    static func documentationFiles() throws -> [String] {
        var files = ["README.md"]
        for folder in ["docs", "deploy"] {
            let names = try FileManager.default.contentsOfDirectory(atPath: repositoryRoot.appendingPathComponent(folder).path)
            files += names.filter { $0.hasSuffix(".md") }.sorted().map { "\(folder)/\($0)" }
        }
        return files
    }

    // MARK: Tests

    func testMarkedBlocksAreFoundAndPortsReplaced() throws {
        let text = """
            intro
            <!-- doc-test-setup
            rouse domain add example.com
            -->
            <!-- doc-test -->
            ```sh
            curl -fsS http://127.0.0.1:8080/health
            # {"database":"reachable","pushApps":…,"status":"ok"}
            ```

            ```sh
            not marked
            ```
               <!-- doc-test -->
               ```sh
               echo 15060 5060
               # HTTP/1.1 200 OK
               ```
            """
        let marked = try Self.parse(text, file: "x.md")
        XCTAssertEqual(marked.setup, "rouse domain add example.com\n")
        XCTAssertEqual(marked.examples.count, 2)
        XCTAssertEqual(marked.examples[0].line, 6)
        XCTAssertEqual(marked.examples[0].expectedOutput, [#"{"database":"reachable","pushApps":…,"status":"ok"}"#])
        XCTAssertEqual(marked.examples[1].script, "echo 15060 5060\n# HTTP/1.1 200 OK")
        XCTAssertEqual(
            Self.substitutePorts(marked.examples[0].script + marked.examples[1].script, http: 41000, sip: 42000),
            "curl -fsS http://127.0.0.1:41000/health\n# {\"database\":\"reachable\",\"pushApps\":…,\"status\":\"ok\"}"
                + "echo 15060 42000\n# HTTP/1.1 200 OK")
        XCTAssertTrue(Self.output(#"x{"database":"reachable","pushApps":0,"status":"ok"}"#, shows: marked.examples[0].expectedOutput[0]))
        XCTAssertFalse(Self.output(#"{"database":"unreachable"}"#, shows: marked.examples[0].expectedOutput[0]))
        XCTAssertThrowsError(try Self.parse("<!-- doc-test -->\nplain text\n", file: "y.md"))
    }

    /// The README's OPTIONS check and the docs' curl examples (posting, admin API, metrics) and
    /// `rouse` commands, each file against its own server.
    func testMarkedExamplesRunAsWritten() throws {
        var ran: [String] = []
        for file in try Self.documentationFiles() {
            let text = try String(contentsOf: Self.repositoryRoot.appendingPathComponent(file), encoding: .utf8)
            let marked = try Self.parse(text, file: file)
            guard !marked.examples.isEmpty else { continue }
            try run(marked, file: file)
            ran.append(file)
        }
        for required in ["README.md", "docs/http-api.md", "docs/operators.md", "docs/app-builders.md"] {
            XCTAssertTrue(ran.contains(required), "\(required) has no doc-test blocks")
        }
    }

    // MARK: Running

    func run(_ marked: MarkedFile, file: String) throws {
        let database = try TestDatabase()
        defer { database.drop() }
        try Migrator.migrate(try database.connect())

        let workDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("rouse-doc-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: workDirectory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: workDirectory) }
        // The files the examples name: an APNs key and a Firebase service account.
        let key = try PushStandIn.makeAPNsKey()
        try FileManager.default.copyItem(
            atPath: key.keyPath, toPath: workDirectory.appendingPathComponent("AuthKey_KEY1234567.p8").path)
        let account = try PushStandIn.makeFCMServiceAccount(tokenURI: "https://127.0.0.1:1/token")
        defer { key.remove(); account.remove() }
        try FileManager.default.copyItem(atPath: account.path, toPath: workDirectory.appendingPathComponent("service-account.json").path)
        let apns = try PushStandIn.apns(keys: ["KEY1234567": key.keyPath], teamID: "ABCDE12345", environment: .sandbox)
        defer { apns.stop() }

        let settings = [
            "ROUSE_DATABASE_URL": database.conninfo,
            "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0",
            "ROUSE_HTTP_LISTEN": "127.0.0.1:0",
            "ROUSE_APNS_SANDBOX_URL": apns.baseURL,
            "ROUSE_APNS_PRODUCTION_URL": "https://127.0.0.1:1",
            "ROUSE_FCM_URL": "https://127.0.0.1:1",
            "ROUSE_PUSH_CA_FILE": apns.caFile,
            "ROUSE_SECRETS_KEY": TestDatabase.secrets.current.hexText,
        ]
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("ROUSE_") }
        environment.merge(settings) { $1 }
        environment["PATH"] = RouseProcess.executable.deletingLastPathComponent().path + ":" + (environment["PATH"] ?? "/usr/bin:/bin")
        // What the examples' tools put in a temporary directory goes with the work directory.
        let scratch = workDirectory.appendingPathComponent(".tmp")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        environment["TMPDIR"] = scratch.path
        if !marked.setup.isEmpty {
            let (status, stdout, stderr) = try Self.runShell("set -e\n" + marked.setup, in: workDirectory, environment: environment)
            guard status == 0 else {
                XCTFail("\(file): the doc-test-setup comment failed (exit status \(status)):\n\(marked.setup)\n\(stdout)\n\(stderr)")
                return
            }
        }

        let server = try RouseProcess(arguments: ["serve"], environment: settings)
        defer { _ = server.stop() }
        XCTAssertTrue(server.waitForOutput(containing: "serving HTTP on"), server.outputText)
        let output = server.outputText
        let sipPort = try XCTUnwrap(Self.port(after: "serving SIP on udp:127.0.0.1:", in: output), output)
        let httpPort = try XCTUnwrap(Self.port(after: "serving HTTP on 127.0.0.1:", in: output), output)

        var script = "set -e\n"
        for (index, example) in marked.examples.enumerated() {
            script += "\nprintf '\\n@@doc-test \(index)@@\\n'\n"
            script += Self.substitutePorts(example.script, http: httpPort, sip: sipPort) + "\n"
        }
        script += "\nprintf '\\n@@doc-test end@@\\n'\n"

        let (status, stdout, stderr) = try Self.runShell(script, in: workDirectory, environment: environment)

        let parts = stdout.components(separatedBy: "\n@@doc-test ")
        var outputs: [Int: String] = [:]
        var reached = -1
        for part in parts.dropFirst() {
            guard let close = part.range(of: "@@") else { continue }
            let label = String(part[..<close.lowerBound])
            if let index = Int(label) {
                outputs[index] = String(part[close.upperBound...])
                reached = index
            }
        }
        guard status == 0, stdout.contains("@@doc-test end@@") else {
            let failed = marked.examples[max(reached, 0)]
            XCTFail(
                """
                \(file): the example at line \(failed.line) failed (exit status \(status)):
                \(failed.script)
                --- its output:
                \(outputs[max(reached, 0)] ?? stdout)
                --- standard error:
                \(stderr)
                """)
            return
        }
        for (index, example) in marked.examples.enumerated() {
            let shown = outputs[index] ?? ""
            for expected in example.expectedOutput where !Self.output(shown, shows: expected) {
                XCTFail("\(file):\(example.line): the output does not show \(expected)\n--- the output:\n\(shown)")
            }
        }
    }

    static func port(after prefix: String, in output: String) -> Int? {
        guard let range = output.range(of: prefix) else { return nil }
        return Int(output[range.upperBound...].prefix { $0.isNumber })
    }

    /// Runs `script` with `/bin/sh`, standard input empty; gives up (and kills it) after 120 s.
    static func runShell(_ script: String, in directory: URL, environment: [String: String]) throws -> (Int32, String, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", script]
        process.currentDirectoryURL = directory
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        let outputFile = directory.appendingPathComponent(".stdout")
        let errorFile = directory.appendingPathComponent(".stderr")
        _ = FileManager.default.createFile(atPath: outputFile.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errorFile.path, contents: nil)
        let output = try FileHandle(forWritingTo: outputFile)
        let errors = try FileHandle(forWritingTo: errorFile)
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let deadline = Date().addingTimeInterval(120)
        while process.isRunning, Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        try output.close()
        try errors.close()
        let stdout = (try? String(contentsOf: outputFile, encoding: .utf8)) ?? ""
        let stderr = (try? String(contentsOf: errorFile, encoding: .utf8)) ?? ""
        return (process.terminationStatus, stdout, stderr)
    }
}
