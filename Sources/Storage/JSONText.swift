import Foundation

/// Builds JSON text for one bind parameter: the storage layer sends a whole batch of rows as one
/// `jsonb` value that PostgreSQL unpacks with `jsonb_to_recordset`, so a batch costs one statement
/// whatever its size. Values never become SQL text.
///
/// Threading: a value type, used by one thread at a time.
struct JSONText {
    private var bytes: [UInt8] = []
    private var needsComma: [Bool] = []

    init(capacity: Int = 256) {
        bytes.reserveCapacity(capacity)
    }

    /// The JSON written so far.
    var text: String { String(decoding: bytes, as: UTF8.self) }

    /// A JSON array of strings, for `jsonb_array_elements_text`.
    static func array(of strings: [String]) -> String {
        var json = JSONText(capacity: strings.count * 64 + 2)
        json.beginArray()
        for string in strings { json.string(string) }
        json.endArray()
        return json.text
    }

    private mutating func raw(_ ascii: String) {
        bytes.append(contentsOf: ascii.utf8)
    }

    mutating func beginArray() {
        separate()
        raw("[")
        needsComma.append(false)
    }

    mutating func endArray() {
        raw("]")
        needsComma.removeLast()
        if !needsComma.isEmpty { markWritten() }
    }

    mutating func beginObject() {
        separate()
        raw("{")
        needsComma.append(false)
    }

    mutating func endObject() {
        raw("}")
        needsComma.removeLast()
        if !needsComma.isEmpty { markWritten() }
    }

    mutating func key(_ name: StaticString) {
        separate()
        raw("\"")
        raw(name.description)
        raw("\":")
        needsComma[needsComma.count - 1] = false
    }

    mutating func field(_ name: StaticString, _ value: String?) {
        key(name)
        string(value)
        markWritten()
    }

    mutating func field(_ name: StaticString, _ value: Double?) {
        key(name)
        number(value)
        markWritten()
    }

    mutating func field(_ name: StaticString, _ value: Int?) {
        key(name)
        if let value { raw(String(value)) } else { raw("null") }
        markWritten()
    }

    mutating func field(_ name: StaticString, strings: [String]) {
        key(name)
        raw("[")
        for (index, value) in strings.enumerated() {
            if index > 0 { raw(",") }
            appendQuoted(value)
        }
        raw("]")
        markWritten()
    }

    /// An array element or a value after `key`.
    mutating func string(_ value: String?) {
        if needsComma.last == true { raw(",") }
        if let value { appendQuoted(value) } else { raw("null") }
        if !needsComma.isEmpty { needsComma[needsComma.count - 1] = true }
    }

    private mutating func number(_ value: Double?) {
        guard let value, value.isFinite else {
            raw("null")
            return
        }
        raw(String(value))
    }

    private mutating func separate() {
        if needsComma.last == true { raw(",") }
    }

    private mutating func markWritten() {
        needsComma[needsComma.count - 1] = true
    }

    private mutating func appendQuoted(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0..<0x20: bytes.append(contentsOf: Array(String(format: "\\u%04x", UInt32(byte)).utf8))
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}
