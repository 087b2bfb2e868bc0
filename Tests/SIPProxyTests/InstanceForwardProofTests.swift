import Foundation
import SIPMessage
@testable import SIPProxy
import XCTest

/// The proof on an INVITE one instance forwards to another (issue 17 item 3), on bytes as they
/// travel between instances, with time passed in.
final class InstanceForwardProofTests: XCTestCase {
    let secret = Array("the deployment's shared secret, 32+ bytes long".utf8)
    let binding = UUID(uuidString: "6c1f0e7a-3b2d-4c5e-8f90-a1b2c3d4e5f6")!
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    /// The branch INVITE as instance A sends it (its Via on top), without the Route that will
    /// carry the proof.
    func invite(callID: String = "c4f1@192.0.2.7", cseq: String = "2 INVITE", uri: String = "sip:1002@192.0.2.20:5062", branch: String = "z9hG4bKa1b2c3")
        throws -> SIPRequest
    {
        let text = "INVITE \(uri) SIP/2.0\r\n"
            + "Via: SIP/2.0/UDP 192.0.2.10:5060;branch=\(branch);rport;rouse=a\r\n"
            + "Via: SIP/2.0/UDP 192.0.2.7:5062;branch=z9hG4bKcaller;rport=5062;received=192.0.2.7\r\n"
            + "Max-Forwards: 69\r\nFrom: <sip:1001@example.com>;tag=f1\r\nTo: <sip:1002@example.com>\r\n"
            + "Call-ID: \(callID)\r\nCSeq: \(cseq)\r\nContact: <sip:1001@192.0.2.7:5062>\r\nContent-Length: 0\r\n\r\n"
        guard case .request(let request) = try SIPParser.parse(Array(text.utf8)) else { throw Unexpected() }
        return request
    }

    struct Unexpected: Error {}

    /// `request` as the receiving instance parses it: the proof in its top Route.
    func received(_ request: SIPRequest, proof: String) throws -> (SIPRequest, String) {
        var sent = request
        sent.headers.prepend(.route, "<sip:192.0.2.20:5060;lr;rouse-b=\(binding.uuidString.lowercased());rouse-p=\(proof)>")
        guard case .request(let parsed) = try SIPParser.parse(SIPSerializer.serialize(sent)) else { throw Unexpected() }
        let route = try SIPNameAddress(parsing: try XCTUnwrap(parsed.headers.values(.route).first))
        return (parsed, try XCTUnwrap(route.uri.parameters.value(InstanceForwardProof.proofParameter)))
    }

    func testAProofMadeWithTheSharedSecretIsAcceptedByAnotherInstance() throws {
        let proof = try XCTUnwrap(InstanceForwardProof(secret: secret).sign(try invite(), binding: binding, at: now))
        let (request, value) = try received(try invite(), proof: proof)
        var checker = ForwardProofChecker(proof: InstanceForwardProof(secret: secret))
        XCTAssertNil(checker.check(value, of: request, binding: binding, at: now.addingTimeInterval(0.2)))
    }

    func testAProofMadeWithoutTheSecretOrForAnotherRequestIsForged() throws {
        let proof = InstanceForwardProof(secret: secret)
        let signed = try XCTUnwrap(proof.sign(try invite(), binding: binding, at: now))
        let other = try XCTUnwrap(InstanceForwardProof(secret: Array("another deployment".utf8)).sign(try invite(), binding: binding, at: now))
        XCTAssertEqual(proof.verify(other, of: try invite(), binding: binding, at: now), .failure(.forged))
        for changed in [
            try invite(callID: "other@192.0.2.7"), try invite(cseq: "3 INVITE"), try invite(uri: "sip:1003@192.0.2.20:5062"),
            try invite(branch: "z9hG4bKother"),
        ] {
            XCTAssertEqual(proof.verify(signed, of: changed, binding: binding, at: now), .failure(.forged), "\(changed.uri) \(changed.callID ?? "")")
        }
        // Someone who saw the proof cannot aim it at another binding, nor alter its time.
        XCTAssertEqual(proof.verify(signed, of: try invite(), binding: UUID(), at: now), .failure(.forged))
        let seconds = Int(now.timeIntervalSince1970)
        let retimed = "\(seconds + 5)." + signed.split(separator: ".")[1]
        XCTAssertEqual(proof.verify(retimed, of: try invite(), binding: binding, at: now), .failure(.forged))
        var flipped = Array(signed)
        flipped[flipped.count - 1] = flipped[flipped.count - 1] == "0" ? "1" : "0"
        XCTAssertEqual(proof.verify(String(flipped), of: try invite(), binding: binding, at: now), .failure(.forged))
    }

    func testAProofOutsideItsWindowIsStale() throws {
        let proof = InstanceForwardProof(secret: secret)
        let signed = try XCTUnwrap(proof.sign(try invite(), binding: binding, at: now))
        XCTAssertNoThrow(try proof.verify(signed, of: try invite(), binding: binding, at: now.addingTimeInterval(29)).get())
        XCTAssertNoThrow(try proof.verify(signed, of: try invite(), binding: binding, at: now.addingTimeInterval(-29)).get(), "a clock a little behind")
        XCTAssertEqual(proof.verify(signed, of: try invite(), binding: binding, at: now.addingTimeInterval(31)), .failure(.stale))
        XCTAssertEqual(proof.verify(signed, of: try invite(), binding: binding, at: now.addingTimeInterval(-31)), .failure(.stale))
    }

    func testAProofIsAcceptedOnceAndRememberedOnlyWhileItIsValid() throws {
        var checker = ForwardProofChecker(proof: InstanceForwardProof(secret: secret), limit: 10)
        let signed = try XCTUnwrap(checker.proof.sign(try invite(), binding: binding, at: now))
        XCTAssertNil(checker.check(signed, of: try invite(), binding: binding, at: now))
        XCTAssertEqual(checker.check(signed, of: try invite(), binding: binding, at: now.addingTimeInterval(1)), .replayed)
        // Replayed to another binding it proves nothing either.
        XCTAssertEqual(checker.check(signed, of: try invite(), binding: UUID(), at: now.addingTimeInterval(1)), .forged)
        // Once past its window it is stale, whether remembered or not; the table stays bounded.
        XCTAssertEqual(checker.check(signed, of: try invite(), binding: binding, at: now.addingTimeInterval(90)), .stale)
        for number in 0..<50 {
            let request = try invite(callID: "call-\(number)")
            let proof = try XCTUnwrap(checker.proof.sign(request, binding: binding, at: now))
            XCTAssertNil(checker.check(proof, of: request, binding: binding, at: now))
        }
        XCTAssertLessThanOrEqual(checker.remembered, 10)
    }

    func testMalformedProofsAreRefused() throws {
        let proof = InstanceForwardProof(secret: secret)
        for value in ["", "1800000000", "1800000000.", "abc.00ff", "1800000000.zz", "1800000000.00ff", "1.2.3"] {
            XCTAssertEqual(proof.verify(value, of: try invite(), binding: binding, at: now), .failure(.malformed), value)
        }
    }
}
