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

/// The peers' addresses a loop has read, by the kernel's binary form, so a datagram from a peer
/// seen before costs a hash lookup instead of `inet_ntop`, a buffer and a new String (the text
/// form is shared by every packet from that peer). Bounded: at `limit` peers it starts again
/// empty. A value owned by one `TransportCore`, used on its loop thread only.
struct PeerAddressCache {
    /// A `sockaddr_in`/`sockaddr_in6`'s address and port, as integers.
    private struct Key: Hashable {
        var high: UInt64
        var low: UInt64
        var port: UInt16
        var isIPv6: Bool
    }

    private var addresses: [Key: SocketAddress] = [:]
    let limit: Int

    init(limit: Int = 4_096) {
        self.limit = max(1, limit)
    }

    /// The address of a `sockaddr_storage` filled by the kernel; nil for other families.
    mutating func address(of storage: inout sockaddr_storage) -> SocketAddress? {
        let key: Key
        switch Int32(storage.ss_family) {
        case AF_INET:
            key = withUnsafeMutablePointer(to: &storage) { raw in
                raw.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                    Key(high: 0, low: UInt64(sin.pointee.sin_addr.s_addr), port: sin.pointee.sin_port, isIPv6: false)
                }
            }
        case AF_INET6:
            key = withUnsafeMutablePointer(to: &storage) { raw in
                raw.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 in
                    withUnsafeBytes(of: sin6.pointee.sin6_addr) { bytes in
                        Key(high: bytes.loadUnaligned(as: UInt64.self), low: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self),
                            port: sin6.pointee.sin6_port, isIPv6: true)
                    }
                }
            }
        default:
            return nil
        }
        if let known = addresses[key] { return known }
        guard let address = SocketAddress(storage: storage) else { return nil }
        if addresses.count >= limit { addresses.removeAll(keepingCapacity: true) }
        addresses[key] = address
        return address
    }

    /// Peers held (for tests).
    var count: Int { addresses.count }
}
