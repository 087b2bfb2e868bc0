import RouseVocabulary
import XCTest

final class WakeResultTests: XCTestCase {
    func testWakeResultsReadAsTheJourneySaysThem() {
        XCTAssertEqual(WakeResult.woke(afterMilliseconds: 1900).words, "woke in 1.9 s")
        XCTAssertEqual(WakeResult.woke(afterMilliseconds: 420).words, "woke in 420 ms")
        XCTAssertEqual(WakeResult.notInTime.words, "no re-register in time")
        for result in [WakeResult.woke(afterMilliseconds: 5), .late(afterMilliseconds: 9000), .notInTime, .callEnded, .notPushed, .pending] {
            XCTAssertEqual(WakeResult(word: result.word, milliseconds: result.milliseconds), result)
        }
    }
}

final class WakeResultWordTests: XCTestCase {
    func testStoredWordsAreTheDocumentedOnes() {
        XCTAssertEqual(
            [WakeResult.pending, .woke(afterMilliseconds: 1), .late(afterMilliseconds: 2), .notInTime, .callEnded, .notPushed].map(\.word),
            ["pending", "woke", "late", "no", "call_ended", "not_pushed"])
        XCTAssertEqual(WakeResult(word: "woke", milliseconds: 1900), .woke(afterMilliseconds: 1900))
        XCTAssertNil(WakeResult.notInTime.milliseconds)
    }
}
