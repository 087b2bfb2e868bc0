/// A failure talking to PostgreSQL. Its description names what failed and where (host and port),
/// never a password or a statement's parameters.
public struct PostgresError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure this is.
    public enum Kind: Sendable, Equatable {
        case connection
        case query
        case unexpectedResult
    }

    public let kind: Kind
    public let message: String
    /// The SQLSTATE code of a query error (`23505` for a unique violation), when the server sent one.
    public let sqlState: String?

    public init(kind: Kind, message: String, sqlState: String? = nil) {
        self.kind = kind
        self.message = message
        self.sqlState = sqlState
    }

    public var description: String { message }

    /// True for a unique or primary-key violation.
    public var isUniqueViolation: Bool { sqlState == "23505" }
}
