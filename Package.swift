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

    // Words every layer shares (push channels and token identity, wake results, flow endpoints,
    // IP prefix sets); no dependencies.
    .target(name: "RouseVocabulary"),

    // The SIP core: pure Swift, no I/O.
    .target(name: "SIPMessage"),
    .target(name: "SIPTransaction", dependencies: ["SIPMessage", "RouseVocabulary"]),
    // The datagram-versus-stream check shared by the differential fuzz harness and its replay test.
    .target(name: "SIPDifferential", dependencies: ["SIPMessage"]),
    // DNS for SIP: the message codec, RFC 3263 next-hop location, a stub resolver off the SIP loop.
    .target(name: "SIPDNS", dependencies: ["RouseVocabulary"]),
    // REGISTER, digest authentication, bindings and their push channels.
    .target(name: "Registrar", dependencies: ["SIPMessage", "Crypto", "RouseVocabulary"]),
    // Sockets, the event loop, flows and TLS.
    .target(name: "SIPTransport", dependencies: ["SIPMessage", "CLinuxShims", "COpenSSL", "RouseVocabulary"]),
    // Push apps, the APNs and FCM clients over HTTP/2, payloads and outcomes.
    .target(name: "Push", dependencies: ["Crypto", "CCurl", "RouseVocabulary"]),
    // RFC 3261 §16 in one place: request checks, Route popping, Record-Route flow tokens, branch
    // copies, CANCEL, the best response, the instance forward proof, answers about Rouse itself.
    .target(name: "SIPProxy", dependencies: ["SIPMessage", "SIPTransaction", "SIPTransport", "SIPDNS", "Crypto", "RouseVocabulary"]),
    // INVITE handling: the wake-then-ring coordinator, journeys.
    .target(name: "CallRouting", dependencies: ["SIPMessage", "SIPTransaction", "SIPProxy", "Registrar", "Push", "Metrics", "Crypto", "RouseLog", "RouseVocabulary", "SIPDNS"]),
    // The SIP service: sockets → transactions → the registrar, the call coordinator and SIPProxy's
    // steps; the coordinator's `CallSignaling` over real flows.
    .target(
        name: "SIPService",
        dependencies: ["SIPMessage", "SIPTransaction", "SIPTransport", "SIPProxy", "Registrar", "CallRouting", "Metrics", "Crypto", "RouseLog", "RouseVocabulary", "SIPDNS"]),
    // PostgreSQL.
    .target(name: "Storage", dependencies: ["CLibPQ", "Registrar", "Push", "CallRouting", "SIPProxy", "SIPMessage", "Crypto", "RouseVocabulary"]),
    // Counters, gauges and histograms in the Prometheus text format; no dependencies.
    .target(name: "Metrics"),
    // The value-type logger every layer takes, and the process's standard-error writer.
    .target(name: "RouseLog", dependencies: ["Crypto"]),
    // A generic HTTP/1.1 server on libmicrohttpd: requests, answers, the route table, middleware.
    .target(name: "HTTPServer", dependencies: ["CMicroHTTPD"]),
    // Rouse's HTTP API on it: the token posting endpoint, health, calls, the admin API and pages.
    .target(
        name: "HTTPAPI", dependencies: ["HTTPServer", "Registrar", "Storage", "Crypto", "Push", "Metrics", "CallRouting", "SIPProxy", "RouseVocabulary", "RouseLog"],
        resources: [.copy("openapi.json")]),
    // Configuration, wiring, start and stop.
    .target(
        name: "RouseServer",
        dependencies: ["SIPMessage", "SIPTransaction", "SIPTransport", "SIPService", "Registrar", "Storage", "Crypto", "CLinuxShims", "Push", "HTTPAPI", "HTTPServer", "Metrics", "CallRouting", "RouseLog", "RouseVocabulary", "SIPProxy", "SIPDNS"]),
    .executableTarget(name: "rouse", dependencies: ["RouseServer"]),

    // Tests and benchmarks.
    .target(
        name: "RouseTestSupport",
        dependencies: ["SIPMessage", "SIPTransaction", "Storage", "Registrar", "CLinuxShims", "COpenSSL", "Crypto", "SIPDNS"]),
    .executableTarget(
        name: "RouseBench",
        dependencies: ["SIPMessage", "SIPTransaction", "SIPTransport", "SIPService", "RouseServer", "RouseTestSupport", "Push", "RouseLog", "Crypto", "Storage", "RouseVocabulary", "Registrar"]),
    .testTarget(name: "RouseVocabularyTests", dependencies: ["RouseVocabulary"]),
    .testTarget(name: "SIPMessageTests", dependencies: ["SIPMessage", "SIPDifferential"]),
    .testTarget(name: "SIPProxyTests", dependencies: ["SIPProxy", "SIPMessage", "SIPTransaction", "SIPTransport", "SIPDNS", "Crypto", "RouseVocabulary"]),
    .testTarget(name: "SIPServiceTests", dependencies: ["SIPService", "SIPMessage", "SIPTransport", "RouseLog", "RouseTestSupport", "RouseVocabulary"]),
    .testTarget(name: "CallRoutingTests", dependencies: ["CallRouting", "SIPMessage", "SIPTransaction", "SIPProxy", "Registrar", "Push", "RouseVocabulary", "Crypto", "SIPDNS"]),
    .testTarget(name: "CryptoTests", dependencies: ["Crypto"]),
    .testTarget(name: "PushTests", dependencies: ["Push", "Crypto", "Registrar", "Storage", "RouseTestSupport", "RouseVocabulary", "SIPMessage"]),
    .testTarget(name: "RegistrarTests", dependencies: ["Registrar", "SIPMessage", "Crypto", "RouseVocabulary"]),
    .testTarget(name: "SIPTransactionTests", dependencies: ["SIPTransaction", "SIPMessage"]),
    .testTarget(
        name: "SIPTransportTests",
        dependencies: ["SIPTransport", "SIPMessage", "RouseTestSupport", "RouseVocabulary"]),
    .testTarget(name: "StorageTests", dependencies: ["Storage", "RouseTestSupport", "CallRouting", "Push", "Registrar", "SIPProxy", "SIPMessage", "RouseVocabulary", "Crypto"]),
    .testTarget(name: "HTTPServerTests", dependencies: ["HTTPServer", "RouseTestSupport"]),
    .testTarget(
        name: "HTTPAPITests", dependencies: ["HTTPAPI", "HTTPServer", "Registrar", "Storage", "RouseTestSupport", "Metrics", "CallRouting", "SIPProxy", "Push", "RouseVocabulary", "Crypto", "RouseLog"]),
    .testTarget(name: "MetricsTests", dependencies: ["Metrics"]),
    .testTarget(name: "RouseLogTests", dependencies: ["RouseLog"]),
    .testTarget(name: "SIPDNSTests", dependencies: ["SIPDNS", "RouseTestSupport"]),
    .testTarget(
        name: "RouseServerTests",
        dependencies: ["RouseServer", "SIPService", "SIPMessage", "SIPTransaction", "SIPTransport", "SIPProxy", "Registrar", "Storage", "Crypto", "RouseTestSupport", "CallRouting", "Push", "RouseLog", "RouseVocabulary"]),
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
        ("PushParametersFuzz", ["Registrar", "SIPMessage", "RouseVocabulary"]),
        ("HTTPBodyFuzz", ["HTTPAPI", "HTTPServer", "Push", "Registrar", "Crypto", "RouseVocabulary"]),
    ]
    for (name, dependencies) in harnesses {
        targets.append(.executableTarget(name: name, dependencies: dependencies))
        products.append(.executable(name: name, targets: [name]))
    }
}

// Every import is declared, and internal unless a public declaration needs it (SE-0409, SE-0444):
// a module's own API says which modules it exposes. Release builds optimise across modules (a
// generic of one layer used from another is specialised there: issue 21's call setup); the fuzz
// harnesses' builds (ROUSE_FUZZ, -sanitize=fuzzer) are left as they were.
let crossModule: [SwiftSetting] = ProcessInfo.processInfo.environment["ROUSE_FUZZ"] == nil
    ? [.unsafeFlags(["-cross-module-optimization"], .when(configuration: .release))] : []
for index in targets.indices where targets[index].type != .system {
    targets[index].swiftSettings = (targets[index].swiftSettings ?? []) + [
        .enableUpcomingFeature("InternalImportsByDefault"), .enableUpcomingFeature("MemberImportVisibility"),
    ] + crossModule
}

let package = Package(
    name: "Rouse",
    platforms: [.macOS(.v14)],
    products: products,
    targets: targets,
    swiftLanguageModes: [.v6]
)
