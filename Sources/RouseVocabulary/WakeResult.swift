import Foundation

/// What became of a woken device after its ring push (the "woke in time" column of Recent pushes).
public enum WakeResult: Sendable, Hashable {
    /// Not known yet: the call still waits.
    case pending
    /// The device registered again this long after the push was sent, in time for the call.
    case woke(afterMilliseconds: Int)
    /// The device registered again after the call had stopped waiting for it (too late to ring).
    case late(afterMilliseconds: Int)
    /// The device did not register again while the call could still reach it.
    case notInTime
    /// The call ended (answered elsewhere, caller hung up) before the device came back.
    case callEnded
    /// The push failed or was refused, so no wake was expected.
    case notPushed

    /// One word for storage and the API: `pending`, `woke`, `late`, `no`, `call_ended`, `not_pushed`.
    public var word: String {
        switch self {
        case .pending: return "pending"
        case .woke: return "woke"
        case .late: return "late"
        case .notInTime: return "no"
        case .callEnded: return "call_ended"
        case .notPushed: return "not_pushed"
        }
    }

    /// Milliseconds from push to the fresh REGISTER, when the device came back.
    public var milliseconds: Int? {
        switch self {
        case .woke(let ms), .late(let ms): return ms
        default: return nil
        }
    }

    /// In words, as the journey line ends: "woke in 1.9 s", "no re-register in time", …
    public var words: String {
        switch self {
        case .pending: return "waiting for the device"
        case .woke(let ms): return "woke in \(WakeResult.seconds(ms))"
        case .late(let ms): return "woke in \(WakeResult.seconds(ms)), too late for the call"
        case .notInTime: return "no re-register in time"
        case .callEnded: return "call ended before the device came back"
        case .notPushed: return "not woken"
        }
    }

    /// Rebuilds a result from its stored word and milliseconds.
    public init(word: String, milliseconds: Int?) {
        switch word {
        case "woke": self = .woke(afterMilliseconds: milliseconds ?? 0)
        case "late": self = .late(afterMilliseconds: milliseconds ?? 0)
        case "no": self = .notInTime
        case "call_ended": self = .callEnded
        case "not_pushed": self = .notPushed
        default: self = .pending
        }
    }

    private static func seconds(_ ms: Int) -> String {
        ms < 1000 ? "\(ms) ms" : String(format: "%.1f s", Double(ms) / 1000)
    }
}
