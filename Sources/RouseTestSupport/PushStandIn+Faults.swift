import Foundation

extension PushStandIn {
    /// A fault the stand-in plays on every push request from now on (`Tests/PushStandIns/README.md`,
    /// "Faults"). A refused connection needs none: point the client at a closed port.
    public enum Fault: Sendable, Equatable {
        /// Every push request works as scripted by its token.
        case none
        /// 503 (APNs `ServiceUnavailable`, FCM `UNAVAILABLE`), with `Retry-After` when given.
        case unavailable(retryAfterSeconds: Int?)
        /// The request is never answered (the client's deadline ends it).
        case stall
        /// The connection is dropped without an answer.
        case reset
        /// FCM only: 400 `INVALID_ARGUMENT` with a `google.rpc.BadRequest` field violation at
        /// `field` (`message.token`, `message.data[0].value`).
        case invalidArgument(field: String)
    }

    /// Switches the fault the stand-in plays (it reads `<state dir>/fault` at each push request).
    /// Thread-safe: the file is replaced whole.
    public func setFault(_ fault: Fault) throws {
        let line: String
        switch fault {
        case .none: line = ""
        case .unavailable(let seconds): line = "unavailable" + (seconds.map { " \($0)" } ?? "")
        case .stall: line = "stall"
        case .reset: line = "reset"
        case .invalidArgument(let field): line = "invalid-argument " + field
        }
        try (line + "\n").write(toFile: stateDirectory + "/fault", atomically: true, encoding: .utf8)
    }
}
