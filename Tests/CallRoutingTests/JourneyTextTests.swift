@testable import CallRouting
import XCTest

/// How journey lines write a duration: whole seconds bare, anything else with one decimal.
final class JourneyTextTests: XCTestCase {
    func testSecondsAreWholeOrHaveOneDecimal() {
        XCTAssertEqual(CallText.seconds(3), "3 s")
        XCTAssertEqual(CallText.seconds(0.34), "0.3 s")
        XCTAssertEqual(CallText.seconds(0.07), "0.1 s")
        XCTAssertEqual(CallText.seconds(12.96), "13.0 s")
        XCTAssertEqual(CallText.seconds(181.5), "181.5 s")
        XCTAssertEqual(CallText.seconds(-1.5), "-1.5 s")
    }
}
