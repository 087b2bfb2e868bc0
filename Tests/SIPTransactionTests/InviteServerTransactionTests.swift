import SIPMessage
import SIPTransaction
import XCTest

final class InviteServerTransactionTests: XCTestCase {
    let timers = TransactionTimers()

    func testBusyOverUDPRetransmitsWithTimerGUntilACKThenTimerIEnds() {
        let invite = TestMessages.invite()
        var transaction = InviteServerTransaction(request: invite, isReliable: false, timers: timers)
        let trying = SIPResponse(replyingTo: invite, statusCode: 100)
        XCTAssertEqual(transaction.start(), [.send(trying), .passToCore(invite)])
        XCTAssertEqual(transaction.receivedRequest(invite), [.send(trying)])

        let ringing = TestMessages.response(180, to: invite)
        XCTAssertEqual(transaction.sendResponse(ringing), [.send(ringing)])
        XCTAssertEqual(transaction.receivedRequest(invite), [.send(ringing)], "§17.2.1: latest provisional again")

        let busy = TestMessages.response(486, to: invite)
        XCTAssertEqual(
            transaction.sendResponse(busy),
            [.send(busy), .startTimer(.g, after: .milliseconds(500)), .startTimer(.h, after: .seconds(32))])
        XCTAssertEqual(transaction.state, .completed)
        for expected in [Duration.seconds(1), .seconds(2), .seconds(4), .seconds(4), .seconds(4)] {
            XCTAssertEqual(transaction.timerFired(.g), [.send(busy), .startTimer(.g, after: expected)])
        }
        XCTAssertEqual(transaction.receivedRequest(invite), [.send(busy)])
        XCTAssertEqual(transaction.sendResponse(TestMessages.response(500, to: invite)), [])

        let ack = TestMessages.ack(for: invite, toTag: "to-1")
        XCTAssertEqual(
            transaction.receivedRequest(ack),
            [.cancelTimer(.g), .cancelTimer(.h), .startTimer(.i, after: .seconds(5))])
        XCTAssertEqual(transaction.state, .confirmed)
        XCTAssertEqual(transaction.receivedRequest(ack), [], "ACK retransmissions are absorbed in Confirmed")
        XCTAssertEqual(transaction.receivedRequest(invite), [])
        XCTAssertEqual(transaction.timerFired(.i), [.terminated])
        XCTAssertEqual(transaction.state, .terminated)
    }

    func testTimerHWithoutACKTerminatesAndReportsTimeout() {
        let invite = TestMessages.invite()
        var transaction = InviteServerTransaction(request: invite, isReliable: false, timers: timers)
        _ = transaction.start()
        _ = transaction.sendResponse(TestMessages.response(404, to: invite))
        XCTAssertEqual(transaction.timerFired(.h), [.cancelTimer(.g), .reportFailure(.timedOut), .terminated])
        XCTAssertEqual(transaction.state, .terminated)
        XCTAssertEqual(transaction.timerFired(.g), [], "a stale timer after termination does nothing")
    }

    func testTwoHundredMovesToAcceptedWhereRetransmissionsAreAbsorbedAndACKGoesToCore() {
        let invite = TestMessages.invite()
        var transaction = InviteServerTransaction(request: invite, isReliable: false, timers: timers)
        _ = transaction.start()
        let ok = TestMessages.response(200, to: invite)
        XCTAssertEqual(transaction.sendResponse(ok), [.send(ok), .startTimer(.l, after: .seconds(32))])
        XCTAssertEqual(transaction.state, .accepted)
        XCTAssertEqual(transaction.receivedRequest(invite), [], "RFC 6026 §7.1: INVITE retransmission absorbed")
        XCTAssertEqual(transaction.sendResponse(ok), [.send(ok)], "the TU's 2xx retransmissions pass through")
        XCTAssertEqual(transaction.sendResponse(TestMessages.response(486, to: invite)), [])
        let ack = TestMessages.ack(for: invite, toTag: "to-1", branch: "z9hG4bK-ack")
        XCTAssertEqual(transaction.receivedRequest(ack), [.passToCore(ack)])
        XCTAssertEqual(transaction.timerFired(.l), [.terminated])
    }

    func testBusyOverTCPHasNoTimerGAndACKTerminatesAtOnce() {
        let invite = TestMessages.invite(transport: "TCP")
        var transaction = InviteServerTransaction(request: invite, isReliable: true, timers: timers)
        _ = transaction.start()
        let busy = TestMessages.response(486, to: invite)
        XCTAssertEqual(transaction.sendResponse(busy), [.send(busy), .startTimer(.h, after: .seconds(32))])
        XCTAssertEqual(transaction.timerFired(.g), [], "no retransmission on a reliable transport")
        XCTAssertEqual(
            transaction.receivedRequest(TestMessages.ack(for: invite, toTag: "to-1")), [.cancelTimer(.h), .terminated])
    }

    func testTimerHOverTCPReportsTimeout() {
        let invite = TestMessages.invite(transport: "TCP")
        var transaction = InviteServerTransaction(request: invite, isReliable: true, timers: timers)
        _ = transaction.start()
        _ = transaction.sendResponse(TestMessages.response(480, to: invite))
        XCTAssertEqual(transaction.timerFired(.h), [.reportFailure(.timedOut), .terminated])
    }

    func testACKBeforeFinalResponseIsIgnored() {
        let invite = TestMessages.invite()
        var transaction = InviteServerTransaction(request: invite, isReliable: false, timers: timers)
        _ = transaction.start()
        XCTAssertEqual(transaction.receivedRequest(TestMessages.ack(for: invite, toTag: nil)), [])
        XCTAssertEqual(transaction.state, .proceeding)
        XCTAssertEqual(transaction.timerFired(.h), [], "timers not started by this state are ignored")
    }

    func testTransportErrorReportsAndTerminates() {
        let invite = TestMessages.invite()
        var transaction = InviteServerTransaction(request: invite, isReliable: false, timers: timers)
        _ = transaction.start()
        XCTAssertEqual(transaction.transportError(), [.reportFailure(.transportError), .terminated])
        XCTAssertEqual(transaction.transportError(), [])
    }

    func testCustomT1AndT2ShapeTimerG() {
        let fast = TransactionTimers(t1: .milliseconds(100), t2: .milliseconds(300), t4: .seconds(1))
        let invite = TestMessages.invite()
        var transaction = InviteServerTransaction(request: invite, isReliable: false, timers: fast)
        _ = transaction.start()
        let busy = TestMessages.response(486, to: invite)
        XCTAssertEqual(
            transaction.sendResponse(busy),
            [.send(busy), .startTimer(.g, after: .milliseconds(100)), .startTimer(.h, after: .milliseconds(6400))])
        XCTAssertEqual(transaction.timerFired(.g), [.send(busy), .startTimer(.g, after: .milliseconds(200))])
        XCTAssertEqual(transaction.timerFired(.g), [.send(busy), .startTimer(.g, after: .milliseconds(300))])
    }
}
