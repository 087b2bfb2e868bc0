import Crypto
import Foundation
import XCTest

/// ES256/RS256 signing, PEM loading and JWTs; the ES256 signature is also checked by the `openssl`
/// command (an independent verifier) when it is installed.
final class SigningTests: XCTestCase {
    func testES256SignatureIsRawAndVerifies() throws {
        let key = try SigningKey.p256(pem: SigningKey.generateP256().privateKeyPEM())
        let message = Array("eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJUIn0".utf8)
        let signature = try key.sign(message)
        XCTAssertEqual(signature.count, 64)
        XCTAssertTrue(key.verify(signature: signature, message: message))
        var tampered = signature
        tampered[10] ^= 0x01
        XCTAssertFalse(key.verify(signature: tampered, message: message))
        XCTAssertFalse(key.verify(signature: signature, message: message + [0x2E]))
    }

    func testES256SignatureVerifiesWithOpenSSLCommand() throws {
        let openssl = try XCTUnwrap(
            ["/usr/bin/openssl", "/usr/local/bin/openssl"].first(where: FileManager.default.isExecutableFile),
            "the openssl command is needed (scripts/deps.sh installs it)")
        let key = SigningKey.generateP256()
        let message = Array("header.claims".utf8)
        let raw = try key.sign(message)
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("rouse-sign-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try key.publicKeyPEM().write(to: folder.appendingPathComponent("pub.pem"), atomically: true, encoding: .utf8)
        try Data(message).write(to: folder.appendingPathComponent("msg"))
        // DER ECDSA-Sig-Value built here independently of Crypto's own conversion.
        try Data(Self.der(raw)).write(to: folder.appendingPathComponent("sig.der"))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: openssl)
        process.arguments = ["dgst", "-sha256", "-verify", folder.appendingPathComponent("pub.pem").path,
                             "-signature", folder.appendingPathComponent("sig.der").path, folder.appendingPathComponent("msg").path]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        process.waitUntilExit()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertEqual(process.terminationStatus, 0, text)
        XCTAssertTrue(text.contains("Verified OK"), text)
    }

    func testRS256SignsAndVerifies() throws {
        let key = try SigningKey.rsa(pem: SigningKey.generateRSA().privateKeyPEM())
        let signature = try key.sign(Array("x".utf8))
        XCTAssertEqual(signature.count, 256)
        XCTAssertTrue(key.verify(signature: signature, message: Array("x".utf8)))
    }

    func testWrongKeyKindsAreNamedWithoutKeyMaterial() throws {
        let rsaPEM = SigningKey.generateRSA().privateKeyPEM()
        let ecPEM = SigningKey.generateP256().privateKeyPEM()
        XCTAssertThrowsError(try SigningKey.p256(pem: rsaPEM)) { error in
            XCTAssertTrue("\(error)".contains("not a P-256"), "\(error)")
            XCTAssertFalse("\(error)".contains("MII"), "\(error)")
        }
        XCTAssertThrowsError(try SigningKey.rsa(pem: ecPEM)) { error in
            XCTAssertTrue("\(error)".contains("not an RSA"), "\(error)")
        }
        XCTAssertThrowsError(try SigningKey.p256(pem: "hello")) { error in
            XCTAssertTrue("\(error)".contains("not a PEM private key"), "\(error)")
        }
        let body = ecPEM.split(separator: "\n").dropFirst().first.map(String.init) ?? ""
        let broken = "-----BEGIN PRIVATE KEY-----\n\(body)\n-----END PRIVATE KEY-----\n"
        XCTAssertThrowsError(try SigningKey.p256(pem: broken)) { error in
            XCTAssertTrue("\(error)".contains("does not parse"), "\(error)")
            XCTAssertFalse("\(error)".contains(body), "\(error)")
        }
        let key = try SigningKey.p256(pem: ecPEM)
        XCTAssertEqual("\(key)", "P-256 private key")
        XCTAssertFalse(String(reflecting: key).contains("MI"))
    }

    func testJSONWebTokenHasHeaderClaimsAndVerifiableSignature() throws {
        let key = SigningKey.generateP256()
        let token = try JSONWebToken.make(
            header: [("kid", .string("ABC123DEFG"))], claims: [("iss", .string("DEF123GHIJ")), ("iat", .integer(1_700_000_000))], key: key)
        let parts = token.split(separator: ".").map(String.init)
        XCTAssertEqual(parts.count, 3)
        XCTAssertEqual(Self.decode(parts[0]), #"{"alg":"ES256","kid":"ABC123DEFG"}"#)
        XCTAssertEqual(Self.decode(parts[1]), #"{"iss":"DEF123GHIJ","iat":1700000000}"#)
        let signature = Data(base64Encoded: Self.padded(parts[2]))!
        XCTAssertEqual(signature.count, 64)
        XCTAssertTrue(key.verify(signature: Array(signature), message: Array((parts[0] + "." + parts[1]).utf8)))
    }

    func testSHA1KnownVector() {
        XCTAssertEqual(Hex.encode(Digest.sha1(Array("abc".utf8))), "a9993e364706816aba3e25717850c26c9cd0d89d")
    }

    static func padded(_ base64url: String) -> String {
        var text = base64url.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        return text
    }

    static func decode(_ part: String) -> String {
        String(decoding: Data(base64Encoded: padded(part)) ?? Data(), as: UTF8.self)
    }

    /// Minimal DER for SEQUENCE { INTEGER r, INTEGER s } (lengths below 128).
    static func der(_ raw: [UInt8]) -> [UInt8] {
        func integer(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
            var value = Array(bytes.drop { $0 == 0 })
            if value.isEmpty { value = [0] }
            if value[0] & 0x80 != 0 { value.insert(0, at: 0) }
            return [0x02, UInt8(value.count)] + value
        }
        let body = integer(raw[0..<32]) + integer(raw[32..<64])
        return [0x30, UInt8(body.count)] + body
    }
}
