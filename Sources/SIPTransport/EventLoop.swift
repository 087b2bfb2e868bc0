import CLinuxShims
import Glibc
import Synchronization

/// One epoll thread that owns every socket registered with it. Thread-safe: `execute(_:)` and `stop()`
/// may be called from any thread; `register`, `modify`, `deregister`, `schedule` and `cancelTimer`
/// only on the loop thread (inside a handler, a timer or an executed task). Handlers must not block.
final class EventLoop: @unchecked Sendable {
    // @unchecked Sendable: `tasks` and `thread` are guarded by their locks and `threadID` is atomic; every other
    // stored property is touched only by the loop thread (or before it starts / after it is joined).
    typealias Handler = (UInt32) -> Void

    private struct TaskQueue {
        var tasks: [@Sendable () -> Void] = []
        /// Set by the loop thread as it exits; no task is accepted afterwards.
        var closed = false
    }

    private let epollFD: Int32
    private let wakeFD: Int32
    private let tasks = Locked(TaskQueue())
    private let threadID = Atomic<UInt>(0)
    private let thread = Locked<pthread_t?>(nil)

    private var handlers: [UInt64: Handler] = [:]
    private var nextToken: UInt64 = 1
    private var timers = TimerHeap()
    private var timerBodies: [UInt64: () -> Void] = [:]
    private var stopping = false
    private static let wakeToken: UInt64 = 0

    init() throws(SIPTransportError) {
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard epollFD >= 0 else { throw .io("epoll_create1: \(errnoText())") }
        wakeFD = eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC))
        guard wakeFD >= 0 else {
            let text = errnoText()
            Glibc.close(epollFD)
            throw .io("eventfd: \(text)")
        }
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.u64 = EventLoop.wakeToken
        guard epoll_ctl(epollFD, EPOLL_CTL_ADD, wakeFD, &event) == 0 else {
            let text = errnoText()
            Glibc.close(wakeFD)
            Glibc.close(epollFD)
            throw .io("epoll_ctl: \(text)")
        }
    }

    deinit {
        Glibc.close(wakeFD)
        Glibc.close(epollFD)
    }

    /// Starts the loop thread.
    func start() throws(SIPTransportError) {
        final class Entry {
            let body: () -> Void
            init(_ body: @escaping () -> Void) { self.body = body }
        }
        let entry = Unmanaged.passRetained(Entry { [self] in run() }).toOpaque()
        var id = pthread_t()
        let result = pthread_create(&id, nil, { raw in
            Unmanaged<Entry>.fromOpaque(raw!).takeRetainedValue().body()
            return nil
        }, entry)
        guard result == 0 else {
            Unmanaged<Entry>.fromOpaque(entry).release()
            throw .io("pthread_create: \(String(cString: strerror(result)))")
        }
        thread.withLock { $0 = id }
    }

    /// Whether the caller runs on the loop thread.
    var inLoopThread: Bool { threadID.load(ordering: .acquiring) == UInt(pthread_self()) }

    /// Runs `task` on the loop thread, after the events being handled. Returns false (and drops the
    /// task) when the loop has stopped.
    @discardableResult
    func execute(_ task: @escaping @Sendable () -> Void) -> Bool {
        let wake = !inLoopThread
        return tasks.withLock { queue in
            guard !queue.closed else { return false }
            // A queue already holding tasks has its wake-up on the way (the loop takes them all
            // and looks again before it waits), so only the first task of a batch writes.
            let alreadyWoken = !queue.tasks.isEmpty
            queue.tasks.append(task)
            if wake, !alreadyWoken {
                // Written under the lock: the loop closes its descriptors only after marking the queue closed.
                var one: UInt64 = 1
                _ = Glibc.write(wakeFD, &one, 8)
            }
            return true
        }
    }

    /// Runs `finalTask` on the loop thread, then ends the loop; waits for the thread unless called on
    /// it. Idempotent.
    func stop(_ finalTask: @escaping @Sendable () -> Void) {
        execute { [self] in
            finalTask()
            stopping = true
        }
        if inLoopThread {
            if let id = thread.withLock({ value -> pthread_t? in defer { value = nil }; return value }) {
                pthread_detach(id)
            }
            return
        }
        if let id = thread.withLock({ value -> pthread_t? in defer { value = nil }; return value }) {
            pthread_join(id, nil)
        }
    }

    // MARK: loop thread only

    /// Watches `fd` for `events` (EPOLLIN, EPOLLOUT…), calling `handler` with what happened.
    func register(fd: Int32, events: UInt32, handler: @escaping Handler) throws(SIPTransportError) -> UInt64 {
        let token = nextToken
        nextToken += 1
        var event = epoll_event()
        event.events = events
        event.data.u64 = token
        guard epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) == 0 else { throw .io("epoll_ctl: \(errnoText())") }
        handlers[token] = handler
        return token
    }

    func modify(fd: Int32, token: UInt64, events: UInt32) {
        var event = epoll_event()
        event.events = events
        event.data.u64 = token
        _ = epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event)
    }

    /// Stops watching `fd`; call before closing it.
    func deregister(fd: Int32, token: UInt64) {
        handlers[token] = nil
        _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil)
    }

    /// Runs `body` on the loop thread once `delay` has passed; returns an id for `cancelTimer`.
    func schedule(after delay: Duration, _ body: @escaping () -> Void) -> UInt64 {
        let id = nextToken
        nextToken += 1
        timers.push(deadline: .now + delay, id: id)
        timerBodies[id] = body
        return id
    }

    func cancelTimer(_ id: UInt64) {
        timerBodies[id] = nil
    }

    private func run() {
        threadID.store(UInt(pthread_self()), ordering: .releasing)
        let capacity = 128
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
        defer { events.deallocate() }
        while !stopping {
            let hadTasks = runTasks()
            runDueTimers()
            if stopping { break }
            let timeout: Int32
            if hadTasks || tasks.withLock({ !$0.tasks.isEmpty }) {
                timeout = 0
            } else {
                timeout = timeoutMilliseconds()
            }
            let count = epoll_wait(epollFD, events, Int32(capacity), timeout)
            if count < 0 {
                if errno == EINTR { continue }
                preconditionFailure("epoll_wait: \(errnoText())")
            }
            for index in 0..<Int(count) {
                let token = events[index].data.u64
                let mask = events[index].events
                if token == EventLoop.wakeToken {
                    var value: UInt64 = 0
                    _ = Glibc.read(wakeFD, &value, 8)
                } else if let handler = handlers[token] {
                    handler(mask)
                }
            }
        }
        // Tasks that raced with the stop still run, so their completions report the closed state.
        let late = tasks.withLock { queue -> [@Sendable () -> Void] in
            queue.closed = true
            defer { queue.tasks = [] }
            return queue.tasks
        }
        for task in late { task() }
        handlers = [:]
        timerBodies = [:]
    }

    /// Runs the queued tasks; returns whether there were any.
    private func runTasks() -> Bool {
        let batch = tasks.withLock { queue -> [@Sendable () -> Void] in
            defer { queue.tasks = [] }
            return queue.tasks
        }
        for task in batch { task() }
        return !batch.isEmpty
    }

    private func runDueTimers() {
        let now = ContinuousClock.now
        while let first = timers.first, first.deadline <= now {
            timers.removeFirst()
            if let body = timerBodies.removeValue(forKey: first.id) { body() }
        }
    }

    private func timeoutMilliseconds() -> Int32 {
        while let first = timers.first, timerBodies[first.id] == nil { timers.removeFirst() }
        guard let first = timers.first else { return -1 }
        let remaining = ContinuousClock.now.duration(to: first.deadline)
        if remaining <= .zero { return 0 }
        let (seconds, attoseconds) = remaining.components
        let milliseconds = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return Int32(min(milliseconds, 3_600_000))
    }
}

/// A binary min-heap of timer deadlines. Not thread-safe: owned by the event loop.
struct TimerHeap {
    struct Entry {
        let deadline: ContinuousClock.Instant
        let id: UInt64
    }

    private var entries: [Entry] = []

    var first: Entry? { entries.first }

    mutating func push(deadline: ContinuousClock.Instant, id: UInt64) {
        entries.append(Entry(deadline: deadline, id: id))
        var child = entries.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard entries[child].deadline < entries[parent].deadline else { break }
            entries.swapAt(child, parent)
            child = parent
        }
    }

    mutating func removeFirst() {
        guard !entries.isEmpty else { return }
        entries.swapAt(0, entries.count - 1)
        entries.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < entries.count, entries[left].deadline < entries[smallest].deadline { smallest = left }
            if right < entries.count, entries[right].deadline < entries[smallest].deadline { smallest = right }
            if smallest == parent { break }
            entries.swapAt(parent, smallest)
            parent = smallest
        }
    }
}

/// `strerror(errno)` as a String.
func errnoText(_ code: Int32 = errno) -> String {
    String(cString: strerror(code))
}
