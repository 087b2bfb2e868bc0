import Crypto
import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPTransport
import Storage
import XCTest

/// Hostile input over the wire (issue 9, item 2) against `rouse serve` started as a process with
/// small limits: oversize messages, header floods, long lines, bad line ends, slowloris, unfinished
/// TLS handshakes, too many connections, bytes that are not UTF-8, CR/LF/NUL in header values, a
/// thousand Contacts, Via loops and Max-Forwards 0. Each gets the RFC answer or a closed flow, and
/// after each a phone registered over UDP still gets its REGISTER answered 200 (with a deadline).
final class HostileInputTests: XCTestCase {
    var database: TestDatabase!
    var rouse: RouseProcess?
    var points: [ListenPoint] = []
    var phone: TestUserAgent!
    var certificate: TestCertificate!

    /// The limits the server runs with: small enough to reach from a test, large enough for 1,000 Contacts.
    static let maxMessageBytes = 40_000
    static let maxHeaders = 128
    static let maxLineBytes = 8_192
    static let maxConnections = 4

    override func setUpWithError() throws {
        database = try TestDatabase()
        certificate = try TestCertificate.make(commonName: "rouse.test")
        try Migrator.migrate(try database.connect())
        let directory = PostgresDirectory(settings: database.settings())
        _ = try directory.addDomain("example.com")
        try directory.addExtension(AddressOfRecord(number: "1001", domain: "example.com"), password: "s3cret-1001")
        try directory.addExtension(AddressOfRecord(number: "1002", domain: "example.com"), password: "s3cret-1002")
        let process = try RouseProcess(
            arguments: ["serve"],
            environment: [
                "ROUSE_DATABASE_URL": database.conninfo,
                "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0,tcp:127.0.0.1:0,tls:127.0.0.1:0",
                "ROUSE_TLS_CERT": certificate.certificatePath,
                "ROUSE_TLS_KEY": certificate.keyPath,
                "ROUSE_SIP_MAX_MESSAGE_BYTES": String(Self.maxMessageBytes),
                "ROUSE_SIP_MAX_HEADERS": String(Self.maxHeaders),
                "ROUSE_SIP_MAX_LINE_BYTES": String(Self.maxLineBytes),
                "ROUSE_TCP_MAX_CONNECTIONS": String(Self.maxConnections),
                "ROUSE_TCP_IDLE_TIMEOUT": "2",
                "ROUSE_TLS_HANDSHAKE_TIMEOUT": "1",
            ])
        rouse = process
        XCTAssertTrue(process.waitForOutput(containing: "serving SIP on"), process.outputText)
        let line = try XCTUnwrap(process.outputText.split(separator: "\n").first { $0.contains("serving SIP on") })
        points = try (line.components(separatedBy: "serving SIP on ").last ?? "").components(separatedBy: ", ").map { try ListenPoint(parsing: $0) }
        phone = try TestUserAgent(
            transport: .udp, serverPort: try point(.udp).port, user: "1002", domain: "example.com", password: "s3cret-1002")
        XCTAssertEqual(try phone.register().statusCode, 200)
    }

    override func tearDown() {
        phone?.close()
        if let rouse {
            XCTAssertTrue(rouse.process.isRunning, "rouse must survive hostile input: \(rouse.outputText.suffix(2_000))")
            _ = rouse.stop()
        }
        rouse = nil
        database?.drop()
        certificate?.remove()
    }

    // MARK: Helpers

    func point(_ transport: SIPTransportKind) throws -> ListenPoint {
        try XCTUnwrap(points.first { $0.transport == transport })
    }

    func client(_ transport: SIPTransportKind) throws -> TestSIPClient {
        let point = try point(transport)
        let kind: TestSIPClient.Transport = transport == .udp ? .udp : transport == .tcp ? .tcp : .tls
        return try TestSIPClient(transport: kind, host: point.host, port: point.port)
    }

    /// The registered phone still gets its REGISTER answered 200, and an OPTIONS from a new socket
    /// is answered 200, each within a deadline.
    func assertStillServing(_ context: String, file: StaticString = #filePath, line: UInt = #line) {
        do {
            XCTAssertEqual(try phone.register(timeout: .seconds(15)).statusCode, 200, context, file: file, line: line)
            let probe = try client(.udp)
            defer { probe.close() }
            try probe.send(Self.request("OPTIONS", transport: "UDP", port: probe.localPort))
            XCTAssertEqual(try finalResponse(probe)?.statusCode, 200, context, file: file, line: line)
        } catch {
            XCTFail("\(context): the server stopped serving: \(error)", file: file, line: line)
        }
    }

    /// A request to Rouse (or `uri`), with `extra` header lines before Content-Length.
    static func request(
        _ method: String, uri: String = "sip:127.0.0.1", transport: String, port: UInt16, extra: String = "",
        maxForwards: Int = 70, callID: String = UUID().uuidString
    ) -> String {
        "\(method) \(uri) SIP/2.0\r\n"
            + "Via: SIP/2.0/\(transport) 127.0.0.1:\(port);branch=z9hG4bK\(UUID().uuidString);rport\r\n"
            + "Max-Forwards: \(maxForwards)\r\nFrom: <sip:probe@example.com>;tag=hostile\r\nTo: <\(uri)>\r\n"
            + "Call-ID: \(callID)\r\nCSeq: 1 \(method)\r\n" + extra + "Content-Length: 0\r\n\r\n"
    }

    /// The first final response within the deadline, or nil when none came (the message was dropped).
    func finalResponse(_ client: TestSIPClient, within timeout: Duration = .seconds(10)) throws -> SIPResponse? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            guard let bytes = try client.receive(timeout: ContinuousClock.now.duration(to: deadline)) else { return nil }
            if case .response(let response) = try SIPParser.parse(bytes), response.statusCode >= 200 { return response }
        }
        return nil
    }

    /// The raw bytes of the first final response within the deadline (for looking at what was sent).
    func finalResponseBytes(_ client: TestSIPClient) throws -> [UInt8]? {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            guard let bytes = try client.receive(timeout: ContinuousClock.now.duration(to: deadline)) else { return nil }
            if case .response(let response) = try SIPParser.parse(bytes, limits: Self.lenient), response.statusCode >= 200 { return bytes }
        }
        return nil
    }

    /// A REGISTER for 1001 with `extra` bytes spliced in as header lines (they may be anything), answered
    /// with digest credentials after the 401. Returns the final response's bytes and the response.
    func registerWithDigest(
        _ client: TestSIPClient, contact: String, extra: [UInt8] = [], transport: String = "UDP",
        to: String = "<sip:1001@example.com>", expires: String = "600"
    ) throws -> (bytes: [UInt8], response: SIPResponse) {
        let callID = UUID().uuidString
        func register(cseq: Int, authorization: String?) -> [UInt8] {
            var head = "REGISTER sip:example.com SIP/2.0\r\n"
            head += "Via: SIP/2.0/\(transport) 127.0.0.1:\(client.localPort);branch=z9hG4bK\(UUID().uuidString);rport\r\n"
            head += "Max-Forwards: 70\r\nFrom: <sip:1001@example.com>;tag=reg\(cseq)\r\nTo: \(to)\r\n"
            head += "Call-ID: \(callID)\r\nCSeq: \(cseq) REGISTER\r\nContact: \(contact)\r\nExpires: \(expires)\r\n"
            if let authorization { head += "Authorization: \(authorization)\r\n" }
            return Array(head.utf8) + extra + Array("Content-Length: 0\r\n\r\n".utf8)
        }
        try client.send(register(cseq: 1, authorization: nil))
        let challengeBytes = try XCTUnwrap(try finalResponseBytes(client), "no answer to the first REGISTER")
        guard case .response(let challenge) = try SIPParser.parse(challengeBytes) else { throw NoAnswer() }
        guard challenge.statusCode == 401 else { return (challengeBytes, challenge) }
        let offer = try XCTUnwrap(challenge.headers.lines(.wwwAuthenticate).first { $0.contains("algorithm=MD5") })
        let parameters = try XCTUnwrap(DigestCredentials(header: offer))
        let nonce = try XCTUnwrap(parameters.nonce)
        let ha1 = Digest.hex(.md5, "1001:example.com:s3cret-1001")
        let ha2 = Digest.hex(.md5, "REGISTER:sip:example.com")
        let answer = Digest.hex(.md5, "\(ha1):\(nonce):00000001:c0ffee:auth:\(ha2)")
        let authorization = "Digest username=\"1001\", realm=\"example.com\", nonce=\"\(nonce)\", uri=\"sip:example.com\", response=\"\(answer)\", algorithm=MD5, cnonce=\"c0ffee\", qop=auth, nc=00000001, opaque=\"\(parameters.opaque ?? "")\""
        try client.send(register(cseq: 2, authorization: authorization))
        let bytes = try XCTUnwrap(try finalResponseBytes(client), "no answer to the authenticated REGISTER")
        guard case .response(let response) = try SIPParser.parse(bytes, limits: Self.lenient) else { throw NoAnswer() }
        return (bytes, response)
    }

    struct NoAnswer: Error {}

    /// Parser limits for reading Rouse's answers, wide enough to see an answer that breaks the defaults.
    static let lenient = SIPParserLimits(maxMessageBytes: 1 << 20, maxHeaderCount: 100_000, maxLineBytes: 1 << 20)

    func storedBindings(of number: String) throws -> [Binding] {
        try PostgresLocationStore(settings: database.settings()).loadBindings(now: Date())
            .filter { $0.aor.number == number }
    }

    /// The header lines of a message as raw byte lines (split on CRLF), up to the blank line.
    static func headerLines(_ bytes: [UInt8]) -> [String] {
        let text = String(decoding: bytes, as: UTF8.self)
        let head = text.components(separatedBy: "\r\n\r\n").first ?? text
        return head.components(separatedBy: "\r\n")
    }

    // MARK: Sizes and line ends

    func testOversizeMessagesHeaderFloodsLongLinesAndBadLineEnds() throws {
        let udp = try client(.udp)
        defer { udp.close() }

        // Over the message limit on UDP: dropped (no answer), the server goes on.
        let padding = String(repeating: "x", count: Self.maxMessageBytes)
        try udp.send(Self.request("OPTIONS", transport: "UDP", port: udp.localPort, extra: "X-Pad: \(padding)\r\n"))
        if let answer = try finalResponse(udp, within: .seconds(2)) {
            XCTAssertEqual(answer.statusCode, 513, "an oversize datagram is dropped or answered 513")
        }
        assertStillServing("after an oversize datagram")

        // Over the message limit on TCP: the connection is closed.
        let tcp = try client(.tcp)
        try tcp.send(Self.request("OPTIONS", transport: "TCP", port: tcp.localPort, extra: "X-Pad: \(padding)\r\n"))
        XCTAssertTrue(tcp.waitUntilClosed(timeout: .seconds(10)), "an oversize message closes its TCP connection")
        tcp.close()
        assertStillServing("after an oversize TCP message")

        // Thousands of headers: 513 (RFC 3261 §21.5.14), answered on the headers read before the limit.
        let flood = (0..<2_000).map { "X-Flood-\($0): \($0)\r\n" }.joined()
        try udp.send(Self.request("OPTIONS", transport: "UDP", port: udp.localPort, extra: flood))
        XCTAssertEqual(try finalResponse(udp)?.statusCode, 513)
        assertStillServing("after 2,000 headers")

        // One line over sip_max_line_bytes: 513.
        let long = String(repeating: "L", count: Self.maxLineBytes + 100)
        try udp.send(Self.request("OPTIONS", transport: "UDP", port: udp.localPort, extra: "User-Agent: \(long)\r\n"))
        XCTAssertEqual(try finalResponse(udp)?.statusCode, 513)
        assertStillServing("after a long line")

        // Header lines ending in a bare LF (RFC 3261 §7: CRLF): 400.
        try udp.send(Self.request("OPTIONS", transport: "UDP", port: udp.localPort, extra: "X-Bare: lf\nX-After: 1\r\n"))
        XCTAssertEqual(try finalResponse(udp)?.statusCode, 400)
        // A whole message in bare LFs, and one with no line end at all: no answer can be formed, dropped.
        let allLF = Self.request("OPTIONS", transport: "UDP", port: udp.localPort).replacingOccurrences(of: "\r\n", with: "\n")
        try udp.send(allLF)
        if let answer = try finalResponse(udp, within: .seconds(2)) { XCTAssertEqual(answer.statusCode, 400) }
        try udp.send("OPTIONS sip:127.0.0.1 SIP/2.0 Via: SIP/2.0/UDP 127.0.0.1:5099;branch=z9hG4bKnoline")
        if let answer = try finalResponse(udp, within: .seconds(2)) { XCTAssertEqual(answer.statusCode, 400) }
        assertStillServing("after bare LF line ends")

        // No CRLF at all on TCP: the stream never frames; it is closed at the size limit.
        let endless = try client(.tcp)
        try endless.send([UInt8](repeating: UInt8(ascii: "A"), count: Self.maxMessageBytes + 1_000))
        XCTAssertTrue(endless.waitUntilClosed(timeout: .seconds(10)), "a stream without line ends is closed")
        endless.close()
        assertStillServing("after a TCP stream without line ends")
    }

    // MARK: Slow and unfinished connections

    func testSlowlorisAndUnfinishedTLSHandshakeAreClosed() throws {
        // Slowloris: one byte every 100 ms, never a whole message. The idle clock (2 s) runs from the
        // last whole message, so the server closes it although bytes keep coming.
        let slow = try client(.tcp)
        let message = Array(Self.request("OPTIONS", transport: "TCP", port: slow.localPort, extra: String(repeating: "X-Slow: 1\r\n", count: 100)).utf8)
        let started = ContinuousClock.now
        var closed = false
        for byte in message.prefix(400) {
            do {
                try slow.send([byte])
                if try slow.receiveRaw(timeout: .milliseconds(100)) != nil { continue }
            } catch {
                closed = true
                break
            }
            if ContinuousClock.now - started > .seconds(20) { break }
        }
        if !closed { closed = slow.waitUntilClosed(timeout: .seconds(10)) }
        XCTAssertTrue(closed, "a peer trickling one byte at a time is closed by the idle deadline")
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(30))
        slow.close()
        assertStillServing("after a slowloris connection")

        // A TLS client that connects and never sends its ClientHello: closed after tls_handshake_timeout.
        let tlsPoint = try point(.tls)
        let silent = try TestSIPClient(transport: .tcp, host: tlsPoint.host, port: tlsPoint.port)
        XCTAssertTrue(silent.waitUntilClosed(timeout: .seconds(10)), "an unfinished TLS handshake is closed")
        silent.close()
        // One that sends half a ClientHello record and stops.
        let half = try TestSIPClient(transport: .tcp, host: tlsPoint.host, port: tlsPoint.port)
        try half.send([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03])
        XCTAssertTrue(half.waitUntilClosed(timeout: .seconds(10)), "a half ClientHello is closed")
        half.close()
        assertStillServing("after unfinished TLS handshakes")
    }

    func testConnectionsBeyondTheLimitAreClosedAndEarlierOnesKeepWorking() throws {
        var open: [TestSIPClient] = []
        defer { open.forEach { $0.close() } }
        for _ in 0..<Self.maxConnections {
            let connection = try client(.tcp)
            try connection.send(Self.request("OPTIONS", transport: "TCP", port: connection.localPort))
            XCTAssertEqual(try finalResponse(connection)?.statusCode, 200)
            open.append(connection)
        }
        // Past tcp_max_connections: accepted and closed at once.
        for _ in 0..<3 {
            let extra = try client(.tcp)
            try? extra.send(Self.request("OPTIONS", transport: "TCP", port: extra.localPort))
            XCTAssertTrue(extra.waitUntilClosed(timeout: .seconds(10)), "a connection over the limit is closed")
            extra.close()
        }
        for connection in open {
            try connection.send(Self.request("OPTIONS", transport: "TCP", port: connection.localPort))
            XCTAssertEqual(try finalResponse(connection)?.statusCode, 200, "a connection within the limit still works")
        }
        assertStillServing("with the connection table full")
    }

    // MARK: Header contents

    func testNonUTF8AndControlBytesInHeadersAreRefusedOrStoredCleanly() throws {
        let udp = try client(.udp)
        defer { udp.close() }

        // NUL in a header value, and in a Contact display name: 400.
        try udp.send(Array(Self.request("OPTIONS", transport: "UDP", port: udp.localPort, extra: "User-Agent: a\u{0}b\r\n").utf8))
        XCTAssertEqual(try finalResponse(udp)?.statusCode, 400)
        let nulContact = try registerWithDigest(udp, contact: "\"Ev\u{0}il\" <sip:1001@127.0.0.1:5081>")
        XCTAssertEqual(nulContact.response.statusCode, 400)
        // A bare CR inside a value (an attempt to start a new header line): 400.
        let bareCR = try registerWithDigest(udp, contact: "<sip:1001@127.0.0.1:5082>", extra: Array("User-Agent: evil\rX-Injected: 1\r\n".utf8))
        XCTAssertEqual(bareCR.response.statusCode, 400)
        XCTAssertTrue(try storedBindings(of: "1001").isEmpty, "nothing stored from refused REGISTERs")
        assertStillServing("after NUL and bare CR")

        // Bytes that are not UTF-8 in User-Agent: handled cleanly (stored with replacement characters).
        let latin1 = try registerWithDigest(udp, contact: "<sip:1001@127.0.0.1:5083>", extra: Array("User-Agent: caf".utf8) + [0xE9, 0xFF, 0xFE] + Array("\r\n".utf8))
        XCTAssertTrue([200, 400].contains(latin1.response.statusCode), "\(latin1.response.statusCode)")
        for binding in try storedBindings(of: "1001") {
            XCTAssertNil(binding.userAgent?.unicodeScalars.first { $0.value < 0x20 }, "no control characters stored")
        }

        // Encoded and folded CR LF in the User-Agent and a Contact display name: registered, but no
        // line is injected into the 200 or into what is stored.
        let folded = Array("User-Agent: folded\r\n X-Injected: folded\r\n".utf8)
        let contact = "\"Evil%0D%0AX-Injected: name\" <sip:1001@127.0.0.1:5084;x=%0D%0AX-Injected:%20uri>"
        let injected = try registerWithDigest(udp, contact: contact, extra: folded)
        XCTAssertEqual(injected.response.statusCode, 200)
        let lines = Self.headerLines(injected.bytes)
        XCTAssertFalse(lines.contains { $0.lowercased().hasPrefix("x-injected") }, lines.joined(separator: "\n"))
        let stored = try storedBindings(of: "1001")
        XCTAssertFalse(stored.isEmpty)
        for binding in stored {
            XCTAssertFalse(binding.contact.contains { $0 == "\r" || $0 == "\n" || $0 == "\0" }, binding.contact)
            XCTAssertFalse(binding.userAgent?.contains { $0 == "\r" || $0 == "\n" || $0 == "\0" } ?? false, binding.userAgent ?? "")
        }
        XCTAssertTrue(stored.contains { $0.userAgent == "folded X-Injected: folded" }, "\(stored.map(\.userAgent))")

        // `rouse registrations` prints one line per binding field, none of them injected.
        let listing = try RouseProcess(arguments: ["registrations", "1001@example.com"], environment: ["ROUSE_DATABASE_URL": database.conninfo])
        XCTAssertEqual(listing.waitForExit(timeout: 60), 0, listing.outputText)
        XCTAssertFalse(listing.outputText.split(separator: "\n").contains { $0.lowercased().hasPrefix("x-injected") }, listing.outputText)
        XCTAssertFalse(listing.outputText.contains("\r"), listing.outputText)
        assertStillServing("after non-UTF-8 and injection attempts")
    }

    func testThousandContactsGetASaneAnswer() throws {
        let udp = try client(.udp)
        defer { udp.close() }
        // 1,000 Contacts in 5 header lines of 200 (within the line, header and message limits).
        let contacts = (0..<5).map { line in
            (0..<200).map { "<sip:1001@127.0.0.1:\(10_000 + line * 200 + $0)>" }.joined(separator: ", ")
        }
        let first = contacts[0]
        let rest = contacts.dropFirst().map { "Contact: \($0)\r\n" }.joined()
        let answer = try registerWithDigest(udp, contact: first, extra: Array(rest.utf8))
        let status = answer.response.statusCode
        XCTAssertEqual(status, 403, "more Contacts than max_bindings_per_extension: refused whole")
        XCTAssertLessThan(answer.bytes.count, 4_096, "the answer does not list what was sent")
        XCTAssertTrue(try storedBindings(of: "1001").isEmpty, "a refused REGISTER stores nothing")
        // Ten (the cap) are accepted.
        let ten = (0..<10).map { "<sip:1001@127.0.0.1:\(20_000 + $0)>" }.joined(separator: ", ")
        let capped = try registerWithDigest(udp, contact: ten)
        XCTAssertEqual(capped.response.statusCode, 200)
        XCTAssertEqual(capped.response.headers.values(.contact).count, 10)
        XCTAssertEqual(try storedBindings(of: "1001").count, 10)
        assertStillServing("after 1,000 Contacts")
    }

    // MARK: Loops and hops

    func testMaxForwardsZeroAndViaLoopsOnInvites() throws {
        let udp = try client(.udp)
        defer { udp.close() }
        let sdpless = "Contact: <sip:probe@127.0.0.1:\(udp.localPort)>\r\n"

        // Max-Forwards 0 on an INVITE for an extension: 483 (RFC 3261 §16.3 step 3).
        try udp.send(Self.request("INVITE", uri: "sip:1002@example.com", transport: "UDP", port: udp.localPort, extra: sdpless, maxForwards: 0))
        XCTAssertEqual(try finalResponse(udp)?.statusCode, 483)
        assertStillServing("after Max-Forwards 0")

        // An INVITE that claims to have passed this instance already (its Via marker, the instance
        // id the phone's stored binding names) with no call of it here: no loop, so a stranger's is
        // challenged like any other (the real loop, the same request back while its call rings,
        // gets 482: CallCoordinatorLoopTests).
        let instance = try XCTUnwrap(try storedBindings(of: "1002").first?.flow.instanceID)
        let loopVia = "Via: SIP/2.0/UDP 127.0.0.1:\(try point(.udp).port);branch=z9hG4bK\(UUID().uuidString);rport;rouse=\(instance)\r\n"
        try udp.send(Self.request("INVITE", uri: "sip:1002@example.com", transport: "UDP", port: udp.localPort, extra: loopVia + sdpless))
        XCTAssertEqual(try finalResponse(udp)?.statusCode, 407)
        assertStillServing("after a forged Via marker")
    }
}
