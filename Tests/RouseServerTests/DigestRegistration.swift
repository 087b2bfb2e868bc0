import Crypto
import Foundation
import Registrar
import RouseTestSupport
import SIPMessage
import XCTest

/// REGISTERs with digest over UDP to one instance of several (`example.com`, MD5), for tests that
/// watch what an instance knows: a query REGISTER lists the bindings it holds in memory.
enum DigestRegistration {
    struct NoAnswer: Error {}

    /// An authenticated REGISTER to the instance on `port`; nil contact makes it a query.
    /// `challengeFrom` asks another instance for the nonce first.
    static func register(
        port: UInt16, user: String, password: String, contact: String?, expires: Int = 600, challengeFrom: UInt16? = nil
    ) throws -> SIPResponse {
        let client = try TestSIPClient(transport: .udp, host: "127.0.0.1", port: port)
        let challenger = try TestSIPClient(transport: .udp, host: "127.0.0.1", port: challengeFrom ?? port)
        defer {
            client.close()
            challenger.close()
        }
        let callID = UUID().uuidString
        func request(_ cseq: Int, _ authorization: String?) -> String {
            var text = "REGISTER sip:example.com SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:\(client.localPort);branch=z9hG4bK\(UUID().uuidString);rport\r\n"
            text += "Max-Forwards: 70\r\nFrom: <sip:\(user)@example.com>;tag=t\(cseq)\r\nTo: <sip:\(user)@example.com>\r\nCall-ID: \(callID)\r\nCSeq: \(cseq) REGISTER\r\n"
            if let contact { text += "Contact: \(contact)\r\nExpires: \(expires)\r\n" }
            if let authorization { text += "Authorization: \(authorization)\r\n" }
            return text + "Content-Length: 0\r\n\r\n"
        }
        func answer(_ client: TestSIPClient) throws -> SIPResponse {
            guard let bytes = try client.receive(timeout: .seconds(10)), case .response(let response) = try SIPParser.parse(bytes) else {
                throw NoAnswer()
            }
            return response
        }
        try challenger.send(request(1, nil))
        let challenge = try answer(challenger)
        let offer = try XCTUnwrap(DigestCredentials(header: challenge.headers.lines(.wwwAuthenticate)[0]))
        let nonce = try XCTUnwrap(offer.nonce)
        let ha1 = Digest.hex(.md5, "\(user):example.com:\(password)")
        let ha2 = Digest.hex(.md5, "REGISTER:sip:example.com")
        let digest = Digest.hex(.md5, "\(ha1):\(nonce):00000001:cafe:auth:\(ha2)")
        try client.send(request(2, "Digest username=\"\(user)\", realm=\"example.com\", nonce=\"\(nonce)\", uri=\"sip:example.com\", response=\"\(digest)\", algorithm=MD5, cnonce=\"cafe\", qop=auth, nc=00000001"))
        return try answer(client)
    }

    /// Polls the instance on `port` with query REGISTERs until its binding list satisfies `condition`.
    static func waitForBindings(port: UInt16, user: String, password: String, _ condition: ([String]) -> Bool) throws -> [String] {
        let deadline = Date().addingTimeInterval(30)
        var contacts: [String] = []
        repeat {
            contacts = try register(port: port, user: user, password: password, contact: nil).headers.values(.contact)
            if condition(contacts) { return contacts }
        } while Date() < deadline
        return contacts
    }
}
