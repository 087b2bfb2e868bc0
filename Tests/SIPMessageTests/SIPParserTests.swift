import SIPMessage
import XCTest

/// Well-formed messages, written in the style of RFC 3261 and the RFC 4475 torture tests, each
/// parsed as a datagram and through the stream framer (whole, byte by byte, random chunks).
final class SIPParserTests: XCTestCase {
    static let linphoneRegister = wire(
        """
        REGISTER sip:sip.example.com SIP/2.0
        Via: SIP/2.0/TLS 192.0.2.44:49312;branch=z9hG4bK.3fG7pq1Lx;rport
        From: <sip:1001@sip.example.com>;tag=Lq8~xQ2a
        To: sip:1001@sip.example.com
        CSeq: 20 REGISTER
        Call-ID: 9yU2zNQ3sC
        Max-Forwards: 70
        Supported: replaces, outbound, gruu, path
        Accept: application/sdp
        Accept: text/plain
        Contact: <sip:1001@192.0.2.44:49312;transport=tls;pn-provider=apns.dev;pn-prid=TOKA:remote&TOKB:voip;pn-param=ABCD1234.org.linphone.phone.remote&voip;pn-silent=1;pn-timeout=0>;+sip.instance="<urn:uuid:2d1c2b7e-6d1b-4a8f-9e0a-3c1f0b2e7d45>";reg-id=1;+org.linphone.specs="lime";expires=3600;q=0.7
        Expires: 3600
        User-Agent: LinphoneiOS/5.2.0 (iPhone) LinphoneSDK/5.3.0
        Content-Length: 0


        """)

    func testLinphoneRegisterKeepsPushParametersVerbatim() throws {
        let register = try request(parseEveryWay(Self.linphoneRegister))
        XCTAssertEqual(register.method, .register)
        XCTAssertEqual(register.uri, SIPURI(host: "sip.example.com"))
        XCTAssertEqual(register.callID, "9yU2zNQ3sC")
        XCTAssertEqual(register.cseq, SIPCSeq(20, .register))
        XCTAssertEqual(register.maxForwards, 70)
        XCTAssertEqual(register.expires, 3600)
        XCTAssertEqual(register.from?.tag, "Lq8~xQ2a")
        XCTAssertEqual(register.to?.uri.userAtHost, "1001@sip.example.com")
        XCTAssertEqual(register.topVia?.branch, "z9hG4bK.3fG7pq1Lx")
        XCTAssertEqual(register.topVia?.transport, "TLS")
        XCTAssertEqual(register.topVia?.rport, .some(nil))
        XCTAssertEqual(register.headers.values(.accept), ["application/sdp", "text/plain"])

        guard case .address(let contact)? = register.contacts?.first else { return XCTFail("no contact") }
        let uri = contact.uri
        XCTAssertEqual(uri.port, 49312)
        XCTAssertEqual(uri.transportParameter, "tls")
        XCTAssertEqual(uri.parameters.value("pn-provider"), "apns.dev")
        XCTAssertEqual(uri.parameters.value("pn-prid"), "TOKA:remote&TOKB:voip")
        XCTAssertEqual(uri.parameters.value("pn-param"), "ABCD1234.org.linphone.phone.remote&voip")
        XCTAssertEqual(uri.parameters.value("pn-timeout"), "0")
        XCTAssertEqual(contact.instance, "<urn:uuid:2d1c2b7e-6d1b-4a8f-9e0a-3c1f0b2e7d45>")
        XCTAssertEqual(contact.regID, 1)
        XCTAssertEqual(contact.expires, 3600)
        XCTAssertEqual(contact.q, 0.7)
        XCTAssertEqual(contact.parameters.value("+org.linphone.specs"), "\"lime\"")
        // The Contact URI written back is the one the phone sent.
        XCTAssertEqual(
            uri.description,
            "sip:1001@192.0.2.44:49312;transport=tls;pn-provider=apns.dev;pn-prid=TOKA:remote&TOKB:voip"
                + ";pn-param=ABCD1234.org.linphone.phone.remote&voip;pn-silent=1;pn-timeout=0")
        XCTAssertEqual(try SIPNameAddress(parsing: contact.description), contact)
    }

    func testCompactFormsFoldingEscapedQuotesAndSeveralViasInOneLine() throws {
        let bytes = wire(
            """
            INVITE sip:vivekg@chair-dnrc.example.com;unknownparam SIP/2.0
            TO :
             sip:vivekg@chair-dnrc.example.com ;   tag    = 1918181833n
            from   : "J Rosenberg \\\\\\"" <sip:jdrosen@example.com>
              ;
              tag = 98asjd8
            MaX-fOrWaRdS: 0068
            Call-ID: wsinv.ndaksdj@192.0.2.1
            Content-Length   : 150
            cseq: 0009
              INVITE
            Via  : SIP  /   2.0
             /UDP
                192.0.2.2;branch=390skdjuw
            s :
            NewFangledHeader:   newfangled value
             continued newfangled value
            UnknownHeaderWithUnusualValue: ;;,,;;,;
            Content-Type: application/sdp
            Route:
             <sip:services.example.com;lr;unknownwith=value;unknown-no-value>
            v:  SIP  / 2.0  / TCP     spindle.example.com   ;
              branch  =   z9hG4bK9ikj8  ,
             SIP  /    2.0   / UDP  192.168.255.111   ; branch=
             z9hG4bK30239
            m:"Quoted string \\"\\"" <sip:jdrosen@example.com> ; newparam =
                  newvalue ;
              secondparam ; q = 0.33

            v=0
            o=mhandley 29739 7272939 IN IP4 192.0.2.3
            s=-
            c=IN IP4 192.0.2.4
            t=0 0
            m=audio 49217 RTP/AVP 0 12
            m=video 3227 RTP/AVP 31
            a=rtpmap:31 LPC

            """)
        let invite = try request(parseEveryWay(bytes))
        XCTAssertEqual(invite.method, .invite)
        XCTAssertEqual(invite.uri.parameters.contains("unknownparam"), true)
        XCTAssertEqual(invite.to?.tag, "1918181833n")
        XCTAssertEqual(invite.from?.displayName, "J Rosenberg \\\"")
        XCTAssertEqual(invite.from?.tag, "98asjd8")
        XCTAssertEqual(invite.maxForwards, 68)
        XCTAssertEqual(invite.cseq, SIPCSeq(9, .invite))
        XCTAssertEqual(invite.headers["Subject"], "")
        XCTAssertEqual(invite.headers["newfangledheader"], "newfangled value continued newfangled value")
        let vias = invite.vias
        XCTAssertEqual(vias.map(\.host), ["192.0.2.2", "spindle.example.com", "192.168.255.111"])
        XCTAssertEqual(vias.map(\.transport), ["UDP", "TCP", "UDP"])
        XCTAssertEqual(vias.map(\.branch), ["390skdjuw", "z9hG4bK9ikj8", "z9hG4bK30239"])
        guard case .address(let contact)? = invite.contacts?.first else { return XCTFail("no contact") }
        XCTAssertEqual(contact.displayName, "Quoted string \"\"")
        XCTAssertEqual(contact.q, 0.33)
        XCTAssertEqual(contact.parameters.value("newparam"), "newvalue")
        XCTAssertEqual(invite.body.count, 150)
        XCTAssertEqual(invite.headers[.contentType], "application/sdp")
        XCTAssertEqual(String(decoding: invite.body.prefix(3), as: UTF8.self), "v=0")
    }

    func testIPv6InRequestURIViaAndContact() throws {
        let bytes = wire(
            """
            OPTIONS sip:[2001:db8::10]:5070;transport=tcp SIP/2.0
            Via: SIP/2.0/TCP [2001:db8::9:1]:5060;branch=z9hG4bKas3-111;received=[2001:db8::9:255]
            Max-Forwards: 70
            From: "Caller" <sip:caller@[2001:db8::1]>;tag=81x2
            To: <sip:[2001:db8::10]>
            Call-ID: SSG9559905523997077@hlau_4100
            CSeq: 8612 OPTIONS
            Contact: "Caller" <sip:caller@[2001:db8::9:1];transport=tcp>
            Content-Length: 0


            """)
        let options = try request(parseEveryWay(bytes))
        XCTAssertEqual(options.uri.host, "[2001:db8::10]")
        XCTAssertEqual(options.uri.port, 5070)
        XCTAssertEqual(options.uri.transportParameter, "tcp")
        XCTAssertEqual(options.topVia?.host, "[2001:db8::9:1]")
        XCTAssertEqual(options.topVia?.port, 5060)
        XCTAssertEqual(options.topVia?.received, "[2001:db8::9:255]")
        XCTAssertEqual(options.from?.uri.host, "[2001:db8::1]")
        XCTAssertNil(options.from?.uri.port)
        XCTAssertEqual(options.to?.uri.host, "[2001:db8::10]")
    }

    func testTelRequestURIAndURIHeaders() throws {
        let bytes = wire(
            """
            INVITE tel:+1-201-555-0123;phone-context=example.com SIP/2.0
            Via: SIP/2.0/UDP 192.0.2.5;branch=z9hG4bKtel1
            Max-Forwards: 70
            From: <tel:+12015550100>;tag=t1
            To: <tel:+1-201-555-0123>
            Call-ID: tel-1@192.0.2.5
            CSeq: 1 INVITE
            Contact: <sip:caller@192.0.2.5?Subject=Project%20X&Priority=urgent>
            Content-Length: 0


            """)
        let invite = try request(parseEveryWay(bytes))
        XCTAssertEqual(invite.uri.scheme, .tel)
        XCTAssertEqual(invite.uri.user, "+1-201-555-0123")
        XCTAssertEqual(invite.uri.parameters.value("phone-context"), "example.com")
        XCTAssertEqual(invite.from?.uri.scheme, .tel)
        guard case .address(let contact)? = invite.contacts?.first else { return XCTFail("no contact") }
        XCTAssertEqual(contact.uri.headers, [SIPParameter("Subject", "Project%20X"), SIPParameter("Priority", "urgent")])
        XCTAssertEqual(contact.uri.description, "sip:caller@192.0.2.5?Subject=Project%20X&Priority=urgent")
    }

    func testWildcardContactUnregistersAll() throws {
        let bytes = wire(
            """
            REGISTER sip:sip.example.com SIP/2.0
            v: SIP/2.0/UDP 198.51.100.7:5060;branch=z9hG4bKstar
            f: <sip:1002@sip.example.com>;tag=a1
            t: <sip:1002@sip.example.com>
            i: star-1
            CSeq: 3 REGISTER
            m: *
            Expires: 0
            l: 0


            """)
        let register = try request(parseEveryWay(bytes))
        XCTAssertEqual(register.contacts, [.wildcard])
        XCTAssertEqual(register.expires, 0)
        XCTAssertNil(register.maxForwards)
        // Compact names keep their spelling but compare as their long forms.
        XCTAssertEqual(register.headers.fields.map(\.name), ["v", "f", "t", "i", "CSeq", "m", "Expires", "l"])
        XCTAssertEqual(register.headers[.contentLength], "0")
    }

    func testResponseWithSeveralContactsAndViaLines() throws {
        let bytes = wire(
            """
            SIP/2.0 200 OK
            Via: SIP/2.0/TCP 192.0.2.44:49312;branch=z9hG4bK.a;received=203.0.113.9;rport=49312
            Via: SIP/2.0/UDP 10.0.0.2;branch=z9hG4bK.b
            From: <sip:1001@sip.example.com>;tag=Lq8
            To: <sip:1001@sip.example.com>;tag=srv9
            Call-ID: 9yU2zNQ3sC
            CSeq: 20 REGISTER
            Contact: <sip:1001@192.0.2.44:49312;transport=tcp>;expires=3600, <sip:1001@198.51.100.3>;expires=60
            Feature-Caps: *;+sip.pns="apns"
            Content-Length: 0


            """)
        let ok = try response(parseEveryWay(bytes))
        XCTAssertEqual(ok.statusCode, 200)
        XCTAssertEqual(ok.reasonPhrase, "OK")
        XCTAssertEqual(ok.vias.count, 2)
        XCTAssertEqual(ok.topVia?.rport, .some(49312))
        XCTAssertEqual(ok.contacts?.count, 2)
        XCTAssertEqual(ok.to?.tag, "srv9")
    }

    func testResponseReasonPhraseKeptAsSent() throws {
        let bytes = wire(
            """
            SIP/2.0 486 Occupé, rappelez plus tard
            Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKr
            From: <sip:a@example.com>;tag=1
            To: <sip:b@example.com>;tag=2
            Call-ID: r1
            CSeq: 5 INVITE
            Content-Length: 0


            """)
        let busy = try response(parseEveryWay(bytes))
        XCTAssertEqual(busy.statusCode, 486)
        XCTAssertEqual(busy.reasonPhrase, "Occupé, rappelez plus tard")
    }

    func testLeadingCRLFsBeforeTheStartLineAreIgnored() throws {
        let bytes = [0x0D, 0x0A, 0x0D, 0x0A] + Self.linphoneRegister
        let message = try SIPParser.parse(bytes)
        XCTAssertEqual(message, try SIPParser.parse(Self.linphoneRegister))
    }

    func testParsesFromASliceAndARawBufferOfALargerRead() throws {
        let read = Array("garbage before".utf8) + Self.linphoneRegister + Array("garbage after".utf8)
        let slice = read[14..<(14 + Self.linphoneRegister.count)]
        let expected = try SIPParser.parse(Self.linphoneRegister)
        XCTAssertEqual(try SIPParser.parse(slice), expected)
        let fromRaw = try slice.withUnsafeBytes { raw in try SIPParser.parse(raw) }
        XCTAssertEqual(fromRaw, expected)
        XCTAssertTrue([UInt8]([0x0D, 0x0A, 0x0D, 0x0A]).withUnsafeBytes(SIPParser.isKeepAlive))
        XCTAssertFalse(Self.linphoneRegister.withUnsafeBytes(SIPParser.isKeepAlive))
    }

    func testDatagramBodyIsCutAtContentLength() throws {
        let bytes = wire(
            """
            MESSAGE sip:bob@example.com SIP/2.0
            Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKm1
            Max-Forwards: 70
            From: <sip:alice@example.com>;tag=m
            To: <sip:bob@example.com>
            Call-ID: m1
            CSeq: 1 MESSAGE
            Content-Type: text/plain
            Content-Length: 5

            Hello, and some trailing bytes the datagram should not carry
            """)
        let message = try request(SIPParser.parse(bytes))
        XCTAssertEqual(message.body, Array("Hello".utf8))
        assertRoundTrip(.request(message))
    }

    func testDatagramWithoutContentLengthTakesTheRest() throws {
        let bytes = wire(
            """
            MESSAGE sip:bob@example.com SIP/2.0
            Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKm2
            Max-Forwards: 70
            From: <sip:alice@example.com>;tag=m
            To: <sip:bob@example.com>
            Call-ID: m2
            CSeq: 1 MESSAGE

            Hi Bob
            """)
        let message = try request(SIPParser.parse(bytes))
        XCTAssertEqual(message.body, Array("Hi Bob".utf8))
        // The parsed message states its body length, so it can be sent over a stream.
        XCTAssertEqual(message.headers[.contentLength], "6")
        assertRoundTrip(.request(message))
    }

    func testUnknownMethodAndHeaderNamesInAnyCase() throws {
        let bytes = wire(
            """
            NEWMETHOD sip:user@example.com SIP/2.0
            VIA: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKn1
            mAX-fORWARDS: 70
            FROM: <sip:alice@example.com>;tag=n
            to: <sip:user@example.com>
            CALL-ID: n1
            cSeQ: 4 NEWMETHOD
            X-Custom_Header.1: a, b ,c
            Content-Length: 0


            """)
        let message = try request(parseEveryWay(bytes))
        XCTAssertEqual(message.method, SIPMethod("NEWMETHOD"))
        XCTAssertEqual(message.callID, "n1")
        XCTAssertEqual(message.headers.values(SIPHeaderName("x-custom_header.1")), ["a", "b", "c"])
    }

    func testErrorResponseToAMalformedRequestCopiesTheTransactionLines() throws {
        let bytes = wire(
            """
            INVITE sip:bob@example.com SIP/2.0
            Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKe1;rport, SIP/2.0/UDP 10.1.1.1;branch=z9hG4bKe0
            Max-Forwards: many
            From: "Alice" <sip:alice@example.com>;tag=e1
            To: <sip:bob@example.com>
            Call-ID: err-1@192.0.2.1
            CSeq: 7 INVITE
            Content-Length: 0


            """)
        guard let error = parseError(bytes) else { return }
        XCTAssertEqual(error.statusCode, 400)
        XCTAssertEqual(error.reason, "Malformed Max-Forwards header")
        let answer = try XCTUnwrap(error.response(toTag: "srv1"))
        XCTAssertEqual(
            String(decoding: SIPSerializer.serialize(answer), as: UTF8.self),
            """
            SIP/2.0 400 Malformed Max-Forwards header\r
            Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKe1;rport, SIP/2.0/UDP 10.1.1.1;branch=z9hG4bKe0\r
            From: "Alice" <sip:alice@example.com>;tag=e1\r
            To: <sip:bob@example.com>;tag=srv1\r
            Call-ID: err-1@192.0.2.1\r
            CSeq: 7 INVITE\r
            Content-Length: 0\r
            \r

            """)
        // Without a tag of its own, the error response still gets one.
        XCTAssertNotNil(error.response()?.to?.tag)
    }

    func testValueParsersRoundTripTheirDescriptions() throws {
        let uris = [
            "sip:alice:secret@example.com:5061;transport=tls;lr?Subject=x&Call-Info=%3Chttp://a%3E",
            "sips:[2001:db8::1]:5061", "tel:+44-20-7946-0000;ext=12", "sip:1001@192.0.2.44;ob",
            "sip:user;par=u%40example.net@example.com",
        ]
        for text in uris {
            let uri = try SIPURI(parsing: text)
            XCTAssertEqual(uri.description, text)
            XCTAssertEqual(try SIPURI(parsing: uri.description), uri)
        }
        let user = try SIPURI(parsing: "sip:user;par=u%40example.net@example.com")
        XCTAssertEqual(user.user, "user;par=u%40example.net")
        XCTAssertEqual(user.host, "example.com")

        let address = try SIPNameAddress(parsing: #""Dr. \"Who\" \\ co" <sip:who@example.com;lr>;tag=9"#)
        XCTAssertEqual(address.displayName, #"Dr. "Who" \ co"#)
        XCTAssertEqual(try SIPNameAddress(parsing: address.description), address)

        let bare = try SIPNameAddress(parsing: "sip:carol@example.com;tag=77")
        XCTAssertEqual(bare.tag, "77")
        XCTAssertTrue(bare.uri.parameters.isEmpty)

        let via = try SIPVia(parsing: "SIP/2.0/WSS df7jal23ls0d.invalid;branch=z9hG4bK56sdasks;rport=5060;received=[2001:db8::2]")
        XCTAssertEqual(via.transport, "WSS")
        XCTAssertEqual(try SIPVia(parsing: via.description), via)
        XCTAssertEqual(SIPHeaderValueScanner.splitList(#""a,b" <sip:x@y>, <sip:q@r;p=1,2>;x="c,d", ,last"#).count, 3)
    }

    /// RFC 3261 §19.1.4: an escaped unreserved character is the character, in the user part, the
    /// password, the host and URI parameters; other escapes, and URI headers, stay as written.
    func testEscapesOfUnreservedCharactersAreReadAsTheCharacters() throws {
        let uri = try SIPURI(parsing: "sip:%61lice:p%61ss@%65xample.com:5060;%74ransport=%54CP;x=%28%29;%28y=1;v=%25%34%31?h=%61")
        XCTAssertEqual(uri.user, "alice")
        XCTAssertEqual(uri.password, "pass")
        XCTAssertEqual(uri.host, "example.com")
        XCTAssertEqual(uri.transportParameter, "tcp")
        XCTAssertEqual(uri.parameters.value("x"), "()")
        XCTAssertTrue(uri.parameters.contains("%28y"), "a parameter name stays a token")
        XCTAssertEqual(uri.parameters.value("v"), "%2541", "%25 stays escaped, so the value still means %41")
        XCTAssertEqual(uri.headers, [SIPParameter("h", "%61")])
        XCTAssertEqual(try SIPURI(parsing: uri.description), uri)
        XCTAssertEqual(try SIPURI(parsing: "sip:a%40b%3Ac%00@example.com").user, "a%40b%3Ac%00")
        for bad in ["sip:ex%2Fample.com", "sip:example%2.com", "sip:example%00.com", "sip:%20@ex ample.com"] {
            XCTAssertThrowsError(try SIPURI(parsing: bad), bad)
        }
    }

    /// quote() writes what qdtext cannot hold as quoted-pairs (NUL included) and drops CR and LF; the
    /// serializer keeps a NUL a quoted-pair carries and blanks any other.
    func testQuotedPairsCarryControlCharactersOut() throws {
        XCTAssertEqual(SIPHeaderValueScanner.quote("Bob\u{0}s\r\n \"x\"\t\u{7F}"), "\"Bob\\\u{0}s \\\"x\\\"\t\\\u{7F}\"")
        let address = SIPNameAddress(displayName: "a\u{0}b\u{7}", uri: SIPURI(host: "example.com"))
        XCTAssertEqual(try SIPNameAddress(parsing: address.description), address)
        var headers = SIPHeaders()
        headers.add(SIPHeader(name: "Subject", value: "\"a\\\u{0}b\""))
        headers.add(SIPHeader(name: "X-Bare", value: "a\u{0}b"))
        let wire = String(decoding: SIPSerializer.serialize(SIPResponse(statusCode: 200, headers: headers)), as: UTF8.self)
        XCTAssertTrue(wire.contains("Subject: \"a\\\u{0}b\"\r\n"), wire)
        XCTAssertTrue(wire.contains("X-Bare: a b\r\n"), wire)
    }

    func testValueParsersRejectWhatTheGrammarForbids() {
        for bad in ["sip:", "sip:@example.com", "sip:alice@", "sip:[2001:db8::1", "sip:[zz::1]", "sip:host:99999",
            "sip:al ice@example.com", "example.com", "tel:", "sip:host;=x"]
        {
            XCTAssertThrowsError(try SIPURI(parsing: bad), bad)
        }
        XCTAssertEqual((try? SIPURI(parsing: "http://example.com")) == nil, true)
        do {
            _ = try SIPURI(parsing: "mailto:bob@example.com")
            XCTFail("mailto parsed")
        } catch {
            XCTAssertTrue(error.isUnsupportedScheme)
        }
        for bad in [#""unterminated <sip:a@b>"#, "<sip:a@b", "<sip:a@b> junk", "sip:a@b?x=y", #""Name" sip:a@b"#] {
            XCTAssertThrowsError(try SIPNameAddress(parsing: bad), bad)
        }
        for bad in ["SIP/2.0/UDP", "SIP/2.0 UDP host", "HTTP/1.1/TCP host", "SIP/2.0/UDP host:port", "SIP/2.0/UDP [::1"] {
            XCTAssertThrowsError(try SIPVia(parsing: bad), bad)
        }
        for bad in ["", "INVITE", "1", "x INVITE", "4294967296 INVITE", "1 INV ITE"] {
            XCTAssertThrowsError(try SIPCSeq(parsing: bad), bad)
        }
    }
}
