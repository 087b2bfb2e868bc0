public import Foundation
public import Registrar
public import RouseVocabulary
public import SIPMessage
public import SIPProxy

/// The decision on an arriving INVITE before anything rings (issue 6 item 1): whom it is for,
/// and whether the caller may place it. Rouse is never an open relay: a caller not on a trusted
/// address must answer a digest challenge (407) as an extension of the organisation, and a
/// Request-URI outside Rouse's organisations is only taken from an extension (its From in one of
/// them, then authenticated), for the routes to decide (issue 19); anyone else gets 403. Pure.
public enum InviteAdmission: Sendable {
    /// Answer at once (403, 404, 407, 485…).
    case respond(SIPResponse)
    /// Go ahead: the callee, and the authenticated caller (nil for a trusted peer).
    case accept(callee: AddressOfRecord, authenticatedCaller: AddressOfRecord?)
    /// An authenticated extension calls a target that is no extension (a number, another
    /// domain): its organisation's routes decide (`inOwnDomain`: the Request-URI named one of
    /// Rouse's domains, so without a route the answer is 404, not 403).
    case outside(DialledTarget, caller: AddressOfRecord, inOwnDomain: Bool)

    /// - Parameters:
    ///   - sourceIP: where the INVITE came from (the packet's source, not its Via).
    ///   - ownNames: the names a Request-URI may use for Rouse itself (its addresses, aliases).
    ///   - throttle: counts wrong credentials per source address (shared with REGISTER and the
    ///     posting endpoint); a blocked source gets 503 with Retry-After.
    public static func decide(
        _ request: SIPRequest, sourceIP: String, directory: DirectorySnapshot, ownNames: Set<String>, trustedPeers: TrustedPeers,
        authenticator: DigestAuthenticator, throttle: AuthFailureThrottle? = nil, serverName: String, now: Date
    ) -> InviteAdmission {
        func answer(_ status: Int, _ reason: String) -> InviteAdmission {
            var response = SIPResponse(replyingTo: request, statusCode: status, reasonPhrase: reason, toTag: tag(for: request))
            response.headers.add(.server, serverName)
            return .respond(response)
        }
        let trusted = trustedPeers.contains(sourceIP)
        if !trusted, let throttle, let left = throttle.isBlocked(sourceIP, now: now) {
            var response = SIPResponse(
                replyingTo: request, statusCode: 503, reasonPhrase: RegistrarCore.throttledReasonPhrase, toTag: tag(for: request))
            response.headers.add(.retryAfter, String(max(1, Int(left.rounded(.up)))))
            response.headers.add(.server, serverName)
            return .respond(response)
        }
        let host = request.uri.host.lowercased()
        let hostWithPort = request.uri.port.map { "\(host):\($0)" } ?? host
        guard let number = request.uri.user, !number.isEmpty else { return answer(404, "Not Found") }
        let fromHost = request.from?.uri.host.lowercased() ?? ""
        // Which organisation the Request-URI names: a domain of Rouse's, or Rouse's own address
        // with the extension as user part (mapped when unambiguous, protocol.md).
        let candidates: [AddressOfRecord]
        let inOwnDomain: Bool
        if directory.domains.contains(host) {
            candidates = [AddressOfRecord(number: number, domain: host)]
            inOwnDomain = true
        } else if request.uri.scheme != .tel, ownNames.contains(host) || ownNames.contains(hostWithPort) {
            candidates = directory.extensions.keys.filter { $0.number == number }.sorted()
            inOwnDomain = true
        } else if !trusted, directory.domains.contains(fromHost) {
            // An extension calling out: authenticated first, then its routes decide.
            candidates = []
            inOwnDomain = false
        } else {
            return answer(403, "Relaying Denied")
        }

        var caller: AddressOfRecord?
        if !trusted {
            let realm = directory.domains.contains(fromHost) ? fromHost : (candidates.first?.domain ?? directory.domains.sorted().first ?? host)
            var stale = false
            let offered = request.headers.lines(.proxyAuthorization).compactMap(DigestCredentials.init(header:))
            for credentials in offered where credentials.realm?.lowercased() == realm {
                switch authenticator.verify(credentials, method: request.method.rawValue, realm: realm, now: now, lookup: { directory.extensions[$0] }) {
                case .authenticated(let aor): caller = aor
                case .stale: stale = true
                case .rejected: throttle?.recordFailure(sourceIP, now: now)
                }
            }
            guard caller != nil else {
                var challenge = SIPResponse(
                    replyingTo: request, statusCode: 407, reasonPhrase: "Proxy Authentication Required", toTag: tag(for: request))
                for value in authenticator.challenges(realm: realm, stale: stale, now: now) { challenge.headers.add(.proxyAuthenticate, value) }
                challenge.headers.add(.server, serverName)
                return .respond(challenge)
            }
        }
        let known = candidates.filter { directory.extensions[$0] != nil }
        switch known.count {
        case 0:
            // Not an extension: a number or another domain an authenticated extension may reach
            // through its routes. A trusted peer's call is never sent on (no relay for peers).
            guard let caller, let target = DialledTarget(request.uri) else { return answer(inOwnDomain ? 404 : 403, inOwnDomain ? "Not Found" : "Relaying Denied") }
            return .outside(target, caller: caller, inOwnDomain: inOwnDomain)
        case 1: return .accept(callee: known[0], authenticatedCaller: caller)
        default: return answer(485, "Ambiguous")
        }
    }

    /// A To tag that is the same for retransmissions of one request (its Via branch hashed).
    static func tag(for request: SIPRequest) -> String {
        var hasher = Hasher()
        hasher.combine(request.topVia?.branch ?? request.callID ?? "")
        return String(UInt64(bitPattern: Int64(hasher.finalize())), radix: 36)
    }
}
