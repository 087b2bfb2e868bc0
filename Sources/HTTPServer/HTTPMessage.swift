public import Foundation

/// A request as a route sees it: method, path (no query string), headers with lower-case names,
/// the whole body (at most the server's limit), the client's address and the query string's
/// arguments (decoded; a repeated one keeps its last value). A value, safe to share.
public struct HTTPRequest: Sendable {
    public let method: String
    public let path: String
    public let headers: [String: String]
    public let body: Data
    public let remoteAddress: String?
    public let query: [String: String]

    public init(
        method: String, path: String, headers: [String: String], body: Data, remoteAddress: String?, query: [String: String] = [:]
    ) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.remoteAddress = remoteAddress
        self.query = query
    }

    /// A header by name, in any case.
    public func header(_ name: String) -> String? { headers[name.lowercased()] }
}

/// An answer: status, headers (in order) and body. A value, safe to share.
public struct HTTPResponse: Sendable, Equatable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: Data

    public init(status: Int, headers: [(String, String)] = [], body: Data = Data()) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public static func == (lhs: HTTPResponse, rhs: HTTPResponse) -> Bool {
        lhs.status == rhs.status && lhs.body == rhs.body && lhs.headers.map { "\($0.0): \($0.1)" } == rhs.headers.map { "\($0.0): \($0.1)" }
    }

    /// A JSON answer of `value`, written by `HTTPJSON.encode` (keys sorted, so equal values give
    /// equal bytes).
    public static func json(_ status: Int, _ value: some Encodable, headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "application/json")] + headers, body: HTTPJSON.encode(value))
    }

    /// The one error shape: `{"error": {"code": …, "message": …, "field": …}}`, with `field` only
    /// when one field is at fault. Messages never hold secrets.
    public static func error(
        _ status: Int, code: String, message: String, field: String? = nil, headers: [(String, String)] = []
    ) -> HTTPResponse {
        json(status, HTTPErrorBody(error: .init(code: code, message: message, field: field)), headers: headers)
    }
}

/// The body of every error answer: `{"error": {"code", "message", "field"?}}`.
public struct HTTPErrorBody: Codable, Sendable, Equatable {
    /// What went wrong: a stable code, words for a person, and the one field at fault if any.
    public struct Detail: Codable, Sendable, Equatable {
        public var code: String
        public var message: String
        public var field: String?

        public init(code: String, message: String, field: String? = nil) {
            self.code = code
            self.message = message
            self.field = field
        }
    }

    public var error: Detail

    public init(error: Detail) {
        self.error = error
    }
}

/// An error a handler or middleware throws to answer with `response` (a refusal, not a fault).
public struct HTTPError: Error, Sendable {
    public let response: HTTPResponse

    public init(_ response: HTTPResponse) {
        self.response = response
    }
}

/// The one JSON encoder of answers: keys sorted, slashes as they are, a newline at the end.
public enum HTTPJSON {
    /// `value` as JSON bytes followed by a newline; `{}` if it cannot be encoded (never for the
    /// plain structs answers are made of).
    public static func encode(_ value: some Encodable) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let body = (try? encoder.encode(value)) ?? Data("{}".utf8)
        return body + Data("\n".utf8)
    }
}

/// An optional value that is written as JSON `null` when absent (a synthesized `Encodable` leaves
/// an absent optional out): for answers whose fields are always present.
@propertyWrapper
public struct NullWhenAbsent<Value: Encodable & Sendable>: Encodable, Sendable {
    public var wrappedValue: Value?

    public init(wrappedValue: Value?) {
        self.wrappedValue = wrappedValue
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let wrappedValue { try container.encode(wrappedValue) } else { try container.encodeNil() }
    }
}

extension NullWhenAbsent: Decodable where Value: Decodable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        wrappedValue = container.decodeNil() ? nil : try container.decode(Value.self)
    }
}

extension NullWhenAbsent: Equatable where Value: Equatable {}
