import Foundation
import RouseTestSupport
import RouseVocabulary
import SIPTransport
import XCTest

/// Client certificates on a TLS listen point (issue 9 item 5; settings `tls_client_ca`,
/// `tls_require_client_cert`), checked with `openssl s_client`: with a CA configured, a client
/// presenting a certificate that CA signed is served; one presenting a certificate of another CA
/// is refused in the handshake; one without a certificate is served when the certificate is
/// optional and refused when it is required. A reload (SIGHUP) reads the CA file again.
final class TLSClientCertificateTests: XCTestCase {
    var authority: TestCertificateAuthority!
    var serverCertificate: TestCertificate!
    var servers: [EchoServer] = []

    override func setUpWithError() throws {
        authority = try TestCertificateAuthority()
        serverCertificate = try TestCertificate.make(commonName: "rouse.test")
    }

    override func tearDown() {
        servers.forEach { $0.shutdown() }
        authority?.remove()
        serverCertificate?.remove()
    }

    func server(caPath: String? = nil, required: Bool) throws -> EchoServer {
        let server = try EchoServer(
            ["tls:127.0.0.1:0"],
            tls: TLSConfiguration(
                certificatePath: serverCertificate.certificatePath, privateKeyPath: serverCertificate.keyPath,
                clientCertificateAuthorityPath: caPath ?? authority.certificatePath, requiresClientCertificate: required))
        servers.append(server)
        return server
    }

    /// Connects with `openssl s_client` (TLS 1.2 or 1.3, with `certificate` when given), sends one
    /// OPTIONS and waits for it to come back (the echo server returns what it reads). True when it
    /// came back: the connection was let in.
    func served(by server: EchoServer, tls13: Bool, certificate: TestCertificate?) throws -> (Bool, String) {
        var arguments = ["20", "openssl", "s_client", "-connect", "127.0.0.1:\(server.port(.tls))", tls13 ? "-tls1_3" : "-tls1_2", "-ign_eof"]
        if let certificate { arguments += ["-cert", certificate.certificatePath, "-key", certificate.keyPath] }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
        process.arguments = arguments
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let marker = "tls-client-cert-\(UUID().uuidString)"
        let message = "OPTIONS sip:127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/TLS 127.0.0.1:5099;branch=z9hG4bK\(marker)\r\n"
            + "From: <sip:ping@127.0.0.1>;tag=1\r\nTo: <sip:127.0.0.1>\r\nCall-ID: \(marker)\r\nCSeq: 1 OPTIONS\r\n"
            + "Max-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
        input.fileHandleForWriting.write(Data(message.utf8))
        // The echo comes back when the server let the connection in; otherwise the server ends the
        // handshake with an alert and s_client exits. Either way, the text decides; then stop it.
        var text = ""
        let deadline = Date().addingTimeInterval(20)
        let reader = output.fileHandleForReading
        while Date() < deadline {
            let chunk = reader.availableData
            if chunk.isEmpty { break }
            text += String(decoding: chunk, as: UTF8.self)
            if text.components(separatedBy: "Call-ID: \(marker)").count > 1 { break }
        }
        try? input.fileHandleForWriting.close()
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        return (text.components(separatedBy: "Call-ID: \(marker)").count > 1, text)
    }

    func testOptionalClientCertificate() throws {
        let server = try server(required: false)
        let signed = try authority.issueClientCertificate(commonName: "desk-phone-1")
        let stranger = try TestCertificateAuthority(commonName: "Someone else's CA").issueClientCertificate(commonName: "intruder")
        for tls13 in [false, true] {
            let (withSigned, signedText) = try served(by: server, tls13: tls13, certificate: signed)
            XCTAssertTrue(withSigned, "a certificate the CA signed is let in (TLS 1.\(tls13 ? 3 : 2)): \(signedText)")
            let (withStranger, strangerText) = try served(by: server, tls13: tls13, certificate: stranger)
            XCTAssertFalse(withStranger, "a certificate of another CA is refused (TLS 1.\(tls13 ? 3 : 2)): \(strangerText)")
            XCTAssertTrue(strangerText.contains("alert"), strangerText)
            let (without, withoutText) = try served(by: server, tls13: tls13, certificate: nil)
            XCTAssertTrue(without, "no certificate is let in when it is optional (TLS 1.\(tls13 ? 3 : 2)): \(withoutText)")
        }
        // The server names its CA in the certificate request, so a client knows what to send.
        let (_, text) = try served(by: server, tls13: false, certificate: nil)
        XCTAssertTrue(text.contains("Acceptable client certificate CA names"), text)
        XCTAssertTrue(text.contains("Rouse test client CA"), text)
    }

    func testRequiredClientCertificate() throws {
        let server = try server(required: true)
        let signed = try authority.issueClientCertificate(commonName: "desk-phone-2")
        for tls13 in [false, true] {
            let (withSigned, signedText) = try served(by: server, tls13: tls13, certificate: signed)
            XCTAssertTrue(withSigned, "a certificate the CA signed is let in (TLS 1.\(tls13 ? 3 : 2)): \(signedText)")
            let (without, withoutText) = try served(by: server, tls13: tls13, certificate: nil)
            XCTAssertFalse(without, "no certificate is refused when it is required (TLS 1.\(tls13 ? 3 : 2)): \(withoutText)")
            XCTAssertTrue(withoutText.contains("alert"), withoutText)
        }
    }

    func testAReloadReadsTheCAFileAgain() throws {
        let folder = try TemporaryFolder(prefix: "rouse-client-ca")
        defer { folder.remove() }
        let caPath = folder.file("ca.pem")
        try FileManager.default.copyItem(atPath: authority.certificatePath, toPath: caPath)
        let server = try server(caPath: caPath, required: true)
        let renewed = try TestCertificateAuthority(commonName: "Rouse test client CA, renewed")
        let phone = try renewed.issueClientCertificate(commonName: "desk-phone-3")
        XCTAssertFalse(try served(by: server, tls13: false, certificate: phone).0, "the new CA is not trusted yet")
        try FileManager.default.removeItem(atPath: caPath)
        try FileManager.default.copyItem(atPath: renewed.certificatePath, toPath: caPath)
        try server.layer.reloadTLS(certificatePath: serverCertificate.certificatePath, privateKeyPath: serverCertificate.keyPath)
        XCTAssertTrue(try served(by: server, tls13: false, certificate: phone).0, "after the reload the new CA's certificates are let in")
    }
}
