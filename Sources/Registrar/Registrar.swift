import Dispatch
import Synchronization
public import Foundation
public import RouseVocabulary
public import SIPMessage

/// One shard of the registrar: a `RegistrarCore` for the extensions that hash to it, on a serial
/// queue of its own, with the bookkeeping of its writes still out. `Registrar` routes to it.
///
/// Threading: the core and everything below are only touched on `queue`.
final class RegistrarShard: @unchecked Sendable {
    // @unchecked: `core` and `subscribers` are only read and written on `queue`.
    var core: RegistrarCore
    private var subscribers: [@Sendable (BindingEvent) -> Void] = []
    private let store: any LocationStore
    let queue: DispatchQueue
    private let clock: @Sendable () -> Date
    private var expiryTimer: DispatchSourceTimer?
    /// Extensions with writes not yet answered by the store, and what they held before the first.
    private var unwritten: [AddressOfRecord: UnwrittenChanges] = [:]
    /// Local writes made so far by every shard (REGISTERs that changed something), and the count
    /// when each extension's last one was made: a read of the store begun before that may predate it.
    private let writesMade: WriteCounter
    private var lastWrite: [AddressOfRecord: UInt64] = [:]
    /// `lastWrite` forgets an extension once its writes are answered and its last one was made
    /// before the previous sweep (`forgetOldWrites`), so it holds the recent writes, not one entry
    /// per extension ever written. A read whose mark is below `forgottenThrough` may predate a
    /// forgotten write: an extension it finds without an entry is read again instead of replaced.
    private var forgottenThrough: UInt64 = 0
    /// The write count at the previous sweep, and when that sweep ran.
    private var sweptAt: (mark: UInt64, time: Date)?
    /// How long a write is remembered at least (stored reads take far less: one statement).
    static let writeMemory: TimeInterval = 60
    /// Extensions whose stored bindings were read while a local write of theirs was out: read
    /// again once their last write is answered.
    private var readAgainAfterWrites: Set<AddressOfRecord> = []

    /// The REGISTERs of one extension whose writes are still out: how many are out, how many were
    /// made and how many failed since none was out, and the bindings before the first of them.
    struct UnwrittenChanges {
        var outstanding = 0
        var made = 0
        var failures = 0
        var before: [Binding]

        /// One more REGISTER's write is out.
        mutating func count() {
            outstanding += 1
            made += 1
        }
    }

    init(core: RegistrarCore, store: any LocationStore, clock: @escaping @Sendable () -> Date, label: String, writesMade: WriteCounter) {
        self.core = core
        self.store = store
        self.clock = clock
        self.queue = DispatchQueue(label: label)
        self.writesMade = writesMade
    }

    /// `to`: the request's To, parsed (`request.to`). Decided on the caller's thread, holding the
    /// shard's queue (`queue.sync`: an idle queue runs the block in place, so a REGISTER costs no
    /// thread wake-up; a busy one makes the caller wait for its current block, which only computes).
    /// An answer that needs no write is sent once the queue is released; one after a write comes
    /// from the store's completion.
    func handleRegister(_ request: SIPRequest, to: SIPNameAddress?, flow: BindingFlow, respond: @escaping @Sendable (SIPResponse) -> Void) {
        // The plain `sync(execute:)`: the generic one that returns a value wraps the block in
        // two more closures and an error rescue (profiled: 1.3k instructions per REGISTER).
        var immediate: SIPResponse?
        queue.sync {
            switch core.register(request, to: to, flow: flow, now: clock()) {
            case .respond(let response):
                immediate = response
            case .commit(let changes, let events, let response, let previous):
                commit(changes, of: request, events: events, response: response, previous: previous, respond: respond)
            }
        }
        if let immediate { respond(immediate) }
    }

    /// On `queue`: hands a REGISTER's changes to the store and answers once it has them: the 200,
    /// then the events, or a 503 that a restart cannot contradict. After a 200 the shard's
    /// bookkeeping of the write (`writeAnswered`, which changes the index only after a failure)
    /// and the events take one hop back to `queue` together.
    private func commit(
        _ changes: [BindingChange], of request: SIPRequest, events: [BindingEvent], response: SIPResponse, previous: [(aor: AddressOfRecord, bindings: [Binding])],
        respond: @escaping @Sendable (SIPResponse) -> Void
    ) {
        for (aor, list) in previous { unwritten[aor, default: UnwrittenChanges(before: list)].count() }
        defer {
            // Counted once the write is out, so a mark that includes it was taken after it.
            let written = writesMade.next()
            for (aor, _) in previous { lastWrite[aor] = written }
        }
        store.apply(changes) { [self] result in
            switch result {
            case .success:
                respond(response)
                queue.async { [self] in
                    writeAnswered(previous.lazy.map(\.aor), failed: false)
                    deliver(events)
                }
            case .failure:
                // Before the answer, so whoever reads the index after it sees it put right.
                queue.async { [self] in writeAnswered(previous.lazy.map(\.aor), failed: true) }
                // Never a 200 that a restart would forget: ask the phone to try again shortly
                // (the index is put right below, once no other write of the extension is out).
                var unavailable = SIPResponse(replyingTo: request, statusCode: 503, toTag: RegistrarCore.tag(for: request))
                unavailable.headers.add(.retryAfter, "5")
                respond(unavailable)
            }
        }
    }

    /// On `queue`: one REGISTER's write was answered. When the last write out for an extension
    /// is answered and any of them failed, the index is put back to what is durable: the bindings
    /// before the first when every write failed (each REGISTER built on the one before, so undoing
    /// only its own would keep the earlier failed change), else read back from the store.
    private func writeAnswered(_ aors: some Sequence<AddressOfRecord>, failed: Bool) {
        for aor in aors {
            // One hash of the extension's address: the entry is changed in place, through its index.
            guard let index = unwritten.index(forKey: aor) else { continue }
            unwritten.values[index].outstanding -= 1
            if failed { unwritten.values[index].failures += 1 }
            guard unwritten.values[index].outstanding == 0 else { continue }
            let chain = unwritten.remove(at: index).value
            let readAgain = !readAgainAfterWrites.isEmpty && readAgainAfterWrites.remove(aor) != nil
            if chain.failures > 0 && chain.failures == chain.made {
                core.replace(aor, with: chain.before)
            }
            if readAgain || (chain.failures > 0 && chain.failures < chain.made) {
                // Some were written, some not, or another instance's change was read meanwhile:
                // what the store holds is the truth.
                DispatchQueue.global().async { [self] in try? reload(aor) }
            }
        }
    }

    /// Stored bindings into the index (see `Registrar.applyStored`): those of the extensions of
    /// `part`, this shard's index among the registrar's `count` (`Registrar.shardIndex`).
    func applyStored(
        _ bindings: [AddressOfRecord: [Binding]], part: (index: Int, count: Int), everything: Bool, since mark: UInt64,
        applied: @escaping @Sendable ([AddressOfRecord]) -> Void
    ) {
        queue.async { [self] in
            let mine = { (aor: AddressOfRecord) in Registrar.shardIndex(of: aor, among: part.count) == part.index }
            // The start-up's read of every binding: the indexes are sized once, not grown (an
            // even share, with room for an uneven hash).
            if everything, core.bindingCount == 0 {
                let total = bindings.values.reduce(0) { $0 + $1.count }
                core.reserveCapacity(part.count == 1 ? total : total / part.count + total / 16)
            }
            var replaced: [AddressOfRecord] = []
            if everything {
                let gone = core.bindings.keys.filter { bindings[$0] == nil }
                for aor in gone where replaceStored(aor, with: [], since: mark) { replaced.append(aor) }
            }
            for (aor, list) in bindings where mine(aor) && replaceStored(aor, with: list, since: mark) { replaced.append(aor) }
            applied(replaced)
        }
    }

    /// On `queue`: replaces one extension's bindings with stored ones unless a local write may be
    /// missing from them (see `applyStored`); says whether it did.
    func replaceStored(_ aor: AddressOfRecord, with list: [Binding], since mark: UInt64) -> Bool {
        if unwritten[aor] != nil {
            readAgainAfterWrites.insert(aor)
            return false
        }
        // A write after the read began, or one forgotten that the read may predate.
        if lastWrite[aor].map({ $0 > mark }) ?? (mark < forgottenThrough) {
            DispatchQueue.global().async { [self] in try? reload(aor) }
            return false
        }
        core.replace(aor, with: list)
        return true
    }

    /// On `queue`: at most every `writeMemory`, drops the `lastWrite` entries made before the
    /// previous sweep whose writes are all answered, and raises `forgottenThrough` to that sweep's mark.
    private func forgetOldWrites(now: Date) {
        guard let swept = sweptAt else {
            sweptAt = (writesMade.mark, now)
            return
        }
        guard now.timeIntervalSince(swept.time) >= Self.writeMemory else { return }
        lastWrite = lastWrite.filter { aor, last in last > swept.mark || unwritten[aor] != nil }
        forgottenThrough = max(forgottenThrough, swept.mark)
        sweptAt = (writesMade.mark, now)
    }

    /// How many extensions' last writes this shard remembers (`lastWrite`).
    var rememberedWrites: Int { queue.sync { lastWrite.count } }

    /// Calls `handler` with every binding event of this shard from now on.
    func subscribe(_ handler: @escaping @Sendable (BindingEvent) -> Void) {
        queue.sync { subscribers.append(handler) }
    }

    /// Reloads one extension's bindings (see `Registrar.reload`).
    func reload(_ aor: AddressOfRecord) throws {
        let mark = writesMade.mark
        let loaded = try store.loadBindings(for: aor, now: clock())
        queue.async { [self] in _ = replaceStored(aor, with: loaded, since: mark) }
    }

    /// Removes this shard's expired bindings now (and forgets old writes, `forgetOldWrites`).
    func expireNow() {
        queue.async { [self] in
            let now = clock()
            forgetOldWrites(now: now)
            let (changes, events) = core.expire(now: now)
            guard !changes.isEmpty else { return }
            store.apply(changes) { [self] result in
                if case .success = result { publish(events) }
            }
        }
    }

    func startExpiryTimer(interval: Duration) {
        queue.sync {
            let timer = DispatchSource.makeTimerSource(queue: queue)
            let nanoseconds = Int(interval.components.seconds) * 1_000_000_000 + Int(interval.components.attoseconds / 1_000_000_000)
            timer.schedule(deadline: .now() + .nanoseconds(nanoseconds), repeating: .nanoseconds(nanoseconds))
            timer.setEventHandler { [weak self] in self?.expireNow() }
            timer.resume()
            expiryTimer = timer
        }
    }

    func stopExpiryTimer() {
        queue.sync {
            expiryTimer?.cancel()
            expiryTimer = nil
        }
    }

    private func publish(_ events: [BindingEvent]) {
        guard !events.isEmpty else { return }
        queue.async { [self] in deliver(events) }
    }

    /// On `queue`: gives each event to every subscriber.
    private func deliver(_ events: [BindingEvent]) {
        for event in events {
            for subscriber in subscribers { subscriber(event) }
        }
    }
}

/// The registrar service: the extensions' bindings in `RegistrarCore`s, one per shard, each on a
/// serial queue of its own, an extension always in the same shard (by a hash of its address of
/// record), so REGISTERs of different extensions are decided on several cores at once while those of
/// one extension stay in order. Changes are made durable through one `LocationStore` (whose writer
/// commits what every shard sends in groups) before answering (a 200 means the binding is in
/// PostgreSQL); bindings expire on time, and every change is announced to subscribers.
///
/// Threading: every public method is thread-safe and returns without waiting for storage; each core
/// is only touched on its shard's queue. Responses and events are delivered on the store's
/// completion thread or on a shard's queue; handlers must not block.
public final class Registrar: ExtensionDirectory, Sendable {
    private let shards: [RegistrarShard]
    private let store: any LocationStore
    private let clock: @Sendable () -> Date
    private let writesMade = WriteCounter()

    /// - Parameter authFailureThrottle: when given, replaces the core's (shared with the HTTP API).
    /// - Parameter shards: serial queues, each with its own copy of `core` (at least 1).
    public init(
        core: RegistrarCore, store: any LocationStore, clock: @escaping @Sendable () -> Date = { Date() },
        authFailureThrottle: AuthFailureThrottle? = nil, shards: Int = 1
    ) {
        var core = core
        if let authFailureThrottle { core.authFailureThrottle = authFailureThrottle }
        let count = max(1, shards)
        let writesMade = self.writesMade
        self.shards = (0..<count).map { index in
            RegistrarShard(
                core: core, store: store, clock: clock, label: count == 1 ? "rouse.registrar" : "rouse.registrar.\(index)",
                writesMade: writesMade)
        }
        self.store = store
        self.clock = clock
    }

    /// How many shards decide REGISTERs.
    public var shardCount: Int { shards.count }

    /// The shard that holds `aor`'s bindings: a hash of its number and domain (FNV-1a, the same in
    /// every run, so an extension's shard does not depend on the process).
    public func shardIndex(of aor: AddressOfRecord) -> Int {
        Registrar.shardIndex(of: aor, among: shards.count)
    }

    /// The same for `count` shards.
    static func shardIndex(of aor: AddressOfRecord, among count: Int) -> Int {
        guard count > 1 else { return 0 }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        fnv1a(&hash, aor.number)
        hash = (hash ^ 0x40) &* 0x100_0000_01b3
        fnv1a(&hash, aor.domain)
        return Int(hash % UInt64(count))
    }

    /// Feeds a text's UTF-8 bytes to an FNV-1a hash, read from its storage (iterating `utf8`
    /// cost several times the hash).
    private static func fnv1a(_ hash: inout UInt64, _ text: String) {
        var text = text
        hash = text.withUTF8 { bytes in
            var value = hash
            for byte in bytes { value = (value ^ UInt64(byte)) &* 0x100_0000_01b3 }
            return value
        }
    }

    private func shard(of aor: AddressOfRecord) -> RegistrarShard { shards[shardIndex(of: aor)] }

    /// The shard of the extension a REGISTER's To (`to`) names, as `RegistrarCore.register` reads
    /// it; the first shard when it names none (that shard answers the error).
    private func shard(of to: SIPNameAddress?) -> RegistrarShard {
        guard shards.count > 1, let to, to.uri.scheme != .tel, let number = to.uri.user else { return shards[0] }
        return shard(of: AddressOfRecord(number: PushParameters.unescape(number), domain: to.uri.host))
    }

    /// Loads every live binding from the store (blocking; at start, before serving).
    public func loadBindings() throws {
        let loaded = try store.loadBindings(now: clock())
        let parts = Dictionary(grouping: loaded) { shardIndex(of: $0.aor) }
        for (index, shard) in shards.enumerated() {
            let part = parts[index] ?? []
            shard.queue.sync { shard.core.load(part) }
        }
    }

    /// Handles a REGISTER that arrived over `flow`; `respond` gets the answer once any change is durable.
    public func handleRegister(_ request: SIPRequest, flow: BindingFlow, respond: @escaping @Sendable (SIPResponse) -> Void) {
        // Parsed once, here: the shard is chosen by it and the core reads it.
        let to = request.to
        shard(of: to).handleRegister(request, to: to, flow: flow, respond: respond)
    }

    /// A mark of the local writes made so far: take it before reading the store, and hand it to
    /// `applyStored` with what the read found.
    public func localWriteMark() -> UInt64 {
        writesMade.mark
    }

    /// Puts bindings read from the store into the index (another instance changed them): each
    /// extension's list replaces what the index holds, unless a local write of that extension is
    /// still out or was made after `mark` (the read may predate it, and would drop its binding);
    /// such an extension is read again once its writes are answered. (A `mark` older than the
    /// writes remembered, `RegistrarShard.writeMemory`, has each extension without a remembered
    /// write read again instead.) `everything`: the read covered every extension, so one the index
    /// holds that is not in `bindings` has none.
    /// `applied` gets the extensions replaced, once every shard has done its part, on a shard's
    /// queue (it must not block).
    public func applyStored(
        _ bindings: [AddressOfRecord: [Binding]], everything: Bool, since mark: UInt64,
        applied: @escaping @Sendable ([AddressOfRecord]) -> Void = { _ in }
    ) {
        guard shards.count > 1 else {
            return shards[0].applyStored(bindings, part: (0, 1), everything: everything, since: mark, applied: applied)
        }
        // Each shard picks its own extensions out of the whole read, all at once, on its queue:
        // no regrouping of a million lists on this thread first.
        gather(over: shards.indices, { index, done in
            shards[index].applyStored(bindings, part: (index, shards.count), everything: everything, since: mark, applied: done)
        }, completion: { applied($0.flatMap { $0 }) })
    }

    /// Blocks until every shard has done what was queued on it before this call (at start-up: its
    /// part of the replica's first read, indexed), so a start-up that waits on it is ready.
    public func waitForQueuedWork() {
        for shard in shards { shard.queue.sync {} }
    }

    /// The live bindings of an extension.
    public func bindings(for aor: AddressOfRecord) -> [Binding] {
        let shard = shard(of: aor)
        return shard.queue.sync { shard.core.bindings(for: aor) }
    }

    /// The live binding with this id (another instance forwarding a call to it names it so).
    public func binding(id: UUID) -> Binding? {
        for shard in shards {
            if let found = shard.queue.sync(execute: { shard.core.binding(withID: id) }) { return found }
        }
        return nil
    }

    /// The extensions and organisations the registrar knows now.
    public func directorySnapshot() -> DirectorySnapshot {
        shards[0].queue.sync { shards[0].core.directory }
    }

    /// The live bindings with push channels that expire by `deadline` (binding-refresh pushes),
    /// from every shard, each registration once (`RegistrarCore.takeRefreshCandidates`);
    /// `completion` runs on a shard's queue and must not block.
    public func pushBindings(expiringBefore deadline: Date, completion: @escaping @Sendable ([Binding]) -> Void) {
        gather(over: shards.indices, { index, done in
            let shard = shards[index]
            shard.queue.async {
                done(shard.core.takeRefreshCandidates(expiringBy: deadline))
            }
        }, completion: { completion($0.flatMap { $0 }) })
    }

    /// How many bindings are live.
    public var bindingCount: Int {
        shards.reduce(0) { total, shard in total + shard.queue.sync { shard.core.bindingCount } }
    }

    /// Calls `handler` with every binding event from now on (an extension's in order).
    public func subscribe(_ handler: @escaping @Sendable (BindingEvent) -> Void) {
        for shard in shards { shard.subscribe(handler) }
    }

    /// One extension's stored hashes, as the directory holds them now.
    public func credentials(of aor: AddressOfRecord) -> ExtensionCredentials? {
        let shard = shard(of: aor)
        return shard.queue.sync { shard.core.directory.extensions[aor] }
    }

    /// Swaps in a new directory (after an extension was added, removed or changed its password).
    public func updateDirectory(_ snapshot: DirectorySnapshot) {
        for shard in shards { shard.queue.async { shard.core.directory = snapshot } }
    }

    /// Wake credentials that must no longer admit a REGISTER (their call ended before its wait).
    public func retireWakeCredentials(_ ids: [String], until: Date) {
        for shard in shards { shard.queue.async { shard.core.wakeCredentials?.retire(ids, until: until) } }
    }

    /// Sets which push providers have a push app (RFC 8599 §5.2).
    public func updateSupportedPushProviders(_ providers: Set<PushProviderFamily>) {
        for shard in shards { shard.queue.async { shard.core.supportedPushProviders = providers } }
    }

    /// Reloads one extension's bindings from the store (another instance changed them), keeping
    /// what the index holds while a local write of it may be missing from the read (see
    /// `applyStored`). Blocking read; call it off the SIP path, never on a registrar queue.
    public func reload(_ aor: AddressOfRecord) throws {
        try shard(of: aor).reload(aor)
    }

    /// How many extensions' last local writes the shards remember for stored reads (those made
    /// in the last one or two `RegistrarShard.writeMemory` periods, or still out).
    var rememberedWrites: Int { shards.reduce(0) { $0 + $1.rememberedWrites } }

    /// Removes expired bindings now (the timers call this every `interval`).
    public func expireNow() {
        for shard in shards { shard.expireNow() }
    }

    /// Starts the expiry timers (one per shard).
    public func startExpiryTimer(interval: Duration = .seconds(1)) {
        for shard in shards { shard.startExpiryTimer(interval: interval) }
    }

    public func stopExpiryTimer() {
        for shard in shards { shard.stopExpiryTimer() }
    }

    /// Runs `part` for each index, then `completion` with what each handed to its `done` (in index
    /// order), on the thread of the last `done`.
    private func gather<Part: Sendable>(
        over indices: Range<Int>, _ part: (Int, @escaping @Sendable (Part) -> Void) -> Void,
        completion: @escaping @Sendable ([Part]) -> Void
    ) {
        let results = Gathering<Part>(count: indices.count)
        for index in indices {
            part(index) { value in
                if let finished = results.add(value, at: index - indices.lowerBound) { completion(finished) }
            }
        }
    }
}

/// The parts of a `Registrar.gather` handed in so far. Thread-safe (an NSLock).
private final class Gathering<Part: Sendable>: @unchecked Sendable {
    // @unchecked: `parts` and `left` are only touched under `lock`.
    private let lock = NSLock()
    private var parts: [Part?]
    private var left: Int

    init(count: Int) {
        parts = Array(repeating: nil, count: count)
        left = count
    }

    /// Records part `index`; every part, in order, once it was the last.
    func add(_ part: Part, at index: Int) -> [Part]? {
        lock.withLock {
            parts[index] = part
            left -= 1
            return left == 0 ? parts.map { $0! } : nil
        }
    }
}

/// The local writes every shard has made, counted once each is handed to the store. Thread-safe
/// (an atomic).
final class WriteCounter: Sendable {
    private let count = Atomic<UInt64>(0)

    /// Counts one more write and returns the count.
    func next() -> UInt64 { count.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue }

    /// The writes counted so far.
    var mark: UInt64 { count.load(ordering: .sequentiallyConsistent) }
}

/// A `LocationStore` held in memory: for unit tests of the registrar's logic and for benchmarks of
/// the SIP path alone. Durable it is not. Thread-safe behind a lock.
public final class InMemoryLocationStore: LocationStore, @unchecked Sendable {
    // @unchecked: `stored` and `failNextWrite` are only touched under `lock`.
    private let lock = NSLock()
    private var stored: [UUID: Binding] = [:]
    private var failNextWrite = false

    public init() {}

    /// Makes the next `apply` fail, as a database outage would.
    public func failNextApply() {
        lock.lock()
        failNextWrite = true
        lock.unlock()
    }

    public var all: [Binding] {
        lock.lock()
        defer { lock.unlock() }
        return Array(stored.values)
    }

    public func loadBindings(now: Date) throws -> [Binding] {
        all.filter { $0.expiresAt > now }
    }

    public func loadBindings(for aor: AddressOfRecord, now: Date) throws -> [Binding] {
        all.filter { $0.aor == aor && $0.expiresAt > now }
    }

    public func apply(_ changes: [BindingChange], completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        lock.lock()
        if failNextWrite {
            failNextWrite = false
            lock.unlock()
            completion(.failure(InMemoryStoreFailure()))
            return
        }
        for change in changes {
            switch change {
            case .save(let binding), .refresh(let binding): stored[binding.id] = binding
            case .delete(let binding, _): stored[binding.id] = nil
            }
        }
        lock.unlock()
        completion(.success(()))
    }

    struct InMemoryStoreFailure: Error, CustomStringConvertible {
        var description: String { "the in-memory store was told to fail" }
    }
}
