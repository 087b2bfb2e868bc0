import Glibc

/// An IPv4 or IPv6 address and a port, with the address kept in its canonical text form
/// (`inet_ntop`), so two spellings of one address compare equal: the typed end of a flow (where a
/// REGISTER came from, the point it arrived on). A value type, safe to share between threads.
public struct SocketAddress: Hashable, Sendable, CustomStringConvertible {
    /// The address in canonical text form: `127.0.0.1`, `::1`.
    public let ip: String
    public let port: UInt16

    /// Validates `ip` as an IPv4 or IPv6 literal (no host names, no brackets) and canonicalises it.
    public init(ip: String, port: UInt16) throws(InvalidIPAddress) {
        guard let canonical = SocketAddress.canonicalIP(ip) else { throw InvalidIPAddress(text: ip) }
        self.init(canonicalIP: canonical, port: port)
    }

    /// An address already in canonical form (read from the kernel).
    package init(canonicalIP: String, port: UInt16) {
        self.ip = canonicalIP
        self.port = port
    }

    /// Reads `127.0.0.1:5060` or `[::1]:5060` (the form `description` writes); nil otherwise (an
    /// IPv6 address without brackets included).
    public init?(parsing text: String) {
        let hostText: Substring
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else { return nil }
            hostText = text[text.index(after: text.startIndex)..<close]
            portText = text[text.index(close, offsetBy: 2)...]
        } else {
            // An IPv6 address with a port must be in brackets: `2001:db8::7:5060` is an address.
            guard let colon = text.firstIndex(of: ":"), colon == text.lastIndex(of: ":") else { return nil }
            hostText = text[..<colon]
            portText = text[text.index(after: colon)...]
        }
        guard let port = UInt16(portText), let address = try? SocketAddress(ip: String(hostText), port: port) else { return nil }
        self = address
    }

    /// Whether the address is IPv6.
    public var isIPv6: Bool { ip.utf8.contains(UInt8(ascii: ":")) }

    /// `127.0.0.1:5060` or `[::1]:5060`.
    public var description: String { isIPv6 ? "[\(ip)]:\(port)" : "\(ip):\(port)" }

    /// The address in network byte order: 4 bytes for IPv4, 16 for IPv6.
    public var ipBytes: [UInt8] {
        if isIPv6 {
            var address = in6_addr()
            _ = inet_pton(AF_INET6, ip, &address)
            return withUnsafeBytes(of: &address) { Array($0) }
        }
        var address = in_addr()
        _ = inet_pton(AF_INET, ip, &address)
        return withUnsafeBytes(of: &address) { Array($0) }
    }

    /// The canonical text form of an IP literal, nil when `text` is not one.
    public static func canonicalIP(_ text: String) -> String? {
        if text.utf8.contains(UInt8(ascii: ":")) {
            var address = in6_addr()
            guard inet_pton(AF_INET6, text, &address) == 1 else { return nil }
            return ipText(family: AF_INET6, &address)
        }
        var address = in_addr()
        guard inet_pton(AF_INET, text, &address) == 1 else { return nil }
        return ipText(family: AF_INET, &address)
    }

    /// The text form of an `in_addr`/`in6_addr` of `family`.
    package static func ipText(family: Int32, _ address: UnsafeRawPointer) -> String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        let count = buffer.count
        let result: String? = buffer.withUnsafeMutableBufferPointer { out in
            guard inet_ntop(family, address, out.baseAddress, socklen_t(count)) != nil else { return nil }
            return String(cString: out.baseAddress!)
        }
        return result ?? ""
    }
}

/// Text that is not an IPv4 or IPv6 literal.
public struct InvalidIPAddress: Error, Hashable, Sendable, CustomStringConvertible {
    public let text: String
    public var description: String { "\"\(text)\" is not an IP address" }
}
