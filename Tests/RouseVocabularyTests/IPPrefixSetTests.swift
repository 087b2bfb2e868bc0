import RouseVocabulary
import XCTest

final class IPPrefixSetTests: XCTestCase {
    func testIPv4AddressesAndBlocksMatchOnTheirPrefixOnly() throws {
        let set = try IPPrefixSet(parsing: ["192.0.2.10", " 10.0.0.0/8 ", "198.51.100.128/25", ""])
        XCTAssertTrue(set.contains("192.0.2.10"))
        XCTAssertFalse(set.contains("192.0.2.11"), "a bare address is a /32")
        XCTAssertTrue(set.contains("10.255.0.1"))
        XCTAssertFalse(set.contains("11.0.0.1"))
        XCTAssertTrue(set.contains("198.51.100.200"))
        XCTAssertFalse(set.contains("198.51.100.127"), "a prefix that is not a whole byte")
        XCTAssertFalse(set.contains("2001:db8::1"), "an IPv6 address is never in an IPv4 block")
        XCTAssertFalse(set.contains("not-an-address"))
    }

    func testIPv6BlocksMatchWithOrWithoutBrackets() throws {
        let set = try IPPrefixSet(parsing: ["2001:db8::/32", "::1"])
        XCTAssertTrue(set.contains("2001:db8:ffff::7"))
        XCTAssertTrue(set.contains("[2001:db8::7]"))
        XCTAssertFalse(set.contains("2001:db9::7"))
        XCTAssertTrue(set.contains("::1"))
        XCTAssertFalse(set.contains("::2"))
        XCTAssertFalse(set.contains("127.0.0.1"))
    }

    func testIPv4MappedAddressesAreTheIPv4AddressTheyMap() throws {
        let v4 = try IPPrefixSet(parsing: ["192.0.2.0/24"])
        XCTAssertTrue(v4.contains("::ffff:192.0.2.44"))
        XCTAssertTrue(v4.contains("[::ffff:c000:22c]"))
        XCTAssertFalse(v4.contains("::ffff:192.0.3.1"))
        let mapped = try IPPrefixSet(parsing: ["::ffff:10.0.0.0/104"])
        XCTAssertTrue(mapped.contains("10.1.2.3"), "a mapped block is the IPv4 block /8")
        XCTAssertTrue(mapped.contains("::ffff:10.1.2.3"))
        XCTAssertFalse(mapped.contains("11.1.2.3"))
    }

    func testEmptySetHoldsNothingAndBadEntriesAreNamed() {
        XCTAssertTrue(IPPrefixSet().isEmpty)
        XCTAssertFalse(IPPrefixSet().contains("127.0.0.1"))
        XCTAssertThrowsError(try IPPrefixSet(parsing: ["10.0.0.0/8", "10.0.0.0/33"])) { error in
            XCTAssertEqual((error as? IPPrefixSetError)?.entry, "10.0.0.0/33")
        }
        XCTAssertThrowsError(try IPPrefixSet(parsing: ["2001:db8::/129"]))
        XCTAssertThrowsError(try IPPrefixSet(parsing: ["pbx.example.com"])) { error in
            XCTAssertTrue("\(error)".contains("\"pbx.example.com\" is not an IP address or CIDR block"), "\(error)")
        }
        XCTAssertThrowsError(try IPPrefixSet(parsing: ["10.0.0.0/x"]))
    }

    func testIPAddressLiterals() {
        XCTAssertTrue(IPPrefixSet.isIPAddress("192.0.2.1"))
        XCTAssertTrue(IPPrefixSet.isIPAddress("[::1]"))
        XCTAssertFalse(IPPrefixSet.isIPAddress("192.0.2.256"))
        XCTAssertFalse(IPPrefixSet.isIPAddress("example.com"))
    }
}
