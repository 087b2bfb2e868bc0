public import SIPMessage

/// An extension's call forwarding (issue 19 "Diversion"): where its calls go unconditionally, when
/// every device is busy, when nobody answers within its own ring time, and when nothing could be
/// woken or reached. Each target is a URI: another extension (`sip:1002@example.com`), a voicemail
/// URI, or a number dialled through the outbound routes (`sip:+441234567@example.com;user=phone`).
/// Loaded with the directory (`DirectorySnapshot.diversions`), so a call reads it from memory. A
/// value.
public struct DiversionRules: Sendable, Hashable {
    /// Every call, before anything rings.
    public var always: SIPURI?
    /// Every device answered busy (486, 600; 603 too unless `decline_is_busy` is off).
    public var busy: SIPURI?
    /// Nobody answered within `noAnswerAfter` (or `ring_timeout`, when it is not shorter).
    public var noAnswer: SIPURI?
    /// The extension's own ring time for `noAnswer`; nil: `ring_timeout`.
    public var noAnswerAfter: Duration?
    /// Nothing could be woken or reached (the call would end 480); `noAnswer` when nil.
    public var unreachable: SIPURI?

    public init(always: SIPURI? = nil, busy: SIPURI? = nil, noAnswer: SIPURI? = nil, noAnswerAfter: Duration? = nil, unreachable: SIPURI? = nil) {
        self.always = always
        self.busy = busy
        self.noAnswer = noAnswer
        self.noAnswerAfter = noAnswerAfter
        self.unreachable = unreachable
    }

    /// No target set.
    public var isEmpty: Bool { always == nil && busy == nil && noAnswer == nil && unreachable == nil }

    /// Every target set, each once.
    public var targets: [SIPURI] {
        var seen: [SIPURI] = []
        for target in [always, busy, noAnswer, unreachable].compactMap({ $0 }) where !seen.contains(target) { seen.append(target) }
        return seen
    }
}
