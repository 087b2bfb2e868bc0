public import SIPMessage

extension SIPRequest {
    /// The ACK a client transaction sends for a non-2xx final response (RFC 3261 §17.1.1.3):
    /// Request-URI, Call-ID, From and the top Via of this INVITE, the To of the response (with its
    /// tag), CSeq with the same number and method ACK, and this request's Route headers.
    public func acknowledgement(for response: SIPResponse) -> SIPRequest {
        var headers = SIPHeaders()
        if let via = self.headers.firstValue(.via) { headers.add(.via, via) }
        headers.add(.maxForwards, "70")
        if let from = self.headers[.from] { headers.add(.from, from) }
        if let to = response.headers[.to] ?? self.headers[.to] { headers.add(.to, to) }
        if let callID = self.headers[.callID] { headers.add(.callID, callID) }
        if let cseq { headers.add(.cseq, SIPCSeq(cseq.number, .ack).description) }
        for route in self.headers.lines(.route) { headers.add(.route, route) }
        return SIPRequest(method: .ack, uri: uri, version: version, headers: headers)
    }

    /// The CANCEL for this request (RFC 3261 §9.1): same Request-URI, Call-ID, From, To, CSeq
    /// number and top Via (so it shares the branch), method CANCEL, and the Route headers.
    public func cancellation() -> SIPRequest {
        var headers = SIPHeaders()
        if let via = self.headers.firstValue(.via) { headers.add(.via, via) }
        headers.add(.maxForwards, "70")
        for key in [SIPHeaderName.from, .to, .callID] {
            if let value = self.headers[key] { headers.add(key, value) }
        }
        if let cseq { headers.add(.cseq, SIPCSeq(cseq.number, .cancel).description) }
        for route in self.headers.lines(.route) { headers.add(.route, route) }
        return SIPRequest(method: .cancel, uri: uri, version: version, headers: headers)
    }
}
