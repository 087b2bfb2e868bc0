import CallRouting
import Foundation
import Registrar
import RouseVocabulary
import SIPTransport
import XCTest

/// SIPp 3.6.1 (Debian's sip-tester, installed by scripts/deps.sh) against `rouse serve` on
/// loopback, with the scenarios in `Tests/Interop/sipp`: it registers with digest, and one SIPp
/// calls another through Rouse (407 answered, 180, 200, ACK and BYE over the Record-Route; or a
/// CANCEL and its 487), over UDP and over TCP.
///
/// SIPp computes only MD5 (and AKAv1-MD5) answers, from the first challenge of a 401/407: it
/// registers with the default `digest_algorithms` (MD5 alone) and with `MD5,SHA-256`, but gives up
/// on `SHA-256,MD5` (`createAuthHeader: authentication must use MD5 or AKAv1-MD5`).
final class InteropSIPpTests: XCTestCase {
    var bed: InteropBed!

    override func setUpWithError() throws {
        bed = try InteropBed()
    }

    override func tearDown() {
        bed?.tearDown()
    }

    func testSIPpRegistersWithTheDefaultChallengeOverUDP() throws {
        try bed.startRouse()
        try assertRegisters(over: .udp)
    }

    func testSIPpRegistersWithTheDefaultChallengeOverTCP() throws {
        try bed.startRouse()
        try assertRegisters(over: .tcp)
    }

    func testSIPpRegistersWhenSHA256IsOfferedAfterMD5() throws {
        try bed.startRouse(["ROUSE_DIGEST_ALGORITHMS": "MD5,SHA-256"])
        try assertRegisters(over: .udp)
    }

    /// SIPp's register scenario must end well, and its binding be in PostgreSQL.
    func assertRegisters(over transport: SIPTransportKind) throws {
        let phone = try bed.sipp("register", scenario: "register", number: "1001", transport: transport)
        XCTAssertEqual(phone.waitForExit(timeout: 90), 0, bed.report("SIPp", phone, file: "register-errors.log"))
        let stored = try bed.bindings("1001")
        XCTAssertEqual(stored.map(\.userAgent), ["SIPp/3.6"])
        XCTAssertEqual(stored.first?.flow.transport, transport)
    }

    func testSIPpCallIsAnsweredAndHungUpOverUDP() throws {
        try bed.startRouse()
        try assertCall(over: .udp, hangup: "answer")
    }

    func testSIPpCallIsAnsweredAndHungUpOverTCP() throws {
        try bed.startRouse()
        try assertCall(over: .tcp, hangup: "answer")
    }

    func testSIPpCallerCancelsAndGets487OverUDP() throws {
        try bed.startRouse()
        try assertCall(over: .udp, hangup: "cancel")
    }

    func testSIPpCallerCancelsAndGets487OverTCP() throws {
        try bed.startRouse()
        try assertCall(over: .tcp, hangup: "cancel")
    }

    /// 1002 registers with SIPp and takes calls with the out-of-call scenario for `hangup`; 1001
    /// calls it with SIPp. The caller's scenario must end well (its 200 and BYE, or its 487), the
    /// callee must have seen each step, and the journey must say how the call ended.
    func assertCall(over transport: SIPTransportKind, hangup: String) throws {
        let callee = try bed.sippCallee(over: transport, scenario: hangup == "answer" ? "callee-answer" : "callee-cancel")
        try bed.assertSIPpCall(over: transport, hangup: hangup, pause: 200, callee: ("SIPp callee", callee))
        let expected = hangup == "answer" ? ["invite received", "ack received", "bye received"] : ["invite received", "cancel received", "ack received"]
        XCTAssertTrue(try bed.waitUntil { self.bed.logged("callee") == expected }, "callee logged \(bed.logged("callee"))")

        let journey = try XCTUnwrap(try bed.endedCall())
        XCTAssertEqual(journey.callee.number, "1002")
        XCTAssertEqual(journey.outcome, hangup == "answer" ? .answered : .canceled)
        XCTAssertEqual(journey.finalStatus, hangup == "answer" ? 200 : 487, "what the caller was answered")
        XCTAssertEqual(journey.branches.count, 1, "one branch: the SIPp phone")
    }
}
