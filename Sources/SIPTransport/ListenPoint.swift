public import RouseVocabulary

/// Where Rouse listens: a transport, an IP literal and a port, written `udp:127.0.0.1:5060` or
/// `tls:[::1]:5061` (the form of `ROUSE_SIP_LISTEN`). Port 0 asks the kernel for a free port. A value
/// type, safe to share between threads.
public struct ListenPoint: Hashable, Sendable, CustomStringConvertible {
    public var transport: SIPTransportKind
    /// An IPv4 or IPv6 literal, without brackets; `0.0.0.0` and `::` listen on every address of
    /// their family. Exactly what is listed is bound (an IPv6 socket never takes IPv4 traffic).
    public var host: String
    public var port: UInt16

    public init(transport: SIPTransportKind, host: String, port: UInt16) {
        self.transport = transport
        self.host = host
        self.port = port
    }

    /// Parses `transport:host:port`, the host in brackets when it is IPv6. Surrounding white space is
    /// ignored and the transport name is case-insensitive. The error names the text it refused.
    public init(parsing text: String) throws(SIPTransportError) {
        let trimmed = text.trimmingWhitespace()
        func invalid(_ reason: String) -> SIPTransportError { .invalidListenPoint(text: text, reason: reason) }
        guard let firstColon = trimmed.firstIndex(of: ":") else {
            throw invalid("expected transport:host:port")
        }
        guard let transport = SIPTransportKind(rawValue: trimmed[..<firstColon].lowercased()) else {
            throw invalid("unknown transport \"\(trimmed[..<firstColon])\" (expected udp, tcp or tls)")
        }
        let rest = trimmed[trimmed.index(after: firstColon)...]
        let hostText: Substring
        let portText: Substring
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw invalid("missing ] after IPv6 address") }
            hostText = rest[rest.index(after: rest.startIndex)..<close]
            let afterClose = rest[rest.index(after: close)...]
            guard afterClose.hasPrefix(":") else { throw invalid("expected :port after ]") }
            portText = afterClose.dropFirst()
            guard hostText.contains(":") else { throw invalid("brackets hold an IPv6 address only") }
        } else {
            guard let lastColon = rest.lastIndex(of: ":") else { throw invalid("missing port") }
            hostText = rest[..<lastColon]
            portText = rest[rest.index(after: lastColon)...]
            if hostText.contains(":") { throw invalid("an IPv6 address must be written in brackets") }
        }
        guard !hostText.isEmpty else { throw invalid("missing host") }
        guard SocketAddress.canonicalIP(String(hostText)) != nil else {
            throw invalid("\"\(hostText)\" is not an IP address")
        }
        guard !portText.isEmpty, portText.allSatisfy({ $0.isASCII && $0.isNumber }), portText.count <= 5,
            let port = UInt16(portText)
        else { throw invalid("\"\(portText)\" is not a port (0-65535)") }
        self.init(transport: transport, host: String(hostText), port: port)
    }

    /// Whether the host is an IPv6 address.
    public var isIPv6: Bool { host.contains(":") }

    /// `udp:127.0.0.1:5060` or `tcp:[::1]:5060`, the form `init(parsing:)` reads.
    public var description: String {
        isIPv6 ? "\(transport):[\(host)]:\(port)" : "\(transport):\(host):\(port)"
    }
}

extension StringProtocol {
    func trimmingWhitespace() -> Substring {
        var slice = Substring(self)
        while let first = slice.first, first.isWhitespace { slice.removeFirst() }
        while let last = slice.last, last.isWhitespace { slice.removeLast() }
        return slice
    }
}
