import Dispatch
import Metrics
import XCTest

/// The exact text the registry renders (Prometheus text format 0.0.4).
final class MetricsTests: XCTestCase {
    func testCountersGaugesAndHistogramsRenderExactly() {
        let registry = MetricsRegistry()
        let requests = registry.counter("rouse_http_requests_total", help: "HTTP requests.")
        requests.increment(["route": "/health", "status": "200"])
        requests.increment(["status": "200", "route": "/health"])
        requests.increment(["route": "unmatched", "status": "404"], by: 3)
        registry.gauge("rouse_bindings", help: "Live bindings.") { 7 }
        let latency = registry.histogram("rouse_push_latency_seconds", help: "Push latency.", buckets: [0.5, 0.1, 1])
        latency.observe(0.25, ["provider": "apns"])
        latency.observe(0.5, ["provider": "apns"])
        latency.observe(3, ["provider": "apns"])
        let temperature = registry.gauge("rouse_test_level", help: "A level.")
        temperature.set(2.5)

        XCTAssertEqual(
            registry.render(),
            """
            # HELP rouse_bindings Live bindings.
            # TYPE rouse_bindings gauge
            rouse_bindings 7
            # HELP rouse_http_requests_total HTTP requests.
            # TYPE rouse_http_requests_total counter
            rouse_http_requests_total{route="/health",status="200"} 2
            rouse_http_requests_total{route="unmatched",status="404"} 3
            # HELP rouse_push_latency_seconds Push latency.
            # TYPE rouse_push_latency_seconds histogram
            rouse_push_latency_seconds_bucket{provider="apns",le="0.1"} 0
            rouse_push_latency_seconds_bucket{provider="apns",le="0.5"} 2
            rouse_push_latency_seconds_bucket{provider="apns",le="1"} 2
            rouse_push_latency_seconds_bucket{provider="apns",le="+Inf"} 3
            rouse_push_latency_seconds_sum{provider="apns"} 3.75
            rouse_push_latency_seconds_count{provider="apns"} 3
            # HELP rouse_test_level A level.
            # TYPE rouse_test_level gauge
            rouse_test_level 2.5

            """)
    }

    func testLabelValuesAndHelpAreEscaped() {
        let registry = MetricsRegistry()
        registry.counter("odd_total", help: "back\\slash and\nnewline").increment(["why": "a \"quoted\" \\ path\nnext"])
        XCTAssertEqual(
            registry.render(),
            """
            # HELP odd_total back\\\\slash and\\nnewline
            # TYPE odd_total counter
            odd_total{why="a \\"quoted\\" \\\\ path\\nnext"} 1

            """)
    }

    func testUnlabelledCounterReadsZeroAndRegistrationIsIdempotent() {
        let registry = MetricsRegistry()
        _ = registry.counter("a_total", help: "A.")
        XCTAssertEqual(registry.render(), "# HELP a_total A.\n# TYPE a_total counter\na_total 0\n")
        registry.counter("a_total", help: "A.").increment()
        registry.counter("a_total", help: "A.").increment()
        XCTAssertTrue(registry.render().hasSuffix("a_total 2\n"))
    }

    func testValueFormatting() {
        XCTAssertEqual(MetricsRegistry.format(1), "1")
        XCTAssertEqual(MetricsRegistry.format(0.25), "0.25")
        XCTAssertEqual(MetricsRegistry.format(.infinity), "+Inf")
        XCTAssertEqual(MetricsRegistry.format(-.infinity), "-Inf")
        XCTAssertEqual(MetricsRegistry.format(.nan), "NaN")
    }

    func testConcurrentIncrementsAreAllCounted() {
        let registry = MetricsRegistry()
        let counter = registry.counter("hits_total", help: "Hits.")
        DispatchQueue.concurrentPerform(iterations: 1000) { index in counter.increment(["shard": String(index % 4)]) }
        let total = registry.render().split(separator: "\n").filter { $0.hasPrefix("hits_total{") }
            .compactMap { Int($0.split(separator: " ").last ?? "") }.reduce(0, +)
        XCTAssertEqual(total, 1000)
    }

    func testABoundSeriesCountsIntoTheSameSeriesAsLabelsDoAndAppearsAtItsFirstCount() {
        let registry = MetricsRegistry()
        let results = registry.counter("rouse_register_total", help: "REGISTERs.")
        let ok = results.series(["result": "ok"])
        let twoLabels = results.series(["b": "2", "a": "1"])
        XCTAssertFalse(registry.render().contains("rouse_register_total{"), "no series before its first count")
        ok.increment()
        ok.increment()
        results.increment(["result": "ok"])
        twoLabels.increment()
        results.increment(["a": "1", "b": "2"])
        XCTAssertEqual(
            registry.render(),
            """
            # HELP rouse_register_total REGISTERs.
            # TYPE rouse_register_total counter
            rouse_register_total{a="1",b="2"} 2
            rouse_register_total{result="ok"} 3

            """)
    }
}
