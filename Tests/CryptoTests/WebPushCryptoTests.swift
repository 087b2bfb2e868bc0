import Crypto
import Foundation
import XCTest

/// The OpenSSL pieces web push is built from, each against a published vector: P-256 keys and ECDH,
/// HKDF-SHA256 and AES-128-GCM with RFC 8291 Appendix A's values (the whole message is checked in
/// PushTests' `WebPushTests`), HKDF with RFC 5869's test case 1, and base64url decoding.
final class WebPushCryptoTests: XCTestCase {
    /// RFC 8291 Appendix A, base64url as printed there (line breaks removed).
    enum Vector {
        static let applicationServerPublicKey =
            "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
        static let applicationServerPrivateKey = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
        static let userAgentPublicKey =
            "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
        static let userAgentPrivateKey = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"
        static let salt = "DGv6ra1nlYgDCS1FRnbzlw"
        static let authSecret = "BTBZMqHH6r4Tts7J_aSIgg"
        static let sharedSecret = "kyrL1jIIOHEzg3sM2ZWRHDRB62YACZhhSlknJ672kSs"
        static let prkKey = "Snr3JMxaHVDXHWJn5wdC52WjpCtd2EIEGBykDcZW32k"
        static let inputKeyMaterial = "S4lYMb_L0FxCeq0WhDx813KgSYqU26kOyzWUdsXYyrg"
        static let prk = "09_eUZGrsvxChDCGRCdkLiDXrReGOEVeSCdCcPBSJSc"
        static let contentEncryptionKey = "oIhVW04MRdy2XN9CiKLxTg"
        static let nonce = "4h_95klXJ5E_qnoN"
        static let plaintext = "When I grow up, I want to be a watermelon"
        static let ciphertext = "8pfeW0KbunFT06SuDKoJH9Ql87S1QUrdirN6GcG7sFz1y1sqLgVi1VhjVkHsUoEsbI_0LpXMuGvnzQ"
    }

    func bytes(_ base64url: String) throws -> [UInt8] {
        try XCTUnwrap(Base64URL.decode(base64url), "not base64url: \(base64url)")
    }

    func testRawPrivateKeyGivesTheVectorsPublicKeys() throws {
        let server = try P256KeyPair(rawPrivateKey: try bytes(Vector.applicationServerPrivateKey))
        XCTAssertEqual(Base64URL.encode(server.publicKey), Vector.applicationServerPublicKey)
        let agent = try P256KeyPair(rawPrivateKey: try bytes(Vector.userAgentPrivateKey))
        XCTAssertEqual(Base64URL.encode(agent.publicKey), Vector.userAgentPublicKey)
        XCTAssertFalse(server.description.contains(Vector.applicationServerPrivateKey))
    }

    func testECDHGivesTheVectorsSharedSecretFromEitherSide() throws {
        let server = try P256KeyPair(rawPrivateKey: try bytes(Vector.applicationServerPrivateKey))
        let agent = try P256KeyPair(rawPrivateKey: try bytes(Vector.userAgentPrivateKey))
        let fromServer = try server.sharedSecret(with: try P256PublicKey(uncompressedPoint: try bytes(Vector.userAgentPublicKey)))
        let fromAgent = try agent.sharedSecret(with: try P256PublicKey(uncompressedPoint: try bytes(Vector.applicationServerPublicKey)))
        XCTAssertEqual(Base64URL.encode(fromServer), Vector.sharedSecret)
        XCTAssertEqual(fromServer, fromAgent)
    }

    func testHKDFStepsGiveTheVectorsKeys() throws {
        let keyInfo = Array("WebPush: info".utf8) + [0] + (try bytes(Vector.userAgentPublicKey)) + (try bytes(Vector.applicationServerPublicKey))
        let prkKey = HKDF.extract(salt: try bytes(Vector.authSecret), inputKeyMaterial: try bytes(Vector.sharedSecret))
        XCTAssertEqual(Base64URL.encode(prkKey), Vector.prkKey)
        let ikm = HKDF.expand(pseudoRandomKey: prkKey, info: keyInfo, length: 32)
        XCTAssertEqual(Base64URL.encode(ikm), Vector.inputKeyMaterial)
        let prk = HKDF.extract(salt: try bytes(Vector.salt), inputKeyMaterial: ikm)
        XCTAssertEqual(Base64URL.encode(prk), Vector.prk)
        XCTAssertEqual(
            Base64URL.encode(HKDF.expand(pseudoRandomKey: prk, info: Array("Content-Encoding: aes128gcm".utf8) + [0], length: 16)),
            Vector.contentEncryptionKey)
        XCTAssertEqual(
            Base64URL.encode(HKDF.expand(pseudoRandomKey: prk, info: Array("Content-Encoding: nonce".utf8) + [0], length: 12)),
            Vector.nonce)
    }

    /// RFC 5869 Appendix A.1: a 42-byte output, so expand runs two HMAC rounds.
    func testHKDFMatchesRFC5869TestCase1() throws {
        let okm = HKDF.deriveKey(
            salt: try XCTUnwrap(Hex.decode("000102030405060708090a0b0c")), inputKeyMaterial: [UInt8](repeating: 0x0B, count: 22),
            info: try XCTUnwrap(Hex.decode("f0f1f2f3f4f5f6f7f8f9")), length: 42)
        XCTAssertEqual(Hex.encode(okm), "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
        XCTAssertEqual(
            Hex.encode(HKDF.extract(salt: try XCTUnwrap(Hex.decode("000102030405060708090a0b0c")), inputKeyMaterial: [UInt8](repeating: 0x0B, count: 22))),
            "077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5")
    }

    func testAESGCMSealsTheVectorsRecordAndOpensIt() throws {
        let key = try bytes(Vector.contentEncryptionKey)
        let nonce = try bytes(Vector.nonce)
        let record = Array(Vector.plaintext.utf8) + [0x02]
        let sealed = try AES128GCM.seal(record, key: key, nonce: nonce)
        XCTAssertEqual(Base64URL.encode(sealed), Vector.ciphertext)
        XCTAssertEqual(try AES128GCM.open(sealed, key: key, nonce: nonce), record)

        var tampered = sealed
        tampered[3] ^= 0x01
        XCTAssertThrowsError(try AES128GCM.open(tampered, key: key, nonce: nonce))
        var wrongTag = sealed
        wrongTag[wrongTag.count - 1] ^= 0x80
        XCTAssertThrowsError(try AES128GCM.open(wrongTag, key: key, nonce: nonce))
        XCTAssertThrowsError(try AES128GCM.seal(record, key: Array(key.prefix(15)), nonce: nonce))
        XCTAssertEqual(try AES128GCM.open(try AES128GCM.seal([], key: key, nonce: nonce), key: key, nonce: nonce), [])
    }

    func testPublicKeysOffTheCurveOrMisshapenAreRefused() throws {
        var point = try bytes(Vector.userAgentPublicKey)
        point[64] ^= 0x01
        XCTAssertThrowsError(try P256PublicKey(uncompressedPoint: point), "a point off the curve")
        XCTAssertThrowsError(try P256PublicKey(uncompressedPoint: Array(point.prefix(33))), "a compressed-size point")
        XCTAssertThrowsError(try P256PublicKey(uncompressedPoint: [0x05] + point.dropFirst()), "not the uncompressed form")
        XCTAssertThrowsError(try P256KeyPair(rawPrivateKey: [UInt8](repeating: 0, count: 32)), "zero is no private key")
        XCTAssertThrowsError(try P256KeyPair(rawPrivateKey: [UInt8](repeating: 0xFF, count: 32)), "above the group order")
        XCTAssertThrowsError(try P256KeyPair(rawPrivateKey: [1, 2, 3]))
    }

    func testGeneratedKeysRoundTripThroughPEMAndAgree() throws {
        let first = P256KeyPair.generate()
        let second = P256KeyPair.generate()
        XCTAssertNotEqual(first.publicKey, second.publicKey)
        XCTAssertEqual(first.publicKey.count, 65)
        XCTAssertEqual(first.publicKey.first, 0x04)
        let reloaded = try P256KeyPair(pem: first.privateKeyPEM())
        XCTAssertEqual(reloaded.publicKey, first.publicKey)
        XCTAssertEqual(
            try reloaded.sharedSecret(with: try P256PublicKey(uncompressedPoint: second.publicKey)),
            try second.sharedSecret(with: try P256PublicKey(uncompressedPoint: first.publicKey)))
        XCTAssertThrowsError(try P256KeyPair(pem: SigningKey.generateRSA().privateKeyPEM()), "an RSA key is not P-256")
        XCTAssertThrowsError(try P256KeyPair(pem: "not a key"))
    }

    func testBase64URLDecodesPaddedUnpaddedAndStandardAlphabets() {
        for length in 0..<40 {
            let data = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            let url = Base64URL.encode(data)
            XCTAssertEqual(Base64URL.decode(url), data, url)
            let standard = Data(data).base64EncodedString()
            XCTAssertEqual(Base64URL.decode(standard), data, standard)
        }
        XCTAssertNil(Base64URL.decode("A"), "one character is no whole byte")
        XCTAssertNil(Base64URL.decode("AB C"), "whitespace")
        XCTAssertNil(Base64URL.decode("AB=C"), "text after padding")
        XCTAssertNil(Base64URL.decode("AB==="), "too much padding")
        XCTAssertNil(Base64URL.decode("AB*D"))
        XCTAssertNil(Base64URL.decode("AR"), "stray bits after the last byte")
        XCTAssertEqual(Base64URL.decode(""), [])
    }
}
