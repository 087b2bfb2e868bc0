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

        let trying = SentResponse(TestMessages.response(100, to: register, toTag: nil))
        XCTAssertEqual(transaction.sendResponse(trying), [.sendBytes(trying.bytes)])
        XCTAssertEqual(transaction.state, .proceeding)
        XCTAssertEqual(transaction.receivedRequest(register), [.sendBytes(trying.bytes)])

        let okResponse = TestMessages.response(200, to: register)
        let ok = SentResponse(okResponse)
        XCTAssertEqual(ok.statusCode, 200)
        XCTAssertEqual(ok.bytes, SIPSerializer.serialize(okResponse), "the bytes as they go on the wire")
        XCTAssertEqual(transaction.sendResponse(ok), [.sendBytes(ok.bytes), .startTimer(.j, after: .seconds(32))])
        XCTAssertEqual(transaction.state, .completed)
        XCTAssertEqual(transaction.receivedRequest(register), [.sendBytes(ok.bytes)])
        XCTAssertEqual(transaction.sendResponse(SentResponse(TestMessages.response(500, to: register))), [])
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
        let ok = SentResponse(TestMessages.response(200, to: register))
        _ = transaction.sendResponse(ok)
        XCTAssertNil(transaction.request, "a completed transaction lets its request go")
        XCTAssertNil(transaction.requestToTag, "a cookie key matches without the To tag")
        XCTAssertEqual(transaction.receivedRequest(register), [.sendBytes(ok.bytes)], "a retransmission is still answered")
    }

    func testCompletedRFC2543TransactionKeepsTheRequestsToTag() {
        var register = TestMessages.request(.register)
        register.headers.set(.to, "<sip:1001@example.com>;tag=known")
        var transaction = NonInviteServerTransaction(request: register, isReliable: false, timers: timers, matchesToTag: true)
        _ = transaction.start()
        _ = transaction.sendResponse(SentResponse(TestMessages.response(200, to: register)))
        XCTAssertNil(transaction.request)
        XCTAssertEqual(transaction.requestToTag, "known")
    }

    func testFinalResponseOverTCPTerminatesAtOnce() {
        let options = TestMessages.request(.options, transport: "TCP")
        var transaction = NonInviteServerTransaction(request: options, isReliable: true, timers: timers)
        _ = transaction.start()
        let ok = SentResponse(TestMessages.response(200, to: options))
        XCTAssertEqual(transaction.sendResponse(ok), [.sendBytes(ok.bytes), .terminated])
    }

    func testTransportErrorReportsAndTerminates() {
        let bye = TestMessages.request(.bye)
        var transaction = NonInviteServerTransaction(request: bye, isReliable: false, timers: timers)
        _ = transaction.start()
        XCTAssertEqual(transaction.transportError(), [.reportFailure(.transportError), .terminated])
        XCTAssertEqual(transaction.timerFired(.j), [])
    }
}
