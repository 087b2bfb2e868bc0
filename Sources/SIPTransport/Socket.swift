import CLinuxShims
import Glibc
import RouseVocabulary

/// Owns one non-blocking socket descriptor and closes it in deinit (or earlier with `close()`).
/// Not thread-safe: made by `SIPTransportLayer.start()`, then used by the event loop thread only.
final class Socket {
    private(set) var fd: Int32

    init(fd: Int32) {
        self.fd = fd
    }

    /// A non-blocking, close-on-exec socket of `family` (AF_INET/AF_INET6) and `type` (SOCK_DGRAM/SOCK_STREAM).
    convenience init(family: Int32, type: __socket_type) throws(SIPTransportError) {
        let fd = Glibc.socket(family, Int32(type.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .io("socket: \(errnoText())") }
        self.init(fd: fd)
    }

    deinit {
        close()
    }

    func close() {
        if fd >= 0 {
            Glibc.close(fd)
            fd = -1
        }
    }

    /// For accepted sockets (`accept4` needs `_GNU_SOURCE`, which the Glibc module is built without).
    func makeNonBlockingAndCloseOnExec() {
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
    }

    func setOption(level: Int32, name: Int32, value: Int32) {
        var value = value
        _ = setsockopt(fd, level, name, &value, socklen_t(MemoryLayout<Int32>.size))
    }

    /// The address the socket is bound to.
    func localAddress() -> SocketAddress? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) { raw in
            raw.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return result == 0 ? SocketAddress(storage: storage) : nil
    }

    /// The pending error of a non-blocking connect (SO_ERROR), 0 when it succeeded.
    func pendingError() -> Int32 {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &length) != 0 { return errno }
        return value
    }
}

/// The events a connection waits for.
enum Interest {
    static let read = EPOLLIN.rawValue | EPOLLRDHUP.rawValue
    static let write = EPOLLOUT.rawValue
    static let readWrite = read | write
    static let closedOrError = EPOLLHUP.rawValue | EPOLLERR.rawValue | EPOLLRDHUP.rawValue
}
