import Foundation
import SIPMessage
import SIPTransaction
import Synchronization

/// A thread-safe list the layer's closures append to. `@unchecked Sendable`: `storage` only under
/// `lock`, an `NSLock` (a pthread mutex ThreadSanitizer sees; it does not see `Mutex`'s futex, and
/// reported the appends of concurrent shards as a race once the layer's one lock was gone).
final class Log<Element: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [Element] = []

    func append(_ element: Element) { lock.withLock { storage.append(element) } }
    var all: [Element] { lock.withLock { storage } }
    var count: Int { lock.withLock { storage.count } }
}

/// A transaction layer on flows named by integers, a manual clock, and logs of what it sent and
/// passed to the core. `onCore` lets a test answer from inside the core callback.
final class LayerHarness: Sendable {
    struct Sent: Hashable, Sendable {
        let message: SIPMessage
        let flow: Int
        let at: Duration
    }

    let scheduler = ManualTimerScheduler()
    let sent = Log<Sent>()
    let events = Log<TransactionLayerEvent<Int>>()
    let layer: TransactionLayer<Int>

    init(
        timers: TransactionTimers = TransactionTimers(),
        onCore: @escaping @Sendable (TransactionLayerEvent<Int>, TransactionLayer<Int>) -> Void = { _, _ in }
    ) {
        let scheduler = self.scheduler
        let sent = self.sent
        let events = self.events
        let box = LayerBoxRef()
        layer = TransactionLayer(
            timers: timers, scheduler: scheduler,
            send: { bytes, flow in
                // Read back as a peer would: what went out must parse.
                sent.append(Sent(message: try! SIPParser.parse(bytes), flow: flow, at: scheduler.now))
            },
            core: { event in
                events.append(event)
                if let layer = box.layer { onCore(event, layer) }
            })
        box.set(layer)
    }

    /// The responses sent so far, as status codes.
    var sentStatusCodes: [Int] {
        sent.all.compactMap {
            if case .response(let response) = $0.message { return response.statusCode }
            return nil
        }
    }

    /// The requests sent so far.
    var sentRequests: [Sent] {
        sent.all.filter {
            if case .request = $0.message { return true }
            return false
        }
    }

    /// The server transaction handles the core got with new requests.
    var requestHandles: [ServerTransactionHandle] {
        events.all.compactMap {
            if case .request(_, let handle, _) = $0 { return handle }
            return nil
        }
    }
}

/// Lets the core closure reach the layer it was given to, once the layer exists.
final class LayerBoxRef: Sendable {
    private let storage = Mutex<TransactionLayer<Int>?>(nil)

    var layer: TransactionLayer<Int>? { storage.withLock { $0 } }
    func set(_ layer: TransactionLayer<Int>) { storage.withLock { $0 = layer } }
}
