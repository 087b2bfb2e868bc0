/// Bounds on what Rouse accepts, so a hostile peer cannot make it hold unbounded memory
/// (decisions.md: 64 KiB per message, 256 headers, 8 KiB per line).
public struct SIPParserLimits: Hashable, Sendable {
    public var maxMessageBytes: Int
    public var maxHeaderCount: Int
    public var maxLineBytes: Int

    public init(maxMessageBytes: Int = 65_536, maxHeaderCount: Int = 256, maxLineBytes: Int = 8_192) {
        self.maxMessageBytes = maxMessageBytes
        self.maxHeaderCount = maxHeaderCount
        self.maxLineBytes = maxLineBytes
    }

    public static let `default` = SIPParserLimits()
}
