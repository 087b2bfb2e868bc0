import SIPMessage
import SIPTransaction
import XCTest

final class TransactionKeyTests: XCTestCase {
    func testACKMatchesItsINVITEAndCANCELHasItsOwnKey() throws {
        let invite = TestMessages.invite()
        let inviteKey = try XCTUnwrap(TransactionKey.server(for: invite))
        XCTAssertEqual(TransactionKey.server(for: TestMessages.ack(for: invite, toTag: "to-1")), inviteKey)
        let cancel = TestMessages.cancel(for: invite)
        XCTAssertNotEqual(TransactionKey.server(for: cancel), inviteKey)
        XCTAssertEqual(TransactionKey.inviteServer(cancelledBy: cancel), inviteKey)
        XCTAssertNil(TransactionKey.inviteServer(cancelledBy: invite), "only a CANCEL cancels")
        XCTAssertFalse(inviteKey.isRFC2543)
    }

    func testBranchComparesCaseInsensitivelyAndSentByCounts() {
        let a = TestMessages.request(.register, branch: "z9hG4bK-ABC")
        let b = TestMessages.request(.register, branch: "z9hG4bK-abc")
        let otherHost = TestMessages.request(.register, branch: "z9hG4bK-abc", sentBy: "other.example.com")
        let otherMethod = TestMessages.request(.options, branch: "z9hG4bK-abc")
        XCTAssertEqual(TransactionKey.server(for: a), TransactionKey.server(for: b))
        XCTAssertNotEqual(TransactionKey.server(for: b), TransactionKey.server(for: otherHost))
        XCTAssertNotEqual(TransactionKey.server(for: b), TransactionKey.server(for: otherMethod))
    }

    /// A branch of the cookie alone, or with the cookie in other letters, is no RFC 3261 branch
    /// (RFC 4475 §3.2.1); sent-by hosts compare without regard to case.
    func testOnlyTheExactCookieWithMoreAfterItMakesABranchKey() throws {
        XCTAssertTrue(try XCTUnwrap(TransactionKey.server(for: TestMessages.request(.register, branch: "z9hG4bK"))).isRFC2543)
        XCTAssertTrue(try XCTUnwrap(TransactionKey.server(for: TestMessages.request(.register, branch: "Z9HG4BK-abc"))).isRFC2543)
        XCTAssertEqual(
            TransactionKey.server(for: TestMessages.request(.register, branch: "z9hG4bK-Ab", sentBy: "Phone.Example.com")),
            TransactionKey.server(for: TestMessages.request(.register, branch: "z9hG4bK-aB", sentBy: "phone.example.COM")))
    }

    /// The hash is computed once from the key's parts: keys that match hash alike (branch case
    /// ignored), keys that differ in any part are told apart in a set.
    func testKeysHashAsTheyCompare() throws {
        let lower = try XCTUnwrap(TransactionKey.server(for: TestMessages.request(.register, branch: "z9hG4bK-abc")))
        let upper = try XCTUnwrap(TransactionKey.server(for: TestMessages.request(.register, branch: "z9hG4bK-ABC")))
        XCTAssertEqual(lower, upper)
        XCTAssertEqual(lower.hashValue, upper.hashValue)
        let others = try [
            TestMessages.request(.register, branch: "z9hG4bK-abd"),
            TestMessages.request(.register, branch: "z9hG4bK-abc", sentBy: "phone.example.com:5061"),
            TestMessages.request(.options, branch: "z9hG4bK-abc"),
        ].map { try XCTUnwrap(TransactionKey.server(for: $0)) }
        XCTAssertEqual(Set([lower, upper] + others).count, 4)
        let via = try XCTUnwrap(TestMessages.request(.register, branch: "z9hG4bK-abc").topVia)
        XCTAssertEqual(
            TransactionKey.server(for: TestMessages.request(.register, branch: "z9hG4bK-abc"), topVia: via), lower,
            "a key from a Via parsed by the caller is the key from the request")
    }

    func testRFC2543FallbackMatchesOnURIFromTagCallIDCSeqAndVia() throws {
        let invite = TestMessages.request(.invite, branch: "1234")
        let key = try XCTUnwrap(TransactionKey.server(for: invite))
        XCTAssertTrue(key.isRFC2543)
        XCTAssertEqual(TransactionKey.server(for: TestMessages.request(.invite, branch: "1234")), key)
        XCTAssertEqual(TransactionKey.server(for: TestMessages.request(.invite, branch: nil)).map(\.isRFC2543), true)
        let variants = [
            TestMessages.request(.invite, branch: "1234", cseq: 2),
            TestMessages.request(.invite, branch: "1234", callID: "other"),
            TestMessages.request(.invite, branch: "1234", fromTag: "other"),
            TestMessages.request(.invite, branch: "1234", uri: "sip:carol@example.com"),
            TestMessages.request(.invite, branch: "1234", sentBy: "other.example.com"),
            TestMessages.request(.invite, branch: "5678"),
        ]
        for variant in variants {
            XCTAssertNotEqual(TransactionKey.server(for: variant), key, "\(variant)")
        }
        let ack = TestMessages.request(.ack, branch: "1234", cseqMethod: .ack, toTag: "to-1")
        XCTAssertEqual(TransactionKey.server(for: ack), key, "the ACK's key leaves the To tag out")
    }

    func testRFC2543ToTagRule() {
        let invite = TestMessages.request(.invite, branch: nil)
        let busy = TestMessages.response(486, to: invite, toTag: "to-9")
        let ack = TestMessages.request(.ack, branch: nil, toTag: "to-9")
        let wrongACK = TestMessages.request(.ack, branch: nil, toTag: "to-8")
        XCTAssertTrue(TransactionKey.rfc2543ToTagMatches(invite, transactionRequest: invite, lastResponse: busy))
        XCTAssertTrue(TransactionKey.rfc2543ToTagMatches(ack, transactionRequest: invite, lastResponse: busy))
        XCTAssertFalse(TransactionKey.rfc2543ToTagMatches(wrongACK, transactionRequest: invite, lastResponse: busy))
        let tagged = TestMessages.request(.invite, branch: nil, toTag: "to-9")
        XCTAssertFalse(TransactionKey.rfc2543ToTagMatches(tagged, transactionRequest: invite, lastResponse: busy))
    }

    func testResponsesMatchClientTransactionsByBranchAndCSeqMethod() throws {
        let invite = TestMessages.invite()
        let key = try XCTUnwrap(TransactionKey.client(for: invite))
        XCTAssertEqual(TransactionKey.client(for: TestMessages.response(180, to: invite)), key)
        let cancel = invite.cancellation()
        XCTAssertEqual(
            TransactionKey.client(for: TestMessages.response(200, to: cancel)), TransactionKey.client(for: cancel))
        XCTAssertNotEqual(TransactionKey.client(for: cancel), key)
        XCTAssertNil(TransactionKey.client(for: TestMessages.request(.invite, branch: "1234")))
    }
}
