import Foundation

/// A piece of HTML that is safe to send: built from literal markup in Rouse's code, with every
/// `String` interpolated into it escaped (`&`, `<`, `>`, `"`, `'`), so a user agent, display name
/// or token from the network can never become markup, in text or in a quoted attribute. Another
/// `HTML` value interpolates as it is. A value, safe to share.
///
/// ```swift
/// let row: HTML = "<td title=\"\(userAgent)\">\(userAgent)</td>"
/// ```
public struct HTML: Sendable, Equatable, ExpressibleByStringInterpolation, CustomStringConvertible {
    /// The markup.
    public private(set) var markup: String

    public init(stringLiteral literal: String) {
        markup = literal
    }

    public init(stringInterpolation: StringInterpolation) {
        markup = stringInterpolation.markup
    }

    /// Nothing.
    public static let empty: HTML = ""

    public var description: String { markup }

    /// Text shown as it is, escaped.
    public init(text: String) {
        markup = HTML.escape(text)
    }

    /// The pieces one after the other.
    public init<Pieces: Sequence>(joining pieces: Pieces) where Pieces.Element == HTML {
        markup = pieces.map(\.markup).joined()
    }

    /// Builds markup: literals as written, `String`s escaped, `HTML` as it is.
    public struct StringInterpolation: StringInterpolationProtocol {
        var markup = ""

        public init(literalCapacity: Int, interpolationCount: Int) {
            markup.reserveCapacity(literalCapacity + interpolationCount * 16)
        }

        public mutating func appendLiteral(_ literal: String) {
            markup += literal
        }

        /// Text from anywhere: escaped.
        public mutating func appendInterpolation(_ text: String) {
            markup += HTML.escape(text)
        }

        /// A whole number.
        public mutating func appendInterpolation<Number: BinaryInteger>(_ number: Number) {
            markup += String(number)
        }

        /// Markup already safe.
        public mutating func appendInterpolation(_ html: HTML) {
            markup += html.markup
        }

        /// Several pieces of markup, one after the other.
        public mutating func appendInterpolation(_ pieces: [HTML]) {
            for piece in pieces { markup += piece.markup }
        }
    }

    /// `text` with the five characters that can end text or a quoted attribute replaced by their
    /// character references.
    public static func escape(_ text: String) -> String {
        var escaped = ""
        escaped.reserveCapacity(text.utf8.count)
        for character in text.unicodeScalars {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&#39;"
            case "\u{0}": escaped += "\u{FFFD}"
            default: escaped.unicodeScalars.append(character)
            }
        }
        return escaped
    }

    /// `text` as one path segment or query value of a URL: everything but unreserved characters
    /// percent-encoded (so `/`, `?`, `#`, `&` and quotes cannot change the URL's shape).
    public static func urlComponent(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: unreserved) ?? ""
    }

    private static let unreserved = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~@")
}
