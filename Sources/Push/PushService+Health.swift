extension PushService {
    /// Each provider host backed off now, in words for `/health`: "push provider apns
    /// (com.example.app) backed off: 5 failures, last: …; next try in 8 s". Thread-safe; quick.
    public var providerProblems: [String] {
        circuits.compactMap(\.problem).sorted()
    }

    /// How many provider hosts are backed off now (`/metrics`).
    public var backedOffProviderCount: Int {
        circuits.filter(\.isBackedOff).count
    }
}
