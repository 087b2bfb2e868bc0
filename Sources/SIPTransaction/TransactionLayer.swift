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
/// Each transaction has a slot in its shard (`Table`): its handle and its timers name the slot, so
/// answering, arming a timer and its firing find the transaction without hashing its key, and a
/// timer is a token for the shard's one `TimerTarget`, not a closure of its own.
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
        self.shards = (0..<max(1, shardCount)).map { Shard(index: $0) }
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
            guard state.servers.serial(at: handle.slot) == handle.serial else { return (false, []) }
            let actions = state.servers.update(handle.slot) { $0.machine.sendResponse(response, serialized: serialized) }
            var effects: [Effect] = []
            apply(actions, server: handle.slot, &state, &effects)
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
            guard let slot = state.servers.slot(for: key), let serial = state.servers.update(slot, { $0.accepts(cancel) ? $0.serial : nil })
            else { return nil }
            return ServerTransactionHandle(key: key, serial: serial, slot: slot)
        }
    }

    /// True while the server transaction exists and has sent no final response.
    @inlinable
    public func isAwaitingFinalResponse(_ handle: ServerTransactionHandle) -> Bool {
        shard(for: handle.key).state.withLock { state in
            guard state.servers.serial(at: handle.slot) == handle.serial else { return false }
            return state.servers.update(handle.slot) { entry in entry.machine.lastStatusCode.map { $0 < 200 } ?? true }
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
            guard state.clients.slot(for: key) == nil else { return .failure(.duplicateTransaction) }
            let serial = state.nextSerial()
            var machine: ClientMachine =
                request.method == .invite
                ? .invite(InviteClientTransaction(request: request, isReliable: isReliable, timers: timers))
                : .nonInvite(NonInviteClientTransaction(request: request, isReliable: isReliable, timers: timers))
            let actions = machine.start()
            let slot = state.clients.insert(ClientEntry(key: key, machine: machine, flow: flow, serial: serial, onEvent: onResponse))
            var effects: [Effect] = []
            apply(actions, client: slot, &state, &effects)
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
                for (slot, serial) in state.servers.slots(on: flow) where state.servers.serial(at: slot) == serial {
                    let actions = state.servers.update(slot) { $0.machine.transportError() }
                    apply(actions, server: slot, &state, &effects)
                }
                for (slot, serial) in state.clients.slots(on: flow) where state.clients.serial(at: slot) == serial {
                    let actions = state.clients.update(slot) { $0.machine.transportError() }
                    apply(actions, client: slot, &state, &effects)
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
        if let slot = state.servers.slot(for: key) {
            guard state.servers.update(slot, { $0.accepts(request) }) else {
                // §17.2.3: an RFC 2543 request whose To tag differs matches nothing; only an ACK
                // can then be meaningful (for a 2xx), other clashes cannot get a transaction.
                if request.method == .ack { effects.append(.core(.ack(request, flow: flow))) }
                return
            }
            let actions = state.servers.update(slot) { $0.machine.receivedRequest(request) }
            apply(actions, server: slot, arrivedOn: flow, &state, &effects)
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
        let slot = state.servers.insert(ServerEntry(key: key, machine: machine, flow: flow, serial: state.nextSerial()))
        apply(actions, server: slot, &state, &effects)
    }

    @inlinable
    func receiveResponse(
        _ response: SIPResponse, key: TransactionKey, from flow: Flow, _ state: inout State, _ effects: inout [Effect]
    ) {
        guard let slot = state.clients.slot(for: key) else {
            effects.append(.core(.strayResponse(response, flow: flow)))
            return
        }
        let actions = state.clients.update(slot) { $0.machine.receivedResponse(response) }
        apply(actions, client: slot, &state, &effects)
    }

    // MARK: - Carrying out actions

    /// `arrivedOn` is the flow of the request that caused the actions, reported with an ACK
    /// passed to the core; responses always go back on the flow the transaction began on.
    @inlinable
    func apply(
        _ actions: [ServerTransactionAction], server slot: Int, arrivedOn arrival: Flow? = nil,
        _ state: inout State, _ effects: inout [Effect]
    ) {
        // The slot stays the transaction's through the loop: it is only freed by `.terminated`,
        // which ends it. Parts of the entry are read as an action needs them (a flow or a key
        // copied costs a retain of each of its texts).
        for action in actions {
            switch action {
            case .send(let response):
                effects.append(.send(.response(response), state.servers.update(slot) { $0.flow }))
            case .sendBytes(let bytes):
                effects.append(.sendBytes(bytes, state.servers.update(slot) { $0.flow }))
            case .passToCore(let request):
                let (flow, handle) = state.servers.update(slot) { ($0.flow, ServerTransactionHandle(key: $0.key, serial: $0.serial, slot: slot)) }
                effects.append(.core(request.method == .ack ? .ack(request, flow: arrival ?? flow) : .request(request, handle, flow: flow)))
            case .startTimer(let timer, let delay):
                let armed = arm(timer, after: delay, place: state.place(of: slot, client: false), &state)
                state.servers.update(slot) { $0.timers.arm(armed) }
            case .cancelTimer(let timer):
                state.servers.update(slot) { $0.timers.disarm(timer) }
            case .reportFailure(let failure):
                let handle = state.servers.update(slot) { ServerTransactionHandle(key: $0.key, serial: $0.serial, slot: slot) }
                effects.append(.core(.serverTransactionFailed(handle, failure)))
            case .terminated:
                state.servers.remove(at: slot)?.timers.cancelAll()
                return
            }
        }
    }

    @inlinable
    func apply(
        _ actions: [ClientTransactionAction], client slot: Int, _ state: inout State,
        _ effects: inout [Effect]
    ) {
        for action in actions {
            switch action {
            case .send(let request):
                effects.append(.send(.request(request), state.clients.update(slot) { $0.flow }))
            case .passToCore(let event):
                effects.append(.client(state.clients.update(slot) { $0.onEvent }, event))
            case .startTimer(let timer, let delay):
                let armed = arm(timer, after: delay, place: state.place(of: slot, client: true), &state)
                state.clients.update(slot) { $0.timers.arm(armed) }
            case .cancelTimer(let timer):
                state.clients.update(slot) { $0.timers.disarm(timer) }
            case .terminated:
                state.clients.remove(at: slot)?.timers.cancelAll()
                return
            }
        }
    }

    /// Schedules a transaction's timer as a token of the shard's target: its place (shard, slot,
    /// server or client) and a serial of its own (a firing whose serial no longer matches was
    /// cancelled or restarted meanwhile).
    @inlinable
    func arm(_ timer: TransactionTimer, after delay: Duration, place: UInt64, _ state: inout State) -> ArmedTimer {
        let id = state.nextSerial()
        let scheduled = scheduler.schedule(after: delay, token: TimerToken(place: place, serial: id), for: timerTarget(&state))
        return ArmedTimer(kind: timer, id: id, timer: scheduled)
    }

    /// The shard's timer target, made on its first timer here: made in this (specialised)
    /// method, its closure runs specialised code when a timer fires. It holds the layer weakly.
    @inlinable
    func timerTarget(_ state: inout State) -> TimerTarget {
        if let target = state.timerTarget { return target }
        let target = TimerTarget { [weak self] token in self?.timerFired(token) }
        state.timerTarget = target
        return target
    }

    /// A timer of a transaction fired: found by its token's place, with no key hashed.
    @inlinable
    func timerFired(_ token: TimerToken) {
        let (shardIndex, slot, isClient) = State.unpack(token.place)
        guard shardIndex < shards.count else { return }
        let effects = shards[shardIndex].state.withLock { state -> [Effect] in
            var effects: [Effect] = []
            if isClient {
                // A timer cancelled while its firing was already on its way is stale: ignored.
                guard let timer = state.clients.timerFired(at: slot, id: token.serial) else { return [] }
                let actions = state.clients.update(slot) { $0.machine.timerFired(timer) }
                apply(actions, client: slot, &state, &effects)
            } else {
                guard let timer = state.servers.timerFired(at: slot, id: token.serial) else { return [] }
                let actions = state.servers.update(slot) { $0.machine.timerFired(timer) }
                apply(actions, server: slot, &state, &effects)
            }
            return effects
        }
        perform(effects)
    }

    /// Carries the effects out in order. Each is moved out of the array (taken from its end once
    /// reversed), not copied: a copy retains every text of its flow, message or event, and the
    /// array's release destroys them all again.
    @inlinable
    func perform(_ effects: consuming [Effect]) {
        effects.reverse()
        while let effect = effects.popLast() {
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

    /// The timers one transaction has running: two or three at most, the first held in place (a
    /// non-INVITE server's only one, Timer J, costs no array), the others in a short array searched
    /// in order (no hashing, no dictionary per transaction).
    @usableFromInline
    struct ArmedTimers: Sendable {
        @usableFromInline var first: ArmedTimer?
        @usableFromInline var more: [ArmedTimer] = []

        @usableFromInline
        init() {}

        /// Starts a timer, cancelling the one of the same kind if it runs (a restart).
        @inlinable
        mutating func arm(_ timer: ArmedTimer) {
            if let running = first, running.kind == timer.kind {
                running.timer.cancel()
                first = timer
            } else if let at = more.firstIndex(where: { $0.kind == timer.kind }) {
                more[at].timer.cancel()
                more[at] = timer
            } else if first == nil {
                first = timer
            } else {
                more.append(timer)
            }
        }

        /// Stops the timer of this kind if it runs.
        @inlinable
        mutating func disarm(_ kind: TransactionTimer) {
            if let running = first, running.kind == kind {
                running.timer.cancel()
                first = more.popLast()
            } else if let at = more.firstIndex(where: { $0.kind == kind }) {
                more.remove(at: at).timer.cancel()
            }
        }

        /// The kind of the fired timer when it is one running (then it is forgotten); nil for a
        /// stale firing of a timer since cancelled or restarted.
        @inlinable
        mutating func fired(id: UInt64) -> TransactionTimer? {
            if let running = first, running.id == id {
                first = more.popLast()
                return running.kind
            }
            guard let at = more.firstIndex(where: { $0.id == id }) else { return nil }
            return more.remove(at: at).kind
        }

        @inlinable
        func cancelAll() {
            first?.timer.cancel()
            for armed in more { armed.timer.cancel() }
        }
    }

    /// A server transaction's state machine. Its events take the machine out of the enum
    /// (`consume self`) and put it back changed: matched as `case .x(var machine)` it would be a
    /// copy, retaining its request and response, the old one released when put back.
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
            switch consume self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.start()
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.start()
            }
        }

        @inlinable
        mutating func receivedRequest(_ request: SIPRequest) -> [ServerTransactionAction] {
            switch consume self {
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
            switch consume self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.sendResponse(response)
            case .nonInvite(var machine):
                defer { self = .nonInvite(machine) }
                return machine.sendResponse(serialized ?? SentResponse(response))
            }
        }

        @inlinable
        mutating func timerFired(_ timer: TransactionTimer) -> [ServerTransactionAction] {
            switch consume self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.timerFired(timer)
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.timerFired(timer)
            }
        }

        @inlinable
        mutating func transportError() -> [ServerTransactionAction] {
            switch consume self {
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
            switch consume self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.start()
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.start()
            }
        }

        @inlinable
        mutating func receivedResponse(_ response: SIPResponse) -> [ClientTransactionAction] {
            switch consume self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.receivedResponse(response)
            case .nonInvite(var machine):
                defer { self = .nonInvite(machine) }
                return machine.receivedResponse(response)
            }
        }

        @inlinable
        mutating func timerFired(_ timer: TransactionTimer) -> [ClientTransactionAction] {
            switch consume self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.timerFired(timer)
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.timerFired(timer)
            }
        }

        @inlinable
        mutating func transportError() -> [ClientTransactionAction] {
            switch consume self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.transportError()
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.transportError()
            }
        }
    }

    @usableFromInline
    struct ServerEntry: TransactionEntry {
        @usableFromInline let key: TransactionKey
        @usableFromInline var machine: ServerMachine
        @usableFromInline let flow: Flow
        @usableFromInline let serial: UInt64
        @usableFromInline var timers = ArmedTimers()

        @usableFromInline
        init(key: TransactionKey, machine: ServerMachine, flow: Flow, serial: UInt64) {
            self.key = key
            self.machine = machine
            self.flow = flow
            self.serial = serial
        }

        /// §17.2.3: a cookie key matches outright; an RFC 2543 key also needs the To tag to match
        /// (a non-INVITE transaction gets no ACK: its request's To tag, kept past completion).
        @inlinable
        func accepts(_ request: SIPRequest) -> Bool {
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
    struct ClientEntry: TransactionEntry {
        @usableFromInline let key: TransactionKey
        @usableFromInline var machine: ClientMachine
        @usableFromInline let flow: Flow
        @usableFromInline let serial: UInt64
        @usableFromInline let onEvent: @Sendable (ClientTransactionEvent) -> Void
        @usableFromInline var timers = ArmedTimers()

        @usableFromInline
        init(key: TransactionKey, machine: ClientMachine, flow: Flow, serial: UInt64, onEvent: @escaping @Sendable (ClientTransactionEvent) -> Void) {
            self.key = key
            self.machine = machine
            self.flow = flow
            self.serial = serial
            self.onEvent = onEvent
        }
    }

    /// One independently locked part of the layer: the transactions whose keys hash to it.
    @usableFromInline
    final class Shard: Sendable {
        @usableFromInline let state: PthreadLocked<State>

        @usableFromInline
        init(index: Int) {
            state = PthreadLocked(State(index: index))
        }
    }

    /// One shard's transactions, servers and clients each in a `Table`. Serials (of transactions
    /// and timers) are unique within the shard, which is all a handle needs: its key names the
    /// shard, its slot the transaction there.
    @usableFromInline
    struct State: Sendable {
        @usableFromInline var servers = Table<ServerEntry>()
        @usableFromInline var clients = Table<ClientEntry>()
        @usableFromInline var serial: UInt64 = 0
        /// The shard's place among the layer's shards (it goes in its timers' tokens).
        @usableFromInline let index: Int
        /// Where the shard's timers fire (`TransactionLayer.timerTarget`), made on the first one.
        @usableFromInline var timerTarget: TimerTarget?

        @usableFromInline
        init(index: Int) {
            self.index = index
        }

        /// Adds the flows with at least one transaction here (what the index holds; for tests).
        func collectIndexedFlows(into flows: inout Set<Flow>) {
            flows.formUnion(servers.firstByFlow.keys)
            flows.formUnion(clients.firstByFlow.keys)
        }

        /// A timer token's place: the slot, the shard, and whether it is a client's.
        @inlinable
        func place(of slot: Int, client: Bool) -> UInt64 {
            UInt64(slot) << 32 | UInt64(index) << 1 | (client ? 1 : 0)
        }

        /// The shard, slot and client flag of a place.
        @inlinable
        static func unpack(_ place: UInt64) -> (shard: Int, slot: Int, isClient: Bool) {
            (Int(UInt32(truncatingIfNeeded: place) >> 1), Int(place >> 32), place & 1 == 1)
        }

        /// A number never handed out before: transaction serials and timer ids.
        @inlinable
        mutating func nextSerial() -> UInt64 {
            serial += 1
            return serial
        }
    }

    /// The transactions of one kind (servers or clients) of a shard: each in a slot of `slots`
    /// (reused once free), found by key through `byKey`, and listed by flow: `firstByFlow` holds a
    /// flow's first slot and `links` each slot's next and previous of its flow, so adding and
    /// removing a transaction costs at most one lookup of its flow (none when it is neither the
    /// first of its flow nor the last one left), and failing a flow visits only its transactions.
    /// Each slot's serial (0 when free) and links are kept beside the entries, in arrays of plain
    /// numbers: checking a handle and following a flow's list read no entry (reading one out of
    /// the array copies it, retaining each of its texts). An entry is added and removed only
    /// through `insert` and `remove`, which keep all of it in step; `update` changes one in place
    /// (never its key or flow).
    @usableFromInline
    struct Table<Entry: TransactionEntry>: Sendable where Entry.EntryFlow == Flow {
        @usableFromInline var slots: [Entry?] = []
        @usableFromInline var serials: [UInt64] = []
        @usableFromInline var links: [FlowLinks] = []
        @usableFromInline var free: [Int] = []
        @usableFromInline var byKey: [TransactionKey: Int] = [:]
        @usableFromInline var firstByFlow: [Flow: Int] = [:]

        @usableFromInline
        init() {}

        @inlinable
        var count: Int { byKey.count }

        @inlinable
        func slot(for key: TransactionKey) -> Int? { byKey[key] }

        /// The serial of the transaction in `slot`; nil when the slot is free (or out of range).
        @inlinable
        func serial(at slot: Int) -> UInt64? {
            slot >= 0 && slot < serials.count && serials[slot] != 0 ? serials[slot] : nil
        }

        /// Reads or changes the entry in `slot` in place (through the array's modify accessor:
        /// nothing of the entry is copied but what `body` takes). The slot must hold one.
        @inlinable
        @discardableResult
        mutating func update<Result>(_ slot: Int, _ body: (inout Entry) -> Result) -> Result {
            body(&slots[slot]!)
        }

        /// The fired timer's kind when `id` is a timer the entry in `slot` has running (then it
        /// is forgotten); nil for a free slot or a stale timer.
        @inlinable
        mutating func timerFired(at slot: Int, id: UInt64) -> TransactionTimer? {
            guard serial(at: slot) != nil else { return nil }
            return update(slot) { $0.timers.fired(id: id) }
        }

        /// Adds a transaction (its key is not in the table) and returns its slot.
        @inlinable
        mutating func insert(_ entry: consuming Entry) -> Int {
            let slot = free.popLast() ?? slots.count
            byKey[entry.key] = slot
            let next = Self.exchange(&firstByFlow[entry.flow, default: -1], slot)
            if next >= 0 { links[next].previous = slot }
            if slot == slots.count {
                serials.append(entry.serial)
                links.append(FlowLinks(previous: -1, next: next))
                slots.append(entry)
            } else {
                serials[slot] = entry.serial
                links[slot] = FlowLinks(previous: -1, next: next)
                slots[slot] = entry
            }
            return slot
        }

        /// Removes the transaction in `slot`, returning it (nil when the slot is free).
        @inlinable
        mutating func remove(at slot: Int) -> Entry? {
            guard serial(at: slot) != nil else { return nil }
            var taken: Entry?
            swap(&taken, &slots[slot])
            guard let entry = consume taken else { return nil }
            serials[slot] = 0
            free.append(slot)
            byKey.removeValue(forKey: entry.key)
            let link = links[slot]
            if link.next >= 0 { links[link.next].previous = link.previous }
            if link.previous >= 0 {
                links[link.previous].next = link.next
            } else if link.next >= 0 {
                firstByFlow[entry.flow] = link.next
            } else {
                firstByFlow.removeValue(forKey: entry.flow)
            }
            return entry
        }

        /// The slots (with their serials) of the transactions on `flow`: one lookup, then the links.
        @inlinable
        func slots(on flow: Flow) -> [(slot: Int, serial: UInt64)] {
            var found: [(slot: Int, serial: UInt64)] = []
            var next = firstByFlow[flow] ?? -1
            while next >= 0 {
                found.append((next, serials[next]))
                next = links[next].next
            }
            return found
        }

        /// Sets `value` to `new`, returning what it was.
        @inlinable
        static func exchange(_ value: inout Int, _ new: Int) -> Int {
            defer { value = new }
            return value
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

/// A transaction as a `TransactionLayer.Table` holds it: found by its key, listed by its flow,
/// told apart from a later one in its slot by its serial, its timers changed in place.
@usableFromInline
protocol TransactionEntry: Sendable {
    associatedtype EntryFlow: Hashable & Sendable
    var key: TransactionKey { get }
    var flow: EntryFlow { get }
    var serial: UInt64 { get }
    var timers: TransactionLayer<EntryFlow>.ArmedTimers { get set }
}

/// A slot's neighbours among its flow's transactions in a `TransactionLayer.Table`: their slots,
/// -1 for none. A value.
@usableFromInline
struct FlowLinks: Sendable {
    @usableFromInline var previous: Int
    @usableFromInline var next: Int

    @inlinable
    init(previous: Int = -1, next: Int = -1) {
        self.previous = previous
        self.next = next
    }
}
