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

extension SIPRequest {
    /// The request with only what transaction matching reads (§17.2.3): the Request-URI and the
    /// Via, From, To, Call-ID and CSeq lines; no body.
    func keepingMatchingLines() -> SIPRequest {
        // Compared one by one (a Set built per request cost more than the filtering itself), by
        // index into room for the five: `filter` copied every line and grew its array four times.
        let all = headers.fields
        var kept: [SIPHeader] = []
        kept.reserveCapacity(5)
        for index in all.indices {
            let key = all[index].key
            if key == .via || key == .from || key == .to || key == .callID || key == .cseq { kept.append(all[index]) }
        }
        return SIPRequest(method: method, uri: uri, version: version, headers: SIPHeaders(kept), body: [])
    }
}
