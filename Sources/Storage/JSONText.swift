import Foundation

/// Builds JSON text for one bind parameter: the storage layer sends a whole batch of rows as one
/// `jsonb` value that PostgreSQL unpacks with `jsonb_to_recordset`, so a batch costs one statement
/// whatever its size. Values never become SQL text. It writes UTF-8 bytes into one buffer (no
/// `String` per value, no formatting through `printf`), which `PostgresParameters` takes as is.
///
/// Threading: a value type, used by one thread at a time.
struct JSONText {
    private var bytes: [UInt8] = []
    /// Whether the next element or key of the array or object being written needs a comma first.
    private var needsComma = false

    init(capacity: Int = 256) {
        bytes.reserveCapacity(capacity)
    }

    /// The JSON written so far.
    var text: String { String(decoding: bytes, as: UTF8.self) }

    /// Calls `body` with the JSON's bytes.
    func withBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        bytes.withUnsafeBufferPointer(body)
    }

    /// A JSON array of strings, for `jsonb_array_elements_text`.
    static func array(of strings: [String]) -> String {
        arrayText(of: strings).text
    }

    /// A JSON array of strings, as a `JSONText`.
    static func arrayText(of strings: [String]) -> JSONText {
        var json = JSONText(capacity: strings.count * 64 + 2)
        json.beginArray()
        for string in strings { json.string(string) }
        json.endArray()
        return json
    }

    private mutating func raw(_ ascii: StaticString) {
        ascii.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    mutating func beginArray() {
        separate()
        bytes.append(UInt8(ascii: "["))
        needsComma = false
    }

    mutating func endArray() {
        bytes.append(UInt8(ascii: "]"))
        needsComma = true
    }

    mutating func beginObject() {
        separate()
        bytes.append(UInt8(ascii: "{"))
        needsComma = false
    }

    mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        needsComma = true
    }

    mutating func key(_ name: StaticString) {
        separate()
        bytes.append(UInt8(ascii: "\""))
        raw(name)
        raw("\":")
        needsComma = false
    }

    mutating func field(_ name: StaticString, _ value: String?) {
        key(name)
        string(value)
    }

    mutating func field(_ name: StaticString, _ value: Double?) {
        key(name)
        if let value, value.isFinite { bytes.append(contentsOf: String(value).utf8) } else { raw("null") }
        needsComma = true
    }

    mutating func field(_ name: StaticString, _ value: Int?) {
        key(name)
        if let value { appendDecimal(value) } else { raw("null") }
        needsComma = true
    }

    /// A time as seconds since 1970 to the microsecond (PostgreSQL's precision), written exactly
    /// (`to_timestamp` of it gives back that microsecond).
    mutating func field(_ name: StaticString, epochSeconds date: Date) {
        key(name)
        if !DecimalText.appendEpochSeconds(date, to: &bytes) { raw("null") }
        needsComma = true
    }

    /// A uuid in PostgreSQL's form (lower-case hex, hyphenated), quoted.
    mutating func field(_ name: StaticString, uuid: UUID) {
        key(name)
        bytes.append(UInt8(ascii: "\""))
        UUIDText.append(uuid, to: &bytes)
        bytes.append(UInt8(ascii: "\""))
        needsComma = true
    }

    /// `number@domain` of an address of record, quoted (its stored text), without building it.
    mutating func field(_ name: StaticString, number: String, domain: String) {
        key(name)
        bytes.append(UInt8(ascii: "\""))
        appendEscaped(number)
        bytes.append(UInt8(ascii: "@"))
        appendEscaped(domain)
        bytes.append(UInt8(ascii: "\""))
        needsComma = true
    }

    mutating func field(_ name: StaticString, strings: [String]) {
        key(name)
        bytes.append(UInt8(ascii: "["))
        for (index, value) in strings.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            appendQuoted(value)
        }
        bytes.append(UInt8(ascii: "]"))
        needsComma = true
    }

    /// An array element or a value after `key`.
    mutating func string(_ value: String?) {
        separate()
        if let value { appendQuoted(value) } else { raw("null") }
        needsComma = true
    }

    private mutating func separate() {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
    }

    private mutating func appendDecimal(_ value: Int) {
        DecimalText.append(value, to: &bytes)
    }

    private mutating func appendQuoted(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        appendEscaped(value)
        bytes.append(UInt8(ascii: "\""))
    }

    /// `value`'s bytes with `"`, `\` and control characters escaped (runs without one copied at once).
    private mutating func appendEscaped(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            var runStart = 0
            for index in 0..<utf8.count {
                let byte = utf8[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<index]))
                runStart = index + 1
                bytes.append(UInt8(ascii: "\\"))
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes.append(byte)
                default:
                    raw("u00")
                    bytes.append(UUIDText.hexDigit(byte >> 4))
                    bytes.append(UUIDText.hexDigit(byte & 0x0f))
                }
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart...]))
        }
    }
}

/// Numbers and times as decimal text, written digit by digit into a byte buffer (no `String`, no
/// `printf`), for JSON and for PostgreSQL's array literals alike.
///
/// Threading: pure functions.
enum DecimalText {
    /// Appends `value` in decimal.
    static func append(_ value: Int, to bytes: inout [UInt8]) {
        if value < 0 {
            guard value != .min else {
                bytes.append(contentsOf: String(value).utf8)
                return
            }
            bytes.append(UInt8(ascii: "-"))
            append(-value, to: &bytes)
            return
        }
        appendDigits(UInt64(value), minimumCount: 1, to: &bytes)
    }

    /// Appends a time as seconds since 1970 to the microsecond (PostgreSQL's precision), written
    /// exactly (`to_timestamp` of it gives back that microsecond); false, appending nothing, when
    /// the time is not finite.
    static func appendEpochSeconds(_ date: Date, to bytes: inout [UInt8]) -> Bool {
        let seconds = date.timeIntervalSince1970
        let micros = (seconds * 1_000_000).rounded()
        if micros >= 0 && micros < 9e15 {
            let whole = UInt64(micros)
            appendDigits(whole / 1_000_000, minimumCount: 1, to: &bytes)
            bytes.append(UInt8(ascii: "."))
            appendDigits(whole % 1_000_000, minimumCount: 6, to: &bytes)
            return true
        }
        guard seconds.isFinite else { return false }
        bytes.append(contentsOf: String(seconds).utf8)
        return true
    }

    /// Appends `value`'s decimal digits, with leading zeros up to `minimumCount` (at most 20):
    /// the bytes are made room for once and written in place, not appended one by one (each
    /// append checks the capacity and the uniqueness of the buffer again).
    private static func appendDigits(_ value: UInt64, minimumCount: Int, to bytes: inout [UInt8]) {
        var count = 1
        var rest = value / 10
        while rest > 0 {
            count += 1
            rest /= 10
        }
        count = max(count, minimumCount)
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: count))
        bytes.withUnsafeMutableBufferPointer { buffer in
            var value = value
            var at = start + count - 1
            while value > 0 {
                buffer[at] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: value % 10)
                value /= 10
                at -= 1
            }
        }
    }
}

/// A uuid's text as PostgreSQL prints it (lower-case hex, hyphenated), written without
/// Foundation's `uuidString` (which formats through `snprintf`).
///
/// Threading: pure functions.
enum UUIDText {
    static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
    }

    /// Appends the 36 characters of `uuid`: room made once, then written in place.
    static func append(_ uuid: UUID, to bytes: inout [UInt8]) {
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(UInt8(ascii: "-"), count: 36))
        bytes.withUnsafeMutableBufferPointer { buffer in
            withUnsafeBytes(of: uuid.uuid) { raw in
                var at = start
                for index in 0..<16 {
                    if index == 4 || index == 6 || index == 8 || index == 10 { at += 1 }
                    buffer[at] = hexDigit(raw[index] >> 4)
                    buffer[at + 1] = hexDigit(raw[index] & 0x0f)
                    at += 2
                }
            }
        }
    }

    /// The 36 characters of `uuid`, lower case.
    static func string(_ uuid: UUID) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(36)
        append(uuid, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The uuid a 36-character hyphenated hex text (either case) spells; nil when it is not one.
    static func parse(_ text: String) -> UUID? {
        var text = text
        return text.withUTF8 { parse(utf8: $0) }
    }

    /// The same from UTF-8 bytes (a value read in place from a PostgreSQL result).
    static func parse(utf8: UnsafeBufferPointer<UInt8>) -> UUID? {
        guard utf8.count == 36 else { return nil }
        var raw: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        let parsed = withUnsafeMutableBytes(of: &raw) { out -> Bool in
            var position = 0
            for index in 0..<16 {
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    guard utf8[position] == UInt8(ascii: "-") else { return false }
                    position += 1
                }
                guard let high = nibble(utf8[position]), let low = nibble(utf8[position + 1]) else { return false }
                out[index] = high << 4 | low
                position += 2
            }
            return true
        }
        return parsed ? UUID(uuid: raw) : nil
    }

    private static func nibble(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
