import CallRouting
import Foundation
import Push
import Registrar
import RouseVocabulary
import XCTest

/// Binding-refresh pushes (RFC 8599 §5.5, issue 11) with a manual clock: which bindings fall due,
/// which channel each push takes (never VoIP), once per registration, and a per-token limit.
final class BindingRefresherTests: XCTestCase {
    let aor = AddressOfRecord(number: "1002", domain: "example.com")
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func binding(expiresIn seconds: TimeInterval, channels: [PushChannel], refreshesItself: Bool = false) -> Binding {
        Binding(
            aor: aor, contact: "sip:app@192.0.2.6:5060;transport=tcp", callID: UUID().uuidString, cseq: 1,
            registeredAt: now.addingTimeInterval(-600), expiresAt: now.addingTimeInterval(seconds),
            flow: BindingFlow(transport: .tcp, source: SocketAddress(parsing: "192.0.2.6:40000"), connectionID: FlowConnectionID("tcp#1"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "i"),
            pushChannels: channels, refreshesItself: refreshesItself)
    }

    let fcm = PushChannel(provider: .fcm, token: "fcm-1", param: "p", kind: .standard)
    let voip = PushChannel(provider: .apns, token: String(repeating: "aa", count: 32), param: nil, kind: .voip)
    let remote = PushChannel(provider: .apns, token: String(repeating: "bb", count: 32), param: nil, kind: .remote)

    func testDueBindingsGetOnePushOnTheirVisibleChannelAndNeverVoIP() throws {
        let due = binding(expiresIn: 100, channels: [fcm])
        let iPhone = binding(expiresIn: 110, channels: [voip, remote])
        let voipOnly = binding(expiresIn: 110, channels: [voip])
        let selfRefreshing = binding(expiresIn: 100, channels: [PushChannel(provider: .fcm, token: "fcm-2", param: "p", kind: .standard)], refreshesItself: true)
        let notYet = binding(expiresIn: 500, channels: [PushChannel(provider: .fcm, token: "fcm-3", param: "p", kind: .standard)])
        let source = MemoryCandidates([due, iPhone, voipOnly, selfRefreshing, notYet])
        let pusher = MemoryRefreshPusher()
        let refresher = BindingRefresher(source: source, claims: MemoryClaims(), pusher: pusher, lead: 120)

        let pushes = try run(refresher, at: now)
        XCTAssertEqual(Set(pushes.map(\.bindingID)), [due.id, iPhone.id])
        XCTAssertEqual(Set(pusher.sent.map(\.channel)), [fcm, remote], "FCM as it is; the iPhone's regular token, not its VoIP one")
        XCTAssertEqual(Set(pusher.sent.map(\.expiresAt)), [due.expiresAt, iPhone.expiresAt])

        // The same registrations are not pushed again, however often the scan comes by.
        XCTAssertTrue(try run(refresher, at: now.addingTimeInterval(70)).isEmpty)
        XCTAssertEqual(pusher.sent.count, 2)
    }

    func testTheTwoFlowsOfOneDeviceGetOnePush() throws {
        // RFC 5626: reg-id 1 and 2 of one app, both carrying its token, both due.
        let first = binding(expiresIn: 100, channels: [fcm])
        let second = binding(expiresIn: 105, channels: [fcm])
        let pusher = MemoryRefreshPusher()
        let refresher = BindingRefresher(source: MemoryCandidates([first, second]), claims: MemoryClaims(), pusher: pusher, lead: 120)
        XCTAssertEqual(try run(refresher, at: now).count, 1)
        XCTAssertEqual(pusher.sent.map(\.channel), [fcm])
    }

    func testALeadUnder120SecondsIsRaisedAndAFreshRegistrationCanBePushedAgainButNotAtOnce() throws {
        var app = binding(expiresIn: 110, channels: [fcm])
        let source = MemoryCandidates([app])
        let pusher = MemoryRefreshPusher()
        let claims = MemoryClaims()
        let refresher = BindingRefresher(source: source, claims: claims, pusher: pusher, lead: 30, minimumInterval: 60)
        XCTAssertEqual(refresher.lead, 120)
        XCTAssertEqual(try run(refresher, at: now).count, 1)

        // The app registered again (a new registration), briefly: due again, but the token was
        // pushed 10 s ago, so the per-token limit holds it back until a minute has passed.
        app.registeredAt = now.addingTimeInterval(5)
        app.expiresAt = now.addingTimeInterval(125)
        source.set([app])
        claims.reset(app.id)
        XCTAssertTrue(try run(refresher, at: now.addingTimeInterval(10)).isEmpty)
        XCTAssertEqual(try run(refresher, at: now.addingTimeInterval(61)).count, 1)
        XCTAssertEqual(pusher.sent.count, 2)
    }

    func testAnExpiredBindingAndAClaimTakenElsewhereAreNotPushed() throws {
        let expired = binding(expiresIn: -1, channels: [fcm])
        let claimedElsewhere = binding(expiresIn: 100, channels: [PushChannel(provider: .fcm, token: "fcm-9", param: "p", kind: .standard)])
        let claims = MemoryClaims()
        claims.takenElsewhere.insert(claimedElsewhere.id)
        let pusher = MemoryRefreshPusher()
        let refresher = BindingRefresher(source: MemoryCandidates([expired, claimedElsewhere]), claims: claims, pusher: pusher, lead: 120)
        XCTAssertTrue(try run(refresher, at: now).isEmpty)
        XCTAssertTrue(pusher.sent.isEmpty)
    }
}

/// The refresher with the registrar itself as its source, which hands each registration out once
/// (from its queue keyed by expiry): what the per-token limit holds back is still pushed later.
final class BindingRefresherRegistrarTests: XCTestCase {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func testARegistrationHeldBackByTheTokenLimitIsPushedOnceTheLimitHasPassed() throws {
        let aor = AddressOfRecord(number: "1002", domain: "example.com")
        let fcm = PushChannel(provider: .fcm, token: "fcm-1", param: "p", kind: .standard)
        func flow(_ regID: Int) -> Binding {
            Binding(
                aor: aor, contact: "sip:app@192.0.2.6:5060;transport=tcp", instance: "<urn:uuid:app>", regID: regID, callID: "c", cseq: 1,
                registeredAt: now, expiresAt: now.addingTimeInterval(100 + Double(regID)),
                flow: BindingFlow(transport: .tcp, source: SocketAddress(parsing: "192.0.2.6:4000\(regID)"), connectionID: FlowConnectionID("tcp#\(regID)"), local: nil, instanceID: "i"),
                pushChannels: [fcm])
        }
        let store = InMemoryLocationStore()
        store.apply([.save(flow(1)), .save(flow(2))]) { _ in }
        let directory = DirectorySnapshot(domains: ["example.com"])
        let core = RegistrarCore(
            policy: RegistrationPolicy(), directory: directory, supportedPushProviders: [.fcm],
            authenticator: DigestAuthenticator(secret: Array("s".utf8), nonceLifetime: 300), serverName: "Rouse/test")
        let start = now
        let registrar = Registrar(core: core, store: store, clock: { start })
        try registrar.loadBindings()
        let pusher = MemoryRefreshPusher()
        let refresher = BindingRefresher(source: registrar, claims: MemoryClaims(), pusher: pusher, lead: 120, minimumInterval: 60)

        // Both flows of the device are due; one push wakes it, the other flow waits for the limit.
        XCTAssertEqual(try run(refresher, at: now).count, 1)
        XCTAssertTrue(try run(refresher, at: now.addingTimeInterval(30)).isEmpty)
        let later = try run(refresher, at: now.addingTimeInterval(61))
        XCTAssertEqual(later.count, 1, "the held-back flow, though the registrar handed it out only once")
        XCTAssertEqual(Set(pusher.sent.map(\.expiresAt)), [now.addingTimeInterval(101), now.addingTimeInterval(102)])
        XCTAssertTrue(try run(refresher, at: now.addingTimeInterval(95)).isEmpty, "nothing is left to push")
    }
}

extension XCTestCase {
    /// Runs one refresh tick at `time` and waits for its pushes.
    fileprivate func run(_ refresher: BindingRefresher, at time: Date) throws -> [BindingRefreshPush] {
        let done = expectation(description: "tick")
        let box = Pushes()
        refresher.tick(now: time) { pushes in
            box.set(pushes)
            done.fulfill()
        }
        wait(for: [done], timeout: 10)
        return box.value
    }
}

final class MemoryCandidates: RefreshCandidateSource, @unchecked Sendable {
    // @unchecked: `bindings` is only touched under `lock`.
    private let lock = NSLock()
    private var bindings: [Binding]

    init(_ bindings: [Binding]) { self.bindings = bindings }

    func set(_ bindings: [Binding]) { lock.withLock { self.bindings = bindings } }

    func pushBindings(expiringBefore deadline: Date, completion: @escaping @Sendable ([Binding]) -> Void) {
        completion(lock.withLock { bindings.filter { !$0.pushChannels.isEmpty && $0.expiresAt <= deadline } })
    }
}

/// Claims as PostgreSQL makes them: once per binding until it registers again (`reset`).
final class MemoryClaims: RefreshClaims, @unchecked Sendable {
    // @unchecked: the sets are only touched under `lock`.
    private let lock = NSLock()
    private var claimed: Set<UUID> = []
    var takenElsewhere: Set<UUID> = []

    func claim(bindingID: UUID) async throws -> Bool {
        lock.withLock { !takenElsewhere.contains(bindingID) && claimed.insert(bindingID).inserted }
    }

    func reset(_ id: UUID) { lock.withLock { _ = claimed.remove(id) } }
}

final class MemoryRefreshPusher: BindingRefreshPushing, @unchecked Sendable {
    // @unchecked: `pushes` is only touched under `lock`.
    private let lock = NSLock()
    private var pushes: [(channel: PushChannel, expiresAt: Date)] = []

    var sent: [(channel: PushChannel, expiresAt: Date)] { lock.withLock { pushes } }

    func sendBindingRefresh(aor: String, expiresAt: Date, to channel: PushChannel) async -> PushOutcome {
        lock.withLock { pushes.append((channel, expiresAt)) }
        return PushOutcome(result: .accepted(providerID: nil), latency: .milliseconds(2))
    }
}

final class Pushes: @unchecked Sendable {
    // @unchecked: `pushes` is only touched under `lock`.
    private let lock = NSLock()
    private var pushes: [BindingRefreshPush] = []

    func set(_ value: [BindingRefreshPush]) { lock.withLock { pushes = value } }
    var value: [BindingRefreshPush] { lock.withLock { pushes } }
}
