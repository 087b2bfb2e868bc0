import Foundation
import Push
import RouseServer
import XCTest

/// The settings of issue 9's faults and limits: their defaults, how they reach the push service,
/// and the combinations refused.
final class FaultSettingsTests: XCTestCase {
    func testDefaultsAndWhatThePushServiceGets() throws {
        let defaults = try ConfigurationLoader.load(flags: [], environment: [:])
        XCTAssertEqual(defaults.pushAttempts, 3)
        XCTAssertEqual(defaults.httpRateLimit, 0)
        XCTAssertNil(defaults.tlsClientCAPath)
        XCTAssertFalse(defaults.tlsRequireClientCertificate)
        XCTAssertEqual(defaults.pushSettings.breaker, ProviderCircuitBreaker.Settings(failureThreshold: 5, initialBackoff: .seconds(10), maximumBackoff: .seconds(300)))

        let ca = NSTemporaryDirectory() + "rouse-ca-\(UUID().uuidString).pem"
        try "not read by the loader, only checked to exist\n".write(toFile: ca, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: ca) }
        let set = try ConfigurationLoader.load(
            flags: ["--push-attempts", "2", "--tls-client-ca", ca, "--tls-require-client-cert", "true"],
            environment: [
                "ROUSE_PUSH_BREAKER_FAILURES": "4", "ROUSE_PUSH_BREAKER_BACKOFF": "500ms", "ROUSE_PUSH_BREAKER_MAX_BACKOFF": "1m",
                "ROUSE_HTTP_RATE_LIMIT": "20",
            ])
        XCTAssertEqual(set.pushSettings.retry.maxAttempts, 2)
        XCTAssertEqual(set.pushSettings.breaker, ProviderCircuitBreaker.Settings(failureThreshold: 4, initialBackoff: .milliseconds(500), maximumBackoff: .seconds(60)))
        XCTAssertEqual(set.httpRateLimit, 20)
        XCTAssertEqual(set.tlsClientCAPath, ca)
        XCTAssertTrue(set.tlsRequireClientCertificate)
    }

    func testContradictionsAreRefusedInWords() {
        XCTAssertThrowsError(try ConfigurationLoader.load(
            flags: ["--tls-require-client-cert", "true", "--push-breaker-backoff", "60", "--push-breaker-max-backoff", "30", "--push-attempts", "0"],
            environment: ["ROUSE_HTTP_RATE_LIMIT": "-1"])
        ) { error in
            let problems = (error as? ConfigurationError)?.problems ?? []
            XCTAssertTrue(problems.contains("tls_require_client_cert: needs tls_client_ca (the CA client certificates are checked against)"), "\(problems)")
            XCTAssertTrue(problems.contains("push_breaker_max_backoff: must not be shorter than push_breaker_backoff"), "\(problems)")
            XCTAssertTrue(problems.contains { $0.hasPrefix("push_attempts: '0' is not a whole number from 1 to 10") }, "\(problems)")
            XCTAssertTrue(problems.contains { $0.hasPrefix("http_rate_limit: '-1' is not a whole number") }, "\(problems)")
        }
        XCTAssertThrowsError(try ConfigurationLoader.load(flags: ["--tls-require-client-cert", "maybe"], environment: [:])) { error in
            let problems = (error as? ConfigurationError)?.problems ?? []
            XCTAssertTrue(problems.contains { $0.hasPrefix("tls_require_client_cert: 'maybe' is not true or false") }, "\(problems)")
        }
    }
}
