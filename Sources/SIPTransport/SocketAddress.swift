import CLinuxShims
import Glibc
import RouseVocabulary

/// The socket side of an address: the `sockaddr` the kernel reads and fills. Used on the loop
/// thread only, like the sockets.
extension SocketAddress {
    var family: Int32 { isIPv6 ? AF_INET6 : AF_INET }

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
            self.init(canonicalIP: parsed.0, port: parsed.1)
        case AF_INET6:
            let parsed: (String, UInt16) = withUnsafeMutablePointer(to: &storage) { raw in
                raw.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 in
                    (SocketAddress.ipText(family: AF_INET6, &sin6.pointee.sin6_addr), UInt16(bigEndian: sin6.pointee.sin6_port))
                }
            }
            self.init(canonicalIP: parsed.0, port: parsed.1)
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
