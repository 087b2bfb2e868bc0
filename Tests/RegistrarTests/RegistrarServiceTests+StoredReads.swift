import Foundation
import Registrar
import SIPMessage
import XCTest

/// Bindings read back from the store (another instance's changes, through the replica) never drop
/// a binding whose REGISTER is still being written, nor one written after the read began.
extension RegistrarServiceTests {
    func testAStoredReadThatPredatesALocalWriteKeepsItsBindingAndIsReadAgain() throws {
        let store = SlowLocationStore()
        let registrar = Registrar(core: F().core, store: store, clock: { F.start })
        let challenge = try exchange(registrar, F.register())
        let authorization = F.answer(challenge.headers.lines(.wwwAuthenticate)[0], password: "alice-secret")
        // A read of the store begins (it will find no binding of alice)…
        let readBegan = registrar.localWriteMark()
        // …then alice registers; her write is still out when the read's result arrives.
        let answers = ResponsesBox()
        registrar.handleRegister(try F.parse(F.register(cseq: 2, authorization: authorization)), flow: F.flow()) { answers.append($0) }
        try wait("the write is out") { store.heldCount == 1 }
        registrar.applyStored([F.alice: []], everything: false, since: readBegan)
        XCTAssertEqual(registrar.bindings(for: F.alice).count, 1, "a binding whose write is out stays")

        store.answerAll()
        try wait("the REGISTER is answered") { answers.count == 1 }
        XCTAssertEqual(answers.statuses, [200])
        try wait("alice's bindings are read again once her write is answered") { store.loadCount == 1 }
        XCTAssertEqual(registrar.bindings(for: F.alice).count, 1)

        // The same stale result arriving late (its read began before the write) is not taken
        // either: the extension is read again instead.
        let stale = ReplacedBox()
        registrar.applyStored([F.alice: []], everything: true, since: readBegan) { stale.set($0) }
        try wait("the stale read is answered") { stale.value != nil }
        XCTAssertEqual(stale.value, [])
        try wait("read again") { store.loadCount == 2 }
        XCTAssertEqual(registrar.bindings(for: F.alice).count, 1)

        // A read begun after the write is the truth: another instance removed the binding (from
        // the store too, so the re-read above, whose result may land after this one, agrees).
        try store.removeEverything(of: F.alice)
        let fresh = ReplacedBox()
        registrar.applyStored([:], everything: true, since: registrar.localWriteMark()) { fresh.set($0) }
        try wait("the fresh read is applied") { fresh.value != nil }
        XCTAssertEqual(fresh.value, [F.alice])
        XCTAssertEqual(registrar.bindings(for: F.alice).count, 0)
    }

    func wait(_ what: String, _ condition: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(30)
        while !condition() {
            guard Date() < deadline else { throw Timeout(what: what) }
            Thread.sleep(forTimeInterval: 0.005)
        }
    }

    struct Timeout: Error { let what: String }
}

/// Carries the extensions an `applyStored` replaced out of its completion.
final class ReplacedBox: @unchecked Sendable {
    // @unchecked: `stored` is only touched under `lock`.
    private let lock = NSLock()
    private var stored: [AddressOfRecord]?
    func set(_ value: [AddressOfRecord]) { lock.withLock { stored = value } }
    var value: [AddressOfRecord]? { lock.withLock { stored } }
}

/// A store that holds each write until the test answers it, then keeps it (in memory), as a slow
/// database would; counts the reads of one extension.
final class SlowLocationStore: LocationStore, @unchecked Sendable {
    // @unchecked: `held` and `loads` are only touched under `lock`.
    private let lock = NSLock()
    private let kept = InMemoryLocationStore()
    private var held: [([BindingChange], @Sendable (Result<Void, any Error>) -> Void)] = []
    private var loads = 0

    var heldCount: Int { lock.withLock { held.count } }
    var loadCount: Int { lock.withLock { loads } }

    func loadBindings(now: Date) throws -> [Binding] { try kept.loadBindings(now: now) }

    func loadBindings(for aor: AddressOfRecord, now: Date) throws -> [Binding] {
        lock.withLock { loads += 1 }
        return try kept.loadBindings(for: aor, now: now)
    }

    func apply(_ changes: [BindingChange], completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        lock.withLock { held.append((changes, completion)) }
    }

    /// Removes an extension's bindings behind the registrar's back, as another instance would.
    func removeEverything(of aor: AddressOfRecord) throws {
        let done = DispatchSemaphore(value: 0)
        kept.apply(try kept.loadBindings(for: aor, now: Date.distantPast).map { .delete($0, .removed) }) { _ in done.signal() }
        done.wait()
    }

    /// Writes and answers every held change, in order.
    func answerAll() {
        let writes = lock.withLock { () -> [([BindingChange], @Sendable (Result<Void, any Error>) -> Void)] in
            defer { held = [] }
            return held
        }
        for (changes, completion) in writes { kept.apply(changes, completion: completion) }
    }
}
