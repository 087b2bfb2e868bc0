public import SIPMessage

/// Answers what Rouse answers about itself, as RFC 3261 asks of a UAS with no other handler:
/// OPTIONS addressed to it gets 200 with Allow, Accept and Supported (§11.2); a method it
/// recognises but does not handle gets 405 with Allow, an unknown method 501 (§8.2.1); a Require
/// naming an extension it lacks gets 420 with Unsupported (§8.2.2.3). Pure logic on messages.
public struct SelfRequestHandler: Sendable {
    /// The methods Rouse handles, in the order Allow lists them.
    public var allowedMethods: [SIPMethod]
    /// Option tags for Supported (decisions.md: path, outbound).
    public var supportedExtensions: [String]
    /// Names (host or address, lower-case, IPv6 in brackets) that mean this server.
    public var ownNames: Set<String>
    /// Server header value.
    public var serverName: String

    /// Every method RFC 3261 and its common extensions define; others get 501.
    static let recognisedMethods: Set<String> = [
        "INVITE", "ACK", "BYE", "CANCEL", "REGISTER", "OPTIONS", "INFO", "UPDATE", "PRACK",
        "SUBSCRIBE", "NOTIFY", "REFER", "MESSAGE", "PUBLISH",
    ]

    public init(allowedMethods: [SIPMethod], supportedExtensions: [String], ownNames: Set<String>, serverName: String) {
        self.allowedMethods = allowedMethods
        self.supportedExtensions = supportedExtensions
        self.ownNames = Set(ownNames.map { $0.lowercased() })
        self.serverName = serverName
    }

    /// True when the Request-URI names this server itself (no user part, host one of its names).
    public func isAddressedToSelf(_ request: SIPRequest) -> Bool {
        request.uri.user == nil && ownNames.contains(request.uri.host.lowercased())
    }

    /// The response to a request no other layer took; nil for ACK, which is never answered.
    public func respond(to request: SIPRequest, toTag: String) -> SIPResponse? {
        if request.method == .ack { return nil }
        if let unsupported = unsupportedRequirements(of: request), !unsupported.isEmpty, request.method != .cancel {
            var response = makeResponse(request, 420, toTag: toTag)
            response.headers.add(.unsupported, unsupported.joined(separator: ", "))
            return response
        }
        guard SelfRequestHandler.recognisedMethods.contains(request.method.rawValue) else {
            var response = makeResponse(request, 501, toTag: toTag)
            response.headers.add(.allow, allowHeader)
            return response
        }
        if request.method == .cancel {
            // A CANCEL that matched no transaction (§9.2).
            return makeResponse(request, 481, toTag: toTag)
        }
        if request.method == .options && allowedMethods.contains(.options) {
            if isAddressedToSelf(request) {
                var response = makeResponse(request, 200, toTag: toTag)
                response.headers.add(.allow, allowHeader)
                response.headers.add(.accept, "application/sdp")
                response.headers.add(.supported, supportedExtensions.joined(separator: ", "))
                return response
            }
            // Rouse is no open relay: it answers for itself only.
            return makeResponse(request, 404, toTag: toTag)
        }
        if allowedMethods.contains(request.method) {
            return makeResponse(request, 404, toTag: toTag)
        }
        var response = makeResponse(request, 405, toTag: toTag)
        response.headers.add(.allow, allowHeader)
        return response
    }

    var allowHeader: String { allowedMethods.map(\.rawValue).joined(separator: ", ") }

    /// Option tags in Require (and Proxy-Require, for requests to Rouse itself) that it lacks.
    func unsupportedRequirements(of request: SIPRequest) -> [String]? {
        var tags = request.headers.values(.require)
        if isAddressedToSelf(request) { tags += request.headers.values(.proxyRequire) }
        let supported = Set(supportedExtensions.map { $0.lowercased() })
        return tags.filter { !supported.contains($0.lowercased()) }
    }

    private func makeResponse(_ request: SIPRequest, _ status: Int, toTag: String) -> SIPResponse {
        var response = SIPResponse(replyingTo: request, statusCode: status, toTag: toTag)
        response.headers.add(.server, serverName)
        return response
    }
}
