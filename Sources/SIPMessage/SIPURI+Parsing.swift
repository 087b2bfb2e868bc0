extension SIPURI {
    /// Parses a URI from its text form.
    public init(parsing text: String) throws(SIPValueError) {
        try self.init(bytes: Array(text.utf8)[...])
    }

    init(bytes raw: ArraySlice<UInt8>) throws(SIPValueError) {
        let bytes = SIPHeaderValueScanner.trim(raw)
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")) else {
            throw SIPValueError("URI without scheme")
        }
        let schemeText = String(decoding: bytes[bytes.startIndex..<colon], as: UTF8.self).lowercased()
        guard let scheme = Scheme(rawValue: schemeText) else {
            throw SIPValueError("unsupported URI scheme")
        }
        var rest = bytes[(colon + 1)...]
        guard !rest.isEmpty else { throw SIPValueError("empty URI") }
        for c in rest where c <= 0x20 || c == 0x7F {
            _ = c
            throw SIPValueError("white space or control character in URI")
        }

        // Headers (?a=b&c=d) come last.
        var headers: [SIPParameter] = []
        if let question = rest.firstIndex(of: UInt8(ascii: "?")) {
            for part in rest[(question + 1)...].split(separator: UInt8(ascii: "&")) {
                if let eq = part.firstIndex(of: UInt8(ascii: "=")) {
                    headers.append(
                        SIPParameter(
                            String(decoding: part[part.startIndex..<eq], as: UTF8.self),
                            String(decoding: part[(eq + 1)...], as: UTF8.self)))
                } else {
                    headers.append(SIPParameter(String(decoding: part, as: UTF8.self)))
                }
            }
            rest = rest[rest.startIndex..<question]
        }

        if scheme == .tel {
            let semi = rest.firstIndex(of: UInt8(ascii: ";")) ?? rest.endIndex
            let number = rest[rest.startIndex..<semi]
            guard !number.isEmpty else { throw SIPValueError("tel URI without number") }
            self.init(
                scheme: .tel, user: String(decoding: number, as: UTF8.self), host: "",
                parameters: try SIPHeaderValueScanner.parseParameters(rest[semi...]), headers: headers)
            return
        }

        var user: String? = nil
        var password: String? = nil
        if let at = rest.firstIndex(of: UInt8(ascii: "@")) {
            let userinfo = rest[rest.startIndex..<at]
            guard !userinfo.isEmpty else { throw SIPValueError("empty user part in URI") }
            if let pc = userinfo.firstIndex(of: UInt8(ascii: ":")) {
                user = String(decoding: userinfo[userinfo.startIndex..<pc], as: UTF8.self)
                password = String(decoding: userinfo[(pc + 1)...], as: UTF8.self)
            } else {
                user = String(decoding: userinfo, as: UTF8.self)
            }
            rest = rest[(at + 1)...]
        }

        var i = rest.startIndex
        let host: String
        if i < rest.endIndex, rest[i] == UInt8(ascii: "[") {
            guard let close = rest[i...].firstIndex(of: UInt8(ascii: "]")) else {
                throw SIPValueError("unterminated IPv6 reference in URI")
            }
            let inner = rest[(i + 1)..<close]
            guard !inner.isEmpty,
                inner.allSatisfy({ SIPURI.isHexDigit($0) || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".") })
            else { throw SIPValueError("bad IPv6 reference in URI") }
            host = String(decoding: rest[i...close], as: UTF8.self)
            i = close + 1
        } else {
            let start = i
            while i < rest.endIndex, rest[i] != UInt8(ascii: ":"), rest[i] != UInt8(ascii: ";") { i += 1 }
            let hostBytes = rest[start..<i]
            guard !hostBytes.isEmpty else { throw SIPValueError("URI without host") }
            guard hostBytes.allSatisfy(SIPURI.isHostByte) else { throw SIPValueError("bad host in URI") }
            host = String(decoding: hostBytes, as: UTF8.self)
        }
        var port: Int? = nil
        if i < rest.endIndex, rest[i] == UInt8(ascii: ":") {
            i += 1
            let start = i
            while i < rest.endIndex, rest[i] != UInt8(ascii: ";") { i += 1 }
            port = try SIPURI.parsePort(rest[start..<i])
        }
        guard i == rest.endIndex || rest[i] == UInt8(ascii: ";") else {
            throw SIPValueError("bad text after host in URI")
        }
        self.init(
            scheme: scheme, user: user, password: password, host: host, port: port,
            parameters: try SIPHeaderValueScanner.parseParameters(rest[i...]), headers: headers)
    }

    static func parsePort(_ bytes: ArraySlice<UInt8>) throws(SIPValueError) -> Int {
        guard !bytes.isEmpty, bytes.count <= 5, bytes.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
            throw SIPValueError("bad port")
        }
        var value = 0
        for c in bytes { value = value * 10 + Int(c - 0x30) }
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
    /// `;params` are then header parameters (RFC 3261 §20).
    public init(parsing text: String) throws(SIPValueError) {
        let bytes = SIPHeaderValueScanner.trim(Array(text.utf8)[...])
        guard !bytes.isEmpty else { throw SIPValueError("empty address") }
        var i = bytes.startIndex
        var displayName: String? = nil
        if bytes[i] == UInt8(ascii: "\"") {
            var j = i + 1
            var closed = false
            while j < bytes.endIndex {
                if bytes[j] == UInt8(ascii: "\\") { j += 2; continue }
                if bytes[j] == UInt8(ascii: "\"") { closed = true; break }
                j += 1
            }
            guard closed, j < bytes.endIndex else { throw SIPValueError("unterminated display name") }
            displayName = SIPHeaderValueScanner.unquote(String(decoding: bytes[i...j], as: UTF8.self))
            i = j + 1
            while i < bytes.endIndex, SIPHeaderValueScanner.isWhitespace(bytes[i]) { i += 1 }
            guard i < bytes.endIndex, bytes[i] == UInt8(ascii: "<") else {
                throw SIPValueError("display name without <URI>")
            }
        }
        if let open = bytes[i...].firstIndex(of: UInt8(ascii: "<")) {
            if displayName == nil {
                let name = SIPHeaderValueScanner.trim(bytes[i..<open])
                if !name.isEmpty { displayName = String(decoding: name, as: UTF8.self) }
            }
            guard let close = bytes[open...].firstIndex(of: UInt8(ascii: ">")) else {
                throw SIPValueError("unterminated <URI>")
            }
            let uri = try SIPURI(bytes: bytes[(open + 1)..<close])
            let after = SIPHeaderValueScanner.trim(bytes[(close + 1)...])
            guard after.isEmpty || after.first == UInt8(ascii: ";") else {
                throw SIPValueError("text after <URI>")
            }
            self.init(
                displayName: displayName, uri: uri,
                parameters: try SIPHeaderValueScanner.parseParameters(after))
        } else {
            // addr-spec: the first ';' after the host part begins header parameters. The user part
            // may hold ';' (user-unreserved), so look for parameters only after the '@'.
            let hostStart = (bytes[i...].firstIndex(of: UInt8(ascii: "@")) ?? i)
            let semi = bytes[hostStart...].firstIndex(of: UInt8(ascii: ";")) ?? bytes.endIndex
            for c in bytes[i..<semi] where c == UInt8(ascii: "?") || c == UInt8(ascii: ",") {
                _ = c
                throw SIPValueError("addr-spec with '?' or ',' must be in <>")
            }
            let uri = try SIPURI(bytes: bytes[i..<semi])
            self.init(
                displayName: nil, uri: uri,
                parameters: try SIPHeaderValueScanner.parseParameters(bytes[semi...]))
        }
    }
}

extension SIPContact {
    /// Parses one Contact element: `*` or an address.
    public init(parsing text: String) throws(SIPValueError) {
        let trimmed = SIPHeaderValueScanner.trim(Array(text.utf8)[...])
        if trimmed.count == 1, trimmed.first == UInt8(ascii: "*") {
            self = .wildcard
        } else {
            self = .address(try SIPNameAddress(parsing: text))
        }
    }
}

extension SIPVia {
    /// Parses one Via element: `SIP/2.0/UDP host[:port][;params]`.
    public init(parsing text: String) throws(SIPValueError) {
        let bytes = SIPHeaderValueScanner.trim(Array(text.utf8)[...])
        // sent-protocol: three tokens separated by '/', with optional white space around '/'.
        var parts: [String] = []
        var i = bytes.startIndex
        for index in 0..<3 {
            while i < bytes.endIndex, SIPHeaderValueScanner.isWhitespace(bytes[i]) { i += 1 }
            let start = i
            while i < bytes.endIndex, SIPHeaderValueScanner.isTokenByte(bytes[i]) { i += 1 }
            guard i > start else { throw SIPValueError("bad Via sent-protocol") }
            parts.append(String(decoding: bytes[start..<i], as: UTF8.self))
            while i < bytes.endIndex, SIPHeaderValueScanner.isWhitespace(bytes[i]) { i += 1 }
            if index < 2 {
                guard i < bytes.endIndex, bytes[i] == UInt8(ascii: "/") else {
                    throw SIPValueError("bad Via sent-protocol")
                }
                i += 1
            }
        }
        guard parts[0].caseInsensitiveEquals("SIP") else { throw SIPValueError("Via protocol is not SIP") }
        let semi = bytes[i...].firstIndex(of: UInt8(ascii: ";")) ?? bytes.endIndex
        let sentBy = SIPHeaderValueScanner.trim(bytes[i..<semi])
        guard !sentBy.isEmpty else { throw SIPValueError("Via without sent-by") }
        var host: String
        var port: Int? = nil
        if sentBy.first == UInt8(ascii: "[") {
            guard let close = sentBy.firstIndex(of: UInt8(ascii: "]")) else {
                throw SIPValueError("bad IPv6 reference in Via")
            }
            host = String(decoding: sentBy[sentBy.startIndex...close], as: UTF8.self)
            let after = sentBy[(close + 1)...]
            if !after.isEmpty {
                guard after.first == UInt8(ascii: ":") else { throw SIPValueError("bad Via sent-by") }
                port = try SIPURI.parsePort(SIPHeaderValueScanner.trim(after.dropFirst()))
            }
        } else if let colon = sentBy.firstIndex(of: UInt8(ascii: ":")) {
            host = String(decoding: SIPHeaderValueScanner.trim(sentBy[sentBy.startIndex..<colon]), as: UTF8.self)
            port = try SIPURI.parsePort(SIPHeaderValueScanner.trim(sentBy[(colon + 1)...]))
        } else {
            host = String(decoding: sentBy, as: UTF8.self)
        }
        guard !host.isEmpty, host.first == "[" || host.utf8.allSatisfy(SIPURI.isHostByte) else {
            throw SIPValueError("bad Via host")
        }
        self.init(
            protocolName: parts[0] + "/" + parts[1], transport: parts[2], host: host, port: port,
            parameters: try SIPHeaderValueScanner.parseParameters(bytes[semi...]))
    }
}

extension SIPCSeq {
    /// Parses `1 INVITE` (RFC 3261 §20.16: a 32-bit sequence number and a method).
    public init(parsing text: String) throws(SIPValueError) {
        let parts = text.split(whereSeparator: { $0 == " " || $0 == "\t" })
        guard parts.count == 2, let number = UInt32(parts[0]), parts[0].allSatisfy(\.isASCII),
            parts[1].utf8.allSatisfy(SIPHeaderValueScanner.isTokenByte)
        else { throw SIPValueError("bad CSeq") }
        self.init(number, SIPMethod(String(parts[1])))
    }
}
