import SIPMessage
import SIPTransaction
import XCTest

final class InviteClientTransactionTests: XCTestCase {
    let timers = TransactionTimers()

    func testTimerADoublesWithoutCapUntilTimerBTimesOutWith408() {
        let invite = TestMessages.invite()
        var transaction = InviteClientTransaction(request: invite, isReliable: false, timers: timers)
        XCTAssertEqual(
            transaction.start(),
            [.send(invite), .startTimer(.a, after: .milliseconds(500)), .startTimer(.b, after: .seconds(32))])
        for expected in [Duration.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16)] {
            XCTAssertEqual(transaction.timerFired(.a), [.send(invite), .startTimer(.a, after: expected)])
        }
        let timeout = SIPResponse(replyingTo: invite, statusCode: 408)
        XCTAssertEqual(transaction.timerFired(.b), [.cancelTimer(.a), .passToCore(.timedOut(timeout)), .terminated])
        XCTAssertEqual(transaction.state, .terminated)
    }

    func testNon2xxIsAcknowledgedInsideTheTransaction() throws {
        let invite = TestMessages.invite()
        var transaction = InviteClientTransaction(request: invite, isReliable: false, timers: timers)
        _ = transaction.start()
        let ringing = TestMessages.response(180, to: invite)
        XCTAssertEqual(
            transaction.receivedResponse(ringing),
            [.cancelTimer(.a), .cancelTimer(.b), .passToCore(.response(ringing))])
        XCTAssertEqual(transaction.state, .proceeding)
        XCTAssertEqual(transaction.timerFired(.a), [], "§17.1.1.2: no retransmission in Proceeding")

        let busy = TestMessages.response(486, to: invite)
        let actions = transaction.receivedResponse(busy)
        let ack = try XCTUnwrap(transaction.ack)
        XCTAssertEqual(actions, [.send(ack), .passToCore(.response(busy)), .startTimer(.d, after: .seconds(32))])
        XCTAssertEqual(ack.method, .ack)
        XCTAssertEqual(ack.uri, invite.uri)
        XCTAssertEqual(ack.cseq, SIPCSeq(1, .ack))
        XCTAssertEqual(ack.topVia, invite.topVia, "§17.1.1.3: the ACK has the INVITE's top Via")
        XCTAssertEqual(ack.vias.count, 1)
        XCTAssertEqual(ack.to?.tag, "to-1", "§17.1.1.3: To of the response")
        XCTAssertEqual(ack.from, invite.from)
        XCTAssertEqual(ack.callID, invite.callID)

        XCTAssertEqual(transaction.receivedResponse(busy), [.send(ack)], "retransmitted final: ACK again, not to TU")
        XCTAssertEqual(transaction.timerFired(.d), [.terminated])
    }

    func testTwoHundredMovesToAcceptedAndLetsFurther2xxThroughUntilTimerM() {
        let invite = TestMessages.invite()
        var transaction = InviteClientTransaction(request: invite, isReliable: false, timers: timers)
        _ = transaction.start()
        let ok = TestMessages.response(200, to: invite)
        XCTAssertEqual(
            transaction.receivedResponse(ok),
            [.cancelTimer(.a), .cancelTimer(.b), .passToCore(.response(ok)), .startTimer(.m, after: .seconds(32))])
        XCTAssertEqual(transaction.state, .accepted)
        let forked = TestMessages.response(200, to: invite, toTag: "to-2")
        XCTAssertEqual(transaction.receivedResponse(forked), [.passToCore(.response(forked))])
        XCTAssertEqual(transaction.receivedResponse(TestMessages.response(486, to: invite)), [])
        XCTAssertEqual(transaction.timerFired(.m), [.terminated])
    }

    func testOverTCPThereIsNoTimerAAndTimerDIsZero() {
        let invite = TestMessages.invite(transport: "TCP")
        var transaction = InviteClientTransaction(request: invite, isReliable: true, timers: timers)
        XCTAssertEqual(transaction.start(), [.send(invite), .startTimer(.b, after: .seconds(32))])
        XCTAssertEqual(transaction.timerFired(.a), [], "no retransmission on a reliable transport")
        let busy = TestMessages.response(486, to: invite)
        let actions = transaction.receivedResponse(busy)
        XCTAssertEqual(actions, [.cancelTimer(.b), .send(transaction.ack!), .passToCore(.response(busy)), .terminated])
    }

    func testTransportErrorGives503() {
        let invite = TestMessages.invite()
        var transaction = InviteClientTransaction(request: invite, isReliable: false, timers: timers)
        _ = transaction.start()
        let failure = SIPResponse(replyingTo: invite, statusCode: 503)
        XCTAssertEqual(transaction.transportError(), [.passToCore(.transportError(failure)), .terminated])
    }
}
