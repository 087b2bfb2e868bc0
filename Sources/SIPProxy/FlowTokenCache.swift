import SIPTransport

/// Flow tokens `ProxyCore` has signed or checked, both ways (token → flow, flow → token), so a
/// dialog's requests (ACK, BYE and their answers: four checks a call) and each INVITE's two
/// Record-Route tokens cost a lookup instead of an HMAC-SHA256 and hex work. Only tokens that
/// were signed here or passed the check are put in, and a lookup matches the whole token, so the
/// cache cannot make a forged token pass. It also keeps the Record-Route entries written here,
/// whole, with their two flows: a request inside the dialog brings the entry back as its Route,
/// which is then known by a lookup, without parsing it (two parses a call, ACK and BYE). Bounded:
/// when `limit` flows or entries are held it starts again empty (a token then costs one check
/// more, an entry one parse).
///
/// Threading: thread-safe (one lock, held for a dictionary operation); shared by the SIP loops.
final class FlowTokenCache: Sendable {
    fileprivate struct Tables {
        var flows: [String: FlowID] = [:]
        var tokens: [FlowID: String] = [:]
        var routes: [String: (caller: FlowID, device: FlowID)] = [:]
    }

    private let tables = Locked(Tables())
    let limit: Int

    init(limit: Int = 8_192) {
        self.limit = max(1, limit)
    }

    func flow(of token: String) -> FlowID? {
        tables.withLock { $0.flows[token] }
    }

    func token(of flow: FlowID) -> String? {
        tables.withLock { $0.tokens[flow] }
    }

    /// Remembers a token signed here (both ways).
    func remember(signed token: String, for flow: FlowID) {
        tables.withLock { tables in
            tables.makeRoom(limit)
            tables.flows[token] = flow
            tables.tokens[flow] = token
        }
    }

    /// Remembers a token that passed the check (token → flow only: the flow's own token is the
    /// one signed here, whatever spelling came in).
    func remember(checked token: String, for flow: FlowID) {
        tables.withLock { tables in
            tables.makeRoom(limit)
            tables.flows[token] = flow
        }
    }

    /// The flows of a Record-Route entry written here, when `entry` is one, exactly.
    func flows(ofRoute entry: String) -> (caller: FlowID, device: FlowID)? {
        tables.withLock { $0.routes[entry] }
    }

    /// Remembers a Record-Route entry written here, which names `caller` and `device` by tokens
    /// signed here.
    func remember(route entry: String, caller: FlowID, device: FlowID) {
        tables.withLock { tables in
            tables.makeRoom(limit)
            tables.routes[entry] = (caller, device)
        }
    }

    /// Tokens held (for tests).
    var count: Int { tables.withLock { $0.flows.count } }
}

extension FlowTokenCache.Tables {
    mutating func makeRoom(_ limit: Int) {
        guard flows.count >= limit || tokens.count >= limit || routes.count >= limit else { return }
        flows.removeAll(keepingCapacity: true)
        tokens.removeAll(keepingCapacity: true)
        routes.removeAll(keepingCapacity: true)
    }
}
