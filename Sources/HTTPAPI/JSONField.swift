import Foundation

/// One field of a JSON request body as it came: absent, `null`, a string, or another kind of
/// value. Request bodies are `Decodable` structs of these, so that each endpoint's checks can
/// name the field at fault in its own words (a wrong type, a missing field and a bad value are
/// told apart exactly as the API documents) instead of a decoder's generic error. A value.
enum JSONField: Codable, Sendable, Equatable {
    case absent
    case null
    case string(String)
    case bool(Bool)
    case number(Double)
    case object([String: JSONField])
    case array([JSONField])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let text = try? container.decode(String.self) {
            self = .string(text)
        } else if let flag = try? container.decode(Bool.self) {
            self = .bool(flag)
        } else if let number = try? container.decode(Double.self) {
            self = .number(number)
        } else if let object = try? container.decode([String: JSONField].self) {
            self = .object(object)
        } else {
            self = .array(try container.decode([JSONField].self))
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .absent, .null: try container.encodeNil()
        case .string(let text): try container.encode(text)
        case .bool(let flag): try container.encode(flag)
        case .number(let number): try container.encode(number)
        case .object(let object): try container.encode(object)
        case .array(let array): try container.encode(array)
        }
    }

    /// The string, when the field is one.
    var string: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    /// The members, when the field is an object.
    var object: [String: JSONField]? {
        if case .object(let members) = self { return members }
        return nil
    }

    /// False when the field is absent (`null` is present).
    var isPresent: Bool { self != .absent }

    /// False when the field is absent or `null`.
    var hasValue: Bool { self != .absent && self != .null }

    /// A member of an object field; `.absent` when there is none (or the field is no object).
    subscript(_ name: String) -> JSONField { object?[name] ?? .absent }

    /// A request body, decoded: `Body` with each field as it came, or nil when the body is not a
    /// JSON object.
    static func body<Body: Decodable>(_ type: Body.Type, from data: Data) -> Body? {
        try? JSONDecoder().decode(type, from: data)
    }
}

extension KeyedDecodingContainer {
    /// A body's field: `.absent` when the key is missing, `.null` for `null` (a synthesized
    /// `Decodable` calls this overload for `JSONField` properties).
    func decode(_ type: JSONField.Type, forKey key: Key) throws -> JSONField {
        guard contains(key) else { return .absent }
        if try decodeNil(forKey: key) { return .null }
        return try JSONField(from: try superDecoder(forKey: key))
    }
}
