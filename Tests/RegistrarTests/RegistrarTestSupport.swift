import Crypto
import Foundation
import Registrar
import RouseVocabulary
import SIPMessage
import XCTest

/// A registrar core with two extensions on example.com, a phone that builds REGISTER texts, and a
/// digest calculator that answers challenges as a phone would.
struct RegistrarFixture {
    static let domain = "example.com"
    static let alice = AddressOfRecord(number: "1001", domain: domain)
    static let bob = AddressOfRecord(number: "1002", domain: domain)
    static let start = Date(timeIntervalSince1970: 1_800_000_000)

    var core: RegistrarCore
    var now = RegistrarFixture.start

    init(
        policy: RegistrationPolicy = RegistrationPolicy(), push: Set<PushProviderFamily> = [.apns, .fcm],
        algorithms: [Digest.Algorithm] = DigestAuthenticator.defaultAlgorithms
    ) {
        let directory = DirectorySnapshot(
            domains: [RegistrarFixture.domain],
            extensions: [
                RegistrarFixture.alice: ExtensionCredentials(aor: RegistrarFixture.alice, password: "alice-secret"),
                RegistrarFixture.bob: ExtensionCredentials(aor: RegistrarFixture.bob, password: "bob-secret"),
            ])
        core = RegistrarCore(
            policy: policy, directory: directory, supportedPushProviders: push,
            authenticator: DigestAuthenticator(secret: Array("test-secret".utf8), nonceLifetime: 300, algorithms: algorithms),
            serverName: "Rouse/test")
    }

    static func flow(_ source: String = "192.0.2.7:5060", transport: String = "udp") -> BindingFlow {
        BindingFlow(transport: SIPTransportKind(rawValue: transport)!, source: SocketAddress(parsing: source), connectionID: FlowConnectionID("\(transport)#\(source)"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "test")
    }

    /// A REGISTER as a phone writes it (before or after a challenge).
    static func register(
        _ aor: AddressOfRecord = alice, contacts: [String] = ["<sip:1001@192.0.2.7:5060>"], expires: Int? = 3600,
        callID: String = "call-1", cseq: UInt32 = 1, authorization: String? = nil, extra: [String] = [],
        toDomain: String? = nil
    ) -> String {
        var lines = [
            "REGISTER sip:\(toDomain ?? aor.domain) SIP/2.0",
            "Via: SIP/2.0/UDP 192.0.2.7:5060;branch=z9hG4bK-\(callID)-\(cseq);rport",
            "Max-Forwards: 70",
            "From: <sip:\(aor.number)@\(toDomain ?? aor.domain)>;tag=from-\(callID)",
            "To: <sip:\(aor.number)@\(toDomain ?? aor.domain)>",
            "Call-ID: \(callID)",
            "CSeq: \(cseq) REGISTER",
            "User-Agent: TestPhone/1.0",
        ]
        lines += contacts.map { "Contact: \($0)" }
        if let expires { lines.append("Expires: \(expires)") }
        if let authorization { lines.append("Authorization: \(authorization)") }
        lines += extra
        return lines.joined(separator: "\r\n") + "\r\nContent-Length: 0\r\n\r\n"
    }

    static func parse(_ text: String) throws -> SIPRequest {
        guard case .request(let request) = try SIPParser.parse(Array(text.utf8)) else {
            return try XCTUnwrap(nil, "the fixture is not a request")
        }
        return request
    }

    /// The Authorization value answering `challenge` (a WWW-Authenticate value).
    static func answer(
        _ challenge: String, number: String = "1001", password: String, realm: String = domain, nc: String = "00000001",
        uri: String = "sip:example.com", username: String? = nil
    ) -> String {
        let parameters = DigestCredentials(header: challenge)!
        let algorithm = parameters.algorithm!
        let nonce = parameters.nonce!
        let ha1 = Digest.hex(algorithm, "\(number):\(realm):\(password)")
        let ha2 = Digest.hex(algorithm, "REGISTER:\(uri)")
        let response = Digest.hex(algorithm, "\(ha1):\(nonce):\(nc):0a4f113b:auth:\(ha2)")
        return "Digest username=\"\(username ?? number)\", realm=\"\(realm)\", nonce=\"\(nonce)\", uri=\"\(uri)\", "
            + "response=\"\(response)\", algorithm=\(algorithm.rawValue), cnonce=\"0a4f113b\", qop=auth, nc=\(nc), "
            + "opaque=\"\(parameters.opaque ?? "")\""
    }

    /// Sends a REGISTER and returns the decision.
    mutating func send(_ text: String, flow: BindingFlow = RegistrarFixture.flow()) throws -> RegisterDecision {
        core.register(try RegistrarFixture.parse(text), flow: flow, now: now)
    }

    /// The response of a decision, whether immediate or after commit.
    static func response(_ decision: RegisterDecision) -> SIPResponse {
        switch decision {
        case .respond(let response): return response
        case .commit(_, _, let response, _): return response
        }
    }

    /// Gets a challenge, answers it, and returns the final decision.
    mutating func registerAuthenticated(
        _ aor: AddressOfRecord = alice, password: String = "alice-secret", contacts: [String] = ["<sip:1001@192.0.2.7:5060>"],
        expires: Int? = 3600, callID: String = "call-1", cseq: UInt32 = 1, algorithm: String = "MD5", extra: [String] = [],
        flow: BindingFlow = RegistrarFixture.flow()
    ) throws -> RegisterDecision {
        let challenge = RegistrarFixture.response(try send(RegistrarFixture.register(aor, contacts: contacts, expires: expires, callID: callID, cseq: cseq, extra: extra), flow: flow))
        XCTAssertEqual(challenge.statusCode, 401)
        let offer = try XCTUnwrap(challenge.headers.lines(.wwwAuthenticate).first { $0.contains("algorithm=\(algorithm)") })
        let authorization = RegistrarFixture.answer(offer, number: aor.number, password: password)
        return try send(
            RegistrarFixture.register(aor, contacts: contacts, expires: expires, callID: callID, cseq: cseq + 1, authorization: authorization, extra: extra),
            flow: flow)
    }
}
