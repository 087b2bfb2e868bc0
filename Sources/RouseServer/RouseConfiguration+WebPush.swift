extension RouseConfiguration {
    /// The VAPID `sub` (RFC 8292 §2.1) web pushes carry: `webpush_contact`, or `mailto:admin@` and
    /// the alphabetically first organisation's domain (`localhost` when there is none), the same on
    /// every instance.
    public func webPushSubject(domains: Set<String>) -> String {
        guard webPushContact.isEmpty else { return webPushContact }
        return "mailto:admin@" + (domains.min() ?? "localhost")
    }
}
