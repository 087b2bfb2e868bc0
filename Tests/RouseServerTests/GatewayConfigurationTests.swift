import Registrar
import RouseServer
import XCTest

/// `gateway_pbx` and `gateway_register_expires` as `rouse serve` reads them: off by default, one
/// PBX per organisation, refused with the setting named (and never the password shown).
final class GatewayConfigurationTests: XCTestCase {
    func testGatewayIsOffByDefaultAndEntriesReadWithTheirExpiry() throws {
        let defaults = try ConfigurationLoader.load(flags: [], environment: [:])
        XCTAssertEqual(defaults.gatewayPBXs, [])
        XCTAssertEqual(defaults.gatewayRegisterExpires, 600)

        let set = try ConfigurationLoader.load(
            flags: ["--gateway-register-expires", "300"],
            environment: ["ROUSE_GATEWAY_PBX": "example.com=192.0.2.20:5070;transport=tcp;user=rouse;password=pbx-secret,acme.example=[2001:db8::20]"])
        XCTAssertEqual(set.gatewayPBXs.map(\.description), [
            "example.com=192.0.2.20:5070;transport=tcp;user=rouse;password=…", "acme.example=[2001:db8::20]:5060;transport=udp",
        ])
        XCTAssertEqual(set.gatewayPBXs.map(\.expires), [300, 300])
        XCTAssertEqual(set.gatewayPBXs.first?.password, "pbx-secret")
    }

    func testABadEntryIsRefusedNamingTheSettingWithoutItsPassword() {
        for (entry, expected) in [
            ("example.com=pbx.example.net", "must be an IP address"), ("example.com=192.0.2.20;transport=sctp", "transport must be udp or tcp"),
            ("192.0.2.20:5060", "is not organisation=host:port"), ("example.com=192.0.2.20;password=hush", "user and password go together"),
        ] {
            XCTAssertThrowsError(try ConfigurationLoader.load(flags: [], environment: ["ROUSE_GATEWAY_PBX": entry]), entry) { error in
                let text = "\(error)"
                XCTAssertTrue(text.contains("gateway_pbx:") && text.contains(expected), text)
                XCTAssertFalse(text.contains("hush"), text)
            }
        }
        XCTAssertThrowsError(try ConfigurationLoader.load(flags: [], environment: ["ROUSE_GATEWAY_REGISTER_EXPIRES": "5"]))
    }
}
