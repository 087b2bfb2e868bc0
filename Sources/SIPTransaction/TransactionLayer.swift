public import SIPMessage
import Synchronization

/// Owns every server and client transaction (RFC 3261 §17): matches incoming messages to them
/// (§17.1.3, §17.2.3), drives their state machines, runs their timers through the injected
/// `TimerScheduler`, and forgets each one when it terminates.
///
/// Threading: every method is thread-safe and never blocks beyond a short `Mutex` section that
/// does no I/O; `send`, `core` and `onResponse` closures run after the lock is released, on the
/// thread that caused them (the transport's event loop, a timer's queue, a caller of `respond`),
/// so they may call back into the layer and must not block.
public final class TransactionLayer<Flow: Hashable & Sendable>: Sendable {
    /// Hands a message to the transport for the flow; must not block.
    public typealias Send = @Sendable (SIPMessage, Flow) -> Void
    /// Receives what the layer passes up; must not block.
    public typealias Core = @Sendable (TransactionLayerEvent<Flow>) -> Void

    private let timers: TransactionTimers
    private let scheduler: any TimerScheduler
    private let send: Send
    private let core: Core
    private let state = Mutex(State())

    public init(timers: TransactionTimers, scheduler: any TimerScheduler, send: @escaping Send, core: @escaping Core) {
        self.timers = timers
        self.scheduler = scheduler
        self.send = send
        self.core = core
    }

    /// Server and client transactions not yet terminated.
    public var activeTransactionCount: Int {
        state.withLock { $0.servers.count + $0.clients.count }
    }

    /// Flows that have at least one transaction not yet terminated (the flow index's size).
    public var flowsWithTransactions: Int {
        state.withLock { $0.indexedFlowCount }
    }

    /// Takes a message from the transport. Requests create or match server transactions
    /// (retransmissions are absorbed and answered with the last response, §17.2.1, §17.2.2; an
    /// ACK for a non-2xx final is absorbed, an ACK matching nothing goes to the core). Responses
    /// go to the client transaction they match, or to the core as stray. Requests without a top
    /// Via or CSeq cannot be matched and are dropped (the parser rejects them first).
    public func receive(_ message: SIPMessage, from flow: Flow, isReliable: Bool) {
        let effects = state.withLock { state -> [Effect] in
            var effects: [Effect] = []
            switch message {
            case .request(let request):
                receiveRequest(request, from: flow, isReliable: isReliable, &state, &effects)
            case .response(let response):
                receiveResponse(response, from: flow, &state, &effects)
            }
            return effects
        }
        perform(effects)
    }

    /// Sends a response through a server transaction, from any thread. Returns false when the
    /// transaction is gone or its state ignores the response (e.g. a second final response).
    @discardableResult
    public func respond(_ response: SIPResponse, to handle: ServerTransactionHandle) -> Bool {
        let (sent, effects) = state.withLock { state -> (Bool, [Effect]) in
            guard var entry = state.servers[handle.key], entry.serial == handle.serial else { return (false, []) }
            let actions = entry.machine.sendResponse(response)
            state.servers[handle.key] = entry
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
    public func inviteTransaction(cancelledBy cancel: SIPRequest) -> ServerTransactionHandle? {
        guard let key = TransactionKey.inviteServer(cancelledBy: cancel) else { return nil }
        return state.withLock { state in
            guard let entry = state.servers[key], entry.accepts(cancel, key: key) else { return nil }
            return ServerTransactionHandle(key: key, serial: entry.serial)
        }
    }

    /// True while the server transaction exists and has sent no final response.
    public func isAwaitingFinalResponse(_ handle: ServerTransactionHandle) -> Bool {
        state.withLock { state in
            guard let entry = state.servers[handle.key], entry.serial == handle.serial else { return false }
            return entry.machine.lastResponse.map { $0.statusCode < 200 } ?? true
        }
    }

    /// Starts a client transaction (§17.1.1 for INVITE, §17.1.2 otherwise) and sends the request.
    /// The caller has put the top Via with a unique `z9hG4bK` branch (§8.1.1.7, §16.6 step 8);
    /// the layer never invents one. `onResponse` gets the responses, or a locally built 408 on
    /// timer B/F and 503 on a transport error; it runs without the layer's lock held.
    @discardableResult
    public func sendRequest(
        _ request: SIPRequest, over flow: Flow, isReliable: Bool,
        onResponse: @escaping @Sendable (ClientTransactionEvent) -> Void
    ) throws(TransactionLayerError) -> ClientTransactionHandle {
        guard request.method != .ack else { throw .ackIsNotATransaction }
        guard let key = TransactionKey.client(for: request), request.cseq != nil else { throw .missingBranch }
        let result = state.withLock { state -> Result<(ClientTransactionHandle, [Effect]), TransactionLayerError> in
            guard state.clients[key] == nil else { return .failure(.duplicateTransaction) }
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
    /// are visited (found by the flow index), never every transaction the layer holds: this runs
    /// on the transport's loop thread whenever a connection closes, and with tens of thousands of
    /// transactions waiting out their timers a scan held up the next message by tens of ms.
    public func transportFailed(on flow: Flow) {
        let effects = state.withLock { state -> [Effect] in
            var effects: [Effect] = []
            for key in state.serverKeys(on: flow) {
                guard var current = state.servers[key] else { continue }
                let actions = current.machine.transportError()
                state.servers[key] = current
                apply(actions, server: key, &state, &effects)
            }
            for key in state.clientKeys(on: flow) {
                guard var current = state.clients[key] else { continue }
                let actions = current.machine.transportError()
                state.clients[key] = current
                apply(actions, client: key, &state, &effects)
            }
            return effects
        }
        perform(effects)
    }

    // MARK: - Matching

    private func receiveRequest(
        _ request: SIPRequest, from flow: Flow, isReliable: Bool, _ state: inout State, _ effects: inout [Effect]
    ) {
        guard let key = TransactionKey.server(for: request) else { return }
        if var entry = state.servers[key] {
            guard entry.accepts(request, key: key) else {
                // §17.2.3: an RFC 2543 request whose To tag differs matches nothing; only an ACK
                // can then be meaningful (for a 2xx), other clashes cannot get a transaction.
                if request.method == .ack { effects.append(.core(.ack(request, flow: flow))) }
                return
            }
            let actions = entry.machine.receivedRequest(request)
            state.servers[key] = entry
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
            : .nonInvite(NonInviteServerTransaction(request: request, isReliable: isReliable, timers: timers))
        let actions = machine.start()
        state.insertServer(ServerEntry(machine: machine, flow: flow, serial: state.nextSerial()), for: key)
        apply(actions, server: key, &state, &effects)
    }

    private func receiveResponse(
        _ response: SIPResponse, from flow: Flow, _ state: inout State, _ effects: inout [Effect]
    ) {
        guard let key = TransactionKey.client(for: response), var entry = state.clients[key] else {
            effects.append(.core(.strayResponse(response, flow: flow)))
            return
        }
        let actions = entry.machine.receivedResponse(response)
        state.clients[key] = entry
        apply(actions, client: key, &state, &effects)
    }

    // MARK: - Carrying out actions

    /// `arrivedOn` is the flow of the request that caused the actions, reported with an ACK
    /// passed to the core; responses always go back on the flow the transaction began on.
    private func apply(
        _ actions: [ServerTransactionAction], server key: TransactionKey, arrivedOn arrival: Flow? = nil,
        _ state: inout State, _ effects: inout [Effect]
    ) {
        guard let entry = state.servers[key] else { return }
        let handle = ServerTransactionHandle(key: key, serial: entry.serial)
        for action in actions {
            switch action {
            case .send(let response):
                effects.append(.send(.response(response), entry.flow))
            case .passToCore(let request):
                effects.append(
                    .core(
                        request.method == .ack
                            ? .ack(request, flow: arrival ?? entry.flow)
                            : .request(request, handle, flow: entry.flow)))
            case .startTimer(let timer, let delay):
                let id = state.nextSerial()
                let scheduled = scheduler.schedule(after: delay) { [weak self] in
                    self?.serverTimerFired(timer, id: id, key: key)
                }
                state.servers[key]?.timers.updateValue(ArmedTimer(id: id, timer: scheduled), forKey: timer)?
                    .timer.cancel()
            case .cancelTimer(let timer):
                state.servers[key]?.timers.removeValue(forKey: timer)?.timer.cancel()
            case .reportFailure(let failure):
                effects.append(.core(.serverTransactionFailed(handle, failure)))
            case .terminated:
                state.removeServer(key)?.timers.values.forEach { $0.timer.cancel() }
            }
        }
    }

    private func apply(
        _ actions: [ClientTransactionAction], client key: TransactionKey, _ state: inout State,
        _ effects: inout [Effect]
    ) {
        guard let entry = state.clients[key] else { return }
        for action in actions {
            switch action {
            case .send(let request):
                effects.append(.send(.request(request), entry.flow))
            case .passToCore(let event):
                effects.append(.client(entry.onEvent, event))
            case .startTimer(let timer, let delay):
                let id = state.nextSerial()
                let scheduled = scheduler.schedule(after: delay) { [weak self] in
                    self?.clientTimerFired(timer, id: id, key: key)
                }
                state.clients[key]?.timers.updateValue(ArmedTimer(id: id, timer: scheduled), forKey: timer)?
                    .timer.cancel()
            case .cancelTimer(let timer):
                state.clients[key]?.timers.removeValue(forKey: timer)?.timer.cancel()
            case .terminated:
                state.removeClient(key)?.timers.values.forEach { $0.timer.cancel() }
            }
        }
    }

    private func serverTimerFired(_ timer: TransactionTimer, id: UInt64, key: TransactionKey) {
        let effects = state.withLock { state -> [Effect] in
            // A timer cancelled while its body was already on its way is stale: ignore it.
            guard var entry = state.servers[key], entry.timers[timer]?.id == id else { return [] }
            entry.timers[timer] = nil
            let actions = entry.machine.timerFired(timer)
            state.servers[key] = entry
            var effects: [Effect] = []
            apply(actions, server: key, &state, &effects)
            return effects
        }
        perform(effects)
    }

    private func clientTimerFired(_ timer: TransactionTimer, id: UInt64, key: TransactionKey) {
        let effects = state.withLock { state -> [Effect] in
            guard var entry = state.clients[key], entry.timers[timer]?.id == id else { return [] }
            entry.timers[timer] = nil
            let actions = entry.machine.timerFired(timer)
            state.clients[key] = entry
            var effects: [Effect] = []
            apply(actions, client: key, &state, &effects)
            return effects
        }
        perform(effects)
    }

    private func perform(_ effects: [Effect]) {
        for effect in effects {
            switch effect {
            case .send(let message, let flow): send(message, flow)
            case .core(let event): core(event)
            case .client(let onEvent, let event): onEvent(event)
            }
        }
    }

    // MARK: - State

    private struct ArmedTimer: Sendable {
        let id: UInt64
        let timer: any ScheduledTimer
    }

    private enum ServerMachine: Sendable {
        case invite(InviteServerTransaction)
        case nonInvite(NonInviteServerTransaction)

        var request: SIPRequest {
            switch self {
            case .invite(let machine): return machine.request
            case .nonInvite(let machine): return machine.request
            }
        }

        var lastResponse: SIPResponse? {
            switch self {
            case .invite(let machine): return machine.lastResponse
            case .nonInvite(let machine): return machine.lastResponse
            }
        }

        mutating func start() -> [ServerTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.start()
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.start()
            }
        }

        mutating func receivedRequest(_ request: SIPRequest) -> [ServerTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.receivedRequest(request)
            case .nonInvite(var machine):
                defer { self = .nonInvite(machine) }
                return machine.receivedRequest(request)
            }
        }

        mutating func sendResponse(_ response: SIPResponse) -> [ServerTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.sendResponse(response)
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.sendResponse(response)
            }
        }

        mutating func timerFired(_ timer: TransactionTimer) -> [ServerTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.timerFired(timer)
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.timerFired(timer)
            }
        }

        mutating func transportError() -> [ServerTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.transportError()
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.transportError()
            }
        }
    }

    private enum ClientMachine: Sendable {
        case invite(InviteClientTransaction)
        case nonInvite(NonInviteClientTransaction)

        mutating func start() -> [ClientTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.start()
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.start()
            }
        }

        mutating func receivedResponse(_ response: SIPResponse) -> [ClientTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.receivedResponse(response)
            case .nonInvite(var machine):
                defer { self = .nonInvite(machine) }
                return machine.receivedResponse(response)
            }
        }

        mutating func timerFired(_ timer: TransactionTimer) -> [ClientTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.timerFired(timer)
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.timerFired(timer)
            }
        }

        mutating func transportError() -> [ClientTransactionAction] {
            switch self {
            case .invite(var machine): defer { self = .invite(machine) }; return machine.transportError()
            case .nonInvite(var machine): defer { self = .nonInvite(machine) }; return machine.transportError()
            }
        }
    }

    private struct ServerEntry: Sendable {
        var machine: ServerMachine
        let flow: Flow
        let serial: UInt64
        var timers: [TransactionTimer: ArmedTimer] = [:]

        /// §17.2.3: a cookie key matches outright; an RFC 2543 key also needs the To tag to match.
        func accepts(_ request: SIPRequest, key: TransactionKey) -> Bool {
            guard key.isRFC2543 else { return true }
            return TransactionKey.rfc2543ToTagMatches(
                request, transactionRequest: machine.request, lastResponse: machine.lastResponse)
        }
    }

    private struct ClientEntry: Sendable {
        var machine: ClientMachine
        let flow: Flow
        let serial: UInt64
        let onEvent: @Sendable (ClientTransactionEvent) -> Void
        var timers: [TransactionTimer: ArmedTimer] = [:]
    }

    /// The transactions by key, and their keys by flow. An entry is added and removed only
    /// through `insert…` and `remove…`, which keep the flow index in step; updating an entry in
    /// place keeps its flow (a transaction never changes flow).
    private struct State: Sendable {
        var servers: [TransactionKey: ServerEntry] = [:]
        var clients: [TransactionKey: ClientEntry] = [:]
        private var serverKeysByFlow: [Flow: Set<TransactionKey>] = [:]
        private var clientKeysByFlow: [Flow: Set<TransactionKey>] = [:]
        private var serial: UInt64 = 0

        /// Flows with at least one transaction (what the index holds; for tests).
        var indexedFlowCount: Int { Set(serverKeysByFlow.keys).union(clientKeysByFlow.keys).count }

        mutating func insertServer(_ entry: ServerEntry, for key: TransactionKey) {
            servers[key] = entry
            serverKeysByFlow[entry.flow, default: []].insert(key)
        }

        mutating func insertClient(_ entry: ClientEntry, for key: TransactionKey) {
            clients[key] = entry
            clientKeysByFlow[entry.flow, default: []].insert(key)
        }

        mutating func removeServer(_ key: TransactionKey) -> ServerEntry? {
            guard let entry = servers.removeValue(forKey: key) else { return nil }
            Self.unindex(key, of: entry.flow, in: &serverKeysByFlow)
            return entry
        }

        mutating func removeClient(_ key: TransactionKey) -> ClientEntry? {
            guard let entry = clients.removeValue(forKey: key) else { return nil }
            Self.unindex(key, of: entry.flow, in: &clientKeysByFlow)
            return entry
        }

        func serverKeys(on flow: Flow) -> Set<TransactionKey> { serverKeysByFlow[flow] ?? [] }
        func clientKeys(on flow: Flow) -> Set<TransactionKey> { clientKeysByFlow[flow] ?? [] }

        private static func unindex(_ key: TransactionKey, of flow: Flow, in index: inout [Flow: Set<TransactionKey>]) {
            index[flow]?.remove(key)
            if index[flow]?.isEmpty == true { index[flow] = nil }
        }

        /// A number never handed out before: transaction serials and timer ids.
        mutating func nextSerial() -> UInt64 {
            serial += 1
            return serial
        }
    }

    private enum Effect: Sendable {
        case send(SIPMessage, Flow)
        case core(TransactionLayerEvent<Flow>)
        case client(@Sendable (ClientTransactionEvent) -> Void, ClientTransactionEvent)
    }
}
