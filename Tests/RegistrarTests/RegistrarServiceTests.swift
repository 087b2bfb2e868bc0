import Foundation
import Registrar
import SIPMessage
import XCTest

/// The registrar service around the core: an answer only after the store committed, 503 when it
/// could not, and events for subscribers.
final class RegistrarServiceTests: XCTestCase {
    typealias F = RegistrarFixture

    func makeRegistrar(store: InMemoryLocationStore) -> Registrar {
        Registrar(core: F().core, store: store, clock: { F.start })
    }

    func authenticatedRegister(_ registrar: Registrar) throws -> SIPResponse {
        let challenge = try exchange(registrar, F.register())
        let authorization = F.answer(challenge.headers.lines(.wwwAuthenticate)[0], password: "alice-secret")
        return try exchange(registrar, F.register(cseq: 2, authorization: authorization))
    }

    func testOKOnlyAfterTheStoreHasTheBindingAndSubscribersHearOfIt() throws {
        let store = InMemoryLocationStore()
        let registrar = makeRegistrar(store: store)
        let heard = expectation(description: "event")
        registrar.subscribe { event in
            if event.kind == .added { heard.fulfill() }
        }
        XCTAssertEqual(try authenticatedRegister(registrar).statusCode, 200)
        XCTAssertEqual(store.all.map(\.aor), [F.alice])
        wait(for: [heard], timeout: 30)
        XCTAssertEqual(registrar.bindings(for: F.alice).count, 1)
    }

    func testFailedWriteGives503WithRetryAfterAndLeavesNoBinding() throws {
        let store = InMemoryLocationStore()
        let registrar = makeRegistrar(store: store)
        store.failNextApply()
        let response = try authenticatedRegister(registrar)
        XCTAssertEqual(response.statusCode, 503)
        XCTAssertEqual(response.headers[.retryAfter], "5")
        XCTAssertTrue(store.all.isEmpty)
        XCTAssertEqual(registrar.bindings(for: F.alice).count, 0)
    }

    /// Two REGISTERs of one extension whose writes both fail: neither binding stays, although the
    /// second was built on the first.
    func testTwoFailedWritesInARowLeaveNeitherBinding() throws {
        let store = HeldLocationStore()
        let registrar = Registrar(core: F().core, store: store, clock: { F.start })
        let challenge = try exchange(registrar, F.register())
        let first = F.register(
            contacts: ["<sip:1001@192.0.2.7:5060>"], callID: "one", cseq: 2,
            authorization: F.answer(challenge.headers.lines(.wwwAuthenticate)[0], password: "alice-secret"))
        let second = F.register(
            contacts: ["<sip:1001@192.0.2.8:5060>"], callID: "two", cseq: 2,
            authorization: F.answer(challenge.headers.lines(.wwwAuthenticate)[0], password: "alice-secret", nc: "00000002"))
        let answers = ResponsesBox()
        for text in [first, second] {
            registrar.handleRegister(try F.parse(text), flow: F.flow()) { answers.append($0) }
        }
        let deadline = Date().addingTimeInterval(30)
        while store.heldCount < 2, Date() < deadline { Thread.sleep(forTimeInterval: 0.005) }
        XCTAssertEqual(store.heldCount, 2, "both writes are out")
        XCTAssertEqual(registrar.bindings(for: F.alice).count, 2, "both are in the index while their writes are out")
        store.answerAll(failing: true)
        while answers.count < 2, Date() < deadline { Thread.sleep(forTimeInterval: 0.005) }
        XCTAssertEqual(answers.statuses, [503, 503])
        XCTAssertEqual(registrar.bindings(for: F.alice).count, 0, "nothing that was never written stays")
    }

    func testLoadBindingsRestoresTheIndex() throws {
        let store = InMemoryLocationStore()
        XCTAssertEqual(try authenticatedRegister(makeRegistrar(store: store)).statusCode, 200)
        let restarted = makeRegistrar(store: store)
        try restarted.loadBindings()
        XCTAssertEqual(restarted.bindings(for: F.alice).map(\.contact), ["sip:1001@192.0.2.7:5060"])
    }
}

/// Carries a response out of a completion handler.
final class ResponseBox: @unchecked Sendable {
    // @unchecked: `stored` is only touched under `lock`.
    private let lock = NSLock()
    private var stored: SIPResponse?
    func set(_ response: SIPResponse) { lock.lock(); stored = response; lock.unlock() }
    var value: SIPResponse? { lock.lock(); defer { lock.unlock() }; return stored }
}

/// Carries several responses out of completion handlers.
final class ResponsesBox: @unchecked Sendable {
    // @unchecked: `stored` is only touched under `lock`.
    private let lock = NSLock()
    private var stored: [SIPResponse] = []
    func append(_ response: SIPResponse) { lock.withLock { stored.append(response) } }
    var count: Int { lock.withLock { stored.count } }
    var statuses: [Int] { lock.withLock { stored.map(\.statusCode) } }
}

/// A store that holds every write until the test answers it, as a slow database would.
final class HeldLocationStore: LocationStore, @unchecked Sendable {
    // @unchecked: `held` is only touched under `lock`.
    private let lock = NSLock()
    private var held: [@Sendable (Result<Void, any Error>) -> Void] = []

    var heldCount: Int { lock.withLock { held.count } }

    func loadBindings(now: Date) throws -> [Binding] { [] }
    func loadBindings(for aor: AddressOfRecord, now: Date) throws -> [Binding] { [] }

    func apply(_ changes: [BindingChange], completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        lock.withLock { held.append(completion) }
    }

    /// Answers every held write, in order.
    func answerAll(failing: Bool) {
        let completions = lock.withLock { () -> [@Sendable (Result<Void, any Error>) -> Void] in
            defer { held = [] }
            return held
        }
        for completion in completions { completion(failing ? .failure(Failure()) : .success(())) }
    }

    struct Failure: Error {}
}

extension XCTestCase {
    /// Hands `text` to `registrar` over the fixture's flow and waits for its answer.
    func exchange(_ registrar: Registrar, _ text: String) throws -> SIPResponse {
        let answered = expectation(description: "answer")
        let box = ResponseBox()
        registrar.handleRegister(try RegistrarFixture.parse(text), flow: RegistrarFixture.flow()) { response in
            box.set(response)
            answered.fulfill()
        }
        wait(for: [answered], timeout: 30)
        return try XCTUnwrap(box.value)
    }
}
