public import CallRouting
public import Foundation
import HTTPServer
import Registrar
import Storage

/// What a woken app may do with the `call_token` of its ring push (issue 11), with
/// `Authorization: Bearer <call_token>`:
/// - `POST /api/v1/calls/{call}/decline` with an optional `{"reason": "declined"|"busy"}`: this
///   device declines; its branch and its wait stop, and when every device has declined the caller
///   gets 603 Decline (486 Busy Here when all said busy).
/// - `GET /api/v1/calls/{call}`: `ringing`, `answered`, `canceled` or `ended`, with the reason.
///
/// `{call}` is the push's `uuid` or its `call_id` (the SIP Call-ID, percent-encoded). A missing,
/// wrong, expired or foreign token gets the same 401. A call held by another instance is declined
/// through PostgreSQL (`NOTIFY rouse_call_control`) and its state read from the calls table.
///
/// Threading: the handlers are async and never block: the coordinator answers on its queue (its
/// callback resumes the handler), PostgreSQL work is awaited on the worker pool until the route's
/// `DatabaseDeadline`.
public struct CallAPI: Sendable {
    /// The channel a declined call held by another instance is announced on.
    public static let controlChannel = "rouse_call_control"
    /// Seconds a call's read or a passed-on decline waits for PostgreSQL.
    static let deadline: Double = 5

    let control: any CallControl
    let instanceID: String

    /// The one 401: the same whatever was wrong with the token.
    static let unauthorized = HTTPResponse.error(
        401, code: "unauthorized", message: "the call token is missing, wrong, expired or not for this call",
        headers: [("WWW-Authenticate", "Bearer realm=\"rouse\"")])

    /// The claims `CallTokenAuthentication` let in.
    static func claims(_ context: APIContext) throws -> CallTokenClaims {
        guard let claims = context.callClaims else { throw HTTPError(unauthorized) }
        return claims
    }

    /// The route's 503 when PostgreSQL fails it: `what` could not be read or passed on.
    static func unavailable(_ what: String) -> @Sendable (any Error) -> HTTPResponse {
        { _ in .error(503, code: "storage_unavailable", message: "\(what) now; try again") }
    }

    /// `GET /api/v1/calls/{call}`.
    @Sendable func status(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let claims = try Self.claims(context)
        if claims.instanceID == instanceID, let status = await withCheckedContinuation({ done in control.status(claims) { done.resume(returning: $0) } }) {
            return .json(200, Self.body(status, claims))
        }
        return try await readStatus(claims, try context.store())
    }

    /// `POST /api/v1/calls/{call}/decline`.
    @Sendable func decline(_ request: HTTPRequest, _ context: APIContext) async throws -> HTTPResponse {
        let claims = try Self.claims(context)
        let reason: DeclineReason
        switch Self.declineReason(request.body) {
        case .success(let parsed): reason = parsed
        case .failure(let failure): return failure.response
        }
        if claims.instanceID != instanceID {
            return try await forward(claims, reason, try context.store())
        }
        let status = await withCheckedContinuation { done in control.decline(claims, reason: reason) { done.resume(returning: $0) } }
        guard let status else { return .error(404, code: "not_found", message: "the call is over and forgotten") }
        return .json(200, Self.body(status, claims))
    }

    /// A decline's optional body as it came.
    struct DeclineBody: Decodable {
        let reason: JSONField
    }

    /// The optional body's `reason`: `declined` (the default) or `busy`.
    public static func declineReason(_ body: Data) -> Result<DeclineReason, PushRegistrationAPI.ResponseFailure> {
        if body.isEmpty || body.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) { return .success(.declined) }
        guard let fields = JSONField.body(DeclineBody.self, from: body) else {
            return .failure(PushRegistrationAPI.ResponseFailure(response: PushRegistrationAPI.notAnObject))
        }
        guard fields.reason.isPresent else { return .success(.declined) }
        guard let text = fields.reason.string, let reason = DeclineReason(rawValue: text) else {
            return .failure(PushRegistrationAPI.ResponseFailure(response: .error(
                400, code: "invalid_field", message: "reason must be \"declined\" or \"busy\"", field: "reason")))
        }
        return .success(reason)
    }

    /// A call's state as the API answers it.
    struct Body: Encodable {
        let uuid: String
        let state: String
        let missed: Bool
        let declinedHere: Bool
        @NullWhenAbsent var reason: String?
        let answeredHere: Bool?
    }

    static func body(_ status: CallStatus, _ claims: CallTokenClaims) -> Body {
        Body(
            uuid: claims.callUUID, state: status.state.rawValue, missed: status.missed, declinedHere: status.declinedHere,
            reason: status.reason, answeredHere: status.answeredHere)
    }

    /// A call held by another instance (or forgotten here): its state as the calls table has it.
    /// A call is written there when it ends, so a valid token whose call has no row yet names a
    /// call still ringing on its instance.
    private func readStatus(_ claims: CallTokenClaims, _ store: Store) async throws -> HTTPResponse {
        let journey = try await store.perform { connection in try PostgresCalls.journey(id: claims.callID, on: connection) }
        if let journey, journey.callee == claims.aor {
            return .json(200, Self.body(Self.status(of: journey), claims))
        }
        if journey == nil, claims.instanceID != instanceID {
            return .json(200, Self.body(CallStatus(state: .ringing, reason: "ringing on another instance"), claims))
        }
        return .error(404, code: "not_found", message: "no such call")
    }

    /// The status a stored journey says (who answered is not known there by device).
    static func status(of journey: CallJourney) -> CallStatus {
        switch journey.outcome {
        case .ringing: return CallStatus(state: .ringing)
        case .answered:
            return CallStatus(state: journey.endedAt == nil ? .answered : .ended, reason: journey.answeredBy.map { "answered by \($0)" })
        case .canceled: return CallStatus(state: .canceled, reason: journey.reason, missed: journey.missed)
        case .unanswered, .failed, .diverted: return CallStatus(state: .ended, reason: journey.reason, missed: journey.missed)
        }
    }

    /// Announces the decline to the instance holding the call; 202 once PostgreSQL has it.
    private func forward(_ claims: CallTokenClaims, _ reason: DeclineReason, _ store: Store) async throws -> HTTPResponse {
        let payload = CallControlNotice.decline(claims, reason: reason).payload
        try await store.perform { connection in
            _ = try connection.query("SELECT pg_notify($1, $2)", [Self.controlChannel, payload])
        }
        return .json(202, ["uuid": claims.callUUID, "state": "ringing", "reason": "declining on the instance holding the call"])
    }
}

/// A call token (`Authorization: Bearer <call_token>`) that names the path's `{call}`: its claims
/// go into `context.callClaims`; a missing, wrong, expired or foreign token is the one 401.
struct CallTokenAuthentication: HTTPMiddleware {
    let signer: CallTokenSigner

    func handle(_ request: HTTPRequest, context: APIContext, next: HTTPNext<APIContext>) async throws -> HTTPResponse {
        let pathID = context.parameter("call")
        guard let header = request.header("Authorization"), header.count > 7, header.prefix(7).lowercased() == "bearer " else {
            return CallAPI.unauthorized
        }
        let token = header.dropFirst(7).trimmingCharacters(in: .whitespaces)
        guard case .success(let claims) = signer.verify(token), !pathID.isEmpty, claims.names(pathID) else { return CallAPI.unauthorized }
        var context = context
        context.callClaims = claims
        return try await next(request, context)
    }
}

/// A decline passed from the instance that got the HTTP request to the one holding the call, as a
/// `NOTIFY rouse_call_control` payload: `decline <instance> <call> <uuid> <device> <reason> <exp> <aor>`.
public struct CallControlNotice: Sendable, Equatable {
    public var claims: CallTokenClaims
    public var reason: DeclineReason

    public static func decline(_ claims: CallTokenClaims, reason: DeclineReason) -> CallControlNotice {
        CallControlNotice(claims: claims, reason: reason)
    }

    public var payload: String {
        [
            "decline", claims.instanceID, claims.callID.uuidString.lowercased(), claims.callUUID, claims.device, reason.rawValue,
            String(Int64(claims.expiresAt.timeIntervalSince1970)), claims.aor.description,
        ].joined(separator: " ")
    }

    public init(claims: CallTokenClaims, reason: DeclineReason) {
        self.claims = claims
        self.reason = reason
    }

    /// Reads a payload; nil when it is not a well-formed decline.
    public init?(payload: String) {
        let parts = payload.split(separator: " ").map(String.init)
        guard parts.count == 8, parts[0] == "decline", let callID = UUID(uuidString: parts[2]), let reason = DeclineReason(rawValue: parts[5]),
            let expiry = Int64(parts[6]), let aor = AddressOfRecord(parsing: parts[7])
        else { return nil }
        claims = CallTokenClaims(
            callID: callID, callUUID: parts[3], aor: aor, device: parts[4], instanceID: parts[1],
            expiresAt: Date(timeIntervalSince1970: TimeInterval(expiry)))
        self.reason = reason
    }
}
