extension Duration {
    /// The duration in whole milliseconds, rounded down (what libcurl's timeouts, push records,
    /// route hop timers and `poll` take).
    public var wholeMilliseconds: Int {
        let (seconds, attoseconds) = components
        return Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000)
    }
}
