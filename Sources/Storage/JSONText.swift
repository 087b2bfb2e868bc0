import Foundation

/// Builds JSON text for one bind parameter: the storage layer sends a whole batch of rows as one
/// `jsonb` value that PostgreSQL unpacks with `jsonb_to_recordset`, so a batch costs one statement
/// whatever its size. Values never become SQL text.
///
/// Threading: a value type, used by one thread at a time.
struct JSONText {
    private(set) var text = ""
    private var needsComma: [Bool] = []

    init(capacity: Int = 256) {
        text.reserveCapacity(capacity)
    }

    mutating func beginArray() {
        separate()
        text.append("[")
        needsComma.append(false)
    }

    mutating func endArray() {
        text.append("]")
        needsComma.removeLast()
        if !needsComma.isEmpty { markWritten() }
    }

    mutating func beginObject() {
        separate()
        text.append("{")
        needsComma.append(false)
    }

    mutating func endObject() {
        text.append("}")
        needsComma.removeLast()
        if !needsComma.isEmpty { markWritten() }
    }

    mutating func key(_ name: StaticString) {
        separate()
        text.append("\"")
        text.append(name.description)
        text.append("\":")
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
        if let value { text.append(String(value)) } else { text.append("null") }
        markWritten()
    }

    mutating func field(_ name: StaticString, strings: [String]) {
        key(name)
        text.append("[")
        for (index, value) in strings.enumerated() {
            if index > 0 { text.append(",") }
            appendQuoted(value)
        }
        text.append("]")
        markWritten()
    }

    /// An array element or a value after `key`.
    mutating func string(_ value: String?) {
        if needsComma.last == true { text.append(",") }
        if let value { appendQuoted(value) } else { text.append("null") }
        if !needsComma.isEmpty { needsComma[needsComma.count - 1] = true }
    }

    private mutating func number(_ value: Double?) {
        guard let value, value.isFinite else {
            text.append("null")
            return
        }
        text.append(String(value))
    }

    private mutating func separate() {
        if needsComma.last == true { text.append(",") }
    }

    private mutating func markWritten() {
        needsComma[needsComma.count - 1] = true
    }

    private mutating func appendQuoted(_ value: String) {
        text.append("\"")
        var plainStart = value.unicodeScalars.startIndex
        var index = plainStart
        let scalars = value.unicodeScalars
        while index < scalars.endIndex {
            let scalar = scalars[index]
            let escape: String?
            switch scalar {
            case "\"": escape = "\\\""
            case "\\": escape = "\\\\"
            case "\n": escape = "\\n"
            case "\r": escape = "\\r"
            case "\t": escape = "\\t"
            default:
                escape = scalar.value < 0x20 ? String(format: "\\u%04x", scalar.value) : nil
            }
            if let escape {
                text.unicodeScalars.append(contentsOf: scalars[plainStart..<index])
                text.append(escape)
                plainStart = scalars.index(after: index)
            }
            index = scalars.index(after: index)
        }
        text.unicodeScalars.append(contentsOf: scalars[plainStart..<scalars.endIndex])
        text.append("\"")
    }
}
