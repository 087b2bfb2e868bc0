import Foundation
import RouseTestSupport
import RouseVocabulary
import SIPTransport
import XCTest

/// What a TLS listen point accepts, checked with a third-party client (`openssl s_client`, from
/// the `openssl` package scripts/deps.sh installs): TLS 1.2 and 1.3 with forward-secret AEAD
/// suites; TLS 1.1 and a TLS 1.2 suite without forward secrecy are refused in the handshake.
final class TLSPolicyTests: XCTestCase {
    var server: EchoServer!

    override func setUpWithError() throws {
        let certificate = try TestCertificate.make(commonName: "rouse.test")
        defer { certificate.remove() }  // the listen point reads it at start
        server = try EchoServer(
            ["tls:127.0.0.1:0"], tls: TLSConfiguration(certificatePath: certificate.certificatePath, privateKeyPath: certificate.keyPath))
    }

    override func tearDown() {
        server?.shutdown()
    }

    /// Runs `openssl s_client` against the listen point with `arguments`; its exit status and output.
    func handshake(_ arguments: [String]) throws -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
        process.arguments = ["20", "openssl", "s_client", "-connect", "127.0.0.1:\(server.port(.tls))"] + arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    func testModernClientsGetForwardSecretAEADSuites() throws {
        let (tls12, output12) = try handshake(["-tls1_2"])
        XCTAssertEqual(tls12, 0, output12)
        XCTAssertTrue(output12.contains("New, TLSv1.2, Cipher is ECDHE-"), output12)
        XCTAssertTrue(output12.contains("GCM") || output12.contains("CHACHA20"), output12)
        let (tls13, output13) = try handshake(["-tls1_3"])
        XCTAssertEqual(tls13, 0, output13)
        XCTAssertTrue(output13.contains("New, TLSv1.3"), output13)
    }

    func testOldProtocolsAndWeakSuitesAreRefused() throws {
        // The client is allowed TLS 1.1 (its own default forbids it), so the refusal is the server's.
        let (tls11, output11) = try handshake(["-tls1_1", "-cipher", "DEFAULT:@SECLEVEL=0"])
        XCTAssertNotEqual(tls11, 0, output11)
        XCTAssertTrue(output11.contains("alert protocol version"), output11)
        let (weak, outputWeak) = try handshake(["-tls1_2", "-cipher", "AES128-SHA"])
        XCTAssertNotEqual(weak, 0, outputWeak)
        XCTAssertTrue(outputWeak.contains("handshake failure"), outputWeak)
        // The listen point keeps serving after the refusals.
        let client = try TestSIPClient(transport: .tls, host: "127.0.0.1", port: server.port(.tls))
        try client.send(sipMessage(1))
        XCTAssertEqual(text(try client.receive(timeout: .seconds(10))), sipMessage(1))
    }
}
