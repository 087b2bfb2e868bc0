public import SIPMessage
public import Synchronization

/// Owns every server and client transaction (RFC 3261 §17): matches incoming messages to them
/// (§17.1.3, §17.2.3), drives their state machines, runs their timers through the injected
/// `TimerScheduler`, and forgets each one when it terminates.
///
/// Threading: every method is thread-safe and never blocks beyond a short locked section that
/// does no I/O; `send`, `core` and `onResponse` closures run after the lock is released, on the
/// thread that caused them (the transport's event loop, a timer's queue, a caller of `respond`),
/// so they may call back into the layer and must not block. There is no lock over the whole
/// layer: transactions are spread over `shardCount` shards by their key's hash, each with its own
/// lock (`PthreadLocked`), so several SIP loops (and the registrar answering) work on different transactions at
/// once and meet only when two keys fall in the same shard. One call holds at most one shard's
/// lock at a time (`transportFailed` visits the shards one after the other).
///
/// The methods are `@inlinable` so that the module that picks `Flow` (SIPService's `FlowID`)
/// compiles them specialised: unspecialised, every dictionary access and every `Effect` array
/// went through generic metadata lookups and value witnesses (profiled: a quarter of a
/// REGISTER's instructions were in this class).
public final class TransactionLayer<Flow: Hashable & Sendable>: Sendable {
    /// Hands a message's bytes to the transport for the flow; must not block. Messages are
    /// serialized outside the layer's locks (a non-INVITE response before taking its shard's lock,
    /// since the transaction keeps the bytes; everything else as the effects are carried out).
    public typealias Send = @Sendable ([UInt8], Flow) -> Void
    /// Receives what the layer passes up; must not block.
    public typealias Core = @Sendable (TransactionLayerEvent<Flow>) -> Void

    /// How many shards a layer has unless told otherwise: enough that loops on every core rarely
    /// meet in one, few enough that the per-shard indexes stay small.
    public static var defaultShardCount: Int { 32 }

    @usableFromInline let timers: TransactionTimers
    @usableFromInline let scheduler: any TimerScheduler
    @usableFromInline let send: Send
    @usableFromInline let core: Core
    @usableFromInline let shards: [Shard]

    /// - Parameter shardCount: how many independently locked parts the transactions are spread
    ///   over (at least 1; 1 gives one lock for everything).
    public init(
        timers: TransactionTimers, scheduler: any TimerScheduler, shardCount: Int = TransactionLayer.defaultShardCount,
        send: @escaping Send, core: @escaping Core
    ) {
        self.timers = timers
        self.scheduler = scheduler
        self.send = send
        self.core = core
        self.shards = (0..<max(1, shardCount)).map { _ in Shard() }
    }

    /// How many shards the transactions are spread over.
    public var shardCount: Int { shards.count }

    /// The shard a key belongs to: its cached hash, so choosing costs no hashing.
    @inlinable
    func shard(for key: TransactionKey) -> Shard {
        shards[Int(UInt(bitPattern: key.hash) % UInt(shards.count))]
    }

    /// The index of the shard a key belongs to (for tests of the spreading).
    public func shardIndex(of key: TransactionKey) -> Int {
        Int(UInt(bitPattern: key.hash) % UInt(shards.count))
    }

    /// Server and client transactions not yet terminated.
    public var activeTransactionCount: Int {
        shards.reduce(0) { total, shard in total + shard.state.withLock { $0.servers.count + $0.clients.count } }
    }

    /// Flows that have at least one transaction not yet terminated (the flow index's size).
    public var flowsWithTransactions: Int {
        var flows = Set<Flow>()
        for shard in shards { shard.state.withLock { $0.collectIndexedFlows(into: &flows) } }
        return flows.count
    }

    /// Takes a message from the transport. Requests create or match server transactions
    /// (retransmissions are absorbed and answered with the last response, §17.2.1, §17.2.2; an
    /// ACK for a non-2xx final is absorbed, an ACK matching nothing goes to the core). Responses
    /// go to the client transaction they match, or to the core as stray. Requests without a top
    /// Via or CSeq cannot be matched and are dropped (the parser rejects them first).
    @inlinable
    public func receive(_ message: SIPMessage, from flow: Flow, isReliable: Bool) {
        switch message {
        case .request(let request):
            receive(request, topVia: request.topVia, from: flow, isReliable: isReliable)
        case .response(let response):
            guard let key = TransactionKey.client(for: response) else {
                core(.strayResponse(response, flow: flow))
                return
            }
            let effects = shard(for: key).state.withLock { state -> [Effect] in
                var effects: [Effect] = []
                receiveResponse(response, key: key, from: flow, &state, &effects)
                return effects
            }
            perform(effects)
        }
    }

    /// Takes a request whose top Via the caller has already parsed (the transport's path parses
    /// it once to note the source, RFC 3261 §18.2.1): as `receive(_:from:isReliable:)`, without
    /// parsing it again. `topVia` must be the request's top Via as it now stands.
    @inlinable
    public func receive(_ request: SIPRequest, topVia: SIPVia?, from flow: Flow, isReliable: Bool) {
        guard let key = TransactionKey.server(for: request, topVia: topVia) else { return }
        let effects = shard(for: key).state.withLock { state -> [Effect] in
            var effects: [Effect] = []
            receiveRequest(request, key: key, from: flow, isReliable: isReliable, &state, &effects)
            return effects
        }
        perform(effects)
    }

    /// Sends a response through a server transaction, from any thread. Returns false when the
    /// transaction is gone or its state ignores the response (e.g. a second final response).
    @inlinable
    @discardableResult
    public func respond(_ response: SIPResponse, to handle: ServerTransactionHandle) -> Bool {
        // Serialized before the lock: a non-INVITE transaction keeps (and resends) these bytes.
        let serialized = handle.key.isInvite ? nil : SentResponse(response)
        let (sent, effects) = shard(for: handle.key).state.withLock { state -> (Bool, [Effect]) in
            guard let index = state.servers.index(forKey: handle.key), State.peek(&state.servers.values[index], { $0.serial }) == handle.serial
            else { return (false, []) }
            let actions = state.servers.values[index].machine.sendResponse(response, serialized: serialized)
            var effects: [Effect] = []
            apply(actions, server: handle.key, &state, &effects)
            return (!actions.isEmpty, effects)
        }
        perform(effects)
        return sent
    }

    /// The INVITE server transaction a CANCEL cancels (§9.2), if it still exists. The core answers
    /// the CANCEL itself (200, or 481 when this is nil) and then, if the INVITE has no final
    /// response yet, sends 487 to it.
    @inlinable
    public func inviteTransaction(cancelledBy cancel: SIPRequest) -> ServerTransactionHandle? {
        guard let key = TransactionKey.inviteServer(cancelledBy: cancel) else { return nil }
        return shard(for: key).state.withLock { state in
            guard let index = state.servers.index(forKey: key),
                let serial = State.peek(&state.servers.values[index], { $0.accepts(cancel, key: key) ? $0.serial : nil })
            else { return nil }
            return ServerTransactionHandle(key: key, serial: serial)
        }
    }

    /// True while the server transaction exists and has sent no final response.
    @inlinable
    public func isAwaitingFinalResponse(_ handle: ServerTransactionHandle) -> Bool {
        shard(for: handle.key).state.withLock { state in
            guard let index = state.servers.index(forKey: handle.key) else { return false }
            return State.peek(&state.servers.values[index]) { entry in
                entry.serial == handle.serial && (entry.machine.lastStatusCode.map { $0 < 200 } ?? true)
            }
        }
    }

    /// Starts a client transaction (§17.1.1 for INVITE, §17.1.2 otherwise) and sends the request.
    /// The caller has put the top Via with a unique `z9hG4bK` branch (§8.1.1.7, §16.6 step 8);
    /// the layer never invents one. `onResponse` gets the responses, or a locally built 408 on
    /// timer B/F and 503 on a transport error; it runs without the layer's lock held.
    @inlinable
    @discardableResult
    public func sendRequest(
        _ request: SIPRequest, over flow: Flow, isReliable: Bool,
        onResponse: @escaping @Sendable (ClientTransactionEvent) -> Void
    ) throws(TransactionLayerError) -> ClientTransactionHandle {
        guard request.method != .ack else { throw .ackIsNotATransaction }
        guard let key = TransactionKey.client(for: request), request.cseq != nil else { throw .missingBranch }
        let timers = self.timers
        let result = shard(for: key).state.withLock { state -> Result<(ClientTransactionHandle, [Effect]), TransactionLayerError> in
            guard state.clients.index(forKey: key) == nil else { return .failure(.duplicateTransaction) }
            let serial = state.nextSerial()
            var machine: ClientMachine =
                request.method == .invite
                ? .invite(InviteClientTransaction(request: request, isReliable: isReliable, timers: timers))
                : .nonInvite(NonInviteClientTransaction(request: request, isReliable: isReliable, timers: timers))
            let actions = machine.start()
            state.insertClient(ClientEntry(machine: machine, flow: flow, serial: serial, onEvent: onResponse), for: key)
            var effects: [Effect] = []
            apply(actions, client: key, &state, &effects)
            return .success((ClientTransactionHandle(key: key, serial: serial), effects))
        }
        switch result {
        case .success(let (handle, effects)):
            perform(effects)
            return handle
        case .failure(let error):
            throw error
        }
    }

    /// The transport lost the flow (a TCP/TLS connection closed, or a send failed): every
    /// transaction on it gets a transport error (§17.1.4, §17.2.4). Only that flow's transactions
    /// are visited (found by each shard's flow index), never every transaction the layer holds:
    /// this runs on a transport loop thread whenever a connection closes, and with tens of
    /// thousands of transactions waiting out their timers a scan held up the next message by tens
    /// of ms. The shards are visited one after the other, each lock held only for its own part.
    @inlinable
    public func transportFailed(on flow: Flow) {
        for shard in shards {
            let effects = shard.state.withLock { state -> [Effect] in
                var effects: [Effect] = []
                for key in state.serverKeys(on: flow) {
                    guard let index = state.servers.index(forKey: key) else { continue }
                    let actions = state.servers.values[index].machine.transportError()
                    apply(actions, server: key, &state, &effects)
                }
                for key in state.clientKeys(on: flow) {
                    guard let index = state.clients.index(forKey: key) else { continue }
                    let actions = state.clients.values[index].machine.transportError()
                    apply(actions, client: key, &state, &effects)
                }
                return effects
            }
            perform(effects)
        }
    }

    // MARK: - Matching

    @inlinable
    func receiveRequest(
        _ request: SIPRequest, key: TransactionKey, from flow: Flow, isReliable: Bool, _ state: inout State,
        _ effects: inout [Effect]
    ) {
        if let index = state.servers.index(forKey: key) {
            guard State.peek(&state.servers.values[index], { $0.accepts(request, key: key) }) else {
                // §17.2.3: an RFC 2543 request whose To tag differs matches nothing; only an ACK
                // can then be meaningful (for a 2xx), other clashes cannot get a transaction.
                if request.method == .ack { effects.append(.core(.ack(request, flow: flow))) }
                return
            }
            let actions = state.servers.values[index].machine.receivedRequest(request)
            apply(actions, server: key, arrivedOn: flow, &state, &effects)
            return
        }
        if request.method == .ack {
            // §17.2.3 / §17.1.1.3: an ACK matching no transaction is for a 2xx; the core takes it.
            effects.append(.core(.ack(request, flow: flow)))
            return
        }
        var machine: ServerMachine =
            request.method == .invite
            ? .invite(InviteServerTransaction(request: request, isReliable: isReliable, timers: timers))
            : .nonInvite(NonInviteServerTransaction(request: request, isReliable: isReliable, timers: timers, matchesToTag: key.isRFC2543))
        let actions = machine.start()
        state.insertServer(ServerEntry(machine: machine, flow: flow, serial: state.nextSerial()), for: key)
        apply(actions, server: key, &state, &effects)
    }

    @inlinable
    func receiveResponse(
        _ response: SIPResponse, key: TransactionKey, from flow: Flow, _ state: inout State, _ effects: inout [Effect]
    ) {
        guard let index = state.clients.index(forKey: key) else {
            effects.append(.core(.strayResponse(response, flow: flow)))
            return
        }
        let actions = state.clients.values[index].machine.receivedResponse(response)
        apply(actions, client: key, &state, &effects)
    }

    // MARK: - Carrying out actions

    /// `arrivedOn` is the flow of the request that caused the actions, reported with an ACK
    /// passed to the core; responses always go back on the flow the transaction began on.
    @inlinable
    func apply(
        _ actions: [ServerTransactionAction], server key: TransactionKey, arrivedOn arrival: Flow? = nil,
        _ state: inout State, _ effects: inout [Effect]
    ) {
        // The dictionary index stays valid through the loop: nothing is inserted or removed in it
        // until `.terminated`, which ends it.
        guard let index = state.servers.index(forKey: key) else { return }
        let (flow, serial) = State.peek(&state.servers.values[index]) { ($0.flow, $0.serial) }
        let handle = ServerTransactionHandle(key: key, serial: serial)
        for action in actions {
            switch action {
            case .send(let response):
                effects.append(.send(.response(response), flow))
            case .sendBytes(let bytes):
                effects.append(.sendBytes(bytes, flow))
            case .passToCore(let request):
                effects.append(
                    .core(
                        request.method == .ack
                            ? .ack(request, flow: arrival ?? flow)
                            : .request(request, handle, flow: flow)))
            case .startTimer(let timer, let delay):
                let id = state.nextSerial()
                let scheduled = scheduler.schedule(after: delay) { [weak self] in
                    self?.serverTimerFired(timer, id: id, key: key)
                }
                state.servers.values[index].timers.arm(ArmedTimer(kind: timer, id: id, timer: scheduled))
            case .cancelTimer(let timer):
                state.servers.values[index].timers.disarm(timer)
            case .reportFailure(let failure):
                effects.append(.core(.serverTransactionFailed(handle, failure)))
            case .terminated:
                state.removeServer(key)?.timers.cancelAll()
                return
            }
        }
    }

    @inlinable
    func apply(
        _ actions: [ClientTransactionAction], client key: TransactionKey, _ state: inout State,
        _ effects: inout [Effect]
    ) {
        guard let index = state.clients.index(forKey: key) else { return }
        let (flow, onEvent) = State.peek(&state.clients.values[index]) { ($0.flow, $0.onEvent) }
        for action in actions {
            switch action {
            case .send(let request):
                effects.append(.send(.request(request), flow))
            case .passToCore(let event):
                effects.append(.client(onEvent, event))
            case .startTimer(let timer, let delay):
                let id = state.nextSerial()
                let scheduled = scheduler.schedule(after: delay) { [weak self] in
                    self?.clientTimerFired(timer, id: id, key: key)
                }
                state.clients.values[index].timers.arm(ArmedTimer(kind: timer, id: id, timer: scheduled))
            case .cancelTimer(let timer):
                state.clients.values[index].timers.disarm(timer)
            case .terminated:
                state.removeClient(key)?.timers.cancelAll()
                return
            }
        }
    }

    @inlinable
    func serverTimerFired(_ timer: TransactionTimer, id: UInt64, key: TransactionKey) {
        let effects = shard(for: key).state.withLock { state -> [Effect] in
            // A timer cancelled while its body was already on its way is stale: ignore it.
            guard let index = state.servers.index(forKey: key), state.servers.values[index].timers.fired(timer, id: id)
            else { return [] }
            let actions = state.servers.values[index].machine.timerFired(timer)
            var effects: [Effect] = []
            apply(actions, server: key, &state, &effects)
            return effects
        }
        perform(effects)
    }

    @inlinable
    func clientTimerFired(_ timer: TransactionTimer, id: UInt64, key: TransactionKey) {
        let effects = shard(for: key).state.withLock { state -> [Effect] in
            guard let index = state.clients.index(forKey: key), state.clients.values[index].timers.fired(timer, id: id)
            else { return [] }
            let actions = state.clients.values[index].machine.timerFired(timer)
            var effects: [Effect] = []
            apply(actions, client: key, &state, &effects)
            return effects
        }
        perform(effects)
    }

    @inlinable
    func perform(_ effects: [Effect]) {
        for effect in effects {
            switch effect {
            case .send(let message, let flow): send(SIPSerializer.serialize(message), flow)
            case .sendBytes(let bytes, let flow): send(bytes, flow)
            case .core(let event): core(event)
            case .client(let onEvent, let event): onEvent(event)
            }
        }
    }

    // MARK: - State

    /// A timer a transaction has running: which one, its id (a fired body whose id no longer
    /// matches was cancelled or restarted meanwhile), and the scheduler's handle.
    @usableFromInline
    struct ArmedTimer: Sendable {
        @usableFromInline let kind: TransactionTimer
        @usableFromInline let id: UInt64
        @usableFromInline let timer: any ScheduledTimer

        @usableFromInline
        init(kind: TransactionTimer, id: UInt64, timer: any ScheduledTimer) {
            self.kind = kind
            self.id = id
            self.timer = timer
        }
    }

    /// The timers one transaction has running: two or three at most, so a short array searched
    /// in order (no hashing, no dictionary per transaction).
    @usableFromInline
    struct ArmedTimers: Sendable {
        @usableFromInline var running: [ArmedTimer] = []

        @usableFromInline
        init() {}

        /// Starts a timer, cancelling the one of the same kind if it runs (a restart).
        @inlinable
        mutating func arm(_ timer: ArmedTimer) {
            if let at = running.firstIndex(where: { $0.kind == timer.kind }) {
                running[at].timer.cancel()
                running[at] = timer
            } else {
                running.append(timer)
            }
        }

        /// Stops the timer of this kind if it runs.
        @inlinable
        mutating func disarm(_ kind: TransactionTimer) {
            guard let at = running.firstIndex(where: { $0.kind == kind }) else { return }
            running.remove(at: at).timer.cancel()
        }

        /// True when the fired timer is the one running (then it is forgotten); false for a
        /// stale body of a timer since cancelled or restarted.
        @inlinable
        mutating func fired(_ kind: TransactionTimer, id: UInt64) -> Bool {
            guard let at = running.firstIndex(where: { $0.kind == kind }), running[at].id == id else { return false }
            running.remove(at: at)
            return true
        }

        @inlinable
        func cancelAll() {
            for armed in running { armed.timer.cancel() }
        }
    }

    @usableFromInline
    enum ServerMachine: Sendable {
        case invite(InviteServerTransaction)
        case nonInvite(NonInviteServerTransaction)

        @inlinable
        var lastStatusCode: Int? {
            switch self {
            case .invite(let machine): return machine.lastResponse?.statusCode
            case .nonInvite(let machine): return machine.lastResponse?.statusCode
            }
        }

        @inlinable
        mutating func start() -> [ServerTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.start()
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.start()
            }
        }

        @inlinable
        mutating func receivedRequest(_ request: SIPRequest) -> [ServerTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.receivedRequest(request)
            case .nonInvite(var machine):
                defer { self = .nonInvite(machine) }
                return machine.receivedRequest(request)
            }
        }

        /// `serialized` is `response` serialized (nil for an INVITE transaction, which keeps the
        /// response itself: its ACK matching reads the To tag).
        @inlinable
        mutating func sendResponse(_ response: SIPResponse, serialized: SentResponse?) -> [ServerTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.sendResponse(response)
            case .nonInvite(var machine):
                defer { self = .nonInvite(machine) }
                return machine.sendResponse(serialized ?? SentResponse(response))
            }
        }

        @inlinable
        mutating func timerFired(_ timer: TransactionTimer) -> [ServerTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.timerFired(timer)
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.timerFired(timer)
            }
        }

        @inlinable
        mutating func transportError() -> [ServerTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.transportError()
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.transportError()
            }
        }
    }

    @usableFromInline
    enum ClientMachine: Sendable {
        case invite(InviteClientTransaction)
        case nonInvite(NonInviteClientTransaction)

        @inlinable
        mutating func start() -> [ClientTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.start()
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.start()
            }
        }

        @inlinable
        mutating func receivedResponse(_ response: SIPResponse) -> [ClientTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.receivedResponse(response)
            case .nonInvite(var machine):
                defer { self = .nonInvite(machine) }
                return machine.receivedResponse(response)
            }
        }

        @inlinable
        mutating func timerFired(_ timer: TransactionTimer) -> [ClientTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.timerFired(timer)
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.timerFired(timer)
            }
        }

        @inlinable
        mutating func transportError() -> [ClientTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.transportError()
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.transportError()
            }
        }
    }

    @usableFromInline
    struct ServerEntry: Sendable {
        @usableFromInline var machine: ServerMachine
        @usableFromInline let flow: Flow
        @usableFromInline let serial: UInt64
        @usableFromInline var timers = ArmedTimers()

        @usableFromInline
        init(machine: ServerMachine, flow: Flow, serial: UInt64) {
            self.machine = machine
            self.flow = flow
            self.serial = serial
        }

        /// §17.2.3: a cookie key matches outright; an RFC 2543 key also needs the To tag to match
        /// (a non-INVITE transaction gets no ACK: its request's To tag, kept past completion).
        @inlinable
        func accepts(_ request: SIPRequest, key: TransactionKey) -> Bool {
            guard key.isRFC2543 else { return true }
            switch machine {
            case .invite(let invite):
                return TransactionKey.rfc2543ToTagMatches(request, transactionRequest: invite.request, lastResponse: invite.lastResponse)
            case .nonInvite(let nonInvite):
                return request.to?.tag == (nonInvite.request.map { $0.to?.tag } ?? nonInvite.requestToTag)
            }
        }
    }

    @usableFromInline
    struct ClientEntry: Sendable {
        @usableFromInline var machine: ClientMachine
        @usableFromInline let flow: Flow
        @usableFromInline let serial: UInt64
        @usableFromInline let onEvent: @Sendable (ClientTransactionEvent) -> Void
        @usableFromInline var timers = ArmedTimers()

        @usableFromInline
        init(machine: ClientMachine, flow: Flow, serial: UInt64, onEvent: @escaping @Sendable (ClientTransactionEvent) -> Void) {
            self.machine = machine
            self.flow = flow
            self.serial = serial
            self.onEvent = onEvent
        }
    }

    /// One independently locked part of the layer: the transactions whose keys hash to it.
    @usableFromInline
    final class Shard: Sendable {
        @usableFromInline let state = PthreadLocked(State())

        @usableFromInline
        init() {}
    }

    /// One shard's transactions by key, and their keys by flow. An entry is added and removed
    /// only through `insert…` and `remove…`, which keep the flow index in step; updating an entry
    /// in place keeps its flow (a transaction never changes flow). Serials (of transactions and
    /// timers) are unique within the shard, which is all a handle needs: its key names the shard.
    @usableFromInline
    struct State: Sendable {
        @usableFromInline var servers: [TransactionKey: ServerEntry] = [:]
        @usableFromInline var clients: [TransactionKey: ClientEntry] = [:]
        @usableFromInline var serverKeysByFlow: [Flow: Set<TransactionKey>] = [:]
        @usableFromInline var clientKeysByFlow: [Flow: Set<TransactionKey>] = [:]
        @usableFromInline var serial: UInt64 = 0

        @usableFromInline
        init() {}

        /// Adds the flows with at least one transaction here (what the index holds; for tests).
        func collectIndexedFlows(into flows: inout Set<Flow>) {
            flows.formUnion(serverKeysByFlow.keys)
            flows.formUnion(clientKeysByFlow.keys)
        }

        @inlinable
        mutating func insertServer(_ entry: ServerEntry, for key: TransactionKey) {
            servers[key] = entry
            serverKeysByFlow[entry.flow, default: []].insert(key)
        }

        @inlinable
        mutating func insertClient(_ entry: ClientEntry, for key: TransactionKey) {
            clients[key] = entry
            clientKeysByFlow[entry.flow, default: []].insert(key)
        }

        @inlinable
        mutating func removeServer(_ key: TransactionKey) -> ServerEntry? {
            guard let entry = servers.removeValue(forKey: key) else { return nil }
            Self.unindex(key, of: entry.flow, in: &serverKeysByFlow)
            return entry
        }

        @inlinable
        mutating func removeClient(_ key: TransactionKey) -> ClientEntry? {
            guard let entry = clients.removeValue(forKey: key) else { return nil }
            Self.unindex(key, of: entry.flow, in: &clientKeysByFlow)
            return entry
        }

        @inlinable
        func serverKeys(on flow: Flow) -> Set<TransactionKey> { serverKeysByFlow[flow] ?? [] }
        @inlinable
        func clientKeys(on flow: Flow) -> Set<TransactionKey> { clientKeysByFlow[flow] ?? [] }

        /// Hashes the flow once (through the dictionary's index), not once per step.
        @inlinable
        static func unindex(_ key: TransactionKey, of flow: Flow, in index: inout [Flow: Set<TransactionKey>]) {
            guard let at = index.index(forKey: flow) else { return }
            index.values[at].remove(key)
            if index.values[at].isEmpty { index.remove(at: at) }
        }

        /// Reads part of an entry in place. `servers.values[index].flow` goes through the
        /// dictionary's getter, which copies the whole entry (its request and last response,
        /// retained and released again: profiled at ~1.5k instructions a read); passed `inout`,
        /// the entry is reached through the modify accessor and not copied.
        @inlinable
        static func peek<Entry, Part>(_ entry: inout Entry, _ part: (inout Entry) -> Part) -> Part {
            part(&entry)
        }

        /// A number never handed out before: transaction serials and timer ids.
        @inlinable
        mutating func nextSerial() -> UInt64 {
            serial += 1
            return serial
        }
    }

    @usableFromInline
    enum Effect: Sendable {
        case send(SIPMessage, Flow)
        case sendBytes([UInt8], Flow)
        case core(TransactionLayerEvent<Flow>)
        case client(@Sendable (ClientTransactionEvent) -> Void, ClientTransactionEvent)
    }
}
