import Crypto
import XCTest

final class DigestTests: XCTestCase {
    func testKnownDigests() {
        // RFC 1321 and FIPS 180-2 test vectors.
        XCTAssertEqual(Digest.hex(.md5, "abc"), "900150983cd24fb0d6963f7d28e17f72")
        XCTAssertEqual(Digest.hex(.sha256, "abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    func testRFC7616DigestExample() {
        // RFC 7616 §3.9.1: Mufasa / Circle of Life, realm http-auth@example.org.
        let ha1 = Digest.hex(.md5, "Mufasa:http-auth@example.org:Circle of Life")
        let ha2 = Digest.hex(.md5, "GET:/dir/index.html")
        let response = Digest.hex(
            .md5, "\(ha1):7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v:00000001:f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ:auth:\(ha2)")
        XCTAssertEqual(response, "8ca523f5e9506fed4657c9700eebdbec")
        let ha1SHA = Digest.hex(.sha256, "Mufasa:http-auth@example.org:Circle of Life")
        let ha2SHA = Digest.hex(.sha256, "GET:/dir/index.html")
        let responseSHA = Digest.hex(
            .sha256, "\(ha1SHA):7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v:00000001:f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ:auth:\(ha2SHA)")
        XCTAssertEqual(responseSHA, "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1")
    }

    func testHMACSHA256RFC4231Case2() {
        let mac = Digest.hmacSHA256(key: Array("Jefe".utf8), message: Array("what do ya want for nothing?".utf8))
        XCTAssertEqual(Hex.encode(mac), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    func testHexAndBase64URL() {
        XCTAssertEqual(Hex.decode("00ffA0"), [0x00, 0xFF, 0xA0])
        XCTAssertNil(Hex.decode("0g"))
        XCTAssertNil(Hex.decode("abc"))
        XCTAssertEqual(Base64URL.encode(Array("any carnal pleas".utf8)), "YW55IGNhcm5hbCBwbGVhcw")
        XCTAssertEqual(Base64URL.encode([0xFB, 0xFF]), "-_8")
    }

    func testRandomBytesDiffer() {
        XCTAssertEqual(SecureRandom.bytes(16).count, 16)
        XCTAssertNotEqual(SecureRandom.hex(16), SecureRandom.hex(16))
        XCTAssertTrue(Digest.constantTimeEquals([1, 2, 3], [1, 2, 3]))
        XCTAssertFalse(Digest.constantTimeEquals([1, 2, 3], [1, 2, 4]))
    }
}
