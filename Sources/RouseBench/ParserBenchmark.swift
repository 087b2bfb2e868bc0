import SIPMessage

/// Throughput of the SIP parser and serializer on one thread: a typical ~600-byte REGISTER (RFC 8599
/// push parameters, RFC 5626 instance) and an INVITE with SDP, each parsed as a whole datagram, and
/// the REGISTER serialized.
enum ParserBenchmark {
    static let register = Array(
        """
        REGISTER sip:sip.example.com SIP/2.0\r
        Via: SIP/2.0/TLS 192.0.2.44:49312;branch=z9hG4bK.3fG7pq1Lx;rport\r
        From: <sip:1001@sip.example.com>;tag=Lq8~xQ2a\r
        To: sip:1001@sip.example.com\r
        CSeq: 20 REGISTER\r
        Call-ID: 9yU2zNQ3sC-8sd7f6\r
        Max-Forwards: 70\r
        Supported: replaces, outbound, gruu, path\r
        Contact: <sip:1001@192.0.2.44:49312;transport=tls;pn-provider=apns;pn-prid=7f3a9c1e5b2d4a6f8e0c1b3d5f7a9c2e4b6d8f0a1c3e5b7d9f2a4c6e8b0d1f3a;pn-param=ABCD1234.org.example.phone.voip>;+sip.instance="<urn:uuid:2d1c2b7e-6d1b-4a8f-9e0a-3c1f0b2e7d45>";reg-id=1\r
        Expires: 3600\r
        User-Agent: ExamplePhone/5.2.0 (iPhone) SDK/5.3.0\r
        Content-Length: 0\r
        \r

        """.utf8)

    static let invite = Array(
        """
        INVITE sip:1002@sip.example.com SIP/2.0\r
        Via: SIP/2.0/TLS 192.0.2.44:49312;branch=z9hG4bK.inv7;rport\r
        Max-Forwards: 70\r
        From: "Alice" <sip:1001@sip.example.com>;tag=a73kszlfl\r
        To: <sip:1002@sip.example.com>\r
        Call-ID: 7sd8f7s8df7@192.0.2.44\r
        CSeq: 1 INVITE\r
        Contact: <sip:1001@192.0.2.44:49312;transport=tls>;+sip.instance="<urn:uuid:2d1c2b7e-6d1b-4a8f-9e0a-3c1f0b2e7d45>"\r
        Allow: INVITE, ACK, CANCEL, OPTIONS, BYE, REFER, NOTIFY, MESSAGE, SUBSCRIBE, INFO, UPDATE\r
        Supported: replaces, outbound, gruu\r
        Content-Type: application/sdp\r
        Content-Length: 249\r
        \r
        v=0\r
        o=1001 3424 2213 IN IP4 192.0.2.44\r
        s=Talk\r
        c=IN IP4 192.0.2.44\r
        t=0 0\r
        m=audio 7078 RTP/AVP 96 97 98 0 8 101\r
        a=rtpmap:96 opus/48000/2\r
        a=rtpmap:97 speex/16000\r
        a=rtpmap:98 speex/8000\r
        a=rtpmap:101 telephone-event/8000\r
        a=rtcp-fb:* ccm tmmbr\r

        """.utf8)

    static func run() -> [BenchFigure] {
        var figures: [BenchFigure] = []
        figures.append(
            BenchFigure(
                name: "parser.register_\(register.count)B", value: parseRate(register), unit: "messages/s"))
        figures.append(
            BenchFigure(name: "parser.invite_sdp_\(invite.count)B", value: parseRate(invite), unit: "messages/s"))
        figures.append(BenchFigure(name: "serializer.register", value: serializeRate(register), unit: "messages/s"))
        return figures
    }

    /// Messages parsed per second over about 1.5 s.
    private static func parseRate(_ bytes: [UInt8]) -> Double {
        var checksum = 0
        let rate = measure { count in
            bytes.withUnsafeBytes { raw in
                for _ in 0..<count {
                    if case .request(let request)? = try? SIPParser.parse(raw) { checksum &+= request.headers.count }
                }
            }
        }
        precondition(checksum > 0, "the benchmark message does not parse")
        return rate
    }

    private static func serializeRate(_ bytes: [UInt8]) -> Double {
        guard let message = try? SIPParser.parse(bytes) else { preconditionFailure("the benchmark message does not parse") }
        var total = 0
        let rate = measure { count in
            for _ in 0..<count { total &+= SIPSerializer.serialize(message).count }
        }
        precondition(total > 0)
        return rate
    }

    /// Runs `body(batch)` repeatedly for about 1.5 s after a short warm-up; returns iterations/s.
    private static func measure(_ body: (Int) -> Void) -> Double {
        let clock = ContinuousClock()
        body(1_000)
        let batch = 10_000
        var iterations = 0
        let start = clock.now
        var elapsed = Duration.zero
        while elapsed < .milliseconds(1_500) {
            body(batch)
            iterations += batch
            elapsed = clock.now - start
        }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return Double(iterations) / seconds
    }
}
