import Foundation
import Registrar
import RouseVocabulary
import SIPMessage
import XCTest

/// Inputs the libFuzzer harnesses (Sources/*Fuzz) found; each once trapped.
final class FuzzRegressionTests: XCTestCase {
    /// PushParametersFuzz: a Contact whose pn-prid holds bytes that are not UTF-8 (read as U+FFFD)
    /// and combining marks. Rouse parsed it; the trap was Foundation's `String.contains(String)`
    /// (swift-corelibs-foundation `range(of:)`, "String index is out of bounds") on the token, so
    /// the checks here and in the harness compare bytes.
    func testPushParametersWithInvalidUTF8DoNotTrap() throws {
        let bytes = try XCTUnwrap(Data(base64Encoded: "PHNpcDoxMDAyQDA2MD47cG4tcHJvdmlkZXI9YXBuczstZGlwcHI9bi1wcm92aWRlcj1hcG5zO3BuLXByaWQ9NmYxZWFiYWFiYWJhYmFiYWJhYmFin52encKdnp1hYmFiYWJhYmFiYWJhYmBhYmFiYWJhYmFiYWJhYmFiYWJhYmFizJxhYmFiYv//Yf//fmJhYmFiYWJhYmFiYWJhYmFiYWJhYmFiYzI6cmVtb3RlJjZmMzExZf////9hYmFiYf///yYAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="))
        let text = String(decoding: bytes, as: UTF8.self)
        guard case .address(let address)? = try? SIPContact(parsing: text) else { return }
        let parameters = (try? PushParameters.parse(address)) ?? nil
        for channel in parameters?.channels ?? [] {
            XCTAssertFalse(channel.token.isEmpty)
            let shortened = Binding.shortenedToken(channel.token)
            XCTAssertNotEqual(shortened, channel.token)
        }
    }

    /// A signed "hex" escape (`%-0`, `%+f`) is not an escape: `UInt8(_:radix:)` would have read
    /// `-0` as 0 and put a NUL byte into the token.
    func testSignedPercentEscapesAreNotDecoded() throws {
        let text = "<sip:1002@192.0.2.7:5060;pn-provider=fcm;pn-prid=abc%-0def%+fghi%41;pn-param=proj>"
        guard case .address(let address)? = try? SIPContact(parsing: text) else { return XCTFail("not a contact") }
        let channel = try XCTUnwrap(try PushParameters.parse(address)?.channels.first)
        XCTAssertFalse(channel.token.utf8.contains(0), channel.token)
        XCTAssertEqual(channel.token, "abc%-0def%+fghiA")
    }
}
