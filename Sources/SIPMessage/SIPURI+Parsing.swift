private typealias Scanner = SIPHeaderValueScanner

extension SIPURI {
    /// Parses a URI from its text form (RFC 3261 §19.1.1, RFC 3966 for `tel:`).
    public init(parsing text: String) throws(SIPValueError) {
        self = try text.parsingSIPBytes { bytes throws(SIPValueError) in try SIPURI(bytes, 0..<bytes.count) }
    }

    init(_ bytes: UnsafeBufferPointer<UInt8>, _ whole: Range<Int>) throws(SIPValueError) {
        // With build: true, scan returns the value or throws.
        self = try SIPURI.scan(bytes, whole, build: true)!
    }

    /// Checks the URI's syntax; builds it only when `build` is true (else returns nil on success).
    static func scan(
        _ bytes: UnsafeBufferPointer<UInt8>, _ whole: Range<Int>, build: Bool
    ) throws(SIPValueError) -> SIPURI? {
        let range = Scanner.trim(bytes, whole)
        guard let colon = Scanner.firstIndex(of: UInt8(ascii: ":"), in: bytes, range), colon > range.lowerBound else {
            throw SIPValueError("URI without scheme")
        }
        let schemeRange = range.lowerBound..<colon
        let scheme: Scheme
        if Scanner.equalsLowercased(bytes, schemeRange, "sip") {
            scheme = .sip
        } else if Scanner.equalsLowercased(bytes, schemeRange, "sips") {
            scheme = .sips
        } else if Scanner.equalsLowercased(bytes, schemeRange, "tel") {
            scheme = .tel
        } else if SIPURI.isSchemeSyntax(bytes, schemeRange) {
            throw SIPValueError(unsupportedScheme: "unsupported URI scheme")
        } else {
            throw SIPValueError("URI without scheme")
        }
        var lower = colon + 1
        var upper = range.upperBound
        guard lower < upper else { throw SIPValueError("empty URI") }
        // One pass: reject white space and controls, find the first '@' and the first '?'. The
        // userinfo may hold '?' (user-unreserved, RFC 4475 §3.1.1.2) but no '@', and neither
        // parameters nor headers may hold an '@' unescaped, so the first '@' ends the userinfo
        // and headers begin at the first '?' after it (RFC 3261 §25.1).
        var firstQuestion: Int? = nil
        var at: Int? = nil
        for k in lower..<upper {
            let c = bytes[k]
            if c > UInt8(ascii: "@") {
                if c == 0x7F { throw SIPValueError("white space or control character in URI") }
                continue
            }
            if c <= 0x20 || c == UInt8(ascii: "<") || c == UInt8(ascii: ">") || c == UInt8(ascii: "\"") {
                throw SIPValueError("white space or control character in URI")
            }
            if c == UInt8(ascii: "?"), firstQuestion == nil { firstQuestion = k }
            if c == UInt8(ascii: "@"), at == nil { at = k }
        }
        var question = firstQuestion
        if let at, let first = firstQuestion, first < at {
            question = Scanner.firstIndex(of: UInt8(ascii: "?"), in: bytes, (at + 1)..<upper)
        }

        // Headers (?a=b&c=d) come last (RFC 3261 §19.1.1).
        var headers: [SIPParameter] = []
        if let question {
            var partStart = question + 1
            while partStart < upper {
                let partEnd = Scanner.firstIndex(of: UInt8(ascii: "&"), in: bytes, partStart..<upper) ?? upper
                if build, partEnd > partStart {
                    if let eq = Scanner.firstIndex(of: UInt8(ascii: "="), in: bytes, partStart..<partEnd) {
                        headers.append(
                            SIPParameter(
                                Scanner.text(bytes, partStart..<eq), Scanner.text(bytes, (eq + 1)..<partEnd)))
                    } else {
                        headers.append(SIPParameter(Scanner.text(bytes, partStart..<partEnd)))
                    }
                }
                partStart = partEnd + 1
            }
            upper = question
        }

        if scheme == .tel {
            let semi = Scanner.firstIndex(of: UInt8(ascii: ";"), in: bytes, lower..<upper) ?? upper
            guard semi > lower else { throw SIPValueError("tel URI without number") }
            let parameters = try Scanner.parseParameters(bytes, semi..<upper, build: build)
            guard build else { return nil }
            return SIPURI(
                scheme: .tel, user: Scanner.text(bytes, lower..<semi), host: "", parameters: parameters,
                headers: headers)
        }

        var userRange: Range<Int>? = nil
        var passwordRange: Range<Int>? = nil
        if let at {
            guard at > lower else { throw SIPValueError("empty user part in URI") }
            if let passwordColon = Scanner.firstIndex(of: UInt8(ascii: ":"), in: bytes, lower..<at) {
                guard passwordColon > lower else { throw SIPValueError("empty user part in URI") }
                userRange = lower..<passwordColon
                passwordRange = (passwordColon + 1)..<at
            } else {
                userRange = lower..<at
            }
            lower = at + 1
        }

        var i = lower
        let hostRange: Range<Int>
        var decodedHost: String? = nil
        if i < upper, bytes[i] == UInt8(ascii: "[") {
            guard let close = Scanner.firstIndex(of: UInt8(ascii: "]"), in: bytes, i..<upper) else {
                throw SIPValueError("unterminated IPv6 reference in URI")
            }
            guard SIPURI.isIPv6Reference(bytes, i..<(close + 1)) else {
                throw SIPValueError("bad IPv6 reference in URI")
            }
            hostRange = i..<(close + 1)
            i = close + 1
        } else {
            let start = i
            var escaped = false
            while i < upper, bytes[i] != UInt8(ascii: ":"), bytes[i] != UInt8(ascii: ";") {
                if bytes[i] == UInt8(ascii: "%") { escaped = true } else if !SIPURI.isHostByte(bytes[i]) {
                    throw SIPValueError("bad host in URI")
                }
                i += 1
            }
            guard i > start else { throw SIPValueError("URI without host") }
            hostRange = start..<i
            if escaped { decodedHost = try SIPURI.decodeHost(bytes, hostRange) }
        }
        var port: Int? = nil
        if i < upper, bytes[i] == UInt8(ascii: ":") {
            i += 1
            let start = i
            while i < upper, bytes[i] != UInt8(ascii: ";") { i += 1 }
            port = try SIPURI.parsePort(bytes, start..<i)
        }
        guard i == upper || bytes[i] == UInt8(ascii: ";") else {
            throw SIPValueError("bad text after host in URI")
        }
        let parameters = try Scanner.parseParameters(bytes, i..<upper, build: build)
        guard build else { return nil }
        // Escapes of unreserved characters are read as the characters (RFC 3261 §19.1.4), so that
        // `sip:%31001@` is 1001's and `;transport=%55DP` is UDP wherever the URI is used.
        return SIPURI(
            scheme: scheme, user: userRange.map { Scanner.decodingUnreserved(bytes, $0) },
            password: passwordRange.map { Scanner.decodingUnreserved(bytes, $0) },
            host: decodedHost ?? Scanner.text(bytes, hostRange), port: port,
            parameters: parameters.decodingUnreservedEscapes(), headers: headers)
    }

    /// A host name written with `%HH` escapes (RFC 3986 reg-name), decoded; each escaped octet must
    /// itself be a host character, so no escape can smuggle a NUL, a space or a delimiter in.
    static func decodeHost(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) throws(SIPValueError) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(range.count)
        var i = range.lowerBound
        while i < range.upperBound {
            var c = bytes[i]
            if c == UInt8(ascii: "%") {
                guard i + 2 < range.upperBound, let high = Scanner.hexValue(bytes[i + 1]), let low = Scanner.hexValue(bytes[i + 2])
                else { throw SIPValueError("bad escape in URI host") }
                c = high << 4 | low
                i += 2
            }
            guard isHostByte(c) else { throw SIPValueError("bad host in URI") }
            out.append(c)
            i += 1
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// `scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )` (RFC 3986 §3.1).
    static func isSchemeSyntax(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Bool {
        guard !range.isEmpty else { return false }
        for k in range {
            let c = bytes[k] | 0x20
            let isAlpha = c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")
            if k == range.lowerBound {
                if !isAlpha { return false }
            } else if !(isAlpha || (bytes[k] >= 0x30 && bytes[k] <= 0x39) || bytes[k] == UInt8(ascii: "+")
                || bytes[k] == UInt8(ascii: "-") || bytes[k] == UInt8(ascii: "."))
            {
                return false
            }
        }
        return true
    }

    /// `[` hex digits, colons and dots (an embedded IPv4 address) `]`, with at least one colon.
    static func isIPv6Reference(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Bool {
        guard range.count >= 4, bytes[range.lowerBound] == UInt8(ascii: "["),
            bytes[range.upperBound - 1] == UInt8(ascii: "]")
        else { return false }
        var colons = 0
        for k in (range.lowerBound + 1)..<(range.upperBound - 1) {
            let c = bytes[k]
            if c == UInt8(ascii: ":") {
                colons += 1
            } else if !(isHexDigit(c) || c == UInt8(ascii: ".")) {
                return false
            }
        }
        return colons >= 2
    }

    static func parsePort(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) throws(SIPValueError) -> Int {
        guard !range.isEmpty, range.count <= 5 else { throw SIPValueError("bad port") }
        var value = 0
        for k in range {
            let c = bytes[k]
            guard c >= 0x30, c <= 0x39 else { throw SIPValueError("bad port") }
            value = value * 10 + Int(c - 0x30)
        }
        guard value <= 65535 else { throw SIPValueError("port out of range") }
        return value
    }

    static func isHexDigit(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66)
    }

    static func isHostByte(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
            || c == UInt8(ascii: "-") || c == UInt8(ascii: ".") || c == UInt8(ascii: "_")
    }
}

extension SIPNameAddress {
    /// Parses `"Name" <uri>;params`, `Name <uri>;params`, `<uri>;params` or a bare addr-spec, whose
    /// `;params` are then header parameters (RFC 3261 §20.10).
    public init(parsing text: String) throws(SIPValueError) {
        self = try text.parsingSIPBytes { bytes throws(SIPValueError) in
            try SIPNameAddress(bytes, 0..<bytes.count)
        }
    }

    init(_ bytes: UnsafeBufferPointer<UInt8>, _ whole: Range<Int>) throws(SIPValueError) {
        // With build: true, scan returns the value or throws.
        self = try SIPNameAddress.scan(bytes, whole, build: true)!
    }

    /// The `tag` parameter of an address (nil when it has none or is malformed), read without
    /// building the address.
    static func tag(of bytes: UnsafeBufferPointer<UInt8>) -> String? {
        var parameters = 0..<0
        do throws(SIPValueError) {
            _ = try scan(bytes, 0..<bytes.count, build: false, headerParameters: &parameters)
            return try Scanner.parseParameters(bytes, parameters).value("tag")
        } catch {
            return nil
        }
    }

    /// Checks the address's syntax; builds it only when `build` is true (else returns nil on success).
    static func scan(
        _ bytes: UnsafeBufferPointer<UInt8>, _ whole: Range<Int>, build: Bool
    ) throws(SIPValueError) -> SIPNameAddress? {
        var parameters = 0..<0
        return try scan(bytes, whole, build: build, headerParameters: &parameters)
    }

    /// `scan`, telling where the header parameters lie.
    private static func scan(
        _ bytes: UnsafeBufferPointer<UInt8>, _ whole: Range<Int>, build: Bool, headerParameters: inout Range<Int>
    ) throws(SIPValueError) -> SIPNameAddress? {
        let range = Scanner.trim(bytes, whole)
        guard !range.isEmpty else { throw SIPValueError("empty address") }
        var i = range.lowerBound
        let end = range.upperBound
        var displayName: String? = nil
        if bytes[i] == UInt8(ascii: "\"") {
            let afterQuote = try Scanner.quotedStringEnd(bytes, from: i, end)
            if build { displayName = Scanner.unquote(bytes, i..<afterQuote) }
            i = afterQuote
            while i < end, Scanner.isWhitespace(bytes[i]) { i += 1 }
            guard i < end, bytes[i] == UInt8(ascii: "<") else {
                throw SIPValueError("display name without <URI>")
            }
        }
        if let open = Scanner.firstIndex(of: UInt8(ascii: "<"), in: bytes, i..<end) {
            if bytes[i] != UInt8(ascii: "\"") {
                let name = Scanner.trim(bytes, i..<open)
                if !name.isEmpty {
                    // display-name = *(token LWS) (RFC 3261 §25.1); UTF-8 is tolerated as phones send it.
                    for k in name {
                        let c = bytes[k]
                        guard Scanner.isTokenByte(c) || c == 0x20 || c == 0x09 || c >= 0x80 else {
                            throw SIPValueError("bad display name")
                        }
                    }
                    if build { displayName = Scanner.text(bytes, name) }
                }
            }
            guard let close = Scanner.firstIndex(of: UInt8(ascii: ">"), in: bytes, open..<end) else {
                throw SIPValueError("unterminated <URI>")
            }
            // LAQUOT and RAQUOT allow no white space inside the brackets (RFC 4475 §3.1.2.14).
            guard close > open + 1, !Scanner.isWhitespace(bytes[open + 1]), !Scanner.isWhitespace(bytes[close - 1]) else {
                throw SIPValueError("white space inside <URI>")
            }
            let uri = try SIPURI.scan(bytes, (open + 1)..<close, build: build)
            let after = Scanner.trim(bytes, (close + 1)..<end)
            guard after.isEmpty || bytes[after.lowerBound] == UInt8(ascii: ";") else {
                throw SIPValueError("text after <URI>")
            }
            let parameters = try Scanner.parseParameters(bytes, after, build: build)
            headerParameters = after
            guard build, let uri = consume uri else { return nil }
            return SIPNameAddress(displayName: displayName, uri: uri, parameters: parameters)
        } else {
            // addr-spec: the first ';' after the host part begins header parameters. The user part
            // may hold ';' (user-unreserved), so look for parameters only after the '@'
            // (RFC 3261 §20.10: an addr-spec with ',', '?' or ';' parameters of its own needs <>).
            let hostStart = Scanner.firstIndex(of: UInt8(ascii: "@"), in: bytes, i..<end) ?? i
            let semi = Scanner.firstIndex(of: UInt8(ascii: ";"), in: bytes, hostStart..<end) ?? end
            for k in i..<semi where bytes[k] == UInt8(ascii: "?") || bytes[k] == UInt8(ascii: ",") {
                throw SIPValueError("addr-spec with '?' or ',' must be in <>")
            }
            let uri = try SIPURI.scan(bytes, i..<semi, build: build)
            let parameters = try Scanner.parseParameters(bytes, semi..<end, build: build)
            headerParameters = semi..<end
            guard build, let uri = consume uri else { return nil }
            return SIPNameAddress(displayName: nil, uri: uri, parameters: parameters)
        }
    }
}

extension SIPContact {
    /// Parses one Contact element: `*` or an address (RFC 3261 §20.10).
    public init(parsing text: String) throws(SIPValueError) {
        self = try text.parsingSIPBytes { bytes throws(SIPValueError) in try SIPContact(bytes, 0..<bytes.count) }
    }

    init(_ bytes: UnsafeBufferPointer<UInt8>, _ whole: Range<Int>) throws(SIPValueError) {
        let range = Scanner.trim(bytes, whole)
        if range.count == 1, bytes[range.lowerBound] == UInt8(ascii: "*") {
            self = .wildcard
        } else {
            self = .address(try SIPNameAddress(bytes, range))
        }
    }

    /// Checks one Contact element's syntax without building it.
    static func check(_ bytes: UnsafeBufferPointer<UInt8>, _ whole: Range<Int>) throws(SIPValueError) {
        let range = Scanner.trim(bytes, whole)
        if range.count == 1, bytes[range.lowerBound] == UInt8(ascii: "*") { return }
        _ = try SIPNameAddress.scan(bytes, range, build: false)
    }
}

extension SIPVia {
    /// Parses one Via element: `SIP/2.0/UDP host[:port][;params]` (RFC 3261 §20.42).
    public init(parsing text: String) throws(SIPValueError) {
        self = try text.parsingSIPBytes { bytes throws(SIPValueError) in try SIPVia(bytes, 0..<bytes.count) }
    }

    init(_ bytes: UnsafeBufferPointer<UInt8>, _ whole: Range<Int>) throws(SIPValueError) {
        // With build: true, scan returns the value or throws.
        self = try SIPVia.scan(bytes, whole, build: true)!
    }

    /// Checks the Via element's syntax; builds it only when `build` is true (else returns nil on success).
    static func scan(
        _ bytes: UnsafeBufferPointer<UInt8>, _ whole: Range<Int>, build: Bool
    ) throws(SIPValueError) -> SIPVia? {
        let range = Scanner.trim(bytes, whole)
        let end = range.upperBound
        // sent-protocol: three tokens separated by '/', with optional white space around '/'.
        var tokens = (0..<0, 0..<0, 0..<0)
        var i = range.lowerBound
        for index in 0..<3 {
            while i < end, Scanner.isWhitespace(bytes[i]) { i += 1 }
            let start = i
            while i < end, Scanner.isTokenByte(bytes[i]) { i += 1 }
            guard i > start else { throw SIPValueError("bad Via sent-protocol") }
            switch index {
            case 0: tokens.0 = start..<i
            case 1: tokens.1 = start..<i
            default: tokens.2 = start..<i
            }
            while i < end, Scanner.isWhitespace(bytes[i]) { i += 1 }
            if index < 2 {
                guard i < end, bytes[i] == UInt8(ascii: "/") else { throw SIPValueError("bad Via sent-protocol") }
                i += 1
            }
        }
        guard Scanner.equalsLowercased(bytes, tokens.0, "sip") else {
            throw SIPValueError("Via protocol is not SIP")
        }
        let semi = Scanner.firstIndex(of: UInt8(ascii: ";"), in: bytes, i..<end) ?? end
        let sentBy = Scanner.trim(bytes, i..<semi)
        guard !sentBy.isEmpty else { throw SIPValueError("Via without sent-by") }
        let hostRange: Range<Int>
        var port: Int? = nil
        if bytes[sentBy.lowerBound] == UInt8(ascii: "[") {
            guard let close = Scanner.firstIndex(of: UInt8(ascii: "]"), in: bytes, sentBy),
                SIPURI.isIPv6Reference(bytes, sentBy.lowerBound..<(close + 1))
            else { throw SIPValueError("bad IPv6 reference in Via") }
            hostRange = sentBy.lowerBound..<(close + 1)
            let after = Scanner.trim(bytes, (close + 1)..<sentBy.upperBound)
            if !after.isEmpty {
                guard bytes[after.lowerBound] == UInt8(ascii: ":") else { throw SIPValueError("bad Via sent-by") }
                port = try SIPURI.parsePort(bytes, Scanner.trim(bytes, (after.lowerBound + 1)..<after.upperBound))
            }
        } else {
            let colon = Scanner.firstIndex(of: UInt8(ascii: ":"), in: bytes, sentBy)
            hostRange = Scanner.trim(bytes, sentBy.lowerBound..<(colon ?? sentBy.upperBound))
            guard !hostRange.isEmpty else { throw SIPValueError("bad Via host") }
            for k in hostRange where !SIPURI.isHostByte(bytes[k]) { throw SIPValueError("bad Via host") }
            if let colon {
                port = try SIPURI.parsePort(bytes, Scanner.trim(bytes, (colon + 1)..<sentBy.upperBound))
            }
        }
        let parameters = try Scanner.parseParameters(bytes, semi..<end, build: build)
        guard build else { return nil }
        // The usual spellings reuse literals: no Strings built, joined or upper-cased for them.
        let usualProtocol = Scanner.equalsLiteral(bytes, tokens.0, "SIP") && Scanner.equalsLiteral(bytes, tokens.1, "2.0")
        let transport: String
        if Scanner.equalsLiteral(bytes, tokens.2, "UDP") {
            transport = "UDP"
        } else if Scanner.equalsLiteral(bytes, tokens.2, "TCP") {
            transport = "TCP"
        } else if Scanner.equalsLiteral(bytes, tokens.2, "TLS") {
            transport = "TLS"
        } else {
            transport = Scanner.text(bytes, tokens.2).uppercased()
        }
        return SIPVia(
            protocolName: usualProtocol ? "SIP/2.0" : Scanner.text(bytes, tokens.0) + "/" + Scanner.text(bytes, tokens.1),
            upperCasedTransport: transport, host: Scanner.text(bytes, hostRange), port: port, parameters: parameters)
    }
}

extension SIPCSeq {
    /// Parses `1 INVITE` (RFC 3261 §20.16: a sequence number below 2^32, leading zeros allowed,
    /// and a method token). A number that overflows 32 bits is an error (RFC 4475 §3.1.2.4).
    public init(parsing text: String) throws(SIPValueError) {
        self = try text.parsingSIPBytes { bytes throws(SIPValueError) in try SIPCSeq(bytes, 0..<bytes.count) }
    }

    init(_ bytes: UnsafeBufferPointer<UInt8>, _ whole: Range<Int>) throws(SIPValueError) {
        let range = Scanner.trim(bytes, whole)
        var i = range.lowerBound
        while i < range.upperBound, bytes[i] >= 0x30, bytes[i] <= 0x39 { i += 1 }
        guard let number = Scanner.decimal(bytes, range.lowerBound..<i) else { throw SIPValueError("bad CSeq") }
        guard number <= UInt64(UInt32.max) else { throw SIPValueError("CSeq number out of range") }
        let numberEnd = i
        while i < range.upperBound, bytes[i] == 0x20 || bytes[i] == 0x09 { i += 1 }
        guard i > numberEnd, i < range.upperBound else { throw SIPValueError("bad CSeq") }
        for k in i..<range.upperBound where !Scanner.isTokenByte(bytes[k]) { throw SIPValueError("bad CSeq") }
        self.init(UInt32(number), SIPMethod.recognise(bytes, i..<range.upperBound))
    }
}
