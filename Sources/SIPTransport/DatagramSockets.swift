import Glibc
import RouseVocabulary

/// The UDP sockets of every loop of a running `SIPTransportLayer`, for sending a datagram from
/// whichever thread has it, with one `sendto` there: a response built on the binding writer's or a
/// registrar shard's thread costs no wake-up of a loop thread (profiled: one context switch per
/// REGISTER). UDP keeps no state between sends and the kernel serialises sends on a socket, so
/// no loop needs to be involved. The descriptors are only read under a shared lock that `close()`
/// takes exclusively before the loops close them: a send never uses a descriptor that was closed,
/// or reused by another file, meanwhile.
///
/// Threading: thread-safe. `send` takes the shared lock (no waiting but while `close()` runs).
final class DatagramSockets: @unchecked Sendable {
    // @unchecked Sendable: `loops` is only read under the shared lock and written under the exclusive one.
    /// One bound UDP socket: its descriptor and address family.
    struct Socket {
        let fd: Int32
        let isIPv6: Bool
    }

    private let lock: UnsafeMutablePointer<pthread_rwlock_t>
    /// Per loop, its UDP sockets in the order of its listen points; empty when not running.
    private var loops: [[Socket]] = []

    init() {
        lock = .allocate(capacity: 1)
        lock.initialize(to: pthread_rwlock_t())
        pthread_rwlock_init(lock, nil)
    }

    deinit {
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }

    /// The loops' sockets, once every loop runs.
    func open(_ sockets: [[Socket]]) {
        pthread_rwlock_wrlock(lock)
        loops = sockets
        pthread_rwlock_unlock(lock)
    }

    /// No send uses the descriptors after this returns (sends under way have ended).
    func close() {
        pthread_rwlock_wrlock(lock)
        loops = []
        pthread_rwlock_unlock(lock)
    }

    /// Sends `bytes` to `peer` from socket `index` of loop `loop`; nil when the layer is not running.
    func send(_ bytes: [UInt8], loop: Int, socket index: Int, to peer: SocketAddress) -> Result<FlowID, SIPTransportError>? {
        pthread_rwlock_rdlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        guard loop < loops.count else { return nil }
        guard index < loops[loop].count else { return .failure(.flowNotOpen(FlowID(.datagram(socket: index, peer: peer), transport: .udp))) }
        return Self.send(bytes, fd: loops[loop][index].fd, socket: index, to: peer)
    }

    /// Sends `bytes` to `address` from loop `loop`'s first socket of the address's family; nil
    /// when the layer is not running.
    func send(_ bytes: [UInt8], loop: Int, to address: SocketAddress) -> Result<FlowID, SIPTransportError>? {
        pthread_rwlock_rdlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        guard loop < loops.count else { return nil }
        guard let index = loops[loop].firstIndex(where: { $0.isIPv6 == address.isIPv6 }) else { return .failure(.noSocket(.udp, address)) }
        return Self.send(bytes, fd: loops[loop][index].fd, socket: index, to: address)
    }

    /// One `sendto` of `bytes` to `peer` on `fd`, socket `index` of its loop (retried on EINTR).
    static func send(_ bytes: [UInt8], fd: Int32, socket index: Int, to peer: SocketAddress) -> Result<FlowID, SIPTransportError> {
        while true {
            let sent = peer.withSockAddr { address, length in
                bytes.withUnsafeBytes { Glibc.sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), address, length) }
            }
            if sent >= 0 { return .success(FlowID(.datagram(socket: index, peer: peer), transport: .udp)) }
            if errno == EINTR { continue }
            return .failure(.io("sendto \(peer): \(errnoText())"))
        }
    }
}
