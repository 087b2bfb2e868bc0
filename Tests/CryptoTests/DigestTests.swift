import Crypto
import Dispatch
import Synchronization
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

/// The piecewise hash, the prepared HMAC key and the hex comparison the digest check uses.
final class DigestStreamTests: XCTestCase {
    func testPiecesHashAsTheWholeText() {
        for algorithm in Digest.Algorithm.allCases {
            var stream = DigestStream(algorithm)
            stream.update("Mufasa")
            stream.update(byte: UInt8(ascii: ":"))
            stream.update("http-auth@example.org:Circle of Life"[...])
            let digest = stream.finish()
            XCTAssertEqual(digest.hex, Digest.hex(algorithm, "Mufasa:http-auth@example.org:Circle of Life"))
            XCTAssertEqual(digest.count, algorithm.byteCount)

            var outer = DigestStream(algorithm)
            outer.update(hexOf: digest)
            let nested = outer.finish()
            XCTAssertEqual(nested.hex, Digest.hex(algorithm, digest.hex), "a digest enters the next one as lower-case hex")
        }
    }

    func testReusedContextsStartEachHashAfresh() {
        let abc = "900150983cd24fb0d6963f7d28e17f72"  // MD5("abc")
        do {
            var dropped = DigestStream(.sha256)
            dropped.update("left unfinished")
        }
        var outer = DigestStream(.md5)
        outer.update("a")
        var inner = DigestStream(.sha256)  // opened while another is: a context of its own
        inner.update("abc")
        let innerHex = inner.finish().hex
        XCTAssertEqual(innerHex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        outer.update("bc")
        let outerHex = outer.finish().hex
        XCTAssertEqual(outerHex, abc, "the open hash is untouched by the one inside it")
        for _ in 0..<3 {
            var again = DigestStream(.md5)
            again.update("abc")
            let hex = again.finish().hex
            XCTAssertEqual(hex, abc)
        }
    }

    func testHashesOnManyThreadsAtOnce() {
        let expected = Digest.hex(.md5, "thread-safe")
        let wrong = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 64) { index in
            for _ in 0..<50 {
                var stream = DigestStream(index % 2 == 0 ? .md5 : .sha256)
                stream.update("thread-safe")
                let digest = stream.finish()
                if index % 2 == 0, digest.hex != expected { wrong.withLock { $0 += 1 } }
            }
        }
        XCTAssertEqual(wrong.withLock { $0 }, 0)
    }

    func testPreparedHMACKeyMatchesRFC4231() {
        // RFC 4231 test case 2, and case 6 (a key longer than the block is hashed first).
        XCTAssertEqual(
            HMACSHA256Key(Array("Jefe".utf8)).mac(Array("what do ya want for nothing?".utf8)).hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        let key = HMACSHA256Key([UInt8](repeating: 0xAA, count: 131))
        let message = Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8)
        XCTAssertEqual(key.mac(message).hex, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
        XCTAssertEqual(key.mac(message), key.mac(message), "the key is reused, not used up")
    }

    func testHexComparisonTakesEitherCaseAndNothingElse() {
        let digest = DigestStream(.md5).finish()  // d41d8cd98f00b204e9800998ecf8427e
        XCTAssertTrue(digest.matchesHex("d41d8cd98f00b204e9800998ecf8427e"[...]))
        XCTAssertTrue(digest.matchesHex("D41D8CD98F00B204E9800998ECF8427E"[...]))
        XCTAssertFalse(digest.matchesHex("d41d8cd98f00b204e9800998ecf8427f"[...]))
        XCTAssertFalse(digest.matchesHex("d41d8cd98f00b204e9800998ecf8427"[...]))
        XCTAssertFalse(digest.matchesHex("d41d8cd98f00b204e9800998ecf8427g"[...]))
        let matches = [UInt8]([0x00, 0xFF]).withUnsafeBytes { bytes in Array("00Ff".utf8).withUnsafeBytes { Hex.matches(bytes, hex: $0) } }
        XCTAssertTrue(matches)
    }
}
