import CallRouting
import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import Storage
import XCTest

/// Call forwarding through `rouse serve` (docs/calls.md "Diversion"), with SIPp 3.6.1 as every
/// phone: 1001 calls 1002, whose forwarding (set with `rouse extension forward`) sends the call
/// on to 1003, once nobody answered within 1002's ring time or once 1002 said busy. 1003's phone
/// is sent the INVITE with History-Info (RFC 7044) naming 1002 and the cause, answers, and the
/// caller's call is completed (200, ACK, BYE); the journeys of both extensions say where the call
/// went and why. With `decline_is_busy` off a 603 is no busy, and `max_diversions` 0 forwards
/// nothing: the caller gets the callee's answer.
final class DiversionProcessTests: XCTestCase {
    var bed: InteropBed!

    override func setUpWithError() throws {
        bed = try InteropBed()
    }

    override func tearDown() {
        bed?.tearDown()
    }

    func testAnUnansweredCallIsForwardedAfterTheRingTimeWithHistoryInfo() throws {
        try setForwarding(["--no-answer", "1003", "--after", "3"])
        try bed.startRouse()
        let forwarded = try bed.sippCallee(over: .udp, scenario: "callee-answer-history", number: "1003", name: "forwarded")
        let ringing = try bed.sippCallee(over: .udp, scenario: "callee-cancel")
        try bed.assertSIPpCall(over: .udp, callee: ("SIPp 1002", ringing))

        XCTAssertTrue(
            try bed.waitUntil { self.bed.logged("callee") == ["invite received", "cancel received", "ack received"] },
            "1002's phone rang and was cancelled: \(bed.logged("callee"))")
        try assertForwarded(to: forwarded, cause: 408)

        let diverted = try journey(of: "1002")
        XCTAssertEqual(diverted.reason, "forwarded to sip:1003@example.com (no answer: no answer within 3 s)")
        XCTAssertTrue(
            diverted.events.contains { $0.text == "forwarded to sip:1003@example.com (no answer, History-Info cause 408): no answer within 3 s" },
            "\(diverted.events.map(\.text))")
        XCTAssertEqual(diverted.branches.map(\.canceledBecause), ["call forwarded (no answer)"], "1002's ringing phone was cancelled")
        XCTAssertTrue(diverted.missed, "1002 missed the call")
    }

    func testABusyCalleeIsForwardedWithCause486() throws {
        try setForwarding(["--busy", "1003"])
        try bed.startRouse()
        let forwarded = try bed.sippCallee(over: .udp, scenario: "callee-answer-history", number: "1003", name: "forwarded")
        let busy = try refusingCallee(decline: false)
        try bed.assertSIPpCall(over: .udp, callee: ("SIPp 1002", busy))

        XCTAssertTrue(
            try bed.waitUntil { self.bed.logged("callee") == ["invite received", "ack received"] },
            "1002's phone answered 486 and got its ACK: \(bed.logged("callee"))")
        try assertForwarded(to: forwarded, cause: 486)

        let diverted = try journey(of: "1002")
        XCTAssertTrue(
            diverted.events.contains { $0.text.hasPrefix("forwarded to sip:1003@example.com (busy, History-Info cause 486)") },
            "\(diverted.events.map(\.text))")
        XCTAssertEqual(diverted.branches.flatMap { $0.responses.map(\.status) }.last, 486, "the busy answer is in 1002's journey")
    }

    func testA603IsNoBusyWhenDeclineIsBusyIsOff() throws {
        let journey = try busyRuleNotFollowed(settings: ["ROUSE_DECLINE_IS_BUSY": "false"], decline: true, answer: 603)
        XCTAssertFalse(journey.events.contains { $0.text.contains("forwarded") }, "\(journey.events.map(\.text))")
    }

    func testTheLoopGuardOfMaxDiversionsIsReadFromTheConfiguration() throws {
        let journey = try busyRuleNotFollowed(settings: ["ROUSE_MAX_DIVERSIONS": "0"], decline: false, answer: 486)
        XCTAssertTrue(
            journey.events.contains {
                $0.text == "not forwarded to sip:1003@example.com: the INVITE was diverted 0 time(s) already (max_diversions 0)"
            }, "\(journey.events.map(\.text))")
    }

    /// 1002 forwards on busy to 1003 and its phone refuses (603 when `decline`, else 486), with
    /// Rouse started with `settings` that keep the rule from applying: the caller (Rouse's own test
    /// agent as 1001) gets `answer`, 1003's phone is never called, and 1002's journey, returned,
    /// ends `failed` with that status.
    func busyRuleNotFollowed(settings: [String: String], decline: Bool, answer: Int, file: StaticString = #filePath, line: UInt = #line) throws -> CallJourney {
        try setForwarding(["--busy", "1003"])
        try bed.startRouse(settings)
        _ = try bed.sippCallee(over: .udp, scenario: "callee-answer-history", number: "1003", name: "forwarded")
        _ = try refusingCallee(decline: decline)
        let agent = try TestUserAgent(
            transport: .udp, serverPort: try bed.port(.udp), user: "1001", domain: InteropBed.domain, password: InteropBed.passwords["1001"]!)
        defer { agent.close() }
        XCTAssertEqual(try agent.invite("sip:1002@example.com").waitForFinal().statusCode, answer, "1002's answer goes back", file: file, line: line)

        let journey = try journey(of: "1002")
        XCTAssertEqual(journey.outcome, .failed, "\(journey.events.map(\.text))", file: file, line: line)
        XCTAssertEqual(journey.finalStatus, answer, file: file, line: line)
        XCTAssertEqual(bed.logged("forwarded"), [], "1003's phone was never called", file: file, line: line)
        return journey
    }

    /// 1002's SIPp phone, answering every call 486 Busy Here, or 603 Decline when `decline`.
    func refusingCallee(decline: Bool) throws -> RouseProcess {
        try bed.sippCallee(over: .udp, scenario: "callee-refuse", arguments: ["-set", "answer", decline ? "decline" : "busy"])
    }

    /// `rouse extension forward 1002@example.com ARGUMENTS`, as an operator sets it before Rouse starts.
    func setForwarding(_ arguments: [String]) throws {
        let command = try RouseProcess(
            arguments: ["extension", "forward", "1002@example.com"] + arguments, environment: ["ROUSE_DATABASE_URL": bed.database.conninfo])
        XCTAssertEqual(command.waitForExit(timeout: 60), 0, command.errorText)
    }

    /// 1003's phone got the forwarded INVITE with History-Info naming 1002 (and how its call
    /// ended) and itself with the cause, answered, and saw the caller's ACK and BYE; 1002's journey
    /// ended `diverted` with the cause, and 1003's call, a journey of its own with the same
    /// Call-ID, was answered and says where it came from.
    func assertForwarded(to phone: RouseProcess, cause: Int, file: StaticString = #filePath, line: UInt = #line) throws {
        let expected = [
            "invite received",
            "history-info:<sip:1002@example.com?Reason=SIP%3Bcause%3D\(cause)>;index=1, <sip:1003@example.com;cause=\(cause)>;index=1.1;mp=1",
            "ack received", "bye received",
        ]
        XCTAssertTrue(
            try bed.waitUntil { self.bed.logged("forwarded").map { $0.replacingOccurrences(of: "history-info: ", with: "history-info:") } == expected },
            "1003's phone logged \(bed.logged("forwarded"))\n" + bed.report("SIPp 1003", phone, file: "forwarded-errors.log"),
            file: file, line: line)

        let diverted = try journey(of: "1002")
        XCTAssertEqual(diverted.outcome, .diverted, file: file, line: line)
        XCTAssertEqual(diverted.finalStatus, cause, "the journey's final status is the History-Info cause", file: file, line: line)
        // The caller's BYE is written to the answered call's journey once it has passed.
        let target = try journey(of: "1003") { $0.events.contains { $0.text.hasPrefix("the caller hung up after") } }
        XCTAssertEqual(target.callID, diverted.callID, file: file, line: line)
        XCTAssertEqual(target.outcome, .answered, file: file, line: line)
        XCTAssertEqual(target.finalStatus, 200, "what the caller was answered", file: file, line: line)
        let words = cause == 486 ? "busy" : "no answer"
        XCTAssertTrue(
            target.events.contains { $0.text == "forwarded here from 1002@example.com (\(words), History-Info cause \(cause))" },
            "\(target.events.map(\.text))", file: file, line: line)
    }

    /// The journey of extension `number`'s call once it has ended (and `extra` holds for it).
    func journey(of number: String, where extra: @escaping (CallJourney) -> Bool = { _ in true }) throws -> CallJourney {
        try XCTUnwrap(try bed.endedCall(of: number, where: extra), "no ended call of \(number) in PostgreSQL")
    }
}
