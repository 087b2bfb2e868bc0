import Glibc
import RouseVocabulary
import XCTest

@testable import SIPTransport

/// The loop's peer addresses read from the kernel's binary form: the same text form as
/// `inet_ntop` gives, once per peer, bounded.
final class PeerAddressCacheTests: XCTestCase {
    private func storage(_ ip: String, _ port: UInt16) throws -> sockaddr_storage {
        var storage = sockaddr_storage()
        let address = try SocketAddress(ip: ip, port: port)
        address.withSockAddr { pointer, length in
            withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: UnsafeRawBufferPointer(start: pointer, count: Int(length))) }
        }
        return storage
    }

    func testReadsBothFamiliesAsInetNtopDoesAndKeepsEachPeerOnce() throws {
        var cache = PeerAddressCache(limit: 3)
        var v4 = try storage("192.0.2.7", 5060)
        var v6 = try storage("2001:db8::7", 40000)
        var otherPort = try storage("192.0.2.7", 5061)
        XCTAssertEqual(cache.address(of: &v4), try SocketAddress(ip: "192.0.2.7", port: 5060))
        XCTAssertEqual(cache.address(of: &v6), try SocketAddress(ip: "2001:db8::7", port: 40000))
        XCTAssertEqual(cache.address(of: &otherPort)?.port, 5061)
        XCTAssertEqual(cache.address(of: &v4)?.ip, "192.0.2.7")
        XCTAssertEqual(cache.count, 3, "one entry per peer")
        var fourth = try storage("198.51.100.1", 1)
        XCTAssertEqual(cache.address(of: &fourth)?.ip, "198.51.100.1")
        XCTAssertEqual(cache.count, 1, "full: started again")
        var unknown = sockaddr_storage()
        unknown.ss_family = sa_family_t(AF_UNIX)
        XCTAssertNil(cache.address(of: &unknown))
    }
}
