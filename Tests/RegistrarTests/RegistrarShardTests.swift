import Crypto
import Foundation
import Registrar
import RouseVocabulary
import SIPMessage
import XCTest

/// A registrar with several shards (`sip_threads` > 1): each extension decided on the shard its
/// address of record hashes to, the service's answers the same as with one.
final class RegistrarShardTests: XCTestCase {
    typealias F = RegistrarFixture

    /// Extensions 2001…2016 on example.com, password `pw-<number>`.
    static let numbers = (2001...2016).map(String.init)
    static func aor(_ number: String) -> AddressOfRecord { AddressOfRecord(number: number, domain: F.domain) }

    static func core() -> RegistrarCore {
        var extensions: [AddressOfRecord: ExtensionCredentials] = [:]
        for number in numbers { extensions[aor(number)] = ExtensionCredentials(aor: aor(number), password: "pw-\(number)") }
        return RegistrarCore(
            policy: RegistrationPolicy(), directory: DirectorySnapshot(domains: [F.domain], extensions: extensions),
            supportedPushProviders: [.apns, .fcm],
            authenticator: DigestAuthenticator(secret: Array("test-secret".utf8), nonceLifetime: 300), serverName: "Rouse/test")
    }

    /// Registers `number` with one contact, answering the challenge; the final status.
    func register(_ registrar: Registrar, _ number: String, toDomain: String = F.domain, expires: Int = 3600, host: String = "192.0.2.7") throws -> Int {
        let aor = RegistrarShardTests.aor(number)
        let contact = "<sip:\(number)@\(host):5060>"
        let challenge = try exchange(registrar, F.register(aor, contacts: [contact], expires: expires, callID: "c-\(number)-\(host)", toDomain: toDomain))
        XCTAssertEqual(challenge.statusCode, 401)
        let authorization = F.answer(challenge.headers.lines(.wwwAuthenticate)[0], number: number, password: "pw-\(number)", uri: "sip:\(toDomain)")
        let text = F.register(aor, contacts: [contact], expires: expires, callID: "c-\(number)-\(host)", cseq: 2, authorization: authorization, toDomain: toDomain)
        return try exchange(registrar, text).statusCode
    }

    func testEveryExtensionIsDecidedOnItsShardAndFoundThere() throws {
        let store = InMemoryLocationStore()
        let registrar = Registrar(core: Self.core(), store: store, clock: { F.start }, shards: 4)
        XCTAssertEqual(registrar.shardCount, 4)
        let shardsUsed = Set(Self.numbers.map { registrar.shardIndex(of: Self.aor($0)) })
        XCTAssertGreaterThan(shardsUsed.count, 1, "16 extensions do not all hash to one shard")
        XCTAssertTrue(shardsUsed.isSubset(of: 0..<4))

        let heard = EventCounter()
        registrar.subscribe { if $0.kind == .added { heard.add() } }
        for number in Self.numbers { XCTAssertEqual(try register(registrar, number), 200, number) }
        XCTAssertEqual(registrar.bindingCount, 16)
        XCTAssertEqual(store.all.count, 16)
        for number in Self.numbers {
            let bindings = registrar.bindings(for: Self.aor(number))
            XCTAssertEqual(bindings.map(\.contact), ["sip:\(number)@192.0.2.7:5060"])
            XCTAssertEqual(registrar.binding(id: bindings[0].id)?.aor, Self.aor(number))
            XCTAssertNotNil(registrar.credentials(of: Self.aor(number)))
        }
        try waitUntil("every shard's events reach the subscriber") { heard.count == 16 }

        // A restart with another number of shards puts each stored binding where its extension hashes.
        let restarted = Registrar(core: Self.core(), store: store, clock: { F.start }, shards: 3)
        try restarted.loadBindings()
        XCTAssertEqual(restarted.bindingCount, 16)
        for number in Self.numbers { XCTAssertEqual(restarted.bindings(for: Self.aor(number)).count, 1, number) }
    }

    func testTheSameExtensionWrittenDifferentlyStaysOnOneShard() throws {
        let registrar = Registrar(core: Self.core(), store: InMemoryLocationStore(), clock: { F.start }, shards: 4)
        XCTAssertEqual(try register(registrar, "2003", host: "192.0.2.7"), 200)
        // The domain in capitals: the same address of record (RFC 3261 §10.3 compares host names
        // without case), so the same shard, which adds the second contact beside the first.
        XCTAssertEqual(try register(registrar, "2003", toDomain: "EXAMPLE.COM", host: "192.0.2.8"), 200)
        XCTAssertEqual(registrar.bindings(for: Self.aor("2003")).map(\.contact).sorted(), ["sip:2003@192.0.2.7:5060", "sip:2003@192.0.2.8:5060"])
        XCTAssertEqual(registrar.bindingCount, 2)
    }

    func testExpiryAndStoredReadsReachEveryShard() throws {
        let now = ClockBox(F.start)
        let store = InMemoryLocationStore()
        let registrar = Registrar(core: Self.core(), store: store, clock: { now.value }, shards: 4)
        for number in Self.numbers { XCTAssertEqual(try register(registrar, number, expires: 60), 200) }

        // A read of the store that covered everything and found only 2001: every other extension
        // has none, whichever shard holds it, and the callback hears of all of them once.
        let kept = Self.aor("2001")
        let replaced = ReplacedBox()
        registrar.applyStored(
            [kept: registrar.bindings(for: kept)], everything: true, since: registrar.localWriteMark()) { replaced.set($0) }
        try waitUntil("the read is applied on every shard") { replaced.value != nil }
        XCTAssertEqual(Set(replaced.value ?? []), Set(Self.numbers.map(Self.aor)))
        XCTAssertEqual(registrar.bindingCount, 1)

        now.value = F.start.addingTimeInterval(61)
        registrar.expireNow()
        try waitUntil("the binding left expires") { registrar.bindingCount == 0 }
        XCTAssertTrue(registrar.bindings(for: kept).isEmpty)
    }

    func testOneShardKeepsOneQueue() throws {
        let registrar = Registrar(core: Self.core(), store: InMemoryLocationStore(), clock: { F.start })
        XCTAssertEqual(registrar.shardCount, 1)
        XCTAssertTrue(Self.numbers.allSatisfy { registrar.shardIndex(of: Self.aor($0)) == 0 })
        XCTAssertEqual(try register(registrar, "2010"), 200)
    }

    func waitUntil(_ what: String, _ condition: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(30)
        while !condition() {
            guard Date() < deadline else { return XCTFail("timed out waiting: \(what)") }
            Thread.sleep(forTimeInterval: 0.005)
        }
    }
}

/// Counts events reported from other threads. Thread-safe (an NSLock).
final class EventCounter: @unchecked Sendable {
    // @unchecked: `stored` is only touched under `lock`.
    private let lock = NSLock()
    private var stored = 0
    func add() { lock.withLock { stored += 1 } }
    var count: Int { lock.withLock { stored } }
}

/// A manual clock read from the registrar's queues. Thread-safe (an NSLock).
final class ClockBox: @unchecked Sendable {
    // @unchecked: `stored` is only touched under `lock`.
    private let lock = NSLock()
    private var stored: Date
    init(_ start: Date) { stored = start }
    var value: Date {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
