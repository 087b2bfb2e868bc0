import Foundation
@testable import Registrar
import XCTest

/// The shards remember each extension's last local write (so a stored read that may predate it
/// does not drop its binding) only for a while: the table holds recent writes, not every
/// extension ever written.
extension RegistrarShardTests {
    func testWritesAreForgottenOnceOldAndAStoredReadOlderThanThemIsReadAgain() throws {
        let now = ClockBox(F.start)
        let registrar = Registrar(core: Self.core(), store: InMemoryLocationStore(), clock: { now.value }, shards: 4)
        /// Moves the clock on and sweeps; returns once every shard has (it reads the clock on its queue).
        func sweep(after seconds: TimeInterval) throws {
            now.value = now.value.addingTimeInterval(seconds)
            registrar.expireNow()
            _ = registrar.rememberedWrites
        }
        try sweep(after: 0)

        // Two rounds: every extension registers, its binding expires; after two sweeps a
        // writeMemory apart none of those writes is remembered, so the table does not grow.
        for host in ["192.0.2.7", "192.0.2.8"] {
            for number in Self.numbers { XCTAssertEqual(try register(registrar, number, expires: 60, host: host), 200) }
            XCTAssertEqual(registrar.rememberedWrites, Self.numbers.count)
            try sweep(after: RegistrarShard.writeMemory + 1)
            XCTAssertEqual(registrar.rememberedWrites, Self.numbers.count, "remembered for at least writeMemory")
            try waitUntil("the bindings expire") { registrar.bindingCount == 0 }
            try sweep(after: RegistrarShard.writeMemory + 1)
            XCTAssertEqual(registrar.rememberedWrites, 0, "forgotten once older than a sweep")
        }

        // A read that began before a write now forgotten cannot tell it was made: the extension is
        // read again (the store has the binding) instead of replaced by the stale result.
        let kept = Self.aor("2001")
        let readBegan = registrar.localWriteMark()
        XCTAssertEqual(try register(registrar, "2001"), 200)
        try sweep(after: RegistrarShard.writeMemory + 1)
        try sweep(after: RegistrarShard.writeMemory + 1)
        XCTAssertEqual(registrar.rememberedWrites, 0)
        let stale = ReplacedBox()
        registrar.applyStored([kept: []], everything: false, since: readBegan) { stale.set($0) }
        try waitUntil("the stale read is answered") { stale.value != nil }
        XCTAssertEqual(stale.value, [])
        XCTAssertEqual(registrar.bindings(for: kept).count, 1, "the stale read was not taken")
    }
}
