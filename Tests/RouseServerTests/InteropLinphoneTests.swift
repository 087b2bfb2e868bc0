import CallRouting
import Foundation
import Registrar
import RouseVocabulary
import SIPTransport
import XCTest

/// Linphone's console client, linphonec 5.1 on liblinphone and belle-sip (Debian's linphone-cli,
/// installed by scripts/deps.sh), against `rouse serve` on loopback: it registers with digest over
/// UDP and TCP and unregisters when it quits; it answers SHA-256 challenges, so it registers and
/// calls with `digest_algorithms` = SHA-256 alone as well as with the default MD5; it auto-answers
/// a SIPp caller and calls a SIPp phone; and one Linphone calls another with SHA-256 alone.
///
/// Like RFC 8760 asks, Linphone answers the first challenge it supports: SHA-256 with
/// `SHA-256,MD5`, MD5 with `MD5,SHA-256`. Which algorithm it used is read from the
/// `Authorization` and `Proxy-Authorization` headers its log shows.
final class InteropLinphoneTests: XCTestCase {
    var bed: InteropBed!

    override func setUpWithError() throws {
        bed = try InteropBed()
    }

    override func tearDown() {
        bed?.tearDown()
    }

    /// Starts linphonec as extension `number` registering with Rouse over `transport`, with a home
    /// folder and linphonerc of its own in the workspace: SIP and RTP on 127.0.0.1 only, no sound
    /// card, Rouse as registrar and outbound proxy, auto-answer when `answers`. Its log (level 6,
    /// the SIP messages included) goes to `linphone-<number>.log` in the workspace.
    ///
    /// linphonec reads its commands with readline, which runs the SIP stack only while it waits on
    /// a terminal: `script` gives it one, fed from the standard input kept open (`send(_:)`).
    func linphone(_ number: String, over transport: SIPTransportKind, answers: Bool = false) throws -> RouseProcess {
        let home = bed.workspace.appendingPathComponent("linphone-\(number)")
        try FileManager.default.createDirectory(at: home.appendingPathComponent(".local/share/linphone"), withIntermediateDirectories: true)
        // Without a runtime folder, the PulseAudio client liblinphone tries makes one in /tmp.
        let runtime = home.appendingPathComponent("run")
        try FileManager.default.createDirectory(at: runtime, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let port = try InteropBed.freePort()
        let proxy = "<sip:127.0.0.1:\(try bed.port(transport));transport=\(transport.rawValue)>"
        let config = [
            "[sip]",
            "sip_port=\(transport == .udp ? Int(port) : 0)",
            "sip_tcp_port=\(transport == .tcp ? Int(port) : 0)",
            "sip_tls_port=0",
            "bind_address=127.0.0.1",
            "use_ipv6=0",
            "default_proxy=0",
            "[rtp]",
            "bind_address=127.0.0.1",
            "audio_rtp_port=40000-49999",
            "[proxy_0]",
            "reg_proxy=\(proxy)",
            "reg_route=\(proxy)",
            "reg_identity=sip:\(number)@\(InteropBed.domain)",
            "reg_expires=600",
            "reg_sendregister=1",
            "publish=0",
            "[auth_info_0]",
            "username=\(number)",
            "passwd=\(InteropBed.passwords[number]!)",
            "domain=\(InteropBed.domain)",
        ]
        let rc = home.appendingPathComponent("linphonerc")
        try (config.joined(separator: "\n") + "\n").write(to: rc, atomically: true, encoding: .utf8)
        let log = bed.workspace.appendingPathComponent("linphone-\(number).log")
        // `script` hands its command to the shell: the paths are quoted.
        let command = "/usr/bin/linphonec -c '\(rc.path)' -d 6 -l '\(log.path)'" + (answers ? " -a" : "")
        return try bed.launch(
            "/usr/bin/script", ["-q", "-f", "-e", "-c", command, "/dev/null"],
            environment: [
                "HOME": home.path, "XDG_DATA_HOME": home.appendingPathComponent(".local/share").path,
                "XDG_CONFIG_HOME": home.appendingPathComponent(".config").path, "XDG_RUNTIME_DIR": runtime.path,
            ],
            keepsInputOpen: true)
    }

    /// What linphonec `number` logged (read once it has quit, when all of it is written).
    func log(_ number: String) -> String {
        (try? String(contentsOf: bed.workspace.appendingPathComponent("linphone-\(number).log"), encoding: .utf8)) ?? ""
    }

    /// The `header` lines (such as `Authorization`) of the requests linphonec `number` sent.
    func sentHeaders(_ header: String, of number: String) -> [String] {
        // The log shows each message after a "message sent to" line, each received one after a
        // "received [n] new bytes" line.
        var sending = false
        var found: [String] = []
        for line in log(number).split(whereSeparator: \.isNewline) {
            if line.contains("message sent to") { sending = true } else if line.contains("new bytes from") { sending = false }
            if sending, line.hasPrefix(header + ":") { found.append(String(line)) }
        }
        return found
    }

    /// Says `quit` to linphonec and waits for it to end well.
    func quit(_ phone: RouseProcess) {
        phone.send("quit\n")
        XCTAssertEqual(phone.waitForExit(timeout: 60), 0, bed.report("linphonec", phone))
    }

    func testLinphoneRegistersWithTheDefaultChallengeOverUDP() throws {
        try bed.startRouse()
        try assertRegisters(over: .udp, answering: "MD5")
    }

    func testLinphoneRegistersWithTheDefaultChallengeOverTCP() throws {
        try bed.startRouse()
        try assertRegisters(over: .tcp, answering: "MD5")
    }

    func testLinphoneRegistersWhenOnlySHA256IsOfferedOverUDP() throws {
        try bed.startRouse(["ROUSE_DIGEST_ALGORITHMS": "SHA-256"])
        try assertRegisters(over: .udp, answering: "SHA-256")
    }

    func testLinphoneRegistersWhenOnlySHA256IsOfferedOverTCP() throws {
        try bed.startRouse(["ROUSE_DIGEST_ALGORITHMS": "SHA-256"])
        try assertRegisters(over: .tcp, answering: "SHA-256")
    }

    func testLinphoneAnswersSHA256WhenItIsOfferedBeforeMD5() throws {
        try bed.startRouse(["ROUSE_DIGEST_ALGORITHMS": "SHA-256,MD5"])
        try assertRegisters(over: .udp, answering: "SHA-256")
    }

    func testLinphoneAnswersMD5WhenItIsOfferedBeforeSHA256() throws {
        try bed.startRouse(["ROUSE_DIGEST_ALGORITHMS": "MD5,SHA-256"])
        try assertRegisters(over: .udp, answering: "MD5")
    }

    /// Linphone registers as 1002 (its binding, with its user agent and transport, in PostgreSQL),
    /// its REGISTERs answer the challenge in `algorithm`, and when it quits it unregisters (the
    /// binding is gone).
    func assertRegisters(over transport: SIPTransportKind, answering algorithm: String) throws {
        let phone = try linphone("1002", over: transport)
        let binding = try bed.registered("1002", by: "linphonec", phone, file: "linphone-1002.log")
        XCTAssertTrue(binding.userAgent?.hasPrefix("Linphonec/5.1") == true, "\(binding.userAgent ?? "no user agent")")
        XCTAssertEqual(binding.flow.transport, transport)

        quit(phone)
        XCTAssertEqual(try bed.bindings("1002").count, 0, "quitting unregisters")
        let answers = sentHeaders("Authorization", of: "1002")
        XCTAssertGreaterThanOrEqual(answers.count, 2, "the REGISTER and the unREGISTER answered the challenge\n" + log("1002").suffix(3000))
        for answer in answers {
            XCTAssertTrue(answer.contains(" algorithm=\(algorithm),"), answer)
        }
    }

    func testLinphoneAnswersASIPpCallOverUDP() throws {
        try bed.startRouse()
        try assertLinphoneAnswers(over: .udp)
    }

    func testLinphoneAnswersASIPpCallOverTCP() throws {
        try bed.startRouse()
        try assertLinphoneAnswers(over: .tcp)
    }

    /// Linphone registered as 1002 auto-answers 1001's SIPp call: the SIPp caller's scenario
    /// (200, ACK, BYE and its 200) must end well and the journey name Linphone as the device that
    /// answered.
    func assertLinphoneAnswers(over transport: SIPTransportKind) throws {
        let phone = try linphone("1002", over: transport, answers: true)
        try bed.registered("1002", by: "linphonec", phone, file: "linphone-1002.log")
        try bed.assertSIPpCall(over: transport, callee: ("linphonec", phone))
        XCTAssertTrue(phone.waitForOutput(containing: "Call 1 with sip:1001@\(InteropBed.domain) ended"), bed.report("linphonec", phone))
        let journey = try XCTUnwrap(try bed.endedCall())
        XCTAssertEqual(journey.outcome, .answered)
        XCTAssertTrue(journey.answeredBy?.hasPrefix("Linphonec/5.1") == true, "\(journey.answeredBy ?? "nobody")")
        quit(phone)
    }

    /// Linphone, registered as 1001, dials 1002 (a SIPp phone) through Rouse: it answers the 407
    /// with digest, the SIPp phone answers, and Linphone hangs up with BYE when told to.
    func testLinphoneCallsASIPpPhoneThroughRouse() throws {
        try bed.startRouse()
        _ = try bed.sippCallee(over: .udp)
        let phone = try linphone("1001", over: .udp)
        try bed.registered("1001", by: "linphonec", phone, file: "linphone-1001.log")
        phone.send("call sip:1002@\(InteropBed.domain)\n")
        XCTAssertTrue(
            phone.waitForOutput(containing: "Call 1 with sip:1002@\(InteropBed.domain) connected."),
            bed.report("linphonec", phone) + "\ncallee logged \(bed.logged("callee"))")
        XCTAssertTrue(try bed.waitUntil { self.bed.logged("callee") == ["invite received", "ack received"] }, "callee logged \(bed.logged("callee"))")
        phone.send("terminate\n")
        XCTAssertTrue(
            try bed.waitUntil { self.bed.logged("callee") == ["invite received", "ack received", "bye received"] },
            "callee logged \(bed.logged("callee"))\n" + bed.report("linphonec", phone))
        let journey = try XCTUnwrap(try bed.endedCall())
        XCTAssertEqual(journey.outcome, .answered)
        XCTAssertEqual(journey.caller, "sip:1001@\(InteropBed.domain)")
        XCTAssertEqual(journey.answeredBy, "SIPp/3.6")
        quit(phone)
    }

    /// With `digest_algorithms` = SHA-256 alone (which SIPp cannot answer), one Linphone (1001)
    /// calls another (1002, auto-answering) through Rouse: both register, the caller answers the
    /// 407 with SHA-256, the call connects and the caller hangs up; the journey says answered by
    /// Linphone.
    func testLinphoneCallsLinphoneWithSHA256Only() throws {
        try bed.startRouse(["ROUSE_DIGEST_ALGORITHMS": "SHA-256"])
        let callee = try linphone("1002", over: .udp, answers: true)
        let caller = try linphone("1001", over: .udp)
        try bed.registered("1002", by: "linphonec 1002", callee, file: "linphone-1002.log")
        try bed.registered("1001", by: "linphonec 1001", caller, file: "linphone-1001.log")
        caller.send("call sip:1002@\(InteropBed.domain)\n")
        XCTAssertTrue(
            caller.waitForOutput(containing: "Call 1 with sip:1002@\(InteropBed.domain) connected."),
            bed.report("linphonec 1001", caller) + "\n" + bed.report("linphonec 1002", callee))
        XCTAssertTrue(callee.waitForOutput(containing: "Call 1 with sip:1001@\(InteropBed.domain) connected."), bed.report("linphonec 1002", callee))
        caller.send("terminate\n")
        XCTAssertTrue(callee.waitForOutput(containing: "Call 1 with sip:1001@\(InteropBed.domain) ended"), bed.report("linphonec 1002", callee))

        let journey = try XCTUnwrap(try bed.endedCall())
        XCTAssertEqual(journey.outcome, .answered)
        XCTAssertEqual(journey.finalStatus, 200)
        XCTAssertEqual(journey.caller, "sip:1001@\(InteropBed.domain)")
        XCTAssertTrue(journey.answeredBy?.hasPrefix("Linphonec/5.1") == true, "\(journey.answeredBy ?? "nobody")")
        quit(caller)
        quit(callee)
        let answers = sentHeaders("Proxy-Authorization", of: "1001")
        XCTAssertFalse(answers.isEmpty, "the caller answered the 407\n" + log("1001").suffix(3000))
        for answer in answers {
            XCTAssertTrue(answer.contains(" algorithm=SHA-256,"), answer)
        }
    }
}
