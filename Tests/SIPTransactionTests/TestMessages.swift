import SIPMessage
import SIPTransaction

/// Builds the requests and responses the tests exchange, with the message model's initializers.
enum TestMessages {
    static let aliceURI = "sip:alice@example.com"

    static func request(
        _ method: SIPMethod, branch: String? = "z9hG4bK-branch-1", sentBy: String = "phone.example.com:5060",
        transport: String = "UDP", cseq: UInt32 = 1, cseqMethod: SIPMethod? = nil, callID: String = "call-1@phone",
        fromTag: String = "from-1", toTag: String? = nil, uri: String = "sip:bob@example.com"
    ) -> SIPRequest {
        var via = "SIP/2.0/\(transport) \(sentBy)"
        if let branch { via += ";branch=\(branch)" }
        var headers = SIPHeaders()
        headers.add(.via, via)
        headers.add(.maxForwards, "70")
        headers.add(.from, "<\(aliceURI)>;tag=\(fromTag)")
        headers.add(.to, "<sip:bob@example.com>" + (toTag.map { ";tag=\($0)" } ?? ""))
        headers.add(.callID, callID)
        headers.add(.cseq, "\(cseq) \((cseqMethod ?? method).rawValue)")
        return SIPRequest(method: method, uri: try! SIPURI(parsing: uri), headers: headers)
    }

    static func invite(branch: String? = "z9hG4bK-branch-1", transport: String = "UDP") -> SIPRequest {
        request(.invite, branch: branch, transport: transport)
    }

    /// The ACK a UAC sends for a non-2xx final response: same branch as the INVITE (§17.1.1.3).
    static func ack(for invite: SIPRequest, toTag: String?, branch: String? = nil) -> SIPRequest {
        let via = invite.topVia!
        return request(
            .ack, branch: branch ?? via.branch, sentBy: via.sentBy, transport: via.transport,
            cseq: invite.cseq!.number, callID: invite.callID!, fromTag: invite.from!.tag!, toTag: toTag,
            uri: invite.uri.description)
    }

    static func cancel(for invite: SIPRequest) -> SIPRequest {
        let via = invite.topVia!
        return request(
            .cancel, branch: via.branch, sentBy: via.sentBy, transport: via.transport, cseq: invite.cseq!.number,
            callID: invite.callID!, fromTag: invite.from!.tag!, uri: invite.uri.description)
    }

    static func response(_ code: Int, to request: SIPRequest, toTag: String? = "to-1") -> SIPResponse {
        SIPResponse(replyingTo: request, statusCode: code, toTag: toTag)
    }
}
