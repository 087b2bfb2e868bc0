import Crypto
import XCTest

final class SecretSealTests: XCTestCase {
    let pem = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n"

    func testSealedValueOpensForItsContextOnly() throws {
        let seal = SecretSeal(current: .generate())
        let sealed = try seal.seal(pem, context: "push_apps.key_text:1")
        XCTAssertTrue(sealed.hasPrefix("v1:\(seal.current.id):"))
        XCTAssertFalse(sealed.contains("PRIVATE"))
        XCTAssertEqual(try seal.open(sealed, context: "push_apps.key_text:1"), pem)
        XCTAssertThrowsError(try seal.open(sealed, context: "push_apps.key_text:2")) { error in
            XCTAssertTrue("\(error)".contains("copied from another row"), "\(error)")
        }
    }

    func testEachSealingUsesAFreshNonce() throws {
        let seal = SecretSeal(current: .generate())
        XCTAssertNotEqual(try seal.seal("same", context: "c"), try seal.seal("same", context: "c"))
    }

    func testWrongKeyNamesBothKeysAndNeverTheValue() throws {
        let right = SecretSeal(current: .generate())
        let wrong = SecretSeal(current: .generate())
        let sealed = try right.seal("hunter2-trunk", context: "outbound_routes.password:7")
        XCTAssertThrowsError(try wrong.open(sealed, context: "outbound_routes.password:7")) { error in
            let text = "\(error)"
            XCTAssertTrue(text.contains(right.current.id) && text.contains(wrong.current.id), text)
            XCTAssertFalse(text.contains("hunter2"), text)
        }
    }

    func testAlteredCiphertextDoesNotOpen() throws {
        let seal = SecretSeal(current: .generate())
        var sealed = Array(try seal.seal("abcdef0123456789", context: "c").utf8)
        sealed[sealed.count - 3] = sealed[sealed.count - 3] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        XCTAssertThrowsError(try seal.open(String(decoding: sealed, as: UTF8.self), context: "c"))
        XCTAssertThrowsError(try seal.open("plain text", context: "c")) { error in
            XCTAssertTrue("\(error)".contains("not a sealed value"), "\(error)")
        }
    }

    func testOlderKeysOpenAndTheFirstSeals() throws {
        let old = SecretSealKey.generate()
        let new = SecretSealKey.generate()
        let sealedOld = try SecretSeal(current: old).seal("x", context: "c")
        let ring = try SecretSeal(keyText: "# rotated\n\(new.hexText)\n\n\(old.hexText)\n")
        XCTAssertEqual(ring.current.id, new.id)
        XCTAssertEqual(try ring.open(sealedOld, context: "c"), "x")
        XCTAssertEqual(SecretSeal.keyID(of: try ring.seal("y", context: "c")), new.id)
    }

    func testOneOpenerOpensManyValuesOfEveryKeyAfterOneThatFails() throws {
        let old = SecretSealKey.generate()
        let ring = SecretSeal(current: .generate(), older: [old])
        let values = try (0..<50).map { index in
            (text: "ha1-\(index)", context: "extensions.ha1_md5:\(index)@example.com",
             sealed: try (index % 2 == 0 ? ring : SecretSeal(current: old)).seal("ha1-\(index)", context: "extensions.ha1_md5:\(index)@example.com"))
        }
        let opener = ring.opener()
        for (index, value) in values.enumerated() {
            XCTAssertEqual(try opener.open(value.sealed, context: value.context), value.text)
            // A value that does not open (another row's context) leaves the opener opening the next.
            XCTAssertThrowsError(try opener.open(value.sealed, context: values[(index + 1) % values.count].context)) { error in
                XCTAssertTrue("\(error)".contains("copied from another row"), "\(error)")
            }
        }
        XCTAssertThrowsError(try opener.open("v1:\(ring.current.id):AB*D", context: "c")) { error in
            XCTAssertTrue("\(error)".contains("damaged"), "\(error)")
        }
        XCTAssertThrowsError(try opener.open("v1:0000beef:AAAA", context: "c")) { error in
            XCTAssertTrue("\(error)".contains("sealed with secrets key 0000beef"), "\(error)")
        }
    }

    func testKeyTextIsHexOrBase64OfThirtyTwoBytes() throws {
        let key = SecretSealKey.generate()
        let bytes = Hex.decode(key.hexText)!
        let base64 = Data(bytes).base64EncodedString()
        XCTAssertEqual(try SecretSealKey(text: key.hexText + "\n").id, key.id)
        XCTAssertEqual(try SecretSealKey(text: base64).id, key.id)
        XCTAssertEqual(try SecretSealKey(text: Base64URL.encode(bytes)).id, key.id)
        XCTAssertThrowsError(try SecretSealKey(text: String(key.hexText.dropLast(2))))
        XCTAssertThrowsError(try SecretSealKey(text: "not a key at all!"))
        XCTAssertThrowsError(try SecretSeal(keyText: "\n# nothing\n"))
        XCTAssertFalse("\(key)".contains(key.hexText))
    }

    func testAES256GCMMatchesAKnownAnswer() throws {
        // NIST GCM test vector (gcmEncryptExtIV256, Count 0 with AAD): key, IV, AAD, PT → CT ‖ tag.
        let key = Hex.decode("92e11dcdaa866f5ce790fd24501f92509aacf4cb8b1339d50c9c1240935dd08b")!
        let nonce = Hex.decode("ac93a1a6145299bde902f21a")!
        let plaintext = Hex.decode("2d71bcfa914e4ac045b2aa60955fad24")!
        let aad = Hex.decode("1e0889016f67601c8ebea4943bc23ad6")!
        let sealed = try AES256GCM.seal(plaintext, key: key, nonce: nonce, additionalData: aad)
        XCTAssertEqual(Hex.encode(sealed), "8995ae2e6df3dbf96fac7b7137bae67f" + "eca5aa77d51d4a0a14d9c51e1da474ab")
        XCTAssertEqual(try AES256GCM.open(sealed, key: key, nonce: nonce, additionalData: aad), plaintext)
    }
}
