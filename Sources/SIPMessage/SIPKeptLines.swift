/// What the parser found of the lines every message has (RFC 3261 §8.1.1): where the top Via,
/// From, To, Call-ID and CSeq lines stand, where the top Via element lies in its line, and the
/// top Via, To and CSeq as it parsed them while checking them. Kept on the parsed message's
/// `SIPHeaders`, so that `topVia`, `to`, `cseq`, `callID`, `from`, `noteSourceInTopVia` and
/// `SIPResponse(replyingTo:)` neither look the lines up nor parse them again (profiled: finding
/// and parsing them again was about 20k instructions per REGISTER).
///
/// Immutable, so every copy of the headers shares it and any thread may read it. `SIPHeaders`
/// keeps it while lines are only added after the existing ones (the top Via part goes out of
/// date when the source is noted in it) and drops it on any other change.
final class SIPKeptLines: Sendable {
    /// Field positions (indices into `SIPHeaders.fields`) of the first line of each.
    let topViaLine: Int
    let fromLine: Int
    let toLine: Int
    let callIDLine: Int
    let cseqLine: Int
    /// The top Via element in the top Via line's value bytes, trimmed.
    let topViaElement: Range<Int>
    /// Where that element ends: the index of the comma after it, or the value's length.
    let topViaElementEnd: Int
    let topVia: SIPVia
    let to: SIPNameAddress
    let cseq: SIPCSeq

    init(
        topViaLine: Int, fromLine: Int, toLine: Int, callIDLine: Int, cseqLine: Int, topViaElement: Range<Int>,
        topViaElementEnd: Int, topVia: SIPVia, to: SIPNameAddress, cseq: SIPCSeq
    ) {
        self.topViaLine = topViaLine
        self.fromLine = fromLine
        self.toLine = toLine
        self.callIDLine = callIDLine
        self.cseqLine = cseqLine
        self.topViaElement = topViaElement
        self.topViaElementEnd = topViaElementEnd
        self.topVia = topVia
        self.to = to
        self.cseq = cseq
    }
}
