import SIPMessage
import SIPTransaction
import XCTest

final class NonInviteServerTransactionTests: XCTestCase {
    let timers = TransactionTimers()

    func testRegisterOverUDPAbsorbsRetransmissionsAndEndsWithTimerJ() {
        let register = TestMessages.request(.register)
        var transaction = NonInviteServerTransaction(request: register, isReliable: false, timers: timers)
        XCTAssertEqual(transaction.start(), [.passToCore(register)])
        XCTAssertEqual(transaction.receivedRequest(register), [], "§17.2.2: discarded in Trying")

        let trying = TestMessages.response(100, to: register, toTag: nil)
        XCTAssertEqual(transaction.sendResponse(trying), [.send(trying)])
        XCTAssertEqual(transaction.state, .proceeding)
        XCTAssertEqual(transaction.receivedRequest(register), [.send(trying)])

        let ok = TestMessages.response(200, to: register)
        XCTAssertEqual(transaction.sendResponse(ok), [.send(ok), .startTimer(.j, after: .seconds(32))])
        XCTAssertEqual(transaction.state, .completed)
        XCTAssertEqual(transaction.receivedRequest(register), [.send(ok)])
        XCTAssertEqual(transaction.sendResponse(TestMessages.response(500, to: register)), [])
        XCTAssertEqual(transaction.timerFired(.j), [.terminated])
        XCTAssertEqual(transaction.state, .terminated)
    }

    func testCompletedTransactionKeepsOnlyWhatMatchingNeeds() {
        var register = TestMessages.request(.register)
        register.headers.add(.contact, "<sip:1001@192.0.2.7:5060;pn-provider=fcm;pn-prid=token>")
        register.headers.add(.userAgent, "Phone/1.0")
        register.body = Array(repeating: 0x61, count: 500)
        var transaction = NonInviteServerTransaction(request: register, isReliable: false, timers: timers)
        _ = transaction.start()
        XCTAssertEqual(transaction.request, register, "the whole request while the core may still need it")
        let ok = TestMessages.response(200, to: register)
        _ = transaction.sendResponse(ok)
        XCTAssertEqual(Set(transaction.request.headers.map(\.key)), [.via, .from, .to, .callID, .cseq])
        XCTAssertEqual(transaction.request.body, [])
        XCTAssertEqual(transaction.request.uri, register.uri)
        XCTAssertEqual(transaction.receivedRequest(register), [.send(ok)], "a retransmission is still answered")
    }

    func testFinalResponseOverTCPTerminatesAtOnce() {
        let options = TestMessages.request(.options, transport: "TCP")
        var transaction = NonInviteServerTransaction(request: options, isReliable: true, timers: timers)
        _ = transaction.start()
        let ok = TestMessages.response(200, to: options)
        XCTAssertEqual(transaction.sendResponse(ok), [.send(ok), .terminated])
    }

    func testTransportErrorReportsAndTerminates() {
        let bye = TestMessages.request(.bye)
        var transaction = NonInviteServerTransaction(request: bye, isReliable: false, timers: timers)
        _ = transaction.start()
        XCTAssertEqual(transaction.transportError(), [.reportFailure(.transportError), .terminated])
        XCTAssertEqual(transaction.timerFired(.j), [])
    }
}
