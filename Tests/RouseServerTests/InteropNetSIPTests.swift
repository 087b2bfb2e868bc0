import CallRouting
import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import SIPTransport
import Storage
import XCTest

/// A phone on a third-party SIP stack registers with `rouse serve` and unregisters again, over UDP
/// and TCP on loopback: Perl's Net::SIP (Debian libnet-sip-perl, installed by scripts/deps.sh),
/// driven by `Tests/Interop/netsip/register.pl`.
///
/// Net::SIP answers MD5 challenges only; with `digest_algorithms` set to offer SHA-256 as well it
/// skips the challenges it cannot answer and answers the MD5 one.
final class InteropNetSIPTests: XCTestCase {
    var bed: InteropBed!

    static let aor = AddressOfRecord(number: "1001", domain: InteropBed.domain)
    static let password = InteropBed.passwords["1001"]!

    /// The Net::SIP phone, beside this file's folder.
    static var script: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Interop/netsip/register.pl").path
    }

    override func setUpWithError() throws {
        bed = try InteropBed()
        try bed.startRouse()
    }

    override func tearDown() {
        bed?.tearDown()
    }

    func testNetSIPPhoneRegistersAndUnregistersOverUDP() throws {
        try registerAndUnregister(over: .udp)
    }

    func testNetSIPPhoneRegistersAndUnregistersOverTCP() throws {
        try registerAndUnregister(over: .tcp)
    }

    /// Runs the phone: after its 200 the binding must be in PostgreSQL with the phone's transport
    /// and port; after the unregister's 200 it must be gone.
    func registerAndUnregister(over transport: SIPTransportKind) throws {
        let port = try bed.port(transport)
        let phone = Process()
        phone.executableURL = URL(fileURLWithPath: "/usr/bin/perl")
        phone.environment = ProcessInfo.processInfo.environment.merging(bed.scratchEnvironment) { $1 }
        phone.arguments = [
            Self.script, "--registrar", "127.0.0.1:\(port)", "--transport", transport.rawValue,
            "--user", Self.aor.number, "--domain", Self.aor.domain, "--password", Self.password, "--timeout", "30",
        ]
        let input = Pipe()
        let output = Pipe()
        let collected = RouseProcess.Collected()
        phone.standardInput = input
        phone.standardOutput = output
        phone.standardError = output
        output.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            if !data.isEmpty { collected.append(String(decoding: data, as: UTF8.self)) }
        }
        try phone.run()
        defer {
            if phone.isRunning {
                phone.terminate()
                phone.waitUntilExit()
            }
            output.fileHandleForReading.readabilityHandler = nil
        }

        let registered = try XCTUnwrap(
            waitForLine(startingWith: "registered ", in: collected, while: phone, timeout: 60),
            "Net::SIP did not register; it said:\n\(collected.all)\nrouse said:\n\(bed.rouse?.outputText ?? "")")
        let contact = try XCTUnwrap(registered.components(separatedBy: "contact=").last)
        let phonePort = try XCTUnwrap(contact.split(separator: ":").last?.split(separator: ";").first)

        // A 200 means the binding is in PostgreSQL already.
        let stored = try bed.bindings(Self.aor.number)
        XCTAssertEqual(stored.count, 1, "\(stored)")
        XCTAssertEqual(stored.first?.flow.transport, transport)
        XCTAssertTrue(stored.first?.contact.contains("127.0.0.1:\(phonePort)") == true, "\(stored.first?.contact ?? "none") vs \(contact)")

        input.fileHandleForWriting.write(Data("go\n".utf8))
        try input.fileHandleForWriting.close()
        let deadline = Date().addingTimeInterval(60)
        while phone.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        XCTAssertFalse(phone.isRunning, "Net::SIP did not finish within 60 s:\n\(collected.all)")
        guard !phone.isRunning else { return }
        XCTAssertEqual(phone.terminationStatus, 0, collected.all)
        XCTAssertNotNil(waitForLine(startingWith: "unregistered", in: collected, while: phone, timeout: 5), collected.all)
        XCTAssertEqual(try bed.bindings(Self.aor.number).count, 0, "the unregister (Expires: 0) removes the binding from PostgreSQL")
    }

    /// Two Net::SIP phones: 1002 registers and answers, 1001 calls it through Rouse (answering the
    /// 407), the call is answered and hung up with BYE through Rouse's Record-Route.
    func testNetSIPPhonesCallEachOtherThroughRouse() throws {
        let port = try bed.port(.udp)
        let script = URL(fileURLWithPath: Self.script).deletingLastPathComponent().appendingPathComponent("call.pl").path
        func phone(_ arguments: [String]) throws -> (Process, RouseProcess.Collected) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/perl")
            process.environment = ProcessInfo.processInfo.environment.merging(bed.scratchEnvironment) { $1 }
            process.arguments = [script, "--proxy", "127.0.0.1:\(port)", "--domain", "example.com", "--timeout", "30"] + arguments
            let output = Pipe()
            let collected = RouseProcess.Collected()
            process.standardOutput = output
            process.standardError = output
            output.fileHandleForReading.readabilityHandler = { handle in
                let data = handle.availableData
                if !data.isEmpty { collected.append(String(decoding: data, as: UTF8.self)) }
            }
            try process.run()
            return (process, collected)
        }
        let (callee, calleeSaid) = try phone(["--role", "callee", "--user", "1002", "--password", InteropBed.passwords["1002"]!])
        defer { if callee.isRunning { callee.terminate(); callee.waitUntilExit() } }
        XCTAssertNotNil(waitForLine(startingWith: "registered", in: calleeSaid, while: callee, timeout: 60), calleeSaid.all)
        let (caller, callerSaid) = try phone(["--role", "caller", "--user", "1001", "--password", Self.password, "--to", "1002"])
        defer { if caller.isRunning { caller.terminate(); caller.waitUntilExit() } }
        XCTAssertNotNil(
            waitForLine(startingWith: "hung up", in: callerSaid, while: caller, timeout: 60),
            "caller said:\n\(callerSaid.all)\ncallee said:\n\(calleeSaid.all)\nrouse said:\n\(bed.rouse?.outputText ?? "")")
        XCTAssertNotNil(waitForLine(startingWith: "bye received", in: calleeSaid, while: callee, timeout: 30), calleeSaid.all)
        let deadline = Date().addingTimeInterval(30)
        while (caller.isRunning || callee.isRunning) && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        XCTAssertEqual(caller.isRunning ? nil : caller.terminationStatus, 0, callerSaid.all)
        XCTAssertEqual(callee.isRunning ? nil : callee.terminationStatus, 0, calleeSaid.all)
        // The journey says the call was answered, by the Net::SIP phone.
        let journey = try bed.endedCall()
        XCTAssertEqual(journey?.outcome, .answered)
        XCTAssertEqual(journey?.callee.number, "1002")
        XCTAssertEqual(journey?.branches.first?.finalStatus, 200)
    }

    /// The first output line starting with `prefix`, waiting up to `timeout` seconds; nil when it
    /// does not come (the phone exits without it, or the time passes).
    func waitForLine(startingWith prefix: String, in collected: RouseProcess.Collected, while process: Process, timeout: TimeInterval) -> String? {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let line = collected.all.split(separator: "\n").first(where: { $0.hasPrefix(prefix) }) { return String(line) }
            guard Date() < deadline else { return nil }
            if !process.isRunning {
                // Let the pipe hand over what the process wrote last.
                Thread.sleep(forTimeInterval: 0.1)
                return collected.all.split(separator: "\n").first(where: { $0.hasPrefix(prefix) }).map(String.init)
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
    }
}
