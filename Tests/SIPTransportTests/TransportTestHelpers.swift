import Foundation
import RouseVocabulary
import SIPMessage
import SIPTransport
import XCTest

/// Collects values reported from other threads and waits for them with a deadline. Thread-safe
/// (an NSCondition guards the values).
final class EventRecorder<Value: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: `values` is only touched with `condition` locked.
    private let condition = NSCondition()
    private var values: [Value] = []

    func record(_ value: Value) {
        condition.lock()
        values.append(value)
        condition.broadcast()
        condition.unlock()
    }

    var all: [Value] {
        condition.lock()
        defer { condition.unlock() }
        return values
    }

    /// Waits until at least `count` values are recorded; returns them, or nil when `timeout` passes.
    func wait(forCount count: Int, timeout: TimeInterval = 5) -> [Value]? {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while values.count < count {
            if !condition.wait(until: deadline) { return values.count >= count ? values : nil }
        }
        return values
    }

    /// Waits for the first value matching `predicate`; nil when `timeout` passes.
    func wait(timeout: TimeInterval = 5, for predicate: (Value) -> Bool) -> Value? {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while true {
            if let found = values.first(where: predicate) { return found }
            if !condition.wait(until: deadline) { return values.first(where: predicate) }
        }
    }
}

/// A SIPTransportLayer that records what it receives and, when echoing, sends every message back over
/// its flow. Thread-safe: the layer is, and the recorders are.
final class EchoServer: Sendable {
    let layer: SIPTransportLayer
    let packets = EventRecorder<InboundPacket>()
    let closedFlows = EventRecorder<(FlowID, FlowCloseReason)>()
    /// The thread each packet was handed over on (`pthread_self`), in the order of `packets`.
    let receivingThreads = EventRecorder<(FlowID, UInt)>()

    init(
        _ points: [String], tls: TLSConfiguration? = nil, limits: TransportLimits = TransportLimits(), loops: Int = 1, echo: Bool = true
    ) throws {
        let packets = self.packets
        let closedFlows = self.closedFlows
        let threads = self.receivingThreads
        let box = LayerBox()
        layer = SIPTransportLayer(
            listen: try points.map { try ListenPoint(parsing: $0) }, tls: tls, limits: limits, loops: loops,
            onPacket: { packet in
                threads.record((packet.flow, UInt(pthread_self())))
                packets.record(packet)
                if echo { box.layer?.send(packet.bytes, over: packet.flow) }
            },
            onFlowClosed: { flow, reason in closedFlows.record((flow, reason)) })
        box.layer = layer
        try layer.start()
    }

    /// The bound port of the first point of `transport` (IPv6 or not).
    func port(_ transport: SIPTransportKind, ipv6: Bool = false) -> UInt16 {
        layer.boundPoints.first { $0.transport == transport && $0.isIPv6 == ipv6 }!.port
    }

    func shutdown() {
        layer.shutdown()
    }
}

/// Lets the onPacket closure reach the layer it belongs to. Thread-safe (an NSLock, which
/// ThreadSanitizer sees, unlike the futex behind `Synchronization.Mutex`).
final class LayerBox: @unchecked Sendable {
    // @unchecked Sendable: `stored` is only touched with `lock` held.
    private let lock = NSLock()
    private weak var stored: SIPTransportLayer?

    var layer: SIPTransportLayer? {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}

/// An OPTIONS request numbered `number`, with `body` and a matching Content-Length.
func sipMessage(_ number: Int, body: String = "") -> String {
    "OPTIONS sip:rouse.test SIP/2.0\r\n"
        + "Via: SIP/2.0/TCP 127.0.0.1;branch=z9hG4bK-\(number)\r\n"
        + "Call-ID: call-\(number)\r\n"
        + "CSeq: \(number) OPTIONS\r\n"
        + "Content-Length: \(body.utf8.count)\r\n\r\n"
        + body
}

func text(_ bytes: [UInt8]?) -> String? {
    bytes.map { String(decoding: $0, as: UTF8.self) }
}
