import Dispatch
public import Foundation
public import RouseVocabulary
public import SIPMessage

/// The registrar service: owns a `RegistrarCore` on its own serial queue, makes its changes durable
/// through a `LocationStore` before answering (a 200 means the binding is in PostgreSQL), expires
/// bindings on time, and announces every change to subscribers.
///
/// Threading: every public method is thread-safe and returns without waiting for storage; the core
/// is only touched on `queue`. Responses and events are delivered on the store's completion thread
/// or on `queue`; handlers must not block.
public final class Registrar: ExtensionDirectory, @unchecked Sendable {
    // @unchecked: `core` and `subscribers` are only read and written on `queue`.
    private var core: RegistrarCore
    private var subscribers: [@Sendable (BindingEvent) -> Void] = []
    private let store: any LocationStore
    private let queue = DispatchQueue(label: "rouse.registrar")
    private let clock: @Sendable () -> Date
    private var expiryTimer: DispatchSourceTimer?
    /// Extensions with writes not yet answered by the store, and what they held before the first.
    private var unwritten: [AddressOfRecord: UnwrittenChanges] = [:]
    /// Local writes made so far (REGISTERs that changed something), and the count when each
    /// extension's last one was made: a read of the store begun before that may predate it.
    private var writesMade: UInt64 = 0
    private var lastWrite: [AddressOfRecord: UInt64] = [:]
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
    }

    /// - Parameter authFailureThrottle: when given, replaces the core's (shared with the HTTP API).
    public init(
        core: RegistrarCore, store: any LocationStore, clock: @escaping @Sendable () -> Date = { Date() },
        authFailureThrottle: AuthFailureThrottle? = nil
    ) {
        self.core = core
        if let authFailureThrottle { self.core.authFailureThrottle = authFailureThrottle }
        self.store = store
        self.clock = clock
    }

    /// Loads every live binding from the store (blocking; at start, before serving).
    public func loadBindings() throws {
        let loaded = try store.loadBindings(now: clock())
        queue.sync { core.load(loaded) }
    }

    /// Handles a REGISTER that arrived over `flow`; `respond` gets the answer once any change is durable.
    public func handleRegister(_ request: SIPRequest, flow: BindingFlow, respond: @escaping @Sendable (SIPResponse) -> Void) {
        queue.async { [self] in
            let decision = core.register(request, flow: flow, now: clock())
            switch decision {
            case .respond(let response):
                respond(response)
            case .commit(let changes, let events, let response, let previous):
                writesMade += 1
                for (aor, list) in previous {
                    unwritten[aor, default: UnwrittenChanges(before: list)].outstanding += 1
                    unwritten[aor]?.made += 1
                    lastWrite[aor] = writesMade
                }
                store.apply(changes) { [self] result in
                    let failed: Bool
                    if case .failure = result { failed = true } else { failed = false }
                    // Before the answer, so whoever reads the index after it sees it put right.
                    queue.async { [self] in writeAnswered(Array(previous.keys), failed: failed) }
                    switch result {
                    case .success:
                        respond(response)
                        publish(events)
                    case .failure:
                        // Never a 200 that a restart would forget: ask the phone to try again shortly
                        // (the index is put right below, once no other write of the extension is out).
                        var unavailable = SIPResponse(replyingTo: request, statusCode: 503, toTag: RegistrarCore.tag(for: request))
                        unavailable.headers.add(.retryAfter, "5")
                        respond(unavailable)
                    }
                }
            }
        }
    }

    /// On `queue`: one REGISTER's write was answered. When the last write out for an extension
    /// is answered and any of them failed, the index is put back to what is durable: the bindings
    /// before the first when every write failed (each REGISTER built on the one before, so undoing
    /// only its own would keep the earlier failed change), else read back from the store.
    private func writeAnswered(_ aors: [AddressOfRecord], failed: Bool) {
        for aor in aors {
            guard var chain = unwritten[aor] else { continue }
            chain.outstanding -= 1
            if failed { chain.failures += 1 }
            unwritten[aor] = chain.outstanding == 0 ? nil : chain
            guard chain.outstanding == 0 else { continue }
            let readAgain = readAgainAfterWrites.remove(aor) != nil
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

    /// A mark of the local writes made so far: take it before reading the store, and hand it to
    /// `applyStored` with what the read found.
    public func localWriteMark() -> UInt64 {
        queue.sync { writesMade }
    }

    /// Puts bindings read from the store into the index (another instance changed them): each
    /// extension's list replaces what the index holds, unless a local write of that extension is
    /// still out or was made after `mark` (the read may predate it, and would drop its binding);
    /// such an extension is read again once its writes are answered. `everything`: the read
    /// covered every extension, so one the index holds that is not in `bindings` has none.
    /// `applied` gets the extensions replaced, on the registrar's queue (it must not block).
    public func applyStored(
        _ bindings: [AddressOfRecord: [Binding]], everything: Bool, since mark: UInt64,
        applied: @escaping @Sendable ([AddressOfRecord]) -> Void = { _ in }
    ) {
        queue.async { [self] in
            var all = bindings
            if everything {
                for aor in core.bindings.keys where all[aor] == nil { all[aor] = [] }
            }
            var replaced: [AddressOfRecord] = []
            for (aor, list) in all where replaceStored(aor, with: list, since: mark) { replaced.append(aor) }
            applied(replaced)
        }
    }

    /// On `queue`: replaces one extension's bindings with stored ones unless a local write may be
    /// missing from them (see `applyStored`); says whether it did.
    private func replaceStored(_ aor: AddressOfRecord, with list: [Binding], since mark: UInt64) -> Bool {
        if unwritten[aor] != nil {
            readAgainAfterWrites.insert(aor)
            return false
        }
        if let last = lastWrite[aor], last > mark {
            DispatchQueue.global().async { [self] in try? reload(aor) }
            return false
        }
        core.replace(aor, with: list)
        return true
    }

    /// The live bindings of an extension.
    public func bindings(for aor: AddressOfRecord) -> [Binding] {
        queue.sync { core.bindings(for: aor) }
    }

    /// The live binding with this id (another instance forwarding a call to it names it so).
    public func binding(id: UUID) -> Binding? {
        queue.sync { core.binding(withID: id) }
    }

    /// The extensions and organisations the registrar knows now.
    public func directorySnapshot() -> DirectorySnapshot {
        queue.sync { core.directory }
    }

    /// The live bindings with push channels that expire by `deadline` (binding-refresh pushes),
    /// each registration once (`RegistrarCore.takeRefreshCandidates`); `completion` runs on the
    /// registrar's queue and must not block.
    public func pushBindings(expiringBefore deadline: Date, completion: @escaping @Sendable ([Binding]) -> Void) {
        queue.async { [self] in
            completion(core.takeRefreshCandidates(expiringBy: deadline))
        }
    }

    /// How many bindings are live.
    public var bindingCount: Int { queue.sync { core.bindingCount } }

    /// Calls `handler` with every binding event from now on.
    public func subscribe(_ handler: @escaping @Sendable (BindingEvent) -> Void) {
        queue.sync { subscribers.append(handler) }
    }

    /// One extension's stored hashes, as the directory holds them now.
    public func credentials(of aor: AddressOfRecord) -> ExtensionCredentials? {
        queue.sync { core.directory.extensions[aor] }
    }

    /// Swaps in a new directory (after an extension was added, removed or changed its password).
    public func updateDirectory(_ snapshot: DirectorySnapshot) {
        queue.async { [self] in core.directory = snapshot }
    }

    /// Wake credentials that must no longer admit a REGISTER (their call ended before its wait).
    public func retireWakeCredentials(_ ids: [String], until: Date) {
        queue.async { [self] in core.wakeCredentials?.retire(ids, until: until) }
    }

    /// Sets which push providers have a push app (RFC 8599 §5.2).
    public func updateSupportedPushProviders(_ providers: Set<PushProviderFamily>) {
        queue.async { [self] in core.supportedPushProviders = providers }
    }

    /// Reloads one extension's bindings from the store (another instance changed them), keeping
    /// what the index holds while a local write of it may be missing from the read (see
    /// `applyStored`). Blocking read; call it off the SIP path, never on the registrar's queue.
    public func reload(_ aor: AddressOfRecord) throws {
        let mark = localWriteMark()
        let loaded = try store.loadBindings(for: aor, now: clock())
        queue.async { [self] in _ = replaceStored(aor, with: loaded, since: mark) }
    }

    /// Removes expired bindings now (the timer calls this every `interval`).
    public func expireNow() {
        queue.async { [self] in
            let (changes, events) = core.expire(now: clock())
            guard !changes.isEmpty else { return }
            store.apply(changes) { [self] result in
                if case .success = result { publish(events) }
            }
        }
    }

    /// Starts the expiry timer.
    public func startExpiryTimer(interval: Duration = .seconds(1)) {
        queue.sync {
            let timer = DispatchSource.makeTimerSource(queue: queue)
            let nanoseconds = Int(interval.components.seconds) * 1_000_000_000 + Int(interval.components.attoseconds / 1_000_000_000)
            timer.schedule(deadline: .now() + .nanoseconds(nanoseconds), repeating: .nanoseconds(nanoseconds))
            timer.setEventHandler { [weak self] in self?.expireNow() }
            timer.resume()
            expiryTimer = timer
        }
    }

    public func stopExpiryTimer() {
        queue.sync {
            expiryTimer?.cancel()
            expiryTimer = nil
        }
    }

    private func publish(_ events: [BindingEvent]) {
        queue.async { [self] in
            for event in events {
                for subscriber in subscribers { subscriber(event) }
            }
        }
    }
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
            case .save(let binding): stored[binding.id] = binding
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
