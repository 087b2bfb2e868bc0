// swift-tools-version:6.0
import Foundation
import PackageDescription

/// Rouse: a SIP registrar and stateful proxy that wakes sleeping mobile apps by push before ringing them.
/// One target per layer; dependencies point one way (docs/architecture.md).
var targets: [Target] = [
    // C libraries, each wrapped once.
    .systemLibrary(name: "CLinuxShims", path: "Sources/CLinuxShims"),
    .systemLibrary(
        name: "COpenSSL", path: "Sources/COpenSSL", pkgConfig: "openssl",
        providers: [.apt(["libssl-dev"])]),
    .systemLibrary(
        name: "CLibPQ", path: "Sources/CLibPQ", pkgConfig: "libpq",
        providers: [.apt(["libpq-dev"])]),
    .systemLibrary(
        name: "CCurl", path: "Sources/CCurl", pkgConfig: "libcurl",
        providers: [.apt(["libcurl4-openssl-dev"])]),
    .systemLibrary(
        name: "CMicroHTTPD", path: "Sources/CMicroHTTPD", pkgConfig: "libmicrohttpd",
        providers: [.apt(["libmicrohttpd-dev"])]),

    // The few OpenSSL operations Rouse uses.
    .target(name: "Crypto", dependencies: ["COpenSSL"]),

    // The SIP core: pure Swift, no I/O.
    .target(name: "SIPMessage"),
    .target(name: "SIPTransaction", dependencies: ["SIPMessage"]),
    // The datagram-versus-stream check shared by the differential fuzz harness and its replay test.
    .target(name: "SIPDifferential", dependencies: ["SIPMessage"]),
    // REGISTER, digest authentication, bindings and their push channels.
    .target(name: "Registrar", dependencies: ["SIPMessage", "Crypto"]),
    // Sockets, the event loop, flows and TLS.
    .target(name: "SIPTransport", dependencies: ["SIPMessage", "CLinuxShims", "COpenSSL"]),
    // Push apps, the APNs and FCM clients over HTTP/2, payloads and outcomes.
    .target(name: "Push", dependencies: ["Crypto", "CCurl", "Registrar"]),
    // INVITE handling: the wake-then-ring coordinator, proxy rules, journeys.
    .target(name: "CallRouting", dependencies: ["SIPMessage", "SIPTransaction", "Registrar", "Push", "Metrics", "Crypto"]),
    // PostgreSQL.
    .target(name: "Storage", dependencies: ["CLibPQ", "Registrar", "Push", "CallRouting"]),
    // Counters, gauges and histograms in the Prometheus text format; no dependencies.
    .target(name: "Metrics"),
    // A generic HTTP/1.1 server on libmicrohttpd: requests, answers, the route table, middleware.
    .target(name: "HTTPServer", dependencies: ["CMicroHTTPD"]),
    // Rouse's HTTP API on it: the token posting endpoint, health, calls, the admin API and pages.
    .target(
        name: "HTTPAPI", dependencies: ["HTTPServer", "Registrar", "Storage", "Crypto", "Push", "Metrics", "CallRouting"],
        resources: [.copy("openapi.json")]),
    // Configuration, wiring, start and stop.
    .target(
        name: "RouseServer",
        dependencies: ["SIPMessage", "SIPTransaction", "SIPTransport", "Registrar", "Storage", "Crypto", "CLinuxShims", "Push", "HTTPAPI", "HTTPServer", "Metrics", "CallRouting"]),
    .executableTarget(name: "rouse", dependencies: ["RouseServer"]),

    // Tests and benchmarks.
    .target(
        name: "RouseTestSupport",
        dependencies: ["SIPMessage", "SIPTransaction", "Storage", "CLinuxShims", "COpenSSL", "Crypto"]),
    .executableTarget(
        name: "RouseBench",
        dependencies: ["SIPMessage", "SIPTransaction", "SIPTransport", "RouseServer", "RouseTestSupport", "Push"]),
    .testTarget(name: "SIPMessageTests", dependencies: ["SIPMessage", "SIPDifferential"]),
    .testTarget(name: "CallRoutingTests", dependencies: ["CallRouting", "SIPMessage", "SIPTransaction", "Registrar", "Push"]),
    .testTarget(name: "CryptoTests", dependencies: ["Crypto"]),
    .testTarget(name: "PushTests", dependencies: ["Push", "Crypto", "Registrar", "Storage", "RouseTestSupport"]),
    .testTarget(name: "RegistrarTests", dependencies: ["Registrar", "SIPMessage", "SIPTransaction"]),
    .testTarget(name: "SIPTransactionTests", dependencies: ["SIPTransaction", "SIPMessage"]),
    .testTarget(
        name: "SIPTransportTests",
        dependencies: ["SIPTransport", "SIPMessage", "RouseTestSupport"]),
    .testTarget(name: "StorageTests", dependencies: ["Storage", "RouseTestSupport", "CallRouting", "Push", "Registrar"]),
    .testTarget(name: "HTTPServerTests", dependencies: ["HTTPServer", "RouseTestSupport"]),
    .testTarget(
        name: "HTTPAPITests", dependencies: ["HTTPAPI", "HTTPServer", "Registrar", "Storage", "RouseTestSupport", "Metrics", "CallRouting", "Push"]),
    .testTarget(name: "MetricsTests", dependencies: ["Metrics"]),
    .testTarget(
        name: "RouseServerTests",
        dependencies: ["RouseServer", "SIPMessage", "SIPTransport", "Registrar", "Storage", "Crypto", "RouseTestSupport", "CallRouting", "Push"]),
]

var products: [Product] = [
    .executable(name: "rouse", targets: ["rouse"]),
    .executable(name: "rouse-bench", targets: ["RouseBench"]),
]

// libFuzzer harnesses have no `main` of their own (libFuzzer brings it), so they are only part of
// the package when `make fuzz` asks for them (ROUSE_FUZZ=1) and builds them with -sanitize=fuzzer.
if ProcessInfo.processInfo.environment["ROUSE_FUZZ"] != nil {
    let harnesses: [(String, [Target.Dependency])] = [
        ("SIPParserFuzz", ["SIPMessage", "SIPDifferential"]),
        ("SIPDifferentialFuzz", ["SIPDifferential", "SIPMessage"]),
        ("DigestFuzz", ["Registrar", "Crypto"]),
        ("PushParametersFuzz", ["Registrar", "SIPMessage"]),
        ("HTTPBodyFuzz", ["HTTPAPI", "HTTPServer", "Push", "Registrar", "Crypto"]),
    ]
    for (name, dependencies) in harnesses {
        targets.append(.executableTarget(name: name, dependencies: dependencies))
        products.append(.executable(name: name, targets: [name]))
    }
}

let package = Package(
    name: "Rouse",
    platforms: [.macOS(.v14)],
    products: products,
    targets: targets,
    swiftLanguageModes: [.v6]
)
