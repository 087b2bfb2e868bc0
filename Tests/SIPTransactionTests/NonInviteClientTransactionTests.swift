import SIPMessage
import SIPTransaction
import XCTest

final class NonInviteClientTransactionTests: XCTestCase {
    let timers = TransactionTimers()

    func testTimerEDoublesUpToT2AndTimerFTimesOutWith408() {
        let options = TestMessages.request(.options)
        var transaction = NonInviteClientTransaction(request: options, isReliable: false, timers: timers)
        XCTAssertEqual(
            transaction.start(),
            [.send(options), .startTimer(.e, after: .milliseconds(500)), .startTimer(.f, after: .seconds(32))])
        for expected in [Duration.seconds(1), .seconds(2), .seconds(4), .seconds(4), .seconds(4)] {
            XCTAssertEqual(transaction.timerFired(.e), [.send(options), .startTimer(.e, after: expected)])
        }
        let timeout = SIPResponse(replyingTo: options, statusCode: 408)
        XCTAssertEqual(transaction.timerFired(.f), [.cancelTimer(.e), .passToCore(.timedOut(timeout)), .terminated])
        XCTAssertEqual(transaction.state, .terminated)
    }

    func testProvisionalResetsTimerEToT2AndFinalEndsWithTimerK() {
        let bye = TestMessages.request(.bye)
        var transaction = NonInviteClientTransaction(request: bye, isReliable: false, timers: timers)
        _ = transaction.start()
        let trying = TestMessages.response(100, to: bye, toTag: nil)
        XCTAssertEqual(transaction.receivedResponse(trying), [.passToCore(.response(trying))])
        XCTAssertEqual(transaction.state, .proceeding)
        XCTAssertEqual(transaction.timerFired(.e), [.send(bye), .startTimer(.e, after: .seconds(4))])

        let ok = TestMessages.response(200, to: bye)
        XCTAssertEqual(
            transaction.receivedResponse(ok),
            [.cancelTimer(.e), .cancelTimer(.f), .passToCore(.response(ok)), .startTimer(.k, after: .seconds(5))])
        XCTAssertEqual(transaction.receivedResponse(ok), [], "§17.1.2.2: retransmissions absorbed in Completed")
        XCTAssertEqual(transaction.timerFired(.k), [.terminated])
    }

    func testOverTCPNoRetransmissionAndNoTimerK() {
        let register = TestMessages.request(.register, transport: "TCP")
        var transaction = NonInviteClientTransaction(request: register, isReliable: true, timers: timers)
        XCTAssertEqual(transaction.start(), [.send(register), .startTimer(.f, after: .seconds(32))])
        XCTAssertEqual(transaction.timerFired(.e), [])
        let ok = TestMessages.response(200, to: register)
        XCTAssertEqual(transaction.receivedResponse(ok), [.cancelTimer(.f), .passToCore(.response(ok)), .terminated])
    }

    func testTimerFOverTCPGives408() {
        let register = TestMessages.request(.register, transport: "TCP")
        var transaction = NonInviteClientTransaction(request: register, isReliable: true, timers: timers)
        _ = transaction.start()
        let timeout = SIPResponse(replyingTo: register, statusCode: 408)
        XCTAssertEqual(transaction.timerFired(.f), [.passToCore(.timedOut(timeout)), .terminated])
        XCTAssertEqual(timeout.statusCode, 408)
    }

    func testTransportErrorGives503UnlessCompleted() {
        let options = TestMessages.request(.options)
        var transaction = NonInviteClientTransaction(request: options, isReliable: false, timers: timers)
        _ = transaction.start()
        let failure = SIPResponse(replyingTo: options, statusCode: 503)
        XCTAssertEqual(transaction.transportError(), [.passToCore(.transportError(failure)), .terminated])

        var completed = NonInviteClientTransaction(request: options, isReliable: false, timers: timers)
        _ = completed.start()
        _ = completed.receivedResponse(TestMessages.response(200, to: options))
        XCTAssertEqual(completed.transportError(), [.terminated])
    }
}
