/// Writes bytes into memory sized beforehand: the serializer and the text forms of URIs and
/// addresses count their exact length first and then write once into one buffer (profiled:
/// growing an array or a String piece by piece was most of their cost). Not thread-safe: one
/// writer per buffer, used while the buffer is being initialised.
struct SIPByteWriter {
    private let start: UnsafeMutablePointer<UInt8>
    private var position: UnsafeMutablePointer<UInt8>

    init(_ buffer: UnsafeMutableBufferPointer<UInt8>) {
        // A zero-length buffer may have no base address; nothing is written into it then.
        start = buffer.baseAddress ?? UnsafeMutablePointer(bitPattern: 1)!
        position = start
    }

    /// How many bytes have been written.
    var count: Int { position - start }

    mutating func write(_ byte: UInt8) {
        position.pointee = byte
        position += 1
    }

    mutating func write(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        position.update(from: base, count: bytes.count)
        position += bytes.count
    }

    mutating func write(text: String) {
        text.withSIPBytes { write($0) }
    }

    mutating func writeLiteral(_ literal: StaticString) {
        write(UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
    }

    /// A non-negative number's decimal digits (a negative one is written as 0).
    mutating func writeDecimal(_ number: Int) {
        let value = max(0, number)
        var divisor = 1
        while divisor <= value / 10 { divisor *= 10 }
        while divisor > 0 {
            write(0x30 + UInt8(truncatingIfNeeded: value / divisor % 10))
            divisor /= 10
        }
    }

    /// How many digits `writeDecimal` writes.
    static func decimalLength(_ number: Int) -> Int {
        var value = max(0, number)
        var digits = 1
        while value >= 10 {
            value /= 10
            digits += 1
        }
        return digits
    }
}

extension String {
    /// A String of exactly `count` UTF-8 bytes written by `body`, made in its own storage.
    init(sipBytes count: Int, _ body: (inout SIPByteWriter) -> Void) {
        self.init(unsafeUninitializedCapacity: count) { buffer in
            var writer = SIPByteWriter(buffer)
            body(&writer)
            precondition(writer.count == count, "text length miscounted")
            return count
        }
    }
}

extension Array where Element == UInt8 {
    /// An array of exactly `count` bytes written by `body`.
    init(sipBytes count: Int, _ body: (inout SIPByteWriter) -> Void) {
        self.init(unsafeUninitializedCapacity: count) { buffer, initialized in
            var writer = SIPByteWriter(buffer)
            body(&writer)
            precondition(writer.count == count, "message length miscounted")
            initialized = count
        }
    }
}
