import RouseVocabulary
import XCTest

/// `trusted_peers`: the addresses and blocks whose INVITEs are not challenged.
final class TrustedPeersTests: XCTestCase {
    func testTrustedPeersMatchAddressesAndBlocks() throws {
        let peers = try TrustedPeers(parsing: ["192.0.2.10", "10.0.0.0/8", "2001:db8::/32"])
        XCTAssertTrue(peers.contains("192.0.2.10"))
        XCTAssertFalse(peers.contains("192.0.2.11"))
        XCTAssertTrue(peers.contains("10.200.3.4"))
        XCTAssertTrue(peers.contains("[2001:db8::7]"))
        XCTAssertFalse(peers.contains("2001:db9::7"))
        XCTAssertFalse(TrustedPeers().contains("127.0.0.1"))
        XCTAssertThrowsError(try TrustedPeers(parsing: ["10.0.0.0/33"]))
        XCTAssertThrowsError(try TrustedPeers(parsing: ["pbx.example.com"]))
    }
}
