import CLinuxShims
import Glibc

/// An IPv4 or IPv6 address and a port, with the address kept in its canonical text form
/// (`inet_ntop`), so two spellings of one address compare equal. A value type, safe to share
/// between threads.
public struct SocketAddress: Hashable, Sendable, CustomStringConvertible {
    /// The address in canonical text form: `127.0.0.1`, `::1`.
    public let ip: String
    public let port: UInt16

    /// Validates `ip` as an IPv4 or IPv6 literal (no host names, no brackets) and canonicalises it.
    public init(ip: String, port: UInt16) throws(SIPTransportError) {
        guard let canonical = SocketAddress.canonicalIP(ip) else { throw .invalidAddress(ip) }
        self.ip = canonical
        self.port = port
    }

    /// Reads `127.0.0.1:5060` or `[::1]:5060` (the form `description` writes); nil otherwise.
    public init?(parsing text: String) {
        let hostText: Substring
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else { return nil }
            hostText = text[text.index(after: text.startIndex)..<close]
            portText = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
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

    var family: Int32 { isIPv6 ? AF_INET6 : AF_INET }

    /// The canonical text form of an IP literal, nil when `text` is not one.
    static func canonicalIP(_ text: String) -> String? {
        if text.utf8.contains(UInt8(ascii: ":")) {
            var address = in6_addr()
            guard inet_pton(AF_INET6, text, &address) == 1 else { return nil }
            return ipText(family: AF_INET6, &address)
        }
        var address = in_addr()
        guard inet_pton(AF_INET, text, &address) == 1 else { return nil }
        return ipText(family: AF_INET, &address)
    }

    private static func ipText(family: Int32, _ address: UnsafeRawPointer) -> String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        let count = buffer.count
        let result: String? = buffer.withUnsafeMutableBufferPointer { out in
            guard inet_ntop(family, address, out.baseAddress, socklen_t(count)) != nil else { return nil }
            return String(cString: out.baseAddress!)
        }
        return result ?? ""
    }

    /// Reads a `sockaddr_in`/`sockaddr_in6` filled by the kernel; nil for other families.
    init?(storage: sockaddr_storage) {
        var storage = storage
        switch Int32(storage.ss_family) {
        case AF_INET:
            let parsed: (String, UInt16) = withUnsafeMutablePointer(to: &storage) { raw in
                raw.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                    (SocketAddress.ipText(family: AF_INET, &sin.pointee.sin_addr), UInt16(bigEndian: sin.pointee.sin_port))
                }
            }
            (ip, port) = parsed
        case AF_INET6:
            let parsed: (String, UInt16) = withUnsafeMutablePointer(to: &storage) { raw in
                raw.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 in
                    (SocketAddress.ipText(family: AF_INET6, &sin6.pointee.sin6_addr), UInt16(bigEndian: sin6.pointee.sin6_port))
                }
            }
            (ip, port) = parsed
        default:
            return nil
        }
    }

    /// Calls `body` with this address as a `sockaddr` and its length.
    func withSockAddr<Result>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result {
        var storage = sockaddr_storage()
        let length: socklen_t
        if isIPv6 {
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            withUnsafeMutablePointer(to: &storage) { raw in
                raw.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 in
                    sin6.pointee.sin6_family = sa_family_t(AF_INET6)
                    sin6.pointee.sin6_port = port.bigEndian
                    _ = inet_pton(AF_INET6, ip, &sin6.pointee.sin6_addr)
                }
            }
        } else {
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
            withUnsafeMutablePointer(to: &storage) { raw in
                raw.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                    sin.pointee.sin_family = sa_family_t(AF_INET)
                    sin.pointee.sin_port = port.bigEndian
                    _ = inet_pton(AF_INET, ip, &sin.pointee.sin_addr)
                }
            }
        }
        return withUnsafePointer(to: &storage) { raw in
            raw.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
        }
    }
}
