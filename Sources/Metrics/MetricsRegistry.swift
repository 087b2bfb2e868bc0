import Foundation

/// Counters, gauges and histograms with labels, rendered in the Prometheus text exposition format
/// 0.0.4 (`# HELP`, `# TYPE`, one line per series; histograms as cumulative `_bucket{le=…}`,
/// `_sum` and `_count`). Families come out sorted by name and series by their labels, so equal
/// contents give equal text.
///
/// Registering a family is idempotent: asking again for the same name and type returns a handle to
/// the same family, so independent parts of Rouse can each ask for what they count. Label values
/// are whatever the caller passes: callers keep them few (routes, results) and free of secrets.
///
/// Threading: thread-safe behind one `NSLock`; gauge callbacks run at render time, outside the
/// lock, on the rendering thread.
public final class MetricsRegistry: @unchecked Sendable {
    // @unchecked: `families` is only touched under `lock`.
    public enum Kind: String, Sendable {
        case counter, gauge, histogram
    }

    fileprivate struct Series {
        var labels: [(String, String)]
        var value: Double = 0
        /// Histograms: the count per bucket (not cumulative), then the sum and count.
        var bucketCounts: [UInt64] = []
        var sum: Double = 0
        var count: UInt64 = 0
    }

    fileprivate struct Family {
        let kind: Kind
        let help: String
        let buckets: [Double]
        var series: [String: Series] = [:]
        var read: (@Sendable () -> Double)?
    }

    private let lock = NSLock()
    private var families: [String: Family] = [:]

    public init() {}

    /// The default latency buckets, in seconds (Prometheus client libraries' defaults).
    public static let defaultBuckets: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    /// A counter family named `name` (conventionally ending in `_total`).
    public func counter(_ name: String, help: String) -> Counter {
        declare(name, Family(kind: .counter, help: help, buckets: []))
        return Counter(registry: self, name: name)
    }

    /// A gauge family whose values are set by the caller.
    public func gauge(_ name: String, help: String) -> Gauge {
        declare(name, Family(kind: .gauge, help: help, buckets: []))
        return Gauge(registry: self, name: name)
    }

    /// A gauge without labels whose value `read` gives at each render (e.g. live bindings).
    public func gauge(_ name: String, help: String, read: @escaping @Sendable () -> Double) {
        declare(name, Family(kind: .gauge, help: help, buckets: [], read: read))
        lock.lock()
        families[name]?.read = read
        lock.unlock()
    }

    /// A counter without labels whose value `read` gives at each render (a count kept elsewhere,
    /// which only grows).
    public func counter(_ name: String, help: String, read: @escaping @Sendable () -> Double) {
        declare(name, Family(kind: .counter, help: help, buckets: [], read: read))
        lock.lock()
        families[name]?.read = read
        lock.unlock()
    }

    /// A histogram family with fixed upper bounds `buckets` (sorted here; `+Inf` is implied).
    public func histogram(_ name: String, help: String, buckets: [Double] = MetricsRegistry.defaultBuckets) -> Histogram {
        let bounds = Array(Set(buckets.filter { $0.isFinite })).sorted()
        declare(name, Family(kind: .histogram, help: help, buckets: bounds))
        return Histogram(registry: self, name: name)
    }

    private func declare(_ name: String, _ family: Family) {
        precondition(MetricsRegistry.isValidName(name), "not a Prometheus metric name: \(name)")
        lock.lock()
        defer { lock.unlock() }
        if let existing = families[name] {
            precondition(existing.kind == family.kind, "\(name) is already a \(existing.kind.rawValue)")
            return
        }
        families[name] = family
    }

    /// Applies `change` to the series of `name` with `labels`, creating it at zero. `change` gets the
    /// family's buckets. The series is changed in place (the family is not copied out, which would
    /// copy its every series), and its key is built without a sorted copy for one label or none.
    fileprivate func update(_ name: String, _ labels: [String: String], _ change: (inout Series, [Double]) -> Void) {
        let sorted = MetricsRegistry.sortedLabels(labels)
        update(name, key: MetricsRegistry.seriesKey(sorted), labels: sorted, change)
    }

    /// The same for a series whose key (`seriesKey`) and labels in name order are worked out already.
    fileprivate func update(_ name: String, key: String, labels: [(String, String)], _ change: (inout Series, [Double]) -> Void) {
        lock.lock()
        defer { lock.unlock() }
        guard let index = families.index(forKey: name) else { return }
        let buckets = families.values[index].buckets
        change(&families.values[index].series[key, default: Series(labels: labels, bucketCounts: Array(repeating: 0, count: buckets.count))], buckets)
    }

    /// The key of a series in its family: its labels in name order, `name=value`, NUL between.
    private static func seriesKey(_ sorted: [(String, String)]) -> String {
        sorted.map { $0.0 + "=" + $0.1 }.joined(separator: "\u{0}")
    }

    /// A series' labels in name order.
    private static func sortedLabels(_ labels: [String: String]) -> [(String, String)] {
        labels.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    /// The whole registry in the text format 0.0.4.
    public func render() -> String {
        lock.lock()
        let snapshot = families
        lock.unlock()
        var text = ""
        for name in snapshot.keys.sorted() {
            let family = snapshot[name]!
            text += "# HELP \(name) \(MetricsRegistry.escapeHelp(family.help))\n"
            text += "# TYPE \(name) \(family.kind.rawValue)\n"
            if let read = family.read {
                text += "\(name) \(MetricsRegistry.format(read()))\n"
                continue
            }
            let series = family.series.values.sorted { MetricsRegistry.labelText($0.labels) < MetricsRegistry.labelText($1.labels) }
            if series.isEmpty, family.kind != .histogram {
                text += "\(name) 0\n"  // a family without labels reads 0 before its first change
                continue
            }
            for one in series {
                switch family.kind {
                case .counter, .gauge:
                    text += "\(name)\(MetricsRegistry.labelText(one.labels)) \(MetricsRegistry.format(one.value))\n"
                case .histogram:
                    var cumulative: UInt64 = 0
                    for (index, bound) in family.buckets.enumerated() {
                        cumulative += one.bucketCounts[index]
                        let labels = MetricsRegistry.labelText(one.labels + [("le", MetricsRegistry.format(bound))])
                        text += "\(name)_bucket\(labels) \(cumulative)\n"
                    }
                    text += "\(name)_bucket\(MetricsRegistry.labelText(one.labels + [("le", "+Inf")])) \(one.count)\n"
                    text += "\(name)_sum\(MetricsRegistry.labelText(one.labels)) \(MetricsRegistry.format(one.sum))\n"
                    text += "\(name)_count\(MetricsRegistry.labelText(one.labels)) \(one.count)\n"
                }
            }
        }
        return text
    }

    /// The content type of `render()`'s text.
    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    /// `{a="1",b="2"}`, or nothing without labels.
    static func labelText(_ labels: [(String, String)]) -> String {
        guard !labels.isEmpty else { return "" }
        return "{" + labels.map { "\($0.0)=\"\(escapeLabelValue($0.1))\"" }.joined(separator: ",") + "}"
    }

    /// A label value with `\`, `"` and line feeds escaped.
    public static func escapeLabelValue(_ value: String) -> String {
        var out = ""
        for character in value {
            switch character {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(character)
            }
        }
        return out
    }

    /// HELP text with `\` and line feeds escaped.
    static func escapeHelp(_ help: String) -> String {
        help.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\n", with: "\\n")
    }

    /// A sample value as Prometheus reads it: whole numbers without a fraction, `+Inf`, `-Inf`, `NaN`.
    public static func format(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }

    static func isValidName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, first == "_" || first == ":" || (first.isASCII && first.properties.isAlphabetic) else {
            return false
        }
        return name.unicodeScalars.allSatisfy { $0.isASCII && ($0 == "_" || $0 == ":" || $0.properties.isAlphabetic || ("0"..."9").contains($0)) }
    }

    /// A counter family: `increment` adds to the series of the given labels.
    public struct Counter: Sendable {
        let registry: MetricsRegistry
        public let name: String

        /// Adds `amount` (never negative) to the series labelled `labels`.
        public func increment(_ labels: [String: String] = [:], by amount: Double = 1) {
            guard amount >= 0 else { return }
            registry.update(name, labels) { series, _ in series.value += amount }
        }

        /// The series labelled `labels`, for counting on a hot path: its key is worked out once
        /// here, so `increment` builds no dictionary and no key (profiled: 2.8k instructions per
        /// REGISTER for `rouse_register_total{result}`). The series appears at its first count.
        public func series(_ labels: [String: String]) -> Series {
            let sorted = MetricsRegistry.sortedLabels(labels)
            return Series(registry: registry, name: name, key: MetricsRegistry.seriesKey(sorted), labels: sorted)
        }

        /// One series of a counter, its labels fixed (`Counter.series`). A value, usable from any thread.
        public struct Series: Sendable {
            let registry: MetricsRegistry
            let name: String
            let key: String
            let labels: [(String, String)]

            /// Adds one to the series.
            public func increment() {
                registry.update(name, key: key, labels: labels) { series, _ in series.value += 1 }
            }
        }
    }

    /// A gauge family: `set` replaces the value of the series of the given labels.
    public struct Gauge: Sendable {
        let registry: MetricsRegistry
        public let name: String

        public func set(_ value: Double, _ labels: [String: String] = [:]) {
            registry.update(name, labels) { series, _ in series.value = value }
        }
    }

    /// A histogram family: `observe` counts a value in its bucket.
    public struct Histogram: Sendable {
        let registry: MetricsRegistry
        public let name: String

        public func observe(_ value: Double, _ labels: [String: String] = [:]) {
            registry.update(name, labels) { series, buckets in
                if let index = buckets.firstIndex(where: { value <= $0 }) { series.bucketCounts[index] += 1 }
                series.sum += value
                series.count += 1
            }
        }
    }
}
