import Crypto
import Foundation
import Registrar
import RouseVocabulary
import XCTest

/// The compact forms of what an instance holds per binding and per extension read and compare as
/// the plain values they stand for.
final class CompactBindingTests: XCTestCase {
    private static let now = Date(timeIntervalSince1970: 1_800_000_000)

    private static func binding(domain: String = "compact.example.test", userAgent: String? = "Linphone/5.2.0 (iPhone) LinphoneSDK") -> Binding {
        Binding(
            id: UUID(uuidString: "6f1c2a0e-0000-4000-8000-000000000001")!, aor: AddressOfRecord(number: "1001", domain: domain),
            contact: "sip:1001@192.0.2.7:5060", callID: "call-1", cseq: 1, registeredAt: now, expiresAt: now.addingTimeInterval(600),
            userAgent: userAgent,
            flow: BindingFlow(
                transport: .udp, source: SocketAddress(parsing: "192.0.2.7:5060"), connectionID: FlowConnectionID("udp#0/192.0.2.7:5060"),
                local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "instance-a"))
    }

    func testFieldsKeptOutOfLineReadBackAndAClearedOneEqualsOneNeverSet() {
        var binding = Self.binding()
        let plain = binding
        let channel = PushChannel(provider: .apns, token: "ABCDEF0123", param: "TEAM.org.example.app.voip", kind: .voip)
        binding.instance = "<urn:uuid:00000000-0000-4000-8000-000000000abc>"
        binding.regID = 1
        binding.q = 0.5
        binding.path = ["<sip:edge.example.test;lr>"]
        binding.pushChannels = [channel]
        binding.refreshesItself = true
        XCTAssertEqual(binding.instance, "<urn:uuid:00000000-0000-4000-8000-000000000abc>")
        XCTAssertEqual(binding.regID, 1)
        XCTAssertEqual(binding.q, 0.5)
        XCTAssertEqual(binding.path, ["<sip:edge.example.test;lr>"])
        XCTAssertEqual(binding.pushChannels, [channel])
        XCTAssertTrue(binding.refreshesItself)
        XCTAssertNotEqual(binding, plain)

        var copy = binding
        copy.q = 0.7
        XCTAssertEqual(binding.q, 0.5, "a copy's change leaves the original as it was")
        copy.q = 0.5
        XCTAssertEqual(copy, binding, "equal fields, equal bindings, whichever box holds them")
        XCTAssertEqual(Set([copy, binding]).count, 1)

        binding.instance = nil
        binding.regID = nil
        binding.q = nil
        binding.path = []
        binding.pushChannels = []
        binding.refreshesItself = false
        XCTAssertEqual(binding, plain)
        XCTAssertEqual(binding.hashValue, plain.hashValue)
    }

    func testDomainAndUserAgentReadAsGivenWhenShared() {
        let one = Self.binding()
        var other = Self.binding(domain: "COMPACT.Example.TEST", userAgent: nil)
        XCTAssertEqual(one.aor, other.aor, "the domain is still lower-cased")
        XCTAssertEqual(other.aor.domain, "compact.example.test")
        XCTAssertNil(other.userAgent)
        other.userAgent = "Linphone/5.2.0 (iPhone) LinphoneSDK"
        other.aor = AddressOfRecord(number: "1002", domain: "compact.example.test")
        XCTAssertEqual(other.userAgent, one.userAgent)
        XCTAssertEqual(other.aor.description, "1002@compact.example.test")
    }

    func testCredentialsKeepBothHashesAsGiven() throws {
        let aor = AddressOfRecord(number: "1001", domain: "compact.example.test")
        let credentials = ExtensionCredentials(aor: aor, password: "secret-1")
        XCTAssertEqual(credentials.ha1MD5, ExtensionCredentials.ha1(.md5, number: "1001", realm: "compact.example.test", password: "secret-1"))
        XCTAssertEqual(
            credentials.ha1SHA256, ExtensionCredentials.ha1(.sha256, number: "1001", realm: "compact.example.test", password: "secret-1"))
        XCTAssertEqual(credentials.md5.count, 16)
        XCTAssertEqual(credentials.sha256.count, 32)
        let read = try XCTUnwrap(ExtensionCredentials(aor: aor, ha1MD5: credentials.ha1MD5.uppercased(), ha1SHA256: credentials.ha1SHA256))
        XCTAssertEqual(read, credentials)
        XCTAssertNotEqual(ExtensionCredentials(aor: aor, password: "secret-2"), credentials)
    }
}
