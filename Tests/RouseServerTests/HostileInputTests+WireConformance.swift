import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPTransport
import XCTest

/// Issue 16, item 3, over the wire: literal messages sent over UDP and over TCP to `rouse serve`
/// (the server HostileInputTests starts). Valid messages written unusually (escapes in a SIP URI,
/// integers with leading zeros, an overlarge Max-Forwards or Expires, a NUL carried by a
/// quoted-pair) get the normal answer; invalid ones (no Call-ID, no Via, a CSeq that overflows, a
/// Content-Length with a space in it) get 400, or are dropped or close the connection where no
/// answer can be routed or framed; and the server keeps answering.
extension HostileInputTests {
    /// A request to Rouse written as raw text (`\n` becomes CRLF), with `{port}` and `{branch}` filled in.
    static func literal(_ text: String, port: UInt16) -> [UInt8] {
        Array(
            text.replacingOccurrences(of: "{port}", with: String(port))
                .replacingOccurrences(of: "{branch}", with: "z9hG4bK" + UUID().uuidString)
                .replacingOccurrences(of: "\n", with: "\r\n").utf8)
    }

    func testUnusualButValidAndInvalidMessagesOverUDPAndTCP() throws {
        for transport in [SIPTransportKind.udp, .tcp] {
            let label = transport == .udp ? "UDP" : "TCP"
            let peer = try client(transport)
            defer { peer.close() }
            let port = peer.localPort
            let zeros = String(repeating: "0", count: 60)

            // %-escapes in the Request-URI's host and parameters, leading zeros everywhere.
            try peer.send(
                Self.literal(
                    """
                    OPTIONS sip:%31%32%37.0.0.1;transport=%\(label == "UDP" ? "55DP" : "54CP") SIP/2.0
                    Via: SIP/2.0/\(label) 127.0.0.1:{port};branch={branch};rport
                    Max-Forwards: \(zeros)70
                    From: <sip:pr%6Fbe@example.com>;tag=w1
                    To: <sip:%31%32%37.0.0.1>
                    Call-ID: escapes-\(label)@127.0.0.1
                    CSeq: \(zeros)1 OPTIONS
                    Content-Length: \(zeros)0


                    """, port: port))
            let escaped = try XCTUnwrap(try finalResponse(peer), "\(label): no answer to an OPTIONS with escapes and leading zeros")
            XCTAssertEqual(escaped.statusCode, 200, label)
            XCTAssertTrue(escaped.headers[.allow]?.contains("REGISTER") ?? false, label)
            XCTAssertEqual(escaped.cseq, SIPCSeq(1, .options), label)

            // Max-Forwards above 255 is taken as absent.
            try peer.send(Self.request("OPTIONS", transport: label, port: port, maxForwards: 300))
            XCTAssertEqual(try finalResponse(peer)?.statusCode, 200, "\(label): Max-Forwards 300")

            // No Call-ID: 400 naming what is missing, and the flow keeps serving.
            let noCallID = Self.request("OPTIONS", transport: label, port: port).replacingOccurrences(
                of: "Call-ID: [^\r]*\r\n", with: "", options: .regularExpression)
            try peer.send(Array(noCallID.utf8))
            // The answer has no Call-ID either (there is none to copy), so read it as text.
            let missing = try XCTUnwrap(try peer.receiveText(timeout: .seconds(10)), "\(label): no answer to a request without Call-ID")
            XCTAssertTrue(missing.hasPrefix("SIP/2.0 400 Missing Call-ID header\r\n"), "\(label): \(missing)")
            XCTAssertTrue(missing.contains("\r\nCSeq: 1 OPTIONS\r\n"), "\(label): \(missing)")
            XCTAssertFalse(missing.lowercased().contains("\r\ncall-id:"), "\(label): \(missing)")

            // Refused before the registrar or the call router sees it: no challenge, no 100 Trying.
            for (method, uri) in [("REGISTER", "sip:example.com"), ("INVITE", "sip:1002@example.com")] {
                let bytes = Self.request(method, uri: uri, transport: label, port: port).replacingOccurrences(
                    of: "Call-ID: [^\r]*\r\n", with: "", options: .regularExpression)
                try peer.send(Array(bytes.utf8))
                let answer = try XCTUnwrap(try peer.receiveText(timeout: .seconds(10)), "\(label): no answer to \(method) without Call-ID")
                XCTAssertTrue(answer.hasPrefix("SIP/2.0 400 Missing Call-ID header\r\n"), "\(label) \(method): \(answer)")
            }

            // No Via: no answer can be routed, so none comes; the flow still serves the next request.
            let noVia = Self.request("OPTIONS", transport: label, port: port).replacingOccurrences(
                of: "Via: [^\r]*\r\n", with: "", options: .regularExpression)
            try peer.send(Array(noVia.utf8))
            try peer.send(Self.request("OPTIONS", transport: label, port: port, callID: "after-no-via-\(label)"))
            let afterNoVia = try XCTUnwrap(try finalResponse(peer), "\(label): nothing after a request without Via")
            XCTAssertEqual(afterNoVia.callID, "after-no-via-\(label)", "\(label): the Via-less request was answered")
            XCTAssertEqual(afterNoVia.statusCode, 200, label)

            // A CSeq that overflows 32 bits: 400 (RFC 4475 §3.1.2.4), never a wrap.
            let overflow = Self.request("REGISTER", uri: "sip:example.com", transport: label, port: port)
                .replacingOccurrences(of: "CSeq: 1 REGISTER", with: "CSeq: 36893488147419103232 REGISTER")
            try peer.send(Array(overflow.utf8))
            let overflowAnswer = try XCTUnwrap(try peer.receiveText(timeout: .seconds(10)), "\(label): no answer to an overflowing CSeq")
            XCTAssertTrue(overflowAnswer.hasPrefix("SIP/2.0 400 Malformed CSeq header\r\n"), "\(label): \(overflowAnswer)")
            XCTAssertTrue(overflowAnswer.contains("\r\nCSeq: 36893488147419103232 REGISTER\r\n"), "\(label): the CSeq as sent")

            // A display name and a User-Agent comment carrying a NUL as a quoted-pair, the AOR's user
            // escaped, `transport` escaped, an overlarge Expires: registered for the maximum, stored escaped.
            let contactPort = 6_000 + Int(port % 1_000)
            let escapedTransport = label == "UDP" ? "%55DP" : "%54CP"
            let registered = try registerWithDigest(
                peer, contact: "\"Bob\\\u{0}s phone\" <sip:1001@127.0.0.1:\(contactPort);transport=\(escapedTransport)>",
                extra: Array("User-Agent: Phone/1.0 (build \\\u{0} 7)\r\n".utf8), transport: label,
                to: "<sip:%31%30%30%31@example.com>", expires: "1" + String(repeating: "0", count: 40))
            XCTAssertEqual(registered.response.statusCode, 200, "\(label): \(registered.response.reasonPhrase)")
            let granted = (registered.response.contacts ?? []).compactMap { contact -> SIPNameAddress? in
                guard case .address(let address) = contact, address.uri.port == contactPort else { return nil }
                return address
            }
            XCTAssertEqual(granted.count, 1, "\(label): \(registered.response.headers.lines(.contact))")
            XCTAssertTrue((86_300...86_400).contains(granted.first?.expires ?? 0), "\(label): the maximum, 86400 s, is granted")
            let stored = try storedBindings(of: "1001").filter { $0.contact.contains(":\(contactPort);") }
            XCTAssertEqual(stored.map(\.contact), ["sip:1001@127.0.0.1:\(contactPort);transport=\(label)"], label)
            XCTAssertEqual(stored.first?.userAgent, "Phone/1.0 (build \\%00 7)", "\(label): the NUL is stored escaped")
            XCTAssertLessThanOrEqual(stored.first?.remainingSeconds(at: Date()) ?? .max, 86_400, label)
            // `rouse registrations` shows it (before the connection of a TCP binding closes below).
            let listing = try RouseProcess(arguments: ["registrations", "1001@example.com"], environment: ["ROUSE_DATABASE_URL": database.conninfo])
            XCTAssertEqual(listing.waitForExit(timeout: 60), 0, listing.outputText)
            let line = listing.outputText.split(separator: "\n").first { $0.contains("127.0.0.1:\(contactPort);transport=\(label)") }
            XCTAssertTrue(line?.contains("user agent: Phone/1.0 (build \\%00 7)") ?? false, "\(label): \(listing.outputText)")
            XCTAssertFalse(listing.outputText.contains("\0"), listing.outputText)

            // Content-Length with a space inside: over UDP the parser refuses it with 400; over TCP the
            // framer, agreeing, cannot cut the stream by it, and the connection is closed.
            let split = Self.request("MESSAGE", uri: "sip:1002@example.com", transport: label, port: port)
                .replacingOccurrences(of: "Content-Length: 0\r\n\r\n", with: "Content-Length: 1 2\r\n\r\nabcdefghijkl")
            try peer.send(Array(split.utf8))
            if transport == .udp {
                let refused = try XCTUnwrap(try finalResponse(peer), "UDP: no answer to Content-Length: 1 2")
                XCTAssertEqual(refused.statusCode, 400)
                XCTAssertEqual(refused.reasonPhrase, "Malformed Content-Length header")
            } else {
                XCTAssertTrue(peer.waitUntilClosed(timeout: .seconds(10)), "TCP: Content-Length: 1 2 closes the connection")
            }
            assertStillServing("after the wire conformance messages over \(label)")
        }
    }
}
