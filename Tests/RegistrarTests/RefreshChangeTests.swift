import Foundation
@testable import Registrar
import RouseVocabulary
import SIPMessage
import XCTest

/// A REGISTER that only moves a binding's expiry (same Contact, Call-ID, flow, Path, User-Agent,
/// no push channels) asks the store for `BindingChange.refresh`; anything more is a whole save.
final class RefreshChangeTests: XCTestCase {
    typealias F = RegistrarFixture

    func testARefreshThatOnlyMovesTheExpiryIsARefreshChange() throws {
        var fixture = F()
        guard case .commit(let first, _, _, _) = try fixture.registerAuthenticated(), case .save(let saved)? = first.first else {
            return XCTFail("the first REGISTER saves its binding")
        }
        fixture.now = fixture.now.addingTimeInterval(60)
        let again = try fixture.registerAuthenticated(cseq: 3)
        guard case .commit(let changes, let events, let response, _) = again else { return XCTFail("\(again)") }
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(changes.count, 1)
        guard case .refresh(let refreshed)? = changes.first else { return XCTFail("\(changes)") }
        XCTAssertEqual(refreshed.id, saved.id)
        XCTAssertEqual(refreshed.cseq, 4)
        XCTAssertEqual(refreshed.registeredAt, fixture.now)
        XCTAssertEqual(refreshed.expiresAt, fixture.now.addingTimeInterval(3600))
        XCTAssertEqual(events.map(\.kind), [.refreshed])
        XCTAssertEqual(fixture.core.bindings(for: F.alice), [refreshed])
    }

    func testARefreshThatChangesMoreIsAWholeSave() throws {
        var fixture = F()
        _ = try fixture.registerAuthenticated()
        let cases: [(String, () throws -> RegisterDecision)] = [
            ("another source", { try fixture.registerAuthenticated(cseq: 3, flow: F.flow("192.0.2.7:5062")) }),
            ("a q", { try fixture.registerAuthenticated(contacts: ["<sip:1001@192.0.2.7:5060>;q=0.5"], cseq: 5) }),
            ("a Path", { try fixture.registerAuthenticated(cseq: 7, extra: ["Path: <sip:edge.example.net;lr>"]) }),
            ("another Call-ID", { try fixture.registerAuthenticated(callID: "call-2", cseq: 1) }),
        ]
        for (what, register) in cases {
            let decision = try register()
            guard case .commit(let changes, _, let response, _) = decision else { return XCTFail("\(what): \(decision)") }
            XCTAssertEqual(response.statusCode, 200, what)
            guard changes.count == 1, case .save = changes[0] else { return XCTFail("\(what): \(changes)") }
        }
    }

    func testAPushBindingRegisteredAgainIsAWholeSave() throws {
        var fixture = F()
        let contact = "<sip:1001@192.0.2.7:5060;pn-provider=fcm;pn-prid=token-1;pn-param=project-1>"
        _ = try fixture.registerAuthenticated(contacts: [contact])
        let again = try fixture.registerAuthenticated(contacts: [contact], cseq: 3)
        guard case .commit(let changes, _, _, _) = again, changes.count == 1, case .save = changes[0] else {
            return XCTFail("its channels and their sign of life are written again: \(again)")
        }
    }
}
