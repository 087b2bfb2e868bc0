import Foundation

/// The bind parameters of one statement in one buffer: each value's text as UTF-8 bytes ending in
/// a NUL, as libpq takes them, so a statement costs one allocation for all its values however many
/// there are, and a large value (a batch of rows as JSON) is written straight into it, never
/// built as a `String` first.
///
/// Threading: a value type, used by one thread at a time.
struct PostgresParameters {
    /// The values' bytes, each followed by a NUL.
    private(set) var bytes: [UInt8] = []
    /// Where each value starts in `bytes`; nil for SQL NULL.
    private var starts: [Int?] = []
    /// Where the value being written started (`begin()`…`end()`), if one is open.
    private var open: Int?

    /// - Parameter values: how many values to make room for (a statement has a handful; growing
    ///   the list of their starts one by one cost a reallocation each).
    init(capacity: Int = 64, values: Int = 8) {
        bytes.reserveCapacity(capacity)
        starts.reserveCapacity(values)
    }

    init(_ values: [String?]) {
        self.init(capacity: values.reduce(0) { $0 + ($1?.utf8.count ?? 0) + 1 })
        for value in values { append(value) }
    }

    /// How many values there are.
    var count: Int32 { Int32(starts.count) }

    /// Adds a value (nil: SQL NULL).
    mutating func append(_ value: String?) {
        guard let value else {
            starts.append(nil)
            return
        }
        begin()
        bytes.append(contentsOf: value.utf8)
        end()
    }

    /// Adds a JSON text as one value.
    mutating func append(_ json: JSONText) {
        begin()
        json.withBytes { bytes.append(contentsOf: $0) }
        end()
    }

    /// Starts a value written piece by piece with `write` and finished with `end()`.
    mutating func begin() {
        precondition(open == nil, "a parameter is already being written")
        open = bytes.count
    }

    /// Appends bytes to the value being written.
    mutating func write(_ byte: UInt8) {
        bytes.append(byte)
    }

    /// Appends text to the value being written.
    mutating func write(_ text: String) {
        bytes.append(contentsOf: text.utf8)
    }

    /// Appends a static text to the value being written.
    mutating func write(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    /// Appends a number in decimal to the value being written.
    mutating func write(decimal value: Int) {
        DecimalText.append(value, to: &bytes)
    }

    /// Appends a uuid (PostgreSQL's text form) to the value being written.
    mutating func write(uuid: UUID) {
        UUIDText.append(uuid, to: &bytes)
    }

    /// Appends a time as seconds since 1970 (`DecimalText.appendEpochSeconds`), or `NULL` when it
    /// is not finite, to the value being written (an element of an array literal).
    mutating func write(epochSeconds date: Date) {
        if !DecimalText.appendEpochSeconds(date, to: &bytes) { write("NULL" as StaticString) }
    }

    /// One whole value: an array literal (`{a,b,c}`) of `elements`, each written by `element`.
    mutating func appendArray<Elements: Collection>(_ elements: Elements, _ element: (inout PostgresParameters, Elements.Element) -> Void) {
        begin()
        write(UInt8(ascii: "{"))
        var first = true
        for item in elements {
            if !first { write(UInt8(ascii: ",")) }
            first = false
            element(&self, item)
        }
        write(UInt8(ascii: "}"))
        end()
    }

    /// Finishes the value being written.
    mutating func end() {
        guard let start = open else { preconditionFailure("no parameter is being written") }
        bytes.append(0)
        starts.append(start)
        open = nil
    }

    /// Calls `body` with libpq's array of value pointers (nil when there are no values) and the count.
    func withValuePointers<R>(_ body: (UnsafePointer<UnsafePointer<CChar>?>?, Int32) -> R) -> R {
        precondition(open == nil, "a parameter is still being written")
        if starts.isEmpty { return body(nil, 0) }
        return bytes.withUnsafeBufferPointer { buffer in
            // No base address only when every value is NULL (each other value has at least its NUL).
            let base = buffer.baseAddress.map { UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self) }
            let pointers: [UnsafePointer<CChar>?] = starts.map { start in start.flatMap { offset in base.map { $0 + offset } } }
            return pointers.withUnsafeBufferPointer { body($0.baseAddress, count) }
        }
    }

    /// The value at `index` as text (nil for SQL NULL), for tests and messages.
    func value(at index: Int) -> String? {
        guard let start = starts[index] else { return nil }
        let end = bytes[start...].firstIndex(of: 0) ?? bytes.endIndex
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }
}
