import Crypto
import Foundation
import RouseLog
import RouseServer
import RouseVocabulary
import SIPMessage
import SIPTransport
import XCTest

final class ConfigurationLoaderTests: XCTestCase {
    func writeConfig(_ json: String) throws -> String {
        let path = NSTemporaryDirectory() + "rouse-config-\(UUID().uuidString).json"
        try json.write(toFile: path, atomically: true, encoding: .utf8)
        addTeardownBlock { try? FileManager.default.removeItem(atPath: path) }
        return path
    }

    func testDefaultsWhenNothingIsSet() throws {
        let configuration = try ConfigurationLoader.load(flags: [], environment: [:])
        XCTAssertEqual(configuration.sipListen.map(\.description), ["udp:127.0.0.1:5060", "tcp:127.0.0.1:5060"])
        XCTAssertEqual(configuration.httpListen, "127.0.0.1:8080")
        XCTAssertEqual(configuration.timerT1, .milliseconds(500))
        XCTAssertEqual(configuration.parserLimits.maxMessageBytes, 65_536)
    }

    func testFlowTimerDefaultsTo120AndStaysWithinTheIdleTimeout() throws {
        let defaults = try ConfigurationLoader.load(flags: [], environment: [:])
        XCTAssertEqual(defaults.flowTimer, 120)
        XCTAssertEqual(defaults.effectiveFlowTimer, 120, "well within the 600 s idle timeout")
        let short = try ConfigurationLoader.load(flags: ["--tcp-idle-timeout", "30"], environment: [:])
        XCTAssertEqual(short.effectiveFlowTimer, 24, "a phone keeping alive at 80–100 % of it is never closed as idle")
        let off = try ConfigurationLoader.load(flags: [], environment: ["ROUSE_FLOW_TIMER": "0"])
        XCTAssertEqual(off.effectiveFlowTimer, 0)
        XCTAssertThrowsError(try ConfigurationLoader.load(flags: ["--flow-timer", "-5"], environment: [:])) { error in
            XCTAssertTrue("\(error)".contains("flow_timer"), "\(error)")
        }
    }

    func testFileThenEnvironmentThenFlagsWin() throws {
        let path = try writeConfig(
            #"{"log_level": "debug", "http_listen": "127.0.0.1:9000", "sip_listen": ["udp:127.0.0.1:5070"], "tcp_idle_timeout": 30}"#)
        let configuration = try ConfigurationLoader.load(
            flags: ["--config", path, "--http-listen=127.0.0.1:9002"],
            environment: ["ROUSE_HTTP_LISTEN": "127.0.0.1:9001", "ROUSE_LOG_LEVEL": "warning"])
        XCTAssertEqual(configuration.httpListen, "127.0.0.1:9002", "a flag beats the environment")
        XCTAssertEqual(configuration.logLevel, .warning, "the environment beats the file")
        XCTAssertEqual(configuration.sipListen.map(\.description), ["udp:127.0.0.1:5070"], "a list in the file")
        XCTAssertEqual(configuration.tcpIdleTimeout, .seconds(30))
    }

    func testConfigFileFromEnvironmentVariable() throws {
        let path = try writeConfig(#"{"sip_t1": "250ms"}"#)
        let configuration = try ConfigurationLoader.load(flags: [], environment: ["ROUSE_CONFIG": path])
        XCTAssertEqual(configuration.timerT1, .milliseconds(250))
    }

    func testDigestAlgorithmsAreAnOrderedListDefaultingToMD5() throws {
        XCTAssertEqual(try ConfigurationLoader.load(flags: [], environment: [:]).digestAlgorithms, [.md5])
        let path = try writeConfig(#"{"digest_algorithms": ["SHA-256", "MD5"]}"#)
        XCTAssertEqual(try ConfigurationLoader.load(flags: ["--config", path], environment: [:]).digestAlgorithms, [.sha256, .md5])
        XCTAssertEqual(
            try ConfigurationLoader.load(flags: ["--digest-algorithms=sha-256"], environment: [:]).digestAlgorithms, [.sha256])
        for (bad, message) in [("SHA-1", "'SHA-1' is not MD5 or SHA-256"), ("MD5,md5", "MD5 is named twice"), ("", "names no algorithm")] {
            XCTAssertThrowsError(try ConfigurationLoader.load(flags: [], environment: ["ROUSE_DIGEST_ALGORITHMS": bad])) { error in
                XCTAssertTrue("\(error)".contains("digest_algorithms: \(message)"), "\(error)")
            }
        }
    }

    func testEveryBadSettingIsNamedOnce() {
        XCTAssertThrowsError(
            try ConfigurationLoader.load(
                flags: ["--sip-listen", "udp:127.0.0.1:5060,bogus", "--sip-t1", "-1"],
                environment: ["ROUSE_LOG_LEVEL": "chatty", "ROUSE_TCP_MAX_CONNECTIONS": "many"])
        ) { error in
            let problems = (error as? ConfigurationError)?.problems ?? []
            XCTAssertEqual(problems.count, 4, "\(problems)")
            let text = String(describing: error)
            for key in ["sip_listen", "sip_t1", "log_level", "tcp_max_connections"] {
                XCTAssertTrue(text.contains(key), "\(key) missing from: \(text)")
            }
            XCTAssertTrue(text.contains("bogus"))
            XCTAssertTrue(text.contains("ROUSE_LOG_LEVEL"), "says where the bad value came from")
        }
    }

    func testUnknownKeysAndBadFilesAreErrors() throws {
        let path = try writeConfig(#"{"sip_lisen": "udp:127.0.0.1:5060"}"#)
        XCTAssertThrowsError(try ConfigurationLoader.load(flags: ["--config", path], environment: [:])) { error in
            XCTAssertTrue(String(describing: error).contains("sip_lisen"))
        }
        let broken = try writeConfig("{ not json")
        XCTAssertThrowsError(try ConfigurationLoader.load(flags: ["--config", broken], environment: [:])) { error in
            XCTAssertTrue(String(describing: error).contains(broken))
        }
        XCTAssertThrowsError(try ConfigurationLoader.load(flags: ["--no-such-flag", "1"], environment: [:])) { error in
            XCTAssertTrue(String(describing: error).contains("--no-such-flag"))
        }
        XCTAssertThrowsError(try ConfigurationLoader.load(flags: [], environment: ["ROUSE_CONFIG": "/nonexistent/rouse.json"]))
    }

    func testDurationsAcceptUnits() throws {
        let configuration = try ConfigurationLoader.load(
            flags: ["--sip-t1", "500ms", "--sip-t2", "4s", "--tcp-idle-timeout", "2m", "--tls-handshake-timeout", "0.5"],
            environment: [:])
        XCTAssertEqual(configuration.timerT1, .milliseconds(500))
        XCTAssertEqual(configuration.timerT2, .seconds(4))
        XCTAssertEqual(configuration.tcpIdleTimeout, .seconds(120))
        XCTAssertEqual(configuration.tlsHandshakeTimeout, .milliseconds(500))
    }

    func testIPv6ListenPoints() throws {
        let configuration = try ConfigurationLoader.load(flags: ["--sip-listen", "udp:[::1]:5060, tcp:[::1]:5062"], environment: [:])
        XCTAssertEqual(configuration.sipListen, [
            ListenPoint(transport: .udp, host: "::1", port: 5060), ListenPoint(transport: .tcp, host: "::1", port: 5062),
        ])
    }
}
