/// A SIP request method (RFC 3261 §7.1). Methods are case-sensitive tokens; unknown ones are kept as sent.
public struct SIPMethod: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }

    public var description: String { rawValue }

    public static let invite = SIPMethod("INVITE")
    public static let ack = SIPMethod("ACK")
    public static let bye = SIPMethod("BYE")
    public static let cancel = SIPMethod("CANCEL")
    public static let register = SIPMethod("REGISTER")
    public static let options = SIPMethod("OPTIONS")
    public static let info = SIPMethod("INFO")
    public static let update = SIPMethod("UPDATE")
    public static let prack = SIPMethod("PRACK")
    public static let subscribe = SIPMethod("SUBSCRIBE")
    public static let notify = SIPMethod("NOTIFY")
    public static let refer = SIPMethod("REFER")
    public static let message = SIPMethod("MESSAGE")
    public static let publish = SIPMethod("PUBLISH")
}

extension SIPMethod {
    /// The method whose token spans `range` of `bytes`, reusing the common methods' Strings.
    static func recognise(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> SIPMethod {
        switch range.count {
        case 3 where SIPHeaderValueScanner.equalsLiteral(bytes, range, "ACK"): return SIPMethod("ACK")
        case 3 where SIPHeaderValueScanner.equalsLiteral(bytes, range, "BYE"): return SIPMethod("BYE")
        case 6 where SIPHeaderValueScanner.equalsLiteral(bytes, range, "INVITE"): return SIPMethod("INVITE")
        case 6 where SIPHeaderValueScanner.equalsLiteral(bytes, range, "CANCEL"): return SIPMethod("CANCEL")
        case 6 where SIPHeaderValueScanner.equalsLiteral(bytes, range, "NOTIFY"): return SIPMethod("NOTIFY")
        case 7 where SIPHeaderValueScanner.equalsLiteral(bytes, range, "OPTIONS"): return SIPMethod("OPTIONS")
        case 7 where SIPHeaderValueScanner.equalsLiteral(bytes, range, "MESSAGE"): return SIPMethod("MESSAGE")
        case 8 where SIPHeaderValueScanner.equalsLiteral(bytes, range, "REGISTER"): return SIPMethod("REGISTER")
        default: return SIPMethod(SIPHeaderValueScanner.text(bytes, range))
        }
    }
}
