import CallRouting
import Crypto
import Foundation
import Push
import Registrar
import RouseVocabulary
import SIPDNS
import SIPProxy
import SIPMessage
import SIPTransaction
import XCTest

/// The coordinator's logic with in-memory doubles around it: a transaction layer whose "network"
/// is an array, a directory in memory, a pusher that answers at once, a journey store that keeps
/// what it is given. Runs under ThreadSanitizer in `make test` (the coordinator's queue, push
/// tasks and branch callbacks all meet here).
final class CallCoordinatorTests: XCTestCase {
    let callee = AddressOfRecord(number: "1002", domain: "example.com")
    let voip = PushChannel(provider: .apns, token: String(repeating: "ab", count: 32), param: nil, kind: .voip)

    func testDeskPhoneOnlyRingsAtOnceAndItsAnswerGoesToTheCaller() throws {
        let harness = Harness(bindings: [desk()])
        harness.placeCall()
        let invite = try harness.waitForBranch()
        XCTAssertEqual(invite.request.uri.user, "desk")
        invite.respond(180)
        invite.respond(200)
        let answer = try harness.waitForCallerResponse { $0 >= 200 }
        XCTAssertEqual(answer.statusCode, 200)
        let journey = try harness.waitForJourney()
        XCTAssertEqual(journey.outcome, .answered)
        XCTAssertTrue(journey.pushes.isEmpty)
        XCTAssertEqual(journey.branches.first?.responses.map(\.status), [180, 200])
    }

    func testAppOnlyThatNeverComesBackGets480WithTheReason() throws {
        let harness = Harness(bindings: [app()], settings: CallSettings(wakeWait: .milliseconds(200)))
        harness.placeCall()
        XCTAssertEqual(try harness.waitForCallerResponse { $0 == 180 }.statusCode, 180)
        let final = try harness.waitForCallerResponse { $0 >= 200 }
        XCTAssertEqual(final.statusCode, 480)
        XCTAssertEqual(final.headers[.reason], "SIP;cause=480;text=\"no device woke in time\"")
        let journey = try harness.waitForJourney()
        XCTAssertEqual(journey.pushes.count, 1)
        XCTAssertEqual(journey.pushes.first?.wake, .notInTime)
        XCTAssertEqual(harness.pusher.rings.count, 1)
    }

    func testWokenAppEndsTheWaitAndAnswers() throws {
        let sleeping = app()
        let harness = Harness(bindings: [sleeping], settings: CallSettings(wakeWait: .seconds(30)))
        harness.placeCall()
        try harness.waitUntil { harness.pusher.rings.count == 1 }
        let woken = wakeUp(sleeping, in: harness)
        let invite = try harness.waitForBranch()
        XCTAssertEqual(invite.bindingID, woken.id)
        invite.respond(200)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 200)
        let journey = try harness.waitForJourney()
        guard case .woke = journey.pushes.first?.wake else { return XCTFail("\(String(describing: journey.pushes.first?.wake))") }
        XCTAssertEqual(harness.journeys.wakes.count, 1)
    }

    func testCallerCancelStopsEveryBranchAndPushesTheCancel() throws {
        let fcm = PushChannel(provider: .fcm, token: "fcm-1", param: "p", kind: .standard)
        var android = app()
        android.pushChannels = [fcm]
        let harness = Harness(bindings: [desk(), android], settings: CallSettings(wakeWait: .seconds(30), wakeWaitWithDeskPhone: .milliseconds(100)))
        harness.placeCall()
        let invite = try harness.waitForBranch()
        invite.respond(180)
        harness.coordinator.handleCancel(of: harness.serverHandle!, callID: harness.callID, reason: nil)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 487)
        try harness.waitUntil { harness.signaling.cancels.count == 1 }
        try harness.waitUntil { harness.pusher.cancels.count == 1 }
        XCTAssertEqual(harness.pusher.cancels.first?.reason, "caller_hangup")
        let journey = try harness.waitForJourney()
        XCTAssertEqual(journey.outcome, .canceled)
        XCTAssertEqual(journey.branches.first?.canceledBecause?.hasPrefix("caller hung up"), true)
    }

    func testA2xxThatCrossedTheCallersCancelIsStillRelayed() throws {
        let harness = Harness(bindings: [desk()])
        harness.placeCall()
        let invite = try harness.waitForBranch()
        invite.respond(180)
        harness.coordinator.handleCancel(of: harness.serverHandle!, callID: harness.callID, reason: nil)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 487)
        invite.respond(200)
        try harness.waitUntil { harness.signaling.late2xx.count == 1 }
        XCTAssertEqual(harness.signaling.late2xx.first?.statusCode, 200)
        XCTAssertEqual(harness.signaling.late2xx.first?.vias.count, 1, "Rouse's own Via is gone")
    }

    func testAPushAnsweredAfterTheCallEndedStillJoinsTheJourneyAndSurvivesTheBye() throws {
        let harness = Harness(bindings: [desk(), app()], settings: CallSettings(wakeWait: .seconds(30), wakeWaitWithDeskPhone: .milliseconds(50)))
        harness.pusher.holdRings()
        harness.placeCall()
        try harness.waitUntil { harness.pusher.heldRingCount == 1 }
        let invite = try harness.waitForBranch()
        invite.respond(200)
        XCTAssertEqual(try harness.waitForCallerResponse { $0 >= 200 }.statusCode, 200)
        harness.pusher.releaseRings()
        try harness.waitUntil { harness.journeys.calls.last?.pushes.count == 1 }
        harness.coordinator.dialogEnded(callID: try XCTUnwrap(invite.request.callID), fromCallee: false)
        try harness.waitUntil { harness.journeys.calls.last?.endedAt != nil }
        let journey = try XCTUnwrap(harness.journeys.calls.last)
        XCTAssertEqual(journey.pushes.count, 1, "the late push is kept by the BYE's rewrite")
        XCTAssertTrue(journey.events.contains { $0.text.hasPrefix("the caller hung up") })
    }

    // MARK: - Doubles

    /// The app of `sleeping` registers again over a new connection, and the coordinator is told.
    func wakeUp(_ sleeping: Binding, in harness: Harness) -> Binding {
        var woken = sleeping
        woken.id = UUID()
        woken.registeredAt = Date()
        woken.flow.connectionID = FlowConnectionID("tcp#2")
        harness.directory.set([woken])
        harness.coordinator.bindingsChanged(callee)
        return woken
    }

    func desk() -> Binding {
        Binding(
            aor: callee, contact: "sip:desk@192.0.2.5:5060", callID: "d", cseq: 1, registeredAt: Date(), expiresAt: Date().addingTimeInterval(600),
            userAgent: "Desk", flow: BindingFlow(transport: .udp, source: SocketAddress(parsing: "192.0.2.5:5060"), connectionID: FlowConnectionID("udp#0"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "i"))
    }

    func app() -> Binding {
        Binding(
            aor: callee, contact: "sip:app@192.0.2.6:5060;transport=tcp", instance: "<urn:uuid:1>", callID: "a", cseq: 1,
            registeredAt: Date().addingTimeInterval(-60), expiresAt: Date().addingTimeInterval(600), userAgent: "App",
            flow: BindingFlow(transport: .tcp, source: SocketAddress(parsing: "192.0.2.6:40000"), connectionID: FlowConnectionID("tcp#1"), local: SocketAddress(parsing: "127.0.0.1:5060"), instanceID: "i"),
            pushChannels: [voip])
    }
}

/// Everything around one coordinator. The SIP side is a real `TransactionLayer` whose sends land in
/// arrays; timers run on a Dispatch queue.
final class Harness: @unchecked Sendable {
    // @unchecked: the arrays are only touched under `lock`; the rest is set in init.
    let lock = NSLock()
    let directory = MemoryDirectory()
    let pusher = MemoryPusher()
    let journeys = MemoryJourneys()
    let signaling: FakeSignaling
    let coordinator: CallCoordinator<FakeSignaling>
    let transactions: TransactionLayer<Int>
    private var callerResponses: [SIPResponse] = []
    private var handle: ServerTransactionHandle?
    private var lastCallID: String?

    /// The call timers and the coordinator's clock when the harness was made with `manualClock`:
    /// time moves only by `advance(by:)`.
    let clock: ManualTimerScheduler?

    init(
        bindings: [Binding], settings: CallSettings = CallSettings(), callTokens: CallTokenSigner? = nil, tokens: (any WakeTokenSource)? = nil,
        manualClock: Bool = false, liveness: (any DeviceLiveness)? = nil, wakeCredentials: WakeCredentialMinting? = nil, shards: Int = 1
    ) {
        directory.set(bindings)
        let clock = manualClock ? ManualTimerScheduler() : nil
        self.clock = clock
        let startedAt = Date()
        let box = Box()
        transactions = TransactionLayer<Int>(
            timers: TransactionTimers(), scheduler: DispatchTimerScheduler(queue: DispatchQueue(label: "test.timers")),
            send: { bytes, _ in if let message = try? SIPParser.parse(bytes) { box.harness?.sent(message) } },
            core: { event in box.harness?.core(event) })
        signaling = FakeSignaling(transactions: transactions)
        coordinator = CallCoordinator<FakeSignaling>(
            directory: directory, tokens: tokens, pusher: pusher, journeys: journeys,
            authenticator: DigestAuthenticator(secret: Array("secret".utf8), nonceLifetime: 300),
            settings: CallSettings(
                wakeWait: settings.wakeWait, wakeWaitWithDeskPhone: settings.wakeWaitWithDeskPhone, ringTimeout: settings.ringTimeout,
                cancelGrace: settings.cancelGrace, trustedPeers: try! TrustedPeers(parsing: ["192.0.2.1"]),
                tokenReadTimeout: settings.tokenReadTimeout, endedCallKeep: settings.endedCallKeep, maxCallDuration: settings.maxCallDuration,
                deadTokenMemory: settings.deadTokenMemory, timerC: settings.timerC),
            ownNames: ["127.0.0.1"], serverName: "Rouse/test", instanceID: "test-instance", callTokens: callTokens,
            wakeCredentials: wakeCredentials, scheduler: clock,
            clock: { clock.map { startedAt.addingTimeInterval($0.now.timeInterval) } ?? Date() }, liveness: liveness, shards: shards)
        coordinator.attach(signaling)
        box.harness = self
    }

    var serverHandle: ServerTransactionHandle? { lock.withLock { handle } }
    /// The Call-ID of the INVITE last handed to the coordinator (what its CANCEL carries).
    var callID: String? { lock.withLock { lastCallID } }

    /// What the caller has been sent so far (above 100 Trying).
    var responsesToCaller: [SIPResponse] { lock.withLock { callerResponses } }

    /// Moves the manual clock on by `duration` (the timers due fire) and waits for the call queue
    /// to handle what they started.
    func advance(by duration: Duration) {
        coordinator.drain()
        clock?.advance(by: duration)
        coordinator.drain()
    }

    func placeCall(callID: String = UUID().uuidString) {
        let text = "INVITE sip:1002@example.com SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKcall\(UUID().uuidString)\r\n"
            + "Max-Forwards: 70\r\nFrom: \"Alice\" <sip:1001@example.com>;tag=a\r\nTo: <sip:1002@example.com>\r\n"
            + "Call-ID: \(callID)\r\nCSeq: 1 INVITE\r\nContact: <sip:1001@192.0.2.1>\r\nContent-Length: 0\r\n\r\n"
        guard case .request(let invite) = try? SIPParser.parse(Array(text.utf8)) else { return XCTFail("bad INVITE") }
        transactions.receive(.request(invite), from: 0, isReliable: true)
    }

    func core(_ event: TransactionLayerEvent<Int>) {
        if case .request(let request, let handle, let flow) = event, request.method == .invite {
            lock.withLock {
                self.handle = handle
                lastCallID = request.callID
            }
            coordinator.handleInvite(request, handle: handle, callerFlow: flow, sourceIP: "192.0.2.1", transport: "udp")
        }
    }

    func sent(_ message: SIPMessage) {
        if case .response(let response) = message, response.statusCode > 100 {
            lock.withLock { callerResponses.append(response) }
        }
    }

    func waitUntil(timeout: TimeInterval = 10, _ condition: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if condition() { return }
            Thread.sleep(forTimeInterval: 0.005)
        }
        throw Timeout()
    }

    func waitForCallerResponse(_ matching: @escaping (Int) -> Bool) throws -> SIPResponse {
        var found: SIPResponse?
        try waitUntil {
            found = lock.withLock { callerResponses.first { matching($0.statusCode) } }
            return found != nil
        }
        return found!
    }

    func waitForBranch() throws -> FakeSignaling.SentInvite {
        var found: FakeSignaling.SentInvite?
        try waitUntil {
            found = signaling.invites.first
            return found != nil
        }
        return found!
    }

    func waitForJourney() throws -> CallJourney {
        var found: CallJourney?
        try waitUntil {
            found = journeys.calls.last
            return found != nil
        }
        return found!
    }

    struct Timeout: Error {}

    final class Box: @unchecked Sendable {
        // @unchecked: set once, before the first message.
        weak var harness: Harness?
    }
}

/// The SIP side as the coordinator sees it; every "device" is reached over flow 1.
final class FakeSignaling: CallSignaling, @unchecked Sendable {
    // @unchecked: `sentInvites` and `sentCancels` are only touched under `lock`.
    typealias Flow = Int

    struct SentInvite {
        let request: SIPRequest
        let bindingID: UUID
        let onResponse: @Sendable (ClientTransactionEvent) -> Void

        func respond(_ status: Int) {
            var response = SIPResponse(replyingTo: request, statusCode: status, toTag: "phone")
            response.headers.set(.via, request.headers.lines(.via).joined(separator: ", "))
            onResponse(.response(response))
        }
    }

    let transactions: TransactionLayer<Int>
    private let lock = NSLock()
    private var sentInvites: [SentInvite] = []
    private var sentCancels: [SIPRequest] = []
    private var lateResponses: [SIPResponse] = []

    init(transactions: TransactionLayer<Int>) {
        self.transactions = transactions
    }

    var invites: [SentInvite] { lock.withLock { sentInvites } }
    var cancels: [SIPRequest] { lock.withLock { sentCancels } }

    func respond(_ response: SIPResponse, to handle: ServerTransactionHandle) {
        transactions.respond(response, to: handle)
    }

    func relay2xx(_ response: SIPResponse, to handle: ServerTransactionHandle, callerFlow: Int) {
        if !transactions.respond(response, to: handle) {
            lock.withLock { lateResponses.append(response) }
        }
    }

    var late2xx: [SIPResponse] { lock.withLock { lateResponses } }

    /// The request as the SIP side sends it: with a Via of Rouse's on top.
    static func withRousesVia(_ request: SIPRequest) -> SIPRequest {
        var outgoing = request
        outgoing.headers.prepend(.via, "SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK\(UUID().uuidString)")
        return outgoing
    }

    func reach(_ binding: Binding) -> BindingReach {
        binding.flow.transport == .udp ? .datagram : (binding.flow.connectionID.name == "tcp#1" ? .gone : .connected)
    }

    func sendInvite(
        _ request: SIPRequest, to binding: Binding, callerFlow: Int, sent: @escaping @Sendable (SentRequest<Int>?) -> Void,
        onResponse: @escaping @Sendable (ClientTransactionEvent) -> Void
    ) {
        let outgoing = Self.withRousesVia(request)
        let send = { @Sendable [self] in
            lock.withLock { sentInvites.append(SentInvite(request: outgoing, bindingID: binding.id, onResponse: onResponse)) }
            sent(SentRequest(outgoing, over: 1))
        }
        let held = lock.withLock { () -> Bool in
            guard holdingRemote, binding.flow.instanceID != "i" else { return false }
            heldSends.append(send)
            return true
        }
        if !held { send() }
    }

    private var holdingRemote = false
    private var heldSends: [@Sendable () -> Void] = []

    /// From now on a send to a binding held by another instance waits for `releaseSends`, as
    /// while a connection to that instance is set up.
    func holdSendsToOtherInstances() { lock.withLock { holdingRemote = true } }
    var heldSendCount: Int { lock.withLock { heldSends.count } }

    /// The held sends go out now, from another thread.
    func releaseSends() {
        let held = lock.withLock { () -> [@Sendable () -> Void] in
            holdingRemote = false
            defer { heldSends = [] }
            return heldSends
        }
        DispatchQueue.global().async { held.forEach { $0() } }
    }

    func sendCancel(_ cancel: SIPRequest, over flow: Int) {
        lock.withLock { sentCancels.append(cancel) }
    }

    /// What each route hop resolves to (by its text); nothing for any other.
    var resolutions: [String: [ResolvedHop]] {
        get { lock.withLock { storedResolutions } }
        set { lock.withLock { storedResolutions = newValue } }
    }
    private var storedResolutions: [String: [ResolvedHop]] = [:]
    private var sentOutside: [(request: SIPRequest, hop: ResolvedHop, onResponse: @Sendable (ClientTransactionEvent) -> Void)] = []

    /// The outside INVITEs sent, in order.
    var outsideInvites: [(request: SIPRequest, hop: ResolvedHop, onResponse: @Sendable (ClientTransactionEvent) -> Void)] {
        lock.withLock { sentOutside }
    }

    func resolve(_ hop: RouteHop, completion: @escaping @Sendable ([ResolvedHop]) -> Void) {
        let found = resolutions[hop.description] ?? []
        DispatchQueue.global().async { completion(found) }
    }

    func sendOutside(
        _ request: SIPRequest, to hop: ResolvedHop, callerFlow: Int, sent: @escaping @Sendable (SentRequest<Int>?) -> Void,
        onResponse: @escaping @Sendable (ClientTransactionEvent) -> Void
    ) {
        let outgoing = Self.withRousesVia(request)
        lock.withLock { sentOutside.append((outgoing, hop, onResponse)) }
        sent(SentRequest(outgoing, over: 2))
    }
}

final class MemoryDirectory: CalleeDirectory, @unchecked Sendable {
    // @unchecked: `stored` is only touched under `lock`.
    private let lock = NSLock()
    private var stored: [Binding] = []
    private var others: [AddressOfRecord] = []
    private var diversions: [AddressOfRecord: DiversionRules] = [:]

    func set(_ bindings: [Binding]) { lock.withLock { stored = bindings } }

    /// More extensions besides 1002, and the call forwarding of any.
    func set(extensions: [AddressOfRecord], diversions: [AddressOfRecord: DiversionRules]) {
        lock.withLock {
            others = extensions
            self.diversions = diversions
        }
    }

    func directorySnapshot() -> DirectorySnapshot {
        let aor = AddressOfRecord(number: "1002", domain: "example.com")
        return lock.withLock {
            let all = [aor] + others
            return DirectorySnapshot(
                domains: ["example.com"], extensions: Dictionary(uniqueKeysWithValues: all.map { ($0, ExtensionCredentials(aor: $0, password: "pw")) }),
                diversions: diversions)
        }
    }

    func bindings(for aor: AddressOfRecord) -> [Binding] { lock.withLock { stored.filter { $0.aor == aor } } }
}

final class MemoryPusher: CallPushing, @unchecked Sendable {
    // @unchecked: the arrays are only touched under `lock`.
    private let lock = NSLock()
    private var sentRings: [PushChannel] = []
    private var sentCancels: [(channel: PushChannel, reason: String)] = []
    private var sentMissed: [(channel: PushChannel, reason: String)] = []
    private var sentEnded: [(channel: PushChannel, reason: String)] = []
    private var ringContents: [CallPushContent] = []

    var rings: [PushChannel] { lock.withLock { sentRings } }
    var cancels: [(channel: PushChannel, reason: String)] { lock.withLock { sentCancels } }
    var missedNotices: [(channel: PushChannel, reason: String)] { lock.withLock { sentMissed } }
    var endedPushes: [(channel: PushChannel, reason: String)] { lock.withLock { sentEnded } }
    private var holding = false
    private var heldRings: [CheckedContinuation<Void, Never>] = []

    private var deadTokens: Set<String> = []

    /// From now on the provider answers ring pushes to `token` 410 Unregistered (a dead token).
    func refuseAsDead(_ token: String) { lock.withLock { _ = deadTokens.insert(token) } }

    /// From now on ring pushes get no answer until `releaseRings` (a stalled provider).
    func holdRings() { lock.withLock { holding = true } }
    var heldRingCount: Int { lock.withLock { heldRings.count } }

    func releaseRings() {
        let held = lock.withLock { () -> [CheckedContinuation<Void, Never>] in
            holding = false
            defer { heldRings = [] }
            return heldRings
        }
        held.forEach { $0.resume() }
    }
    /// What each ring push carried (its call token, among others), in order.
    var ringPayloads: [CallPushContent] { lock.withLock { ringContents } }

    func ring(_ call: CallPushContent, to channel: PushChannel, expiresAt: Date, aor: String) async -> (PushOutcome, Int64?) {
        lock.withLock {
            sentRings.append(channel)
            ringContents.append(call)
        }
        if lock.withLock({ holding }) {
            await withCheckedContinuation { continuation in
                let heldNow = lock.withLock { () -> Bool in
                    guard holding else { return false }
                    heldRings.append(continuation)
                    return true
                }
                if !heldNow { continuation.resume() }
            }
        }
        if lock.withLock({ deadTokens.contains(channel.token) }) {
            return (PushOutcome(result: .refused(status: 410, reason: "Unregistered", explanation: "the token is no longer valid"),
                                latency: .milliseconds(3), isDeadToken: true), 1)
        }
        return (PushOutcome(result: .accepted(providerID: nil), latency: .milliseconds(3)), 1)
    }

    func cancel(_ call: CallPushContent, reason: String, to channel: PushChannel, expiresAt: Date, aor: String) async -> PushOutcome {
        lock.withLock { sentCancels.append((channel, reason)) }
        return PushOutcome(result: .accepted(providerID: nil), latency: .milliseconds(3))
    }

    func ended(_ call: CallPushContent, reason: String, to channel: PushChannel, expiresAt: Date, aor: String) async -> PushOutcome {
        lock.withLock { sentEnded.append((channel, reason)) }
        return PushOutcome(result: .accepted(providerID: nil), latency: .milliseconds(3))
    }

    func missed(_ call: CallPushContent, reason: String, to channel: PushChannel, aor: String) async -> PushOutcome {
        lock.withLock { sentMissed.append((channel, reason)) }
        return PushOutcome(result: .accepted(providerID: nil), latency: .milliseconds(3))
    }
}

final class MemoryJourneys: JourneyStore, @unchecked Sendable {
    // @unchecked: the arrays are only touched under `lock`.
    private let lock = NSLock()
    private var recorded: [CallJourney] = []
    private var recordedWakes: [(UUID, WakeResult)] = []

    var calls: [CallJourney] { lock.withLock { recorded } }
    var wakes: [(UUID, WakeResult)] { lock.withLock { recordedWakes } }

    func recordPush(_ push: JourneyPush, of journey: CallJourney) {}
    func recordWake(pushID: UUID, _ result: WakeResult) { lock.withLock { recordedWakes.append((pushID, result)) } }
    func recordCall(_ journey: CallJourney) { lock.withLock { recorded.append(journey) } }
}

/// Posted tokens from a database that does not answer (partitioned): every read waits until
/// `release`, then finds nothing.
final class StalledTokens: WakeTokenSource, @unchecked Sendable {
    // @unchecked: `waiting` and `released` are only touched under `lock`.
    private let lock = NSLock()
    private var waiting: [CheckedContinuation<Void, Never>] = []
    private var released = false

    var stalledReads: Int { lock.withLock { waiting.count } }

    func wakeTokens(for aor: AddressOfRecord, checking tokens: [PushChannel]) async throws -> (posted: [PostedToken], dead: Set<PushTokenID>) {
        await withCheckedContinuation { continuation in
            let held = lock.withLock { () -> Bool in
                guard !released else { return false }
                waiting.append(continuation)
                return true
            }
            if !held { continuation.resume() }
        }
        return ([], [])
    }

    /// Lets every read waiting now, and every later one, answer.
    func release() {
        let held = lock.withLock { () -> [CheckedContinuation<Void, Never>] in
            released = true
            defer { waiting = [] }
            return waiting
        }
        held.forEach { $0.resume() }
    }
}
