import SIPMessage
import SIPTransaction
import XCTest

final class SIPRequestTransactionTests: XCTestCase {
    func testACKForNon2xxFollowsSection17113() {
        var invite = TestMessages.invite()
        invite.headers.add(.route, "<sip:proxy.example.com;lr>")
        invite.body = Array("v=0".utf8)
        let busy = TestMessages.response(486, to: invite, toTag: "busy-tag")
        let ack = invite.acknowledgement(for: busy)
        XCTAssertEqual(ack.method, .ack)
        XCTAssertEqual(ack.uri, invite.uri)
        XCTAssertEqual(ack.headers.values(.via), [invite.headers.values(.via)[0]])
        XCTAssertEqual(ack.headers[.to], busy.headers[.to])
        XCTAssertEqual(ack.headers[.from], invite.headers[.from])
        XCTAssertEqual(ack.callID, invite.callID)
        XCTAssertEqual(ack.cseq, SIPCSeq(1, .ack))
        XCTAssertEqual(ack.headers.lines(.route), ["<sip:proxy.example.com;lr>"])
        XCTAssertEqual(ack.maxForwards, 70)
        XCTAssertTrue(ack.body.isEmpty)
    }

    func testCANCELSharesTheBranchAndCSeqNumber() {
        let invite = TestMessages.invite()
        let cancel = invite.cancellation()
        XCTAssertEqual(cancel.method, .cancel)
        XCTAssertEqual(cancel.uri, invite.uri)
        XCTAssertEqual(cancel.topVia, invite.topVia)
        XCTAssertEqual(cancel.cseq, SIPCSeq(1, .cancel))
        XCTAssertEqual(cancel.headers[.to], invite.headers[.to])
        XCTAssertEqual(TransactionKey.inviteServer(cancelledBy: cancel), TransactionKey.server(for: invite))
    }
}
