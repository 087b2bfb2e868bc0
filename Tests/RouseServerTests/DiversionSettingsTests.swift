import RouseServer
import XCTest

/// The two call forwarding settings, `decline_is_busy` and `max_diversions` (docs/configuration.md):
/// their defaults, set from the environment and flags, and refused out of range naming the key.
final class DiversionSettingsTests: XCTestCase {
    func testDefaultsAreDeclineIsBusyAndFiveDiversions() throws {
        let configuration = try ConfigurationLoader.load(flags: [], environment: [:])
        XCTAssertTrue(configuration.declineIsBusy)
        XCTAssertEqual(configuration.maxDiversions, 5)
    }

    func testTheyAreSetFromTheEnvironmentAndFlags() throws {
        let configuration = try ConfigurationLoader.load(flags: ["--max-diversions", "0"], environment: ["ROUSE_DECLINE_IS_BUSY": "false"])
        XCTAssertFalse(configuration.declineIsBusy)
        XCTAssertEqual(configuration.maxDiversions, 0, "0 forwards no call")
        XCTAssertEqual(try ConfigurationLoader.load(flags: ["--max-diversions=20"], environment: [:]).maxDiversions, 20)
    }

    func testOutOfRangeValuesAreRefusedNamingTheKey() {
        XCTAssertThrowsError(
            try ConfigurationLoader.load(flags: ["--max-diversions", "21"], environment: ["ROUSE_DECLINE_IS_BUSY": "sometimes"])
        ) { error in
            let problems = (error as? ConfigurationError)?.problems ?? []
            XCTAssertEqual(problems.count, 2, "\(problems)")
            XCTAssertTrue(problems.contains { $0.hasPrefix("max_diversions") && $0.contains("'21' is not a whole number from 0 to 20") }, "\(problems)")
            XCTAssertTrue(problems.contains { $0.hasPrefix("decline_is_busy") && $0.contains("'sometimes' is not true or false") }, "\(problems)")
        }
        XCTAssertThrowsError(try ConfigurationLoader.load(flags: ["--max-diversions", "-1"], environment: [:])) { error in
            XCTAssertTrue("\(error)".contains("max_diversions"), "\(error)")
        }
    }
}
