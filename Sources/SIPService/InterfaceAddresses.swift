import Glibc

/// The IP addresses of this machine's interfaces (getifaddrs), for recognising a Request-URI that
/// names the server when it listens on a wildcard address.
enum InterfaceAddresses {
    static func all() -> [String] {
        var first: UnsafeMutablePointer<ifaddrs>? = nil
        guard getifaddrs(&first) == 0, let first else { return [] }
        defer { freeifaddrs(first) }
        var result: [String] = []
        var cursor: UnsafeMutablePointer<ifaddrs>? = first
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            guard let address = entry.pointee.ifa_addr else { continue }
            let family = Int32(address.pointee.sa_family)
            guard family == AF_INET || family == AF_INET6 else { continue }
            var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            let length = socklen_t(family == AF_INET ? MemoryLayout<sockaddr_in>.size : MemoryLayout<sockaddr_in6>.size)
            if getnameinfo(address, length, &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST) == 0 {
                let text = String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                // Drop a zone index (fe80::1%eth0): URIs carry none.
                result.append(String(text.split(separator: "%").first ?? Substring(text)).lowercased())
            }
        }
        return result
    }
}
